package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.extension.ExtendWith;

/** Each error names the table and the option (or schema) to fix. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@ExtendWith(ShoalDaemonExtension.class)
class ShoalErrorsTest extends ShoalSparkTestBase {
  private SparkSession spark;
  private String endpoint;

  @BeforeAll
  void setUp(ShoalDaemon daemon) {
    endpoint = daemon.endpoint();
    ingest(endpoint, "small", List.of("{\"a\": 1, \"s\": \"x\"}", "{\"a\": 2, \"s\": \"y\"}"), 10);
    spark = spark(endpoint).newSession();
  }

  private static String message(Throwable t) {
    StringBuilder sb = new StringBuilder();
    for (Throwable c = t; c != null; c = c.getCause()) {
      sb.append(c.getMessage()).append('\n');
    }
    return sb.toString();
  }

  @Test
  void unreachable_daemon_names_the_endpoint_option() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    String dead = "grpc://127.0.0.1:" + port;
    Exception e = assertThrows(Exception.class,
        () -> spark.read().format("shoal").option("endpoint", dead).option("table", "small").load());
    String m = message(e);
    assertTrue(m.contains("unreachable") && m.contains("option 'endpoint'") && m.contains("'small'"), m);
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
    Exception e = assertThrows(Exception.class, () -> spark.sql("SELECT * FROM shoal.nope").collect());
    assertTrue(message(e).contains("nope"), message(e));
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
