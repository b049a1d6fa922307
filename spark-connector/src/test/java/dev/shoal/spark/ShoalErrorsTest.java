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
    spark = spark(endpoint);
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
  void bearer_token_option_authenticates_and_its_absence_is_named() throws Exception {
    try (ShoalDaemon secured = ShoalDaemon.start(java.nio.file.Files.createTempDirectory("shoal-auth").resolve("data"),
        "--auth-token", "s3cret")) {
      try (ShoalClient client = ShoalClient.open(java.net.URI.create(secured.endpoint()), "s3cret")) {
        client.createTableIfNotExists("locked");
        try (ShoalClient.Put put = client.startPut("locked")) {
          put.send(List.of("{\"a\": 1}", "{\"a\": 2}", "{\"a\": 3}"));
          put.finish();
        }
      }
      String m = message(assertThrows(Exception.class,
          () -> spark.read().format("shoal").option("endpoint", secured.endpoint()).option("table", "locked").load()));
      assertTrue(m.contains("option 'token'"), m);
      long n = spark.read().format("shoal").option("endpoint", secured.endpoint()).option("table", "locked")
          .option("token", "s3cret").load().where("a >= 2").count();
      org.junit.jupiter.api.Assertions.assertEquals(2, n);
    }
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
