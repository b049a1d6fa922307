package dev.shoal.flink.table;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.shoal.flink.ShoalMode;
import dev.shoal.flink.ShoalTarget;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.catalog.ResolvedSchema;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;

/** {@link ShoalTableITCase} against the real daemon, plus its authentication: a missing token. */
@ShoalMode(ShoalTarget.Mode.DAEMON)
class ShoalTableDaemonITCase extends ShoalTableITCase {

  @Test
  void missingTokenFailsTheJobAsUnauthenticated() {
    SHOAL.createTable("sql_no_token", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("shoal_no_token", "sql_no_token", "id STRING", ""));
    Exception e = assertThrows(Exception.class,
        () -> tEnv.executeSql("INSERT INTO shoal_no_token VALUES ('a')").await());
    Optional<Throwable> cause = ExceptionUtils.findThrowableWithMessage(e, "UNAUTHENTICATED");
    assertTrue(cause.isPresent(), () -> ExceptionUtils.stringifyException(e));
    assertTrue(cause.get().getMessage().contains("shoal table \"sql_no_token\""), cause.get().getMessage());
  }

  private static List<String> firstColumn(TableResult result) throws Exception {
    List<String> out = new ArrayList<>();
    try (CloseableIterator<Row> rows = result.collect()) {
      rows.forEachRemaining(r -> out.add(String.valueOf(r.getField(0))));
    }
    return out;
  }

  /**
   * CREATE CATALOG ... ('type' = 'shoal'): the daemon's tables with their inferred schemas,
   * INSERT INTO a catalog table without CREATE TABLE, CREATE and DROP TABLE through the catalog.
   */
  @Test
  void catalogListsTablesWithInferredSchemasAndCreatesAndDropsThem() throws Exception {
    SHOAL.createTable("cat_events", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("fill", "cat_events", "id STRING, n BIGINT, score DOUBLE, ok BOOLEAN, inner_row ROW<k STRING>, tags ARRAY<STRING>",
        ", 'token' = '" + TOKEN + "'"));
    tEnv.executeSql("INSERT INTO fill VALUES ('a', 1, 0.5, true, ROW('x'), ARRAY['t1']), ('b', 2, 1.5, false, ROW('y'), ARRAY['t2'])").await();
    tEnv.executeSql("CREATE CATALOG shoal_cat WITH ('type' = 'shoal', 'endpoint' = '" + SHOAL.endpoint() + "', 'token' = '" + TOKEN + "')");
    assertTrue(firstColumn(tEnv.executeSql("SHOW TABLES IN shoal_cat.`default`")).contains("cat_events"));

    ResolvedSchema schema = tEnv.from("shoal_cat.`default`.cat_events").getResolvedSchema();
    Map<String, String> types = new TreeMap<>();
    schema.getColumns().forEach(c -> types.put(c.getName(), c.getDataType().getLogicalType().asSummaryString()));
    assertEquals(Map.of("id", "STRING", "n", "BIGINT", "score", "DOUBLE", "ok", "BOOLEAN", "inner_row", "ROW<`k` STRING>",
        "tags", "ARRAY<STRING>"), types);

    // INSERT INTO a catalog table needs no CREATE TABLE; the catalog gives connector, endpoint, table and token.
    tEnv.executeSql("INSERT INTO shoal_cat.`default`.cat_events (id, n) VALUES ('c', 3)").await();
    assertEquals(counts(List.of("a", "b", "c")), counts(SHOAL.column("cat_events", "id")));
    // SELECT from a catalog table reads it (here a snapshot, by a dynamic option).
    assertEquals(counts(List.of("a", "b", "c")), counts(firstColumn(tEnv.executeSql(
        "SELECT id FROM shoal_cat.`default`.cat_events /*+ OPTIONS('scan.bounded' = 'true') */"))));

    tEnv.executeSql("CREATE TABLE shoal_cat.`default`.cat_new (id STRING, v DOUBLE)");
    assertTrue(SHOAL.action("list_psfs", "{\"table\": \"cat_new\"}") != null, "the table exists on the daemon");
    tEnv.executeSql("INSERT INTO shoal_cat.`default`.cat_new VALUES ('z', 1.5)").await();
    assertEquals(List.of("z"), SHOAL.column("cat_new", "id"));
    Exception exists = assertThrows(Exception.class, () -> tEnv.executeSql("CREATE TABLE shoal_cat.`default`.cat_new (id STRING)"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(exists, "already exists").isPresent(), ExceptionUtils.stringifyException(exists));
    tEnv.executeSql("DROP TABLE shoal_cat.`default`.cat_new");
    assertFalse(firstColumn(tEnv.executeSql("SHOW TABLES IN shoal_cat.`default`")).contains("cat_new"));
    Exception missing = assertThrows(Exception.class, () -> tEnv.executeSql("DROP TABLE shoal_cat.`default`.cat_new"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(missing, "does not exist").isPresent(), ExceptionUtils.stringifyException(missing));
    tEnv.executeSql("DROP CATALOG shoal_cat");
  }
}
