package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.stream.Collectors;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;

import org.junit.jupiter.api.Test;

/**
 * The shaded jar (after {@code package}): what native code finds by name is where it looks.
 * libshoal_jni.so binds {@code Java_dev_shoal_embedded_ShoalNative_*} and constructs
 * {@code dev.shoal.embedded.ShoalEmbeddedException}; Arrow's arrow_cdata_jni binds
 * {@code org.apache.arrow.c.jni.JniWrapper}. Neither may be relocated, and both libraries must be
 * in the jar. Flight, gRPC and protobuf must be (relocated), Arrow's vectors must not be there.
 */
class ShadedJarIT {
  private static ZipFile jar() throws Exception {
    Path path = Paths.get(System.getProperty("shoal.shaded.jar", "target/missing-shaded.jar"));
    assertTrue(Files.isRegularFile(path), "the shaded jar at " + path);
    return new ZipFile(path.toFile());
  }

  @Test
  void embedded_mode_classes_and_native_libraries_are_in_the_jar_unrelocated() throws Exception {
    try (ZipFile jar = jar()) {
      for (String entry : new String[] {
          "dev/shoal/embedded/ShoalNative.class",
          "dev/shoal/embedded/ShoalEmbeddedException.class",
          "dev/shoal/embedded/native/linux-x86_64/libshoal_jni.so",
          "org/apache/arrow/c/jni/JniWrapper.class",
          "org/apache/arrow/c/Data.class",
          "dev/shoal/embedded/EmbeddedShoalClient.class"}) {
        ZipEntry e = jar.getEntry(entry);
        assertNotNull(e, entry + " is in the shaded jar");
      }
      // Arrow 12's arrow-c-data keeps its library at x86_64/, Arrow 13 and later at arrow_cdata_jni/x86_64/
      assertTrue(jar.getEntry("x86_64/libarrow_cdata_jni.so") != null
          || jar.getEntry("arrow_cdata_jni/x86_64/libarrow_cdata_jni.so") != null, "arrow-c-data's JNI library is in the jar");
      List<String> relocatedNative = jar.stream().map(ZipEntry::getName)
          .filter(n -> n.startsWith("dev/shoal/spark/shaded/") && (n.contains("/arrow/c/") || n.contains("dev/shoal/embedded")))
          .collect(Collectors.toList());
      assertTrue(relocatedNative.isEmpty(), "relocated classes that native code binds by name: " + relocatedNative);
    }
  }

  /** The client finds embedded mode's transport through its service file, under the relocated interface's name. */
  @Test
  void the_embedded_transport_is_registered_for_the_relocated_client() throws Exception {
    try (ZipFile jar = jar()) {
      ZipEntry services = jar.getEntry("META-INF/services/dev.shoal.spark.shaded.dev.shoal.client.ShoalTransport");
      assertNotNull(services, "the relocated client's transport service file is in the shaded jar");
      String text = new String(jar.getInputStream(services).readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
      assertTrue(text.contains("dev.shoal.embedded.EmbeddedTransport"), text);
      assertNotNull(jar.getEntry("dev/shoal/embedded/EmbeddedTransport.class"));
      assertNull(jar.getEntry("META-INF/services/dev.shoal.client.ShoalTransport"), "no service file under the unrelocated name");
    }
  }

  @Test
  void flight_is_relocated_and_spark_provides_arrow_vectors() throws Exception {
    try (ZipFile jar = jar()) {
      assertNotNull(jar.getEntry("dev/shoal/spark/shaded/org/apache/arrow/flight/FlightClient.class"));
      assertNull(jar.getEntry("org/apache/arrow/flight/FlightClient.class"));
      assertNull(jar.getEntry("org/apache/arrow/vector/VectorSchemaRoot.class"), "Arrow's vectors come from Spark");
      assertNull(jar.getEntry("io/grpc/Channel.class"));
    }
  }

  /** Every class outside the connector's own packages is relocated, or is one that native code binds by name. */
  @Test
  void no_class_outside_the_relocation_prefix_but_those_native_code_binds() throws Exception {
    try (ZipFile jar = jar()) {
      List<String> unrelocated = jar.stream().map(ZipEntry::getName)
          .filter(n -> n.endsWith(".class"))
          .filter(n -> !n.startsWith("dev/shoal/spark/") && !n.startsWith("dev/shoal/embedded/")
              && !n.startsWith("org/apache/arrow/c/")
              // Arrow 12's arrow-c-data keeps these two in Arrow's vector package (later lines: in arrow/c)
              && !n.equals("org/apache/arrow/vector/StructVectorLoader.class")
              && !n.equals("org/apache/arrow/vector/StructVectorUnloader.class"))
          .collect(Collectors.toList());
      assertTrue(unrelocated.isEmpty(), unrelocated.size() + " classes are not relocated, e.g. "
          + unrelocated.subList(0, Math.min(5, unrelocated.size())));
    }
  }
}
