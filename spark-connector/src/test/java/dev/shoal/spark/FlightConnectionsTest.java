package dev.shoal.spark;

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
}
