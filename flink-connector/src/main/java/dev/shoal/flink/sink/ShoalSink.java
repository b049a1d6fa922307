package dev.shoal.flink.sink;

import java.io.IOException;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalTableClient;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.base.sink.AsyncSinkBase;
import org.apache.flink.connector.base.sink.writer.BufferedRequestState;
import org.apache.flink.connector.base.sink.writer.ElementConverter;
import org.apache.flink.connector.base.sink.writer.config.AsyncSinkWriterConfiguration;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * A Flink Sink V2 sink that writes JSON records into a shoal table: over Arrow Flight {@code
 * DoPut} to a daemon, or into the engine inside the writers' JVM for an {@code embedded:/path}
 * endpoint. Built with {@link #builder()}:
 *
 * <pre>{@code
 * ShoalSink<String> sink = ShoalSink.<String>builder()
 *     .setEndpoint("grpc://localhost:7700")
 *     .setTable("events")
 *     .setDeliveryGuarantee(DeliveryGuarantee.AT_LEAST_ONCE)
 *     .build();
 * stream.sinkTo(sink);
 * }</pre>
 *
 * <p>It is an {@link AsyncSinkBase}: flink-connector-base does the batching (by rows, bytes and
 * time), the bound on in-flight batches with its backpressure, and the wait for in-flight batches
 * at a checkpoint; {@link ShoalWriter} adds the DoPut calls, the retries with backoff and, under
 * {@code at-least-once}, the durability wait after the flush.
 *
 * @param <InputT> the element type; {@code String} elements are taken as JSON documents, other
 *     types need a {@code SerializationSchema} producing one JSON document each
 */
public class ShoalSink<InputT> extends AsyncSinkBase<InputT, byte[]> implements FlinkMajorSink<InputT> {
  private static final long serialVersionUID = 1L;

  /**
   * The base's own per-request timer (it re-sends or fails a batch whose completion did not arrive
   * in time) is set far beyond our own per-call deadline and retry budget, which are what bound a
   * batch; failing on it avoids a second copy of a batch still being retried.
   */
  private static final long BASE_REQUEST_TIMEOUT_MS = Duration.ofHours(1).toMillis();

  private final String endpoint;
  private final String table;
  private final ShoalClientOptions clientOptions;
  private final DeliveryGuarantee deliveryGuarantee;
  private final RetryPolicy retryPolicy;
  /** {@code sink.transactional-id-prefix}; null: derived per job (exactly-once only). */
  private final String transactionalIdPrefix;

  ShoalSink(
      ElementConverter<InputT, byte[]> elementConverter,
      int maxBatchSize,
      int maxInFlightRequests,
      int maxBufferedRequests,
      long maxBatchSizeInBytes,
      long maxTimeInBufferMs,
      String endpoint,
      String table,
      ShoalClientOptions clientOptions,
      DeliveryGuarantee deliveryGuarantee,
      RetryPolicy retryPolicy,
      String transactionalIdPrefix) {
    super(
        elementConverter,
        maxBatchSize,
        maxInFlightRequests,
        maxBufferedRequests,
        maxBatchSizeInBytes,
        maxTimeInBufferMs,
        maxBatchSizeInBytes,
        BASE_REQUEST_TIMEOUT_MS,
        true);
    this.endpoint = endpoint;
    this.table = table;
    this.clientOptions = clientOptions;
    this.deliveryGuarantee = deliveryGuarantee;
    this.retryPolicy = retryPolicy;
    this.transactionalIdPrefix = transactionalIdPrefix;
  }

  /** A builder; see {@link ShoalSinkBuilder} for the options and their defaults. */
  public static <InputT> ShoalSinkBuilder<InputT> builder() {
    return new ShoalSinkBuilder<>();
  }

  public String getEndpoint() {
    return endpoint;
  }

  public String getTable() {
    return table;
  }

  public DeliveryGuarantee getDeliveryGuarantee() {
    return deliveryGuarantee;
  }

  /** {@code sink.transactional-id-prefix} as configured (null: derived from the job and the sink). */
  public String getTransactionalIdPrefix() {
    return transactionalIdPrefix;
  }

  ShoalClientOptions clientOptions() {
    return clientOptions;
  }

  RetryPolicy retryPolicy() {
    return retryPolicy;
  }

  /**
   * Flink 1.20 and 2.x both create writers through these two methods ({@link WriterInitContext});
   * what differs between the majors is in {@link FlinkMajorSink}.
   */
  @Override
  public ShoalWriter<InputT> createWriter(WriterInitContext context) throws IOException {
    return restoreWriter(context, Collections.emptyList());
  }

  @Override
  public ShoalWriter<InputT> restoreWriter(
      WriterInitContext context, Collection<BufferedRequestState<byte[]>> recoveredState) throws IOException {
    ShoalTableClient client = ShoalTableClient.open(endpoint, table, clientOptions);
    try {
      if (clientOptions.createTable()) {
        client.createTableIfNotExists(table, clientOptions.primaryKey());
      }
      if (clientOptions.routeByKey()) {
        client = KeyRoutingShoalClient.routingByKey(client, clientOptions);
      }
      return newWriter(context, recoveredState, client);
    } catch (RuntimeException e) {
      // (e.g. the table does not exist) An embedded client left open would keep the engine.
      try {
        client.close();
      } catch (InterruptedException interrupted) {
        Thread.currentThread().interrupt();
      } catch (RuntimeException closing) {
        e.addSuppressed(closing);
      }
      throw e;
    }
  }

  private ShoalWriter<InputT> newWriter(
      WriterInitContext context, Collection<BufferedRequestState<byte[]>> recoveredState, ShoalTableClient client) {
    return ShoalWriter.create(
        getElementConverter(),
        context,
        AsyncSinkWriterConfiguration.builder()
            .setMaxBatchSize(getMaxBatchSize())
            .setMaxBatchSizeInBytes(getMaxBatchSizeInBytes())
            .setMaxInFlightRequests(getMaxInFlightRequests())
            .setMaxBufferedRequests(getMaxBufferedRequests())
            .setMaxTimeInBufferMS(getMaxTimeInBufferMS())
            .setMaxRecordSizeInBytes(getMaxRecordSizeInBytes())
            .setRequestTimeoutMS(getRequestTimeoutMS())
            .setFailOnTimeout(getFailOnTimeout())
            .build(),
        recoveredState,
        client,
        deliveryGuarantee,
        retryPolicy,
        transactionalIdPrefix);
  }

  @Override
  public SimpleVersionedSerializer<BufferedRequestState<byte[]>> getWriterStateSerializer() {
    return new ShoalWriterStateSerializer();
  }
}
