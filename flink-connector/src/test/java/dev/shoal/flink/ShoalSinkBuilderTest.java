package dev.shoal.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.junit.jupiter.api.Test;

class ShoalSinkBuilderTest {

  static ShoalSinkBuilder<String> valid() {
    return ShoalSink.<String>builder().setEndpoint("grpc://localhost:7700").setTable("events");
  }

  @Test
  void exactlyOnceIsRejectedSayingTheDaemonLacksTransactions() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> valid().setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE).build());
    assertTrue(e.getMessage().contains("'exactly-once' is not supported yet"), e.getMessage());
    assertTrue(e.getMessage().contains("transaction actions"), e.getMessage());
  }

  @Test
  void defaultsAreAtLeastOnceAndTheDocumentedLimits() {
    ShoalSink<String> sink = valid().build();
    assertEquals(DeliveryGuarantee.AT_LEAST_ONCE, sink.getDeliveryGuarantee());
  }

  @Test
  void missingEndpointOrTableIsNamed() {
    assertTrue(assertThrows(IllegalArgumentException.class, () -> ShoalSink.<String>builder().setTable("t").build())
        .getMessage().contains("'endpoint'"));
    assertTrue(assertThrows(IllegalArgumentException.class,
            () -> ShoalSink.<String>builder().setEndpoint("localhost:1").build())
        .getMessage().contains("'table'"));
  }

  @Test
  void contradictoryLimitsNameBothOptions() {
    String message = assertThrows(IllegalArgumentException.class,
        () -> valid().setMaxBatchSize(100).setMaxBufferedRequests(100).build()).getMessage();
    assertTrue(message.contains("sink.requests.max-buffered") && message.contains("sink.buffer-flush.max-rows"), message);
    assertThrows(IllegalArgumentException.class, () -> valid().setMaxTimeInBuffer(Duration.ZERO).build());
  }

  @Test
  void backoffDoublesUpToTheMaximum() {
    RetryPolicy policy = new RetryPolicy(10, Duration.ofMillis(100), Duration.ofSeconds(1));
    assertEquals(100, policy.backoffMillis(1));
    assertEquals(200, policy.backoffMillis(2));
    assertEquals(800, policy.backoffMillis(4));
    assertEquals(1000, policy.backoffMillis(5));
    assertEquals(1000, policy.backoffMillis(60));
  }
}
