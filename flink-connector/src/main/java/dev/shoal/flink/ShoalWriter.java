package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.List;
import java.util.OptionalLong;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.api.connector.sink2.CommittingSinkWriter;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.connector.sink2.InitContext;
import org.apache.flink.api.connector.sink2.WriterInitContext;
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
 * <p>It talks to shoal through a {@link ShoalClient}: a daemon over Arrow Flight, or the engine
 * inside this JVM for an {@code embedded:} endpoint; both answer the same, so everything below holds
 * for either.
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
 *       checkpoint state holds no records), waits for every acknowledgement, then calls {@code
 *       DoAction make_durable} with the highest acknowledged {@code end_address}: everything
 *       acknowledged is then durable. If the daemon may have lost acknowledged records that were not
 *       durable yet (an {@code UNAVAILABLE} error while some were outstanding, or a log tail below
 *       them: a daemon crash rolls its log back to the durable point), the checkpoint fails instead,
 *       so the job replays from the previous one.
 *   <li>under {@code exactly-once} ({@link CommittingSinkWriter}): the records of a checkpoint
 *       interval are staged in a shoal transaction {@code <prefix>-<subtask>-<checkpoint>-<epoch>}
 *       (begun with the interval's first batch); at the checkpoint the writer sends the whole
 *       buffer, waits for every acknowledgement, calls {@code prepare_transaction}, checks that the
 *       daemon staged exactly the records it acknowledged, and hands a {@link ShoalCommittable} to
 *       the {@link ShoalCommitter}. On start it aborts the transactions an earlier run of this sink
 *       left open or prepared past the restored checkpoint (their records will be sent again).
 * </ul>
 *
 * <p>Metrics (on the writer's {@link SinkWriterMetricGroup}): Flink's standard {@code
 * numRecordsOut}, {@code numBytesOut}, {@code numRecordsSendErrors} and {@code currentSendTime};
 * and {@code shoalBatchesOut} (acknowledged DoPut batches), {@code shoalRetries} (retried calls),
 * {@code shoalAckLatencyMs} (histogram: batch sent until acknowledged, retries included), {@code
 * shoalDurableAddress}, {@code shoalLastDurabilityWaitMs} (gauges), {@code
 * shoalTransactionsPrepared} and {@code shoalTransactionsAborted} (exactly-once).
 */
public class ShoalWriter<InputT> extends AsyncSinkWriter<InputT, byte[]>
    implements CommittingSinkWriter<InputT, ShoalCommittable> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalWriter.class);

  private final ShoalClient client;
  private final DeliveryGuarantee deliveryGuarantee;
  private final RetryPolicy retryPolicy;
  private final ExecutorService senders;
  private final String where;

  /** Highest {@code end_address} of any acknowledged batch of this writer; -1 before the first. */
  private final AtomicLong highestAcknowledgedEnd = new AtomicLong(-1);
  /** Highest durable address the daemon reported (PutResult durable_address or make_durable). */
  private final AtomicLong durableAddress = new AtomicLong(-1);
  /**
   * At-least-once: why acknowledged records may have been lost (an UNAVAILABLE error while some
   * were not known durable); null if nothing suggests so. Makes the next durability wait fail.
   */
  private volatile String possibleLoss;

  // Exactly-once: the transaction of the current checkpoint interval (task thread only).
  /** {@code <prefix>-<subtask>-}. */
  private final String transactionPrefix;
  /** Larger than the epoch of every transaction of this subtask index that existed when the writer started. */
  private final long epoch;
  /** The checkpoint id the next transaction is named after: the one after the last snapshot. */
  private long nextCheckpointId;
  private long lastPreparedCheckpointId = -1;
  private Transaction current;

  private final Counter batchesOut = new ThreadSafeSimpleCounter();
  private final Counter retries = new ThreadSafeSimpleCounter();
  private final Counter transactionsPrepared = new ThreadSafeSimpleCounter();
  private final Counter transactionsAborted = new ThreadSafeSimpleCounter();
  private final Counter sendErrors;
  private final Histogram ackLatency = new SynchronizedHistogram(new DescriptiveStatisticsHistogram(1000));
  private volatile long lastDurabilityWaitMs = 0;
  private volatile boolean closed;

  ShoalWriter(
      ElementConverter<InputT, byte[]> elementConverter,
      WriterInitContext context,
      AsyncSinkWriterConfiguration configuration,
      Collection<BufferedRequestState<byte[]>> states,
      ShoalClient client,
      DeliveryGuarantee deliveryGuarantee,
      RetryPolicy retryPolicy,
      String transactionalIdPrefix) {
    super(elementConverter, context, configuration, states);
    // Opened here rather than in ElementConverter.open, whose parameter differs between Flink 1.20
    // (Sink.InitContext) and 2.x (WriterInitContext).
    if (elementConverter instanceof SerializationSchemaElementConverter<?> converter) {
      converter.openSchema(context.asSerializationSchemaInitializationContext());
    }
    int subtask = context.getTaskInfo().getIndexOfThisSubtask();
    this.client = client;
    this.deliveryGuarantee = deliveryGuarantee;
    this.retryPolicy = retryPolicy;
    this.where = "shoal table \"" + client.table() + "\" at " + client.endpoint();
    String name = "shoal-sink-" + client.table() + "-" + subtask + "-";
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
    metrics.counter("shoalTransactionsPrepared", transactionsPrepared);
    metrics.counter("shoalTransactionsAborted", transactionsAborted);
    if (deliveryGuarantee == DeliveryGuarantee.EXACTLY_ONCE) {
      String prefix = transactionalIdPrefix != null ? transactionalIdPrefix : defaultTransactionalIdPrefix(context, client.table());
      this.transactionPrefix = prefix + "-" + subtask + "-";
      OptionalLong restored = context.getRestoredCheckpointId();
      this.nextCheckpointId = restored.orElse(0) + 1;
      try {
        this.epoch = abortLingeringTransactions(prefix, subtask, context.getTaskInfo().getNumberOfParallelSubtasks(), restored);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new ShoalSinkException(where + ": interrupted while aborting lingering transactions", e);
      }
    } else {
      this.transactionPrefix = null;
      this.epoch = 0;
    }
  }

  /**
   * The prefix when {@code sink.transactional-id-prefix} is not set: {@code flink-<job id>-<hash of
   * the sink's task name and table>} - stable across the failovers of one job, different for
   * another job or another sink of the job.
   */
  static String defaultTransactionalIdPrefix(InitContext context, String table) {
    String sink = context.getTaskInfo().getTaskName() + "\u0000" + table;
    return "flink-" + context.getJobInfo().getJobId() + "-"
        + String.format("%08x", java.util.Arrays.hashCode(sink.getBytes(StandardCharsets.UTF_8)));
  }

  /**
   * Aborts the transactions an earlier run of this sink left open or prepared whose records the
   * job will send again: those of the subtask indexes this subtask stands in for ({@code index %
   * parallelism == subtask}, so a smaller parallelism also cleans up the higher indexes) named
   * after a checkpoint past the restored one (all of them on a fresh start). Transactions named
   * after the restored checkpoint or before are committed, or are in the restored committables and
   * Flink commits them again. Returns the epoch for this writer's transactions: past every epoch of
   * this subtask index in the table, so no id is reused (the daemon never reopens an aborted or
   * committed id).
   */
  private long abortLingeringTransactions(String prefix, int subtask, int parallelism, OptionalLong restored)
      throws InterruptedException {
    Pattern ids = Pattern.compile(Pattern.quote(prefix) + "-(\\d{1,9})-(\\d{1,18})-(\\d{1,18})");
    long maxEpoch = 0;
    int aborted = 0;
    for (JsonNode transaction : withRetries("list_transactions", client::listTransactions)) {
      String id = transaction.path("transaction").asText();
      Matcher m = ids.matcher(id);
      if (!m.matches()) {
        continue;
      }
      int index = Integer.parseInt(m.group(1));
      long checkpoint = Long.parseLong(m.group(2));
      if (index == subtask) {
        maxEpoch = Math.max(maxEpoch, Long.parseLong(m.group(3)));
      }
      String state = transaction.path("state").asText();
      boolean pending = state.equals("open") || state.equals("prepared");
      if (pending && index % parallelism == subtask && (restored.isEmpty() || checkpoint > restored.getAsLong())) {
        LOG.info("{}: aborting transaction {} ({}, {} records) left by an earlier run (restored checkpoint: {})",
            where, id, state, transaction.path("records").asLong(), restored.isPresent() ? restored.getAsLong() : "none");
        withRetries("abort_transaction " + id, () -> client.abortTransaction(id));
        transactionsAborted.inc();
        aborted++;
      }
    }
    LOG.info("{}: exactly-once writer {} starts with epoch {} ({} lingering transactions aborted)",
        where, subtask, maxEpoch + 1, aborted);
    return maxEpoch + 1;
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
    Transaction transaction = deliveryGuarantee == DeliveryGuarantee.EXACTLY_ONCE ? currentTransaction() : null;
    senders.execute(() -> send(requestEntries, batchBytes, transaction, resultHandler));
  }

  /** The transaction of this checkpoint interval, created with its first batch (task thread). */
  private Transaction currentTransaction() {
    if (current == null) {
      if (nextCheckpointId <= lastPreparedCheckpointId) {
        throw new IllegalStateException(where + ": records after the prepared transaction of checkpoint "
            + lastPreparedCheckpointId + " arrived before the checkpoint's snapshot");
      }
      current = new Transaction(transactionPrefix + nextCheckpointId + "-" + epoch, nextCheckpointId);
    }
    return current;
  }

  /** Runs on a sender thread: one batch, with retries on transient errors. */
  private void send(List<byte[]> records, long bytes, Transaction transaction, ResultHandler<byte[]> resultHandler) {
    long started = System.nanoTime();
    for (int attempt = 1; ; attempt++) {
      try {
        ShoalClient.PutAcknowledgement ack;
        if (transaction == null) {
          ack = client.put(records, bytes);
          if (ack.records() > 0) {
            highestAcknowledgedEnd.accumulateAndGet(ack.endAddress(), Math::max);
          }
          durableAddress.accumulateAndGet(ack.durableAddress(), Math::max);
        } else {
          // A resent batch may be staged twice (its first attempt may have reached the daemon);
          // prepareCommit compares the daemon's count with the acknowledged one and fails then.
          transaction.begin();
          ack = client.put(records, bytes, transaction.id);
          if (ack.staged() < 0) {
            throw new ShoalSinkException(where + ": the daemon acknowledged a batch for transaction " + transaction.id
                + " without staging it (no \"staged\" in its PutResult): does it support transactions?");
          }
          transaction.staged.addAndGet(ack.staged());
        }
        batchesOut.inc();
        ackLatency.update(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
        resultHandler.complete();
        return;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        resultHandler.completeExceptionally(
            new ShoalSinkException(where + ": DoPut interrupted", e));
        return;
      } catch (RuntimeException e) {
        sendErrors.inc(records.size());
        noteUnavailable(e);
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
   * At-least-once: an {@code UNAVAILABLE} error (connection refused or reset: the daemon may be
   * restarting) while acknowledged records are not known durable means they may be gone - a
   * daemon that crashes loses what was not durable yet.
   */
  private void noteUnavailable(RuntimeException e) {
    if (deliveryGuarantee == DeliveryGuarantee.AT_LEAST_ONCE
        && ShoalErrors.UNAVAILABLE.equals(ShoalErrors.code(e))
        && highestAcknowledgedEnd.get() > durableAddress.get()
        && possibleLoss == null) {
      possibleLoss = "a call failed with UNAVAILABLE (" + ShoalErrors.describe(e) + ") while records acknowledged up "
          + "to log address " + highestAcknowledgedEnd.get() + " were durable only up to " + durableAddress.get();
      LOG.warn("{}: {}; the next checkpoint fails so that the job replays them", where, possibleLoss);
    }
  }

  /**
   * Called by Flink before each checkpoint barrier ({@code endOfInput = false}) and at the end of a
   * bounded input ({@code true}). Under {@code at-least-once} and {@code exactly-once} both send the
   * whole buffer and wait for every acknowledgement; at-least-once then waits for durability
   * (exactly-once's durability comes with the commit). Under {@code none} a checkpoint only waits
   * for the batches in flight (the buffer goes into the checkpoint state), as {@link
   * AsyncSinkWriter} does.
   */
  @Override
  public void flush(boolean endOfInput) throws InterruptedException {
    switch (deliveryGuarantee) {
      case AT_LEAST_ONCE -> {
        super.flush(true);
        waitUntilDurable();
      }
      case EXACTLY_ONCE -> super.flush(true);
      default -> super.flush(endOfInput);
    }
  }

  /**
   * Asks the daemon to make the log durable up to the highest {@code end_address} this writer saw
   * acknowledged ({@code make_durable}), retrying errors that are not clearly permanent. Fails
   * (ShoalSinkException, the checkpoint fails and the job replays from the previous one) when the
   * acknowledged records may have been lost in a daemon crash: an UNAVAILABLE error since they
   * were acknowledged, or a log tail below them.
   */
  private void waitUntilDurable() throws InterruptedException {
    checkNoPossibleLoss();
    long target = highestAcknowledgedEnd.get();
    if (target < 0 || durableAddress.get() >= target) {
      return;
    }
    long started = System.nanoTime();
    for (int attempt = 1; ; attempt++) {
      RuntimeException failure;
      try {
        long tail = client.stats().path("tail_address").asLong(-1);
        if (tail >= 0 && tail < target) {
          throw new ShoalSinkException(where + ": the table's log ends at " + tail + ", below the records this writer "
              + "saw acknowledged (up to " + target + "): the daemon lost records that were not durable yet "
              + "(a restart?). Failing the checkpoint so that the job replays them from the previous one.");
        }
        long durable = client.makeDurable(target);
        durableAddress.accumulateAndGet(durable, Math::max);
        if (durable >= target) {
          break;
        }
        failure = null;
      } catch (ShoalSinkException e) {
        throw e;
      } catch (RuntimeException e) {
        noteUnavailable(e);
        checkNoPossibleLoss();
        if (!ShoalErrors.isRetryableAction(e)) {
          throw new ShoalSinkException(
              where + ": make_durable failed while waiting for durability: " + ShoalErrors.describe(e), e);
        }
        failure = e;
      }
      if (attempt > retryPolicy.maxRetries()) {
        throw new ShoalSinkException(
            where + ": acknowledged records up to log address " + target + " are still not durable after " + attempt
                + " make_durable actions (durable until " + durableAddress.get() + ")"
                + (failure == null ? "" : "; last error: " + ShoalErrors.describe(failure)),
            failure);
      }
      retries.inc();
      long backoff = retryPolicy.backoffMillis(attempt);
      LOG.warn("{}: make_durable did not make log address {} durable (attempt {} of {}), retrying in {} ms{}",
          where, target, attempt, retryPolicy.maxRetries() + 1, backoff,
          failure == null ? "" : ": " + ShoalErrors.describe(failure));
      Thread.sleep(backoff);
    }
    lastDurabilityWaitMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
  }

  private void checkNoPossibleLoss() {
    String reason = possibleLoss;
    if (reason != null) {
      throw new ShoalSinkException(where + ": the daemon may have lost acknowledged records that were not durable yet: "
          + reason + ". Failing the checkpoint so that the job replays them from the previous one (tables created "
          + "with \"durability\": \"group_commit\" or \"fsync\" acknowledge only durable records and avoid this).");
    }
  }

  /**
   * Exactly-once: prepares the transaction of the interval that ends here (everything is
   * acknowledged: {@link #flush} ran) and returns it as the committable; none if the interval had
   * no records.
   */
  @Override
  public Collection<ShoalCommittable> prepareCommit() throws InterruptedException {
    if (deliveryGuarantee != DeliveryGuarantee.EXACTLY_ONCE || current == null) {
      return List.of();
    }
    Transaction transaction = current;
    current = null;
    lastPreparedCheckpointId = transaction.checkpointId;
    JsonNode info = withRetries("prepare_transaction " + transaction.id, () -> client.prepareTransaction(transaction.id));
    long staged = info.path("records").asLong(-1);
    long acknowledged = transaction.staged.get();
    if (staged != acknowledged) {
      // A batch resent after a transient error was staged twice, or the daemon lost staged
      // batches: this transaction must not be committed. Abort it and fail: the job replays the
      // interval from the last checkpoint into a new transaction.
      try {
        client.abortTransaction(transaction.id);
        transactionsAborted.inc();
      } catch (RuntimeException e) {
        LOG.warn("{}: aborting transaction {} failed (the next start aborts it): {}", where, transaction.id,
            ShoalErrors.describe(e));
      }
      throw new ShoalSinkException(where + ": transaction " + transaction.id + " holds " + staged
          + " staged records but the writer saw " + acknowledged + " acknowledged (a batch resent after a transient "
          + "error was staged twice, or the daemon lost staged records); aborted it - the job replays the "
          + "checkpoint interval");
    }
    transactionsPrepared.inc();
    return List.of(new ShoalCommittable(client.endpoint(), client.table(), transaction.id, staged));
  }

  /** Names the next transaction after the checkpoint that follows this one. */
  @Override
  public List<BufferedRequestState<byte[]>> snapshotState(long checkpointId) {
    nextCheckpointId = Math.max(nextCheckpointId, checkpointId + 1);
    return super.snapshotState(checkpointId);
  }

  /** Runs an idempotent action, retrying errors that are not clearly permanent. */
  private <T> T withRetries(String what, Supplier<T> action) throws InterruptedException {
    for (int attempt = 1; ; attempt++) {
      try {
        return action.get();
      } catch (RuntimeException e) {
        if (ShoalErrors.NOT_FOUND.equals(ShoalErrors.code(e)) && what.equals("list_transactions")) {
          throw new ShoalSinkException(where + ": the table does not exist (create it with the create_table action "
              + "before the job starts): " + ShoalErrors.describe(e), e);
        }
        if (!ShoalErrors.isRetryableAction(e) || attempt > retryPolicy.maxRetries()) {
          throw new ShoalSinkException(
              where + ": " + what + " failed after " + attempt + " attempts: " + ShoalErrors.describe(e), e);
        }
        long backoff = retryPolicy.backoffMillis(attempt);
        retries.inc();
        LOG.warn("{}: {} failed (attempt {} of {}), retrying in {} ms: {}",
            where, what, attempt, retryPolicy.maxRetries() + 1, backoff, ShoalErrors.describe(e));
        Thread.sleep(backoff);
      }
    }
  }

  /** A shoal transaction holding one checkpoint interval's records. */
  private final class Transaction {
    final String id;
    final long checkpointId;
    /** Records the daemon acknowledged as staged. */
    final AtomicLong staged = new AtomicLong();
    private boolean begun; // guarded by this

    Transaction(String id, long checkpointId) {
      this.id = id;
      this.checkpointId = checkpointId;
    }

    /** {@code begin_transaction} once (it is idempotent while the transaction is open). */
    synchronized void begin() {
      if (!begun) {
        client.beginTransaction(id);
        begun = true;
      }
    }
  }

  /**
   * Stops the sender threads and closes the client - also when the task thread is interrupted (a
   * cancelled task): an embedded client that stayed open would keep the engine, and the data
   * directory's lock, for the JVM's lifetime.
   */
  @Override
  public void close() {
    closed = true;
    senders.shutdownNow();
    boolean interrupted = false;
    try {
      senders.awaitTermination(10, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      interrupted = true;
    }
    try {
      client.close();
    } catch (InterruptedException e) {
      interrupted = true;
    } catch (RuntimeException e) {
      LOG.warn("closing the shoal client of table \"{}\" failed", client.table(), e);
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
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
