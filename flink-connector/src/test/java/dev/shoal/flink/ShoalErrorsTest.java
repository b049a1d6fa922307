package dev.shoal.flink;

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
}
