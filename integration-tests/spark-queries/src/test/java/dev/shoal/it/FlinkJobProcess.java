package dev.shoal.it;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Runs the demo's Flink job ({@code dev.shoal.demo.flink.GithubEventsJob} of
 * {@code integration-tests/flink-job}) as its own JVM - the Flink connector's Arrow 19 / Netty 4.2
 * cannot share this (Spark) JVM's classpath - from that module's {@code target/classes} and
 * {@code target/runtime-classpath.txt}. Its output is echoed and kept.
 */
final class FlinkJobProcess {
  /** The flags of the parent pom's {@code shoal.test.jvm.flags} that Flight needs. */
  static final List<String> JVM_FLAGS = List.of("-Xmx1g", "--add-opens=java.base/java.nio=ALL-UNNAMED",
      "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
      "--add-opens=java.base/java.util=ALL-UNNAMED", "-Dio.netty.tryReflectionSetAccessible=true");

  private FlinkJobProcess() {}

  record Result(int exitCode, List<String> output, double seconds) {}

  static Result run(Path moduleDir, Path stderrLog, String... args) throws Exception {
    Path classes = moduleDir.resolve("target/classes");
    Path classpathFile = moduleDir.resolve("target/runtime-classpath.txt");
    if (!Files.isDirectory(classes) || !Files.exists(classpathFile)) {
      throw new IllegalStateException("the Flink job is not built at " + moduleDir
          + " (build the reactor: mvn -pl integration-tests/spark-queries -am verify)");
    }
    String classpath = classes + File.pathSeparator + Files.readString(classpathFile).trim();
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.addAll(JVM_FLAGS);
    command.add("-cp");
    command.add(classpath);
    command.add("dev.shoal.demo.flink.GithubEventsJob");
    command.addAll(List.of(args));
    long started = System.nanoTime();
    Process process = new ProcessBuilder(command).redirectError(stderrLog.toFile()).start();
    List<String> output = new ArrayList<>();
    try (BufferedReader reader = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
      String line;
      while ((line = reader.readLine()) != null) {
        System.out.println("  " + line);
        output.add(line);
      }
    }
    if (!process.waitFor(180, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      throw new IllegalStateException("the Flink job did not end within 180 s");
    }
    return new Result(process.exitValue(), output, (System.nanoTime() - started) / 1e9);
  }
}
