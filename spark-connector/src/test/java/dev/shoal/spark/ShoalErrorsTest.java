package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * Each error names the table and the option (or schema) to fix, in both modes; the errors of
 * one transport (an unreachable daemon, a missing token; a bad or locked embedded directory) are
 * in its subclass ({@link ShoalErrorsDaemonTest}, {@link ShoalErrorsEmbeddedTest}).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class ShoalErrorsTest extends ShoalSparkTestBase {
  SparkSession spark;
  String endpoint;

  @BeforeAll
  void setUp(ShoalTarget target) {
    endpoint = target.endpoint();
    ingest(endpoint, "small", List.of("{\"a\": 1, \"s\": \"x\"}", "{\"a\": 2, \"s\": \"y\"}"), 10);
    spark = spark(endpoint);
  }

  static String message(Throwable t) {
    StringBuilder sb = new StringBuilder();
    for (Throwable c = t; c != null; c = c.getCause()) {
      sb.append(c.getMessage()).append('\n');
    }
    return sb.toString();
  }

  @Test
  void unknown_table_names_the_table_option() {
    Exception e = assertThrows(Exception.class,
        () -> spark.read().format("shoal").option("endpoint", endpoint).option("table", "nope").load());
    String m = message(e);
    assertTrue(m.contains("'nope'") && m.contains("option 'table'"), m);
  }

  @Test
  void unknown_table_in_the_catalog_is_spark_table_not_found() {
    // A catalog named like the format ("shoal") makes Spark try `shoal`.`nope` as a direct query
    // on files when the table is missing; without runSQLOnFiles the error is the plain one.
    SparkSession session = spark(endpoint);
    session.conf().set("spark.sql.runSQLOnFiles", "false");
    Exception e = assertThrows(Exception.class, () -> session.sql("SELECT * FROM shoal.nope").collect());
    assertTrue(message(e).contains("TABLE_OR_VIEW_NOT_FOUND") && message(e).contains("nope"), message(e));
  }

  @Test
  void unknown_column_in_a_user_schema_names_the_column_and_schema() {
    Exception e = assertThrows(Exception.class, () -> spark.read().format("shoal").schema("a long, nope string")
        .option("endpoint", endpoint).option("table", "small").load().collect());
    String m = message(e);
    assertTrue(m.contains("unknown column 'nope'") && m.contains("'small'") && m.contains(".schema("), m);
  }

  @Test
  void type_mismatch_names_the_column_and_the_daemon_type() {
    Exception e = assertThrows(Exception.class, () -> spark.read().format("shoal").schema("a string")
        .option("endpoint", endpoint).option("table", "small").load().collect());
    String m = message(e);
    assertTrue(m.contains("type mismatch for column 'a'") && m.contains("bigint") && m.contains("'small'"), m);
  }

  @Test
  void an_empty_table_reads_as_no_rows() {
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      client.createTableIfNotExists("empty");
    }
    org.apache.spark.sql.Dataset<org.apache.spark.sql.Row> df =
        spark.read().format("shoal").option("endpoint", endpoint).option("table", "empty").load();
    org.junit.jupiter.api.Assertions.assertEquals(0, df.schema().fields().length);
    org.junit.jupiter.api.Assertions.assertEquals(0, df.count());
  }

  @Test
  void missing_options_are_named() {
    String m = message(assertThrows(Exception.class, () -> spark.read().format("shoal").option("endpoint", endpoint).load()));
    assertTrue(m.contains("option 'table' is required"), m);
    m = message(assertThrows(Exception.class, () -> spark.read().format("shoal").option("table", "small").load()));
    assertTrue(m.contains("option 'endpoint' is required"), m);
    m = message(assertThrows(Exception.class,
        () -> spark.read().format("shoal").option("endpoint", "localhost").option("table", "small").load()));
    assertTrue(m.contains("grpc://host:port"), m);
  }
}
