package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

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
    try (FlightShoalClient client = FlightShoalClient.open(endpoint, null)) {
      connection = FlightConnections.acquire(endpoint, null);
      connection.release();
    }
    try (FlightShoalClient client = FlightShoalClient.open(endpoint, null)) {
      FlightConnections.Connection again = FlightConnections.acquire(endpoint, null);
      again.release();
      assertSame(connection, again, "the idle connection is reused within FlightConnections.IDLE_CLOSE_MILLIS");
    }
  }

  /**
   * A connection's threads are its own and end with it: gRPC's shared event loops and its
   * {@code grpc-shared-destroyer} thread would outlive it, holding the class loader of the thread
   * that first connected (issue 19).
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
}
