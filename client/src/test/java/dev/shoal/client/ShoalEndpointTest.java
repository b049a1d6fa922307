package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.nio.file.Path;
import org.apache.arrow.flight.CallStatus;
import org.junit.jupiter.api.Test;

/** Endpoint values and the status vocabulary of both transports. */
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

  @Test
  void both_spellings_of_a_status_classify_alike() {
    assertEquals(ShoalStatus.DEADLINE_EXCEEDED, ShoalStatus.named("TIMED_OUT"));
    assertEquals(ShoalStatus.PERMISSION_DENIED, ShoalStatus.named("UNAUTHORIZED"));
    assertEquals(ShoalStatus.CLIENT, ShoalStatus.of(new IllegalStateException("no answer")));
    assertEquals(ShoalStatus.UNKNOWN, ShoalStatus.named("SOMETHING_NEW"));
    assertTrue(ShoalStatus.isTransient(CallStatus.TIMED_OUT.toRuntimeException()));
    assertTrue(ShoalStatus.isTransient(new dev.shoal.embedded.ShoalEmbeddedException("doPut", "RESOURCE_EXHAUSTED", "disk full")));
    assertFalse(ShoalStatus.isTransient(CallStatus.NOT_FOUND.toRuntimeException()));
    assertFalse(ShoalStatus.named("FAILED_PRECONDITION").isRetryableAction());
    assertFalse(ShoalStatus.CLOSED.isRetryableAction());
    assertTrue(ShoalStatus.INTERNAL.isRetryableAction(), "make_durable's 'not durable after 60 s' is retried");
    ShoalClientException wrapped = new ShoalClientException("NOT_FOUND", "no table 'x'", "GetSchema", "x", "grpc://h:1",
        CallStatus.UNAVAILABLE.toRuntimeException());
    assertEquals(ShoalStatus.NOT_FOUND, ShoalStatus.of(new RuntimeException(wrapped)), "the client's own code comes first");
  }
}
