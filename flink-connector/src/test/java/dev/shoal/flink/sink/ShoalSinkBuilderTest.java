package dev.shoal.flink.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import dev.shoal.client.ShoalEndpoint;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.junit.jupiter.api.Test;

class ShoalSinkBuilderTest {

  static ShoalSinkBuilder<String> valid() {
    return ShoalSink.<String>builder().setEndpoint("grpc://localhost:7700").setTable("events");
  }

  @Test
  void exactlyOnceBuildsATwoPhaseCommittingSink() {
    ShoalSink<String> sink = valid().setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .setTransactionalIdPrefix("job-7.sink:a_b").build();
    assertTrue(sink instanceof org.apache.flink.api.connector.sink2.SupportsCommitter, sink.getClass().getName());
    assertEquals("job-7.sink:a_b", sink.getTransactionalIdPrefix());
    assertTrue(!(valid().build() instanceof org.apache.flink.api.connector.sink2.SupportsCommitter),
        "no committer operator for at-least-once");
  }

  @Test
  void malformedTransactionalIdPrefixIsNamed() {
    String message = assertThrows(IllegalArgumentException.class,
        () -> valid().setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE).setTransactionalIdPrefix("a b").build())
        .getMessage();
    assertTrue(message.contains("sink.transactional-id-prefix"), message);
  }

  @Test
  void committablesSurviveSerialization() throws Exception {
    ShoalCommittable committable = new ShoalCommittable("grpc://h:1", "events", "p-0-5-1", 42);
    ShoalCommittable.Serializer serializer = new ShoalCommittable.Serializer();
    assertEquals(committable, serializer.deserialize(serializer.getVersion(), serializer.serialize(committable)));
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
  void embeddedEndpointsAreParsedAndMalformedOnesNamed() {
    String m = assertThrows(IllegalArgumentException.class,
        () -> ShoalSink.<String>builder().setEndpoint("embedded://somehost/data").setTable("t").build()).getMessage();
    assertTrue(m.contains("option 'endpoint'") && m.contains("names a host"), m);
    m = assertThrows(IllegalArgumentException.class,
        () -> ShoalSink.<String>builder().setEndpoint("embedded:").setTable("t").build()).getMessage();
    assertTrue(m.contains("option 'endpoint'") && m.contains("names no data directory"), m);
    m = assertThrows(IllegalArgumentException.class,
        () -> ShoalSink.<String>builder().setEndpoint("grpc://bad host:1").setTable("t").build()).getMessage();
    assertTrue(m.contains("option 'endpoint'") && m.contains("embedded:/path/to/data"), m);
    // embedded:///abs, embedded:/abs (any case) and a relative path (against the working directory)
    assertEquals(java.nio.file.Path.of("/tmp/data"), ShoalEndpoint.embeddedPath("embedded:/tmp/x/../data"));
    assertEquals(java.nio.file.Path.of("/tmp/data"), ShoalEndpoint.embeddedPath("embedded:///tmp/data"));
    assertEquals(java.nio.file.Path.of("rel").toAbsolutePath(), ShoalEndpoint.embeddedPath("embedded:rel"));
    assertTrue(ShoalEndpoint.isEmbedded("EMBEDDED:/tmp/data") && !ShoalEndpoint.isEmbedded("grpc://h:1"));
    ShoalSink<String> sink = ShoalSink.<String>builder().setEndpoint("embedded:/tmp/data").setTable("t")
        .setEmbeddedKeepAlive(Duration.ZERO).setEmbeddedConfig("durability", "fsync").build();
    assertEquals(Duration.ZERO, sink.clientOptions().embeddedKeepAlive());
    assertEquals(java.util.Map.of("durability", "fsync"), sink.clientOptions().embeddedConfig());
    m = assertThrows(IllegalArgumentException.class,
        () -> valid().setEmbeddedKeepAlive(Duration.ofSeconds(-1)).build()).getMessage();
    assertTrue(m.contains("embedded.keep-alive"), m);
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
