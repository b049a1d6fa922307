package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.arrow.flight.CallStatus;
import org.junit.jupiter.api.Test;

/**
 * The status vocabulary of both transports (a Flight status, the embedded engine's exception). In
 * shoal-embedded's tests: the embedded engine's exception is that module's.
 */
class ShoalStatusTest {

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
