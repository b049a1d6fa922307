package dev.shoal.flink.sink;

import java.io.IOException;
import dev.shoal.flink.common.ShoalClientOptions;
import org.apache.flink.api.connector.sink2.Committer;
import org.apache.flink.api.connector.sink2.CommitterInitContext;
import org.apache.flink.api.connector.sink2.SupportsCommitter;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.base.sink.writer.ElementConverter;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The {@code exactly-once} shoal sink: a {@link ShoalSink} whose writers stage each checkpoint
 * interval's records in a shoal transaction and prepare it at the checkpoint, plus Flink's {@link
 * SupportsCommitter} (the Sink V2 two-phase-commit API of 1.20 and 2.x; it replaced {@code
 * TwoPhaseCommittingSink}, deprecated in 1.20 and removed in 2.0): a {@link ShoalCommitter}
 * commits the prepared transactions once the checkpoint is complete. {@link
 * ShoalSinkBuilder#build()} returns one for {@code EXACTLY_ONCE}; the other guarantees get a plain
 * {@link ShoalSink} (no committer operator in the job graph).
 */
public class ShoalExactlyOnceSink<InputT> extends ShoalSink<InputT> implements SupportsCommitter<ShoalCommittable> {
  private static final long serialVersionUID = 1L;

  ShoalExactlyOnceSink(
      ElementConverter<InputT, byte[]> elementConverter,
      int maxBatchSize,
      int maxInFlightRequests,
      int maxBufferedRequests,
      long maxBatchSizeInBytes,
      long maxTimeInBufferMs,
      String endpoint,
      String table,
      ShoalClientOptions clientOptions,
      RetryPolicy retryPolicy,
      String transactionalIdPrefix) {
    super(elementConverter, maxBatchSize, maxInFlightRequests, maxBufferedRequests, maxBatchSizeInBytes,
        maxTimeInBufferMs, endpoint, table, clientOptions, DeliveryGuarantee.EXACTLY_ONCE, retryPolicy,
        transactionalIdPrefix);
  }

  @Override
  public Committer<ShoalCommittable> createCommitter(CommitterInitContext context) throws IOException {
    return new ShoalCommitter(clientOptions(), retryPolicy());
  }

  @Override
  public SimpleVersionedSerializer<ShoalCommittable> getCommittableSerializer() {
    return new ShoalCommittable.Serializer();
  }
}
