package dev.shoal.flink;

import java.util.Collection;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.base.sink.writer.AsyncSinkWriter;
import org.apache.flink.connector.base.sink.writer.BufferedRequestState;
import org.apache.flink.connector.base.sink.writer.ElementConverter;
import org.apache.flink.connector.base.sink.writer.ResultHandler;
import org.apache.flink.connector.base.sink.writer.config.AsyncSinkWriterConfiguration;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.HistogramStatistics;
import org.apache.flink.metrics.ThreadSafeSimpleCounter;
import org.apache.flink.metrics.groups.SinkWriterMetricGroup;
import org.apache.flink.runtime.metrics.DescriptiveStatisticsHistogram;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The writer of {@link ShoalSink} (one per parallel subtask).
 *
 * <p>From {@link AsyncSinkWriter} it gets the buffer, the batching by rows/bytes/time, the bound on
 * in-flight batches (the writer blocks in {@code write} when reached: backpressure) and the wait
 * for in-flight batches at a checkpoint. It adds:
 *
 * <ul>
 *   <li>{@link #submitRequestEntries}: one {@code DoPut} per batch, run on a sender thread so the
 *       task thread never blocks on the network; transient errors are retried there with
 *       exponential backoff (the batch keeps its in-flight slot meanwhile), permanent ones fail the
 *       job with a {@link ShoalSinkException} naming the table and, for rejected JSON, the record.
 *   <li>{@link #flush}: under {@code at-least-once} a checkpoint sends the whole buffer (so the
 *       checkpoint state holds no records), waits for every acknowledgement, then asks the daemon
 *       to flush the table ({@code DoAction checkpoint}) until its {@code flushed_until_address}
 *       is past the highest acknowledged {@code last_address}: everything acknowledged is then in
 *       the table's segment files.
 * </ul>
 *
 * <p>Metrics (on the writer's {@link SinkWriterMetricGroup}): Flink's standard {@code
 * numRecordsOut}, {@code numBytesOut}, {@code numRecordsSendErrors} and {@code currentSendTime};
 * and {@code shoalBatchesOut} (acknowledged DoPut batches), {@code shoalRetries} (retried calls),
 * {@code shoalAckLatencyMs} (histogram: batch sent until acknowledged, retries included), {@code
 * shoalDurableAddress} and {@code shoalLastDurabilityWaitMs} (gauges).
 */
public class ShoalWriter<InputT> extends AsyncSinkWriter<InputT, byte[]> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalWriter.class);

  private final ShoalClient client;
  private final DeliveryGuarantee deliveryGuarantee;
  private final RetryPolicy retryPolicy;
  private final ExecutorService senders;

  /** Highest {@code last_address} of any acknowledged batch of this writer; -1 before the first. */
  private final AtomicLong highestAcknowledgedAddress = new AtomicLong(-1);
  /** Highest flushed address the daemon reported (PutResult durable_address or checkpoint). */
  private final AtomicLong durableAddress = new AtomicLong(-1);
  /** System.nanoTime of the latest acknowledgement this writer received. */
  private final AtomicLong lastAcknowledgedNanos = new AtomicLong(System.nanoTime());

  private final Counter batchesOut = new ThreadSafeSimpleCounter();
  private final Counter retries = new ThreadSafeSimpleCounter();
  private final Counter sendErrors;
  private final Histogram ackLatency = new SynchronizedHistogram(new DescriptiveStatisticsHistogram(1000));
  private volatile long lastDurabilityWaitMs = 0;
  private volatile boolean closed;

  ShoalWriter(
      ElementConverter<InputT, byte[]> elementConverter,
      Sink.InitContext context,
      AsyncSinkWriterConfiguration configuration,
      Collection<BufferedRequestState<byte[]>> states,
      ShoalClient client,
      DeliveryGuarantee deliveryGuarantee,
      RetryPolicy retryPolicy) {
    super(elementConverter, context, configuration, states);
    this.client = client;
    this.deliveryGuarantee = deliveryGuarantee;
    this.retryPolicy = retryPolicy;
    String name = "shoal-sink-" + client.table() + "-" + context.getSubtaskId() + "-";
    AtomicInteger threads = new AtomicInteger();
    this.senders =
        Executors.newCachedThreadPool(
            runnable -> {
              Thread t = new Thread(runnable, name + threads.incrementAndGet());
              t.setDaemon(true);
              return t;
            });
    SinkWriterMetricGroup metrics = context.metricGroup();
    this.sendErrors = metrics.getNumRecordsSendErrorsCounter();
    metrics.counter("shoalBatchesOut", batchesOut);
    metrics.counter("shoalRetries", retries);
    metrics.histogram("shoalAckLatencyMs", ackLatency);
    metrics.gauge("shoalDurableAddress", durableAddress::get);
    metrics.gauge("shoalLastDurabilityWaitMs", () -> lastDurabilityWaitMs);
  }

  /** A record's size is its JSON text's UTF-8 length (what the daemon stores as payload). */
  @Override
  protected long getSizeInBytes(byte[] requestEntry) {
    return requestEntry.length;
  }

  @Override
  protected void submitRequestEntries(List<byte[]> requestEntries, ResultHandler<byte[]> resultHandler) {
    long bytes = 0;
    for (byte[] entry : requestEntries) {
      bytes += entry.length;
    }
    long batchBytes = bytes;
    senders.execute(() -> send(requestEntries, batchBytes, resultHandler));
  }

  /** Runs on a sender thread: one batch, with retries on transient errors. */
  private void send(List<byte[]> records, long bytes, ResultHandler<byte[]> resultHandler) {
    long started = System.nanoTime();
    for (int attempt = 1; ; attempt++) {
      try {
        ShoalClient.PutAcknowledgement ack = client.put(records, bytes);
        if (ack.records() > 0) {
          highestAcknowledgedAddress.accumulateAndGet(ack.lastAddress(), Math::max);
        }
        durableAddress.accumulateAndGet(ack.durableAddress(), Math::max);
        lastAcknowledgedNanos.accumulateAndGet(System.nanoTime(), Math::max);
        batchesOut.inc();
        ackLatency.update(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
        resultHandler.complete();
        return;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        resultHandler.completeExceptionally(
            new ShoalSinkException("shoal table \"" + client.table() + "\": DoPut interrupted", e));
        return;
      } catch (RuntimeException e) {
        sendErrors.inc(records.size());
        boolean retry = !closed && ShoalErrors.isTransient(e) && attempt <= retryPolicy.maxRetries();
        if (!retry) {
          resultHandler.completeExceptionally(ShoalErrors.putFailed(client, records, e, attempt));
          return;
        }
        long backoff = retryPolicy.backoffMillis(attempt);
        retries.inc();
        LOG.warn(
            "shoal table \"{}\" at {}: DoPut of {} records failed with a transient error (attempt {} of {}), "
                + "retrying in {} ms: {}",
            client.table(), client.endpoint(), records.size(), attempt, retryPolicy.maxRetries() + 1, backoff,
            ShoalErrors.describe(e));
        try {
          Thread.sleep(backoff);
        } catch (InterruptedException interrupted) {
          Thread.currentThread().interrupt();
          resultHandler.completeExceptionally(ShoalErrors.putFailed(client, records, e, attempt));
          return;
        }
      }
    }
  }

  /**
   * Called by Flink before each checkpoint barrier ({@code endOfInput = false}) and at the end of a
   * bounded input ({@code true}). Under {@code at-least-once} both send the whole buffer and wait
   * for durability; under {@code none} a checkpoint only waits for the batches in flight (the
   * buffer goes into the checkpoint state), as {@link AsyncSinkWriter} does.
   */
  @Override
  public void flush(boolean endOfInput) throws InterruptedException {
    if (deliveryGuarantee == DeliveryGuarantee.AT_LEAST_ONCE) {
      super.flush(true);
      waitUntilDurable();
    } else {
      super.flush(endOfInput);
    }
  }

  /**
   * Asks the daemon to flush the table until everything this writer saw acknowledged is in its
   * segment files. {@code last_address} is where the last record of a batch starts, so it is
   * durable once {@code flushed_until_address} is <em>greater</em> than it (the daemon's checkpoint
   * closes the open page, so one call normally suffices).
   */
  private void waitUntilDurable() throws InterruptedException {
    long target = highestAcknowledgedAddress.get();
    if (target < 0 || durableAddress.get() > target) {
      return;
    }
    long started = System.nanoTime();
    TableDurability table = TableDurability.of(client.endpoint(), client.table());
    // One checkpoint action at a time per table in this JVM: the subtasks of a job share the
    // table, and one action flushes for all of them (the daemon also fails concurrent ones).
    synchronized (table) {
      for (int attempt = 1; ; attempt++) {
        // Another writer's checkpoint action counts only if it started after this writer's last
        // acknowledgement (then the daemon's flush covered it) and reported an address past ours.
        if (table.lastStartedNanos - lastAcknowledgedNanos.get() > 0 && table.lastFlushedUntil > target) {
          durableAddress.accumulateAndGet(table.lastFlushedUntil, Math::max);
          break;
        }
        RuntimeException failure = null;
        try {
          long startedNanos = System.nanoTime();
          long flushed = client.checkpoint();
          table.lastStartedNanos = startedNanos;
          table.lastFlushedUntil = flushed;
          durableAddress.accumulateAndGet(flushed, Math::max);
          if (flushed > target) {
            break;
          }
        } catch (RuntimeException e) {
          if (!ShoalErrors.isRetryableForCheckpoint(e)) {
            throw new ShoalSinkException(
                "shoal table \"" + client.table() + "\" at " + client.endpoint()
                    + ": checkpoint action failed while waiting for durability: " + ShoalErrors.describe(e),
                e);
          }
          failure = e;
        }
        if (attempt > retryPolicy.maxRetries()) {
          throw new ShoalSinkException(
              "shoal table \"" + client.table() + "\" at " + client.endpoint() + ": acknowledged records up to "
                  + "log address " + target + " are still not durable after " + attempt + " checkpoint actions"
                  + " (flushed until " + durableAddress.get() + ")"
                  + (failure == null ? "" : "; last error: " + ShoalErrors.describe(failure)),
              failure);
        }
        retries.inc();
        long backoff = retryPolicy.backoffMillis(attempt);
        LOG.warn(
            "shoal table \"{}\" at {}: checkpoint action did not make log address {} durable (attempt {} of {}), "
                + "retrying in {} ms{}",
            client.table(), client.endpoint(), target, attempt, retryPolicy.maxRetries() + 1, backoff,
            failure == null ? "" : ": " + ShoalErrors.describe(failure));
        Thread.sleep(backoff);
      }
    }
    lastDurabilityWaitMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
  }

  /**
   * The last checkpoint action on one table from this JVM, shared by its writers, and their lock:
   * one action at a time per table.
   */
  private static final class TableDurability {
    private static final java.util.concurrent.ConcurrentHashMap<String, TableDurability> TABLES =
        new java.util.concurrent.ConcurrentHashMap<>();
    /** When the last successful checkpoint action started (System.nanoTime) and what it answered; guarded by this. */
    long lastStartedNanos = System.nanoTime();
    long lastFlushedUntil = -1;

    static TableDurability of(String endpoint, String table) {
      return TABLES.computeIfAbsent(endpoint + "\u0000" + table, key -> new TableDurability());
    }
  }

  @Override
  public void close() {
    closed = true;
    senders.shutdownNow();
    try {
      senders.awaitTermination(10, TimeUnit.SECONDS);
      client.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (RuntimeException e) {
      LOG.warn("closing the shoal client of table \"{}\" failed", client.table(), e);
    }
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
