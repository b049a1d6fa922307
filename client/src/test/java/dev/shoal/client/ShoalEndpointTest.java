package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/** Endpoint values (the status vocabulary of both transports: shoal-embedded's ShoalStatusTest). */
class ShoalEndpointTest {

  @Test
  void endpoints_select_their_transport_and_malformed_ones_name_the_option() {
    assertEquals(URI.create("grpc://h:1"), ShoalEndpoint.flightUri("h:1"), "host:port is plain gRPC");
    assertEquals(URI.create("grpc+tls://h:1"), ShoalEndpoint.flightUri("grpc+tls://h:1"));
    assertEquals(Path.of("/tmp/data"), ShoalEndpoint.embeddedPath("embedded:/tmp/x/../data"));
    assertEquals(Path.of("/tmp/data"), ShoalEndpoint.embeddedPath("embedded:///tmp/data"));
    assertEquals(Path.of("rel").toAbsolutePath(), ShoalEndpoint.embeddedPath("embedded:rel"));
    assertTrue(ShoalEndpoint.isEmbedded("EMBEDDED:/tmp/data") && !ShoalEndpoint.isEmbedded("grpc://h:1"));
    assertTrue(ShoalEndpoint.isEmbedded(URI.create("embedded:/tmp/data")));
    for (String bad : new String[] {"http://h:1", "grpc://", "embedded://host/data", "embedded:"}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ShoalEndpoint.validate(bad), bad);
      assertTrue(e.getMessage().contains("option 'endpoint'") && e.getMessage().contains(bad), e.getMessage());
    }
  }

  /** The client alone has no embedded transport (shoal-embedded registers it): opening one says so, naming the jar. */
  @Test
  void without_shoal_embedded_an_embedded_endpoint_is_a_client_error_of_open() {
    ShoalClientException e = assertThrows(ShoalClientException.class,
        () -> ShoalClient.open("embedded:/tmp/shoal-no-transport", ShoalClientOptions.withToken(null)));
    assertEquals(ShoalClientException.OPEN, e.request());
    assertEquals(ShoalStatus.CLIENT, e.status());
    assertTrue(e.getMessage().contains("shoal-embedded"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> ShoalClient.open("embedded:", ShoalClientOptions.withToken(null)),
        "a malformed endpoint stays an IllegalArgumentException");
  }
}
