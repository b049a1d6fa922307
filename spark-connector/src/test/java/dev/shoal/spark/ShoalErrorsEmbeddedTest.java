package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.embedded.EmbeddedEngines;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link ShoalErrorsTest} against the engine in the JVM, plus the errors of embedded mode: a data
 * directory that cannot be one, a directory a daemon holds (its LOCK file), bad engine options.
 * Each names option 'endpoint' (or the option at fault).
 */
class ShoalErrorsEmbeddedTest extends ShoalErrorsTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.EMBEDDED);

  @Test
  void a_data_directory_that_is_a_file_names_the_endpoint_option(@TempDir Path tmp) throws Exception {
    Path file = Files.createFile(tmp.resolve("shoal-not-a-directory.txt"));
    String m = message(assertThrows(Exception.class,
        () -> spark.read().format("shoal").option("endpoint", "embedded:" + file).option("table", "small").load()));
    assertTrue(m.contains("option 'endpoint'") && m.contains("cannot create the data directory") && m.contains(file.toString()), m);
  }

  @Test
  void an_embedded_endpoint_without_a_directory_or_with_a_host_is_named() {
    String m = message(assertThrows(Exception.class,
        () -> spark.read().format("shoal").option("endpoint", "embedded:").option("table", "small").load()));
    assertTrue(m.contains("option 'endpoint'") && m.contains("names no data directory"), m);
    m = message(assertThrows(Exception.class,
        () -> spark.read().format("shoal").option("endpoint", "embedded://somehost/data").option("table", "small").load()));
    assertTrue(m.contains("option 'endpoint'") && m.contains("names a host"), m);
  }

  @Test
  void a_directory_held_by_a_daemon_cannot_be_opened_and_the_error_says_so(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    try (ShoalDaemon daemon = ShoalDaemon.start(dir)) {
      ingest(daemon.endpoint(), "held", List.of("{\"a\": 1}"), 10);
      String m = message(assertThrows(Exception.class,
          () -> spark.read().format("shoal").option("endpoint", "embedded:" + dir).option("table", "held").load()));
      assertTrue(m.contains("option 'endpoint'") && m.contains("LOCK") && m.contains("in use by another shoal process")
          && m.contains("held by a running daemon") && m.contains("FAILED_PRECONDITION"), m);
      // the catalog's endpoint the same
      SparkSession session = spark("embedded:" + dir);
      m = message(assertThrows(Exception.class, () -> session.sql("SHOW TABLES IN shoal").collect()));
      assertTrue(m.contains("option 'endpoint'") && m.contains("LOCK"), m);
      // while the daemon serves the same directory over Flight
      assertEquals(1, spark.read().format("shoal").option("endpoint", daemon.endpoint()).option("table", "held").load().count());
    }
  }

  @Test
  void engine_options_are_passed_and_a_bad_one_is_named(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    String m = message(assertThrows(Exception.class, () -> spark.read().format("shoal").option("endpoint", "embedded:" + dir)
        .option("table", "t").option("embedded.config.no_such_key", "1").load()));
    assertTrue(m.contains("embedded.config.") && m.contains("no_such_key") && m.contains("INVALID_ARGUMENT"), m);
    m = message(assertThrows(Exception.class, () -> spark.read().format("shoal").option("endpoint", "embedded:" + dir)
        .option("table", "t").option(ShoalOptions.EMBEDDED_KEEP_ALIVE, "soon").load()));
    assertTrue(m.contains("option 'embedded.keep-alive-ms'"), m);
    // valid keys reach the engine: an in-memory engine (no table files), kept open for the read
    spark.read().json(spark.createDataset(List.of("{\"a\": 1}", "{\"a\": 2}", "{\"a\": 3}"), org.apache.spark.sql.Encoders.STRING()))
        .write().format("shoal").option("endpoint", "embedded:" + dir).option("table", "t")
        .option("embedded.config.in_memory", "true").option("embedded.config.batch_rows", "2").mode("append").save();
    try {
      assertEquals(2, spark.read().format("shoal").option("endpoint", "embedded:" + dir).option("table", "t").load()
          .where("a >= 2").count());
      assertTrue(Files.notExists(dir.resolve("tables")), "in_memory: no table files");
      // an engine this JVM has open is joined with its own options or none, not with others
      m = message(assertThrows(Exception.class, () -> spark.read().format("shoal").option("endpoint", "embedded:" + dir)
          .option("table", "t").option("embedded.config.batch_rows", "3").load()));
      assertTrue(m.contains("other options") && m.contains("embedded.config."), m);
    } finally {
      EmbeddedEngines.closeIdle(dir.toAbsolutePath().normalize());
    }
  }

  @Test
  void a_task_in_another_jvm_than_the_driver_is_told_that_embedded_mode_is_local_only() {
    ShoalOptions options = ShoalOptions.forTable(java.util.Map.of("endpoint", endpoint, "table", "small"))
        .withOriginJvm("the driver's JVM elsewhere");
    String m = message(assertThrows(ShoalException.class, () -> options.connect(options.endpoints().get(0))));
    assertTrue(m.contains("option 'endpoint'") && m.contains("local mode") && m.contains("grpc://host:port"), m);
  }
}
