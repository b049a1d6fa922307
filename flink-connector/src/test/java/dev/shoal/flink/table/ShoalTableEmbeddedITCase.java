package dev.shoal.flink.table;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.embedded.ShoalEmbedded;
import dev.shoal.flink.EmbeddedShoal;
import dev.shoal.flink.ShoalMode;
import dev.shoal.flink.ShoalTarget;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link ShoalTableITCase} with {@code 'endpoint' = 'embedded:<dir>'} (the engine in the test JVM),
 * plus the embedded options of the factory: {@code 'embedded.config.*'} reaches the engine, a bad
 * key or value is named, {@code 'embedded.keep-alive'} is validated at planning time.
 */
@ShoalMode(TargetMode.EMBEDDED)
class ShoalTableEmbeddedITCase extends ShoalTableITCase {

  static String embeddedTable(String name, Path dir, String table, String options) {
    return "CREATE TABLE " + name + " (id STRING) WITH ('connector' = 'shoal', 'endpoint' = 'embedded:" + dir
        + "', 'table' = '" + table + "', 'format' = 'json', 'embedded.keep-alive' = '0 ms'" + options + ")";
  }

  @Test
  void engineOptionsReachTheEngineAndBadOnesAreNamed(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    // The test's handle opens the engine in memory; the job's writers join it with the same keys.
    try (ShoalEmbedded store = ShoalEmbedded.open(dir, Map.of("in_memory", true))) {
      store.createTable("mem");
      StreamTableEnvironment tEnv = tableEnvironment();
      tEnv.executeSql(embeddedTable("shoal_mem", dir, "mem",
          ", 'embedded.config.in_memory' = 'true', 'sink.delivery-guarantee' = 'none'"));
      tEnv.executeSql("INSERT INTO shoal_mem VALUES ('m1'), ('m2')").await();
      assertEquals(counts(List.of("m1", "m2")), counts(EmbeddedShoal.column(store, "mem", "id")));
      assertTrue(Files.notExists(dir.resolve("tables")), "in_memory reached the engine: no table files");

      // An engine open in this JVM is joined with its own keys or none, not with others.
      tEnv.executeSql(embeddedTable("shoal_other", dir, "mem", ", 'embedded.config.batch_rows' = '3'"));
      String m = failure(() -> tEnv.executeSql("INSERT INTO shoal_other VALUES ('x')").await(), "embedded.config.");
      assertTrue(m.contains("other options") && m.contains("INVALID_ARGUMENT") && m.contains("shoal table \"mem\""), m);
    }

    Path fresh = tmp.resolve("bad-key").resolve("data");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(embeddedTable("shoal_bad_key", fresh, "t", ", 'embedded.config.no_such_key' = '1'"));
    String m = failure(() -> tEnv.executeSql("INSERT INTO shoal_bad_key VALUES ('x')").await(), "no_such_key");
    assertTrue(m.contains("'embedded.config.*'") && m.contains("INVALID_ARGUMENT"), m);

    tEnv.executeSql("CREATE TABLE shoal_bad_keep_alive (id STRING) WITH ('connector' = 'shoal', 'endpoint' = 'embedded:"
        + fresh + "', 'table' = 't', 'format' = 'json', 'embedded.keep-alive' = 'soon')");
    Exception e = assertThrows(Exception.class, () -> tEnv.executeSql("INSERT INTO shoal_bad_keep_alive VALUES ('x')"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(e, "embedded.keep-alive").isPresent(),
        () -> ExceptionUtils.stringifyException(e));
  }

  /** The message of the job failure's cause that contains {@code text}. */
  static String failure(org.junit.jupiter.api.function.Executable job, String text) {
    Exception e = assertThrows(Exception.class, job);
    Optional<Throwable> cause = ExceptionUtils.findThrowableWithMessage(e, text);
    assertTrue(cause.isPresent(), () -> "an error naming " + text + " in " + ExceptionUtils.stringifyException(e));
    return cause.get().getMessage();
  }
}
