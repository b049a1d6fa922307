package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.testing.DaemonProcess;
import dev.shoal.embedded.EmbeddedEngines;
import dev.shoal.embedded.EmbeddedShoalClient;
import org.apache.arrow.vector.VarCharVector;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Both transports answer alike: the same calls against a real daemon (a {@code shoal serve} child
 * process) and against the engine in this JVM give the same answers and the same status codes.
 * In shoal-embedded's tests (the client's, with the embedded transport on the class path).
 */
class ShoalClientTest {

  @Test
  void a_daemon_and_the_embedded_engine_answer_alike(@TempDir Path tmp) throws Exception {
    List<String> daemonAnswers;
    try (DaemonProcess daemon = DaemonProcess.start(tmp.resolve("daemon").resolve("data"))) {
      try (ShoalClient client = ShoalClient.open(daemon.endpoint(), ShoalClientOptions.withToken(null))) {
        assertTrue(client instanceof FlightShoalClient);
        daemonAnswers = exercise(client);
      }
      assertEquals(List.of("true", "false", "acknowledged 2", "records 3", "tables [events]",
          "pushes [PushEvent, PushEvent]", "ingested 3", "NOT_FOUND GetSchema nope", "INVALID_ARGUMENT"), daemonAnswers);
      // A restart listens on the same port and recovers the table.
      daemon.restart();
      try (ShoalClient client = ShoalClient.open("127.0.0.1:" + daemon.port(), ShoalClientOptions.withToken(null))) {
        assertEquals(List.of("PushEvent", "PushEvent"), types(client, "type = 'PushEvent'"));
      }
      assertEquals(0, daemon.stop(), "a SIGTERM ends the daemon cleanly");
    }
    Path dir = tmp.resolve("embedded").resolve("data");
    ShoalClientOptions embedded = new ShoalClientOptions(null, null, null, 0, 0, null);
    try (ShoalClient client = ShoalClient.open("embedded:" + dir, embedded)) {
      assertTrue(client instanceof EmbeddedShoalClient);
      assertEquals(daemonAnswers, exercise(client));
    }
    EmbeddedEngines.closeIdle(dir.toAbsolutePath().normalize());
  }

  @Test
  void an_embedded_uri_opens_its_path_as_written_and_a_stream_closed_early_is_cancelled(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("with space").resolve("data");
    java.net.URI uri = new java.net.URI("embedded", dir.toString(), null);
    assertTrue(uri.toString().contains("%20"), uri.toString());
    try (ShoalClient client = ShoalClient.open(uri, null)) {
      client.createTableIfNotExists("events");
      try (ShoalClient.Put put = client.startPut("events")) {
        for (int batch = 0; batch < 4; batch++) {
          List<String> records = new ArrayList<>();
          for (int i = 0; i < 5000; i++) {
            records.add("{\"type\": \"PushEvent\", \"n\": " + (batch * 5000 + i) + "}");
          }
          put.send(records);
        }
        put.finish();
      }
      ShoalFlightPlan plan = client.getFlightInfo("events", ShoalClient.JSON.createObjectNode().put("table", "events"));
      try (ShoalBatchStream stream = client.doGet("events", plan.endpoints().get(0).ticket())) {
        assertTrue(stream.next(), "a first batch");
      } // closed before its end: no error
      assertEquals(List.of("PushEvent"), types(client, "n = 19999"), "the engine answers after the early close");
    }
    assertTrue(java.nio.file.Files.isDirectory(dir), "the directory as written, not " + uri.getRawSchemeSpecificPart());
    EmbeddedEngines.closeIdle(dir.toAbsolutePath().normalize());
  }

  /** Creates, writes, plans, reads, and fails a request; what it saw, as text. */
  private static List<String> exercise(ShoalClient client) {
    List<String> seen = new ArrayList<>();
    seen.add(client.createTableIfNotExists("events").path("created").asText());
    seen.add(client.createTableIfNotExists("events").path("created").asText());
    try (ShoalClient.Put put = client.startPut("events")) {
      JsonNode ack = put.send(List.of("{\"type\": \"PushEvent\", \"n\": 1}", "{\"type\": \"WatchEvent\", \"n\": 2}"));
      seen.add("acknowledged " + ack.path("records").asLong());
      put.send(List.of("{\"type\": \"PushEvent\", \"n\": 3}"));
      put.finish();
      seen.add("records " + put.records());
    }
    seen.add("tables " + client.listTables());
    seen.add("pushes " + types(client, "type = 'PushEvent'"));
    seen.add("ingested " + client.stats("events").path("records").asLong(-1));
    long tail = client.stats("events").path("tail_address").asLong();
    assertTrue(client.makeDurable("events", tail) >= tail);
    ShoalClientException missing = assertThrows(ShoalClientException.class, () -> client.getSchema("nope"));
    seen.add(missing.status() + " " + missing.request() + " " + missing.table());
    assertNotEquals(null, missing.detail());
    ShoalClientException bad = assertThrows(ShoalClientException.class,
        () -> client.getFlightInfo("events", ShoalClient.JSON.createObjectNode().put("table", "events").put("filter", "type = = 1")));
    seen.add(bad.status().name());
    return seen;
  }

  private static List<String> types(ShoalClient client, String filter) {
    List<String> types = new ArrayList<>();
    client.query("events", ShoalClient.JSON.createObjectNode().put("table", "events").put("filter", filter)
        .set("columns", ShoalClient.JSON.createArrayNode().add("type")), batch -> {
          VarCharVector type = (VarCharVector) batch.getVector("type");
          for (int i = 0; i < batch.getRowCount(); i++) {
            types.add(type.getObject(i).toString());
          }
        });
    return types;
  }
}
