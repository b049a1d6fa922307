package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.util.List;

import dev.shoal.client.ShoalClient;
import dev.shoal.client.testing.TargetMode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link ShoalErrorsTest} against the daemon process, plus the errors only a daemon can give: it
 * is unreachable, or it wants a token.
 */
class ShoalErrorsDaemonTest extends ShoalErrorsTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.DAEMON);

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
  void bearer_token_option_authenticates_and_its_absence_is_named(@TempDir java.nio.file.Path tmp) throws Exception {
    try (ShoalDaemon secured = ShoalDaemon.start(tmp.resolve("data"),
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
}
