package dev.shoal.flink.sink;

import java.util.function.LongSupplier;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.HistogramStatistics;
import org.apache.flink.metrics.ThreadSafeSimpleCounter;
import org.apache.flink.metrics.groups.SinkWriterMetricGroup;
import org.apache.flink.runtime.metrics.DescriptiveStatisticsHistogram;

/**
 * The metrics of a {@link ShoalWriter}, registered on its {@link SinkWriterMetricGroup}: Flink's
 * standard {@code numRecordsSendErrors} (and, kept by {@code AsyncSinkWriter}, {@code
 * numRecordsOut}, {@code numBytesOut}, {@code currentSendTime}); {@code shoalBatchesOut}
 * (acknowledged DoPut batches), {@code shoalRetries} (retried calls), {@code shoalAckLatencyMs}
 * (histogram: batch sent until acknowledged, retries included, milliseconds), {@code
 * shoalDurableAddress} (log address), {@code shoalLastDurabilityWaitMs} (gauges), {@code
 * shoalTransactionsPrepared} and {@code shoalTransactionsAborted} (exactly-once).
 */
final class ShoalWriterMetrics {
  final Counter batchesOut = new ThreadSafeSimpleCounter();
  final Counter retries = new ThreadSafeSimpleCounter();
  final Counter transactionsPrepared = new ThreadSafeSimpleCounter();
  final Counter transactionsAborted = new ThreadSafeSimpleCounter();
  final Counter sendErrors;
  final Histogram ackLatencyMs = new SynchronizedHistogram(new DescriptiveStatisticsHistogram(1000));
  /** Milliseconds the last at-least-once durability wait took. */
  volatile long lastDurabilityWaitMs = 0;

  /** Registers the metrics on {@code group}; {@code durableAddress} feeds {@code shoalDurableAddress}. */
  ShoalWriterMetrics(SinkWriterMetricGroup group, LongSupplier durableAddress) {
    this.sendErrors = group.getNumRecordsSendErrorsCounter();
    group.counter("shoalBatchesOut", batchesOut);
    group.counter("shoalRetries", retries);
    group.histogram("shoalAckLatencyMs", ackLatencyMs);
    group.gauge("shoalDurableAddress", durableAddress::getAsLong);
    group.gauge("shoalLastDurabilityWaitMs", () -> lastDurabilityWaitMs);
    group.counter("shoalTransactionsPrepared", transactionsPrepared);
    group.counter("shoalTransactionsAborted", transactionsAborted);
  }

  /** Acknowledgement latencies are recorded from sender threads; Flink's histogram is not thread-safe. */
  private static final class SynchronizedHistogram implements Histogram {
    private final Histogram delegate;

    SynchronizedHistogram(Histogram delegate) {
      this.delegate = delegate;
    }

    @Override
    public synchronized void update(long value) {
      delegate.update(value);
    }

    @Override
    public synchronized long getCount() {
      return delegate.getCount();
    }

    @Override
    public synchronized HistogramStatistics getStatistics() {
      return delegate.getStatistics();
    }
  }
}
