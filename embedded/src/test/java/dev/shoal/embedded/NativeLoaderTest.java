package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Loading the library: from the class-path resource (this JVM: surefire sets no override), from the
 * override property (a child JVM), and the errors for a missing file or another platform.
 */
class NativeLoaderTest {
  @TempDir Path dir;

  @Test
  void this_jvm_loads_the_library_from_the_class_path_resource() {
    NativeLoader.load();
    assertTrue(NativeLoader.loadedFrom().startsWith("resource " + NativeLoader.RESOURCE), NativeLoader.loadedFrom());
    assertTrue(NativeLoader.class.getResource(NativeLoader.RESOURCE) != null);
    NativeLoader.load(); // once per JVM: a second call is a no-op
  }

  @Test
  void the_system_property_overrides_the_resource() throws Exception {
    Path library = Path.of(System.getProperty("shoal.test.jni.library", "../target/debug/libshoal_jni.so"));
    assertTrue(Files.isRegularFile(library), "no library at " + library.toAbsolutePath());
    List<String> output = runProbe("-D" + NativeLoader.LIBRARY_PROPERTY + "=" + library.toAbsolutePath());
    assertTrue(output.contains("loaded from " + library.toAbsolutePath()), output.toString());
    assertTrue(output.contains("rows 1"), output.toString());
  }

  @Test
  void an_override_naming_no_file_is_a_clear_error() throws Exception {
    List<String> output = runProbe("-D" + NativeLoader.LIBRARY_PROPERTY + "=" + dir.resolve("missing.so"));
    assertEquals(1, output.size(), output.toString());
    assertTrue(output.get(0).startsWith("failed UNAVAILABLE: load native library: UNAVAILABLE: system property shoal.jni.library names "), output.toString());
  }

  @Test
  void another_platform_is_named_in_the_error() {
    assertEquals("linux-x86_64", NativeLoader.platformDirectory("Linux", "amd64"));
    ShoalEmbeddedException e = assertThrows(ShoalEmbeddedException.class,
        () -> NativeLoader.platformDirectory("Mac OS X", "aarch64"));
    assertEquals("UNAVAILABLE", e.code());
    assertTrue(e.getMessage().contains("Mac OS X / aarch64"), e.getMessage());
    assertTrue(e.getMessage().contains(NativeLoader.LIBRARY_PROPERTY), e.getMessage());
  }

  /** Runs {@link LoaderProbe} in a child JVM with the extra JVM options; its output lines. */
  private List<String> runProbe(String... jvmOptions) throws IOException, InterruptedException {
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.addAll(Arrays.asList(jvmOptions));
    command.add("--add-opens=java.base/java.nio=ALL-UNNAMED");
    command.add("-cp");
    command.add(System.getProperty("java.class.path"));
    command.add(LoaderProbe.class.getName());
    command.add(dir.resolve("store").toString());
    Path log = dir.resolve("probe.log");
    Process process = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    assertTrue(process.waitFor(2, TimeUnit.MINUTES), "the probe JVM did not finish");
    List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
    lines.removeIf(line -> line.startsWith("WARNING") || line.isBlank() || line.startsWith("SLF4J"));
    return lines;
  }
}
