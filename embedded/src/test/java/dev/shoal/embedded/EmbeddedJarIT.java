package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URL;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Run by failsafe after {@code package}, with the built jar (not target/classes) on the class path:
 * the native library comes out of the jar, as it does for a user.
 */
class EmbeddedJarIT {
  @TempDir Path dir;

  @Test
  void the_jar_carries_the_library_and_it_loads_from_there() {
    URL resource = NativeLoader.class.getResource(NativeLoader.RESOURCE);
    assertTrue(resource != null, "no " + NativeLoader.RESOURCE + " on the class path");
    assertEquals("jar", resource.getProtocol(), resource.toString());
    assertTrue(resource.toString().contains("shoal-embedded"), resource.toString());

    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      assertTrue(NativeLoader.loadedFrom().startsWith("resource "), NativeLoader.loadedFrom());
      shoal.createTable("t");
      assertEquals(3, shoal.ingest("t", List.of("{\"a\":1}", "{\"a\":2}", "{\"a\":3}")).records());
      assertEquals(2, shoal.scan("t", "a >= 2", List.of("a"), null, root -> { }));
    }
  }
}
