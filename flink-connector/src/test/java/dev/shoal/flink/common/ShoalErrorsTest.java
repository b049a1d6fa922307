package dev.shoal.flink.common;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.channels.ClosedChannelException;
import org.apache.arrow.flight.CallStatus;
import org.junit.jupiter.api.Test;

/** Which errors the source's reads retry. */
class ShoalErrorsTest {

  /**
   * A daemon killed while it streams an answer: gRPC reported UNKNOWN "channel closed" (a
   * ClosedChannelException below), and the durable-only follower failed instead of waiting for
   * the restart (ShoalSourceDaemonITCase, a CI run of 2026-11-26).
   */
  @Test
  void aConnectionLostMidAnswerIsRetriedByReads() {
    RuntimeException closed =
        CallStatus.UNKNOWN.withDescription("channel closed").withCause(new ClosedChannelException()).toRuntimeException();
    assertTrue(ShoalErrors.isTransientRead(closed));
    assertFalse(ShoalErrors.isTransient(closed), "writes keep their own rule");
    assertTrue(ShoalErrors.isTransientRead(CallStatus.UNAVAILABLE.withDescription("io exception").toRuntimeException()));
    assertFalse(ShoalErrors.isTransientRead(CallStatus.UNKNOWN.withDescription("boom").toRuntimeException()));
    assertFalse(ShoalErrors.isTransientRead(CallStatus.INVALID_ARGUMENT.withDescription("bad filter").toRuntimeException()));
  }

  /** Messages quote shoal's answer once: not again from the transport's exception below the client's. */
  @Test
  void aFailureIsDescribedOnceWithItsRootCause() {
    dev.shoal.client.ShoalClientException embedded = new dev.shoal.client.ShoalClientException("INVALID_ARGUMENT",
        "record 7 of the batch is not valid JSON", "DoPut", "t", "embedded:/tmp/d",
        new dev.shoal.embedded.ShoalEmbeddedException("doPut", "INVALID_ARGUMENT", "record 7 of the batch is not valid JSON"));
    org.junit.jupiter.api.Assertions.assertEquals("record 7 of the batch is not valid JSON", ShoalErrors.describe(embedded));
    RuntimeException refused = CallStatus.UNAVAILABLE.withDescription("io exception")
        .withCause(new java.net.ConnectException("Connection refused")).toRuntimeException();
    dev.shoal.client.ShoalClientException flight = new dev.shoal.client.ShoalClientException("UNAVAILABLE",
        refused.getMessage(), "DoPut", "t", "grpc://h:1", refused);
    org.junit.jupiter.api.Assertions.assertEquals("io exception (Connection refused)", ShoalErrors.describe(flight));
    assertTrue(ShoalErrors.isTransient(flight) && !ShoalErrors.isTransient(embedded));
  }
}
