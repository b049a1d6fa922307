package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;

import org.junit.jupiter.api.Test;

/**
 * The JVM's Flight connections are shared per endpoint and token, and leases are counted. (No
 * daemon needed: a Flight client connects on its first call. The daemon-backed suites run every
 * query through these connections.)
 */
class FlightConnectionsTest {
  @Test
  void clients_of_one_endpoint_and_token_share_one_connection_and_others_do_not() {
    URI endpoint = URI.create("grpc://127.0.0.1:1");
    FlightConnections.Connection first = FlightConnections.acquire(endpoint, null);
    FlightConnections.Connection second = FlightConnections.acquire(endpoint, "");
    FlightConnections.Connection other = FlightConnections.acquire(endpoint, "a-token");
    FlightConnections.Connection elsewhere = FlightConnections.acquire(URI.create("grpc://127.0.0.1:2"), null);
    try {
      assertSame(first, second, "no token and an empty token are the same credentials");
      assertSame(first.client(), second.client());
      assertNotSame(first, other, "another bearer token gets its own connection");
      assertNotSame(first, elsewhere);
    } finally {
      first.release();
      second.release();
      other.release();
      elsewhere.release();
    }
    assertThrows(IllegalStateException.class, first::release, "a lease returned twice");
  }

  @Test
  void a_client_returns_its_lease_and_a_new_client_reuses_the_idle_connection() {
    URI endpoint = URI.create("grpc://127.0.0.1:3");
    FlightConnections.Connection connection;
    try (FlightShoalClient client = new FlightShoalClient(endpoint.toString(), ShoalClientOptions.withToken(null))) {
      connection = FlightConnections.acquire(endpoint, null);
      connection.release();
    }
    try (FlightShoalClient client = new FlightShoalClient(endpoint.toString(), ShoalClientOptions.withToken(null))) {
      FlightConnections.Connection again = FlightConnections.acquire(endpoint, null);
      again.release();
      assertSame(connection, again, "the idle connection is reused within its idle time");
    }
  }

  /**
   * A connection's threads are its own and end with it: gRPC's shared event loops and its
   * {@code grpc-shared-destroyer} thread would outlive it, holding the class loader of the thread
   * that first connected.
   */
  @Test
  void a_closed_connection_leaves_no_thread_behind() throws Exception {
    URI endpoint = URI.create("grpc://127.0.0.1:4");
    FlightConnections.Connection connection = FlightConnections.acquire(endpoint, null);
    try {
      // Nothing listens on port 4: the call fails, after the channel has started its threads.
      assertThrows(RuntimeException.class, () -> connection.client().listActions().forEach(a -> { }));
      assertFalse(threads("shoal-flight-127.0.0.1:4-").isEmpty(), "the connection runs on its own threads");
    } finally {
      connection.release();
    }
    FlightConnections.closeIdleNow();
    assertEquals(java.util.List.of(), threads("shoal-flight-127.0.0.1:4-"));
  }

  private static java.util.List<String> threads(String prefix) {
    java.util.List<String> out = new java.util.ArrayList<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (t.isAlive() && t.getName().startsWith(prefix)) {
        out.add(t.getName());
      }
    }
    return out;
  }

  /**
   * With an idle time of 0 (the Flink connector's), the last release closes the connection and
   * waits for its threads: nothing of it outlives the job that used it.
   */
  @Test
  void without_idle_time_the_last_release_closes_the_connection_and_its_threads() {
    URI endpoint = URI.create("grpc://127.0.0.1:5");
    ShoalClientOptions options = new ShoalClientOptions(null, null, null, 0, 0, null);
    FlightShoalClient first = new FlightShoalClient(endpoint.toString(), options);
    FlightShoalClient second = new FlightShoalClient("127.0.0.1:5", options);
    assertThrows(RuntimeException.class, () -> first.listTables(), "nothing listens on port 5");
    assertFalse(threads("shoal-flight-127.0.0.1:5-").isEmpty(), "the connection runs on its own threads");
    first.close();
    assertFalse(threads("shoal-flight-127.0.0.1:5-").isEmpty(), "a client is still using the connection");
    second.close();
    assertEquals(java.util.List.of(), threads("shoal-flight-127.0.0.1:5-"), "closed with the last client, threads ended");
  }

  @Test
  void failures_name_the_request_the_endpoint_and_a_transient_status() {
    try (FlightShoalClient client = new FlightShoalClient("grpc://127.0.0.1:6", ShoalClientOptions.withToken(null))) {
      ShoalClientException e = assertThrows(ShoalClientException.class, () -> client.getSchema("events"));
      assertEquals(ShoalStatus.UNAVAILABLE, e.status());
      assertTrue(ShoalStatus.isTransient(e) && ShoalStatus.isTransientRead(e) && e.status().isRetryableAction());
      assertTrue(e.getMessage().startsWith("shoal GetSchema on table 'events' at grpc://127.0.0.1:6 failed (UNAVAILABLE)"),
          e.getMessage());
    }
  }
}
