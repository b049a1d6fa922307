package dev.shoal.flink.sink;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalSinkException;
import dev.shoal.flink.common.ShoalTableClient;
import java.util.Collection;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.connector.base.sink.writer.BufferedRequestState;
import org.apache.flink.connector.base.sink.writer.ElementConverter;
import org.apache.flink.connector.base.sink.writer.config.AsyncSinkWriterConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@code exactly-once} writer: the records of a checkpoint interval are staged in a shoal
 * transaction named by {@link ShoalTransactions} (begun with the interval's first batch); at the
 * checkpoint the writer sends the whole buffer, waits for every acknowledgement, calls {@code
 * prepare_transaction}, checks that the daemon staged exactly the records it acknowledged, and
 * hands a {@link ShoalCommittable} to the {@link ShoalCommitter}. On start it aborts the
 * transactions an earlier run of this sink left open or prepared past the restored checkpoint
 * (their records will be sent again).
 */
final class ExactlyOnceShoalWriter<InputT> extends ShoalWriter<InputT> {
  private static final Logger LOG = LoggerFactory.getLogger(ExactlyOnceShoalWriter.class);

  // The transaction of the current checkpoint interval (task thread only).
  private final String prefix;
  private final int subtask;
  /** Larger than the epoch of every transaction of this subtask index that existed when the writer started. */
  private final long epoch;
  /** The checkpoint id the next transaction is named after: the one after the last snapshot. */
  private long nextCheckpointId;
  private long lastPreparedCheckpointId = -1;
  private Transaction current;

  ExactlyOnceShoalWriter(
      ElementConverter<InputT, byte[]> elementConverter,
      WriterInitContext context,
      AsyncSinkWriterConfiguration configuration,
      Collection<BufferedRequestState<byte[]>> states,
      ShoalTableClient client,
      RetryPolicy retryPolicy,
      String transactionalIdPrefix) {
    super(elementConverter, context, configuration, states, client, retryPolicy);
    this.prefix = transactionalIdPrefix != null
        ? transactionalIdPrefix
        : ShoalTransactions.defaultPrefix(context, client.table());
    this.subtask = context.getTaskInfo().getIndexOfThisSubtask();
    OptionalLong restored = context.getRestoredCheckpointId();
    this.nextCheckpointId = restored.orElse(0) + 1;
    try {
      this.epoch = ShoalTransactions.abortLingering(client, actions, metrics, where, prefix, subtask,
          context.getTaskInfo().getNumberOfParallelSubtasks(), restored);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ShoalSinkException(where + ": interrupted while aborting lingering transactions", e);
    }
  }

  /** The transaction of this checkpoint interval, created with its first batch (task thread). */
  @Override
  protected Object batchContext() {
    if (current == null) {
      if (nextCheckpointId <= lastPreparedCheckpointId) {
        throw new IllegalStateException(where + ": records after the prepared transaction of checkpoint "
            + lastPreparedCheckpointId + " arrived before the checkpoint's snapshot");
      }
      current = new Transaction(ShoalTransactions.id(prefix, subtask, nextCheckpointId, epoch), nextCheckpointId);
    }
    return current;
  }

  @Override
  protected ShoalTableClient.PutAcknowledgement putBatch(List<byte[]> records, long bytes, Object batchContext)
      throws InterruptedException {
    Transaction transaction = (Transaction) batchContext;
    // A resent batch may be staged twice (its first attempt may have reached the daemon);
    // prepareCommit compares the daemon's count with the acknowledged one and fails then.
    transaction.begin();
    ShoalTableClient.PutAcknowledgement ack = client.put(records, bytes, transaction.id);
    if (ack.staged() < 0) {
      throw new ShoalSinkException(where + ": the daemon acknowledged a batch for transaction " + transaction.id
          + " without staging it (no \"staged\" in its PutResult): does it support transactions?");
    }
    transaction.staged.addAndGet(ack.staged());
    return ack;
  }

  /**
   * Called by Flink before each checkpoint barrier and at the end of a bounded input: sends the
   * whole buffer and waits for every acknowledgement (durability comes with the commit).
   */
  @Override
  public void flush(boolean endOfInput) throws InterruptedException {
    super.flush(true);
  }

  /**
   * Prepares the transaction of the interval that ends here (everything is acknowledged: {@link
   * #flush} ran) and returns it as the committable; none if the interval had no records.
   */
  @Override
  public Collection<ShoalCommittable> prepareCommit() throws InterruptedException {
    if (current == null) {
      return List.of();
    }
    Transaction transaction = current;
    current = null;
    lastPreparedCheckpointId = transaction.checkpointId;
    JsonNode info = actions.run("prepare_transaction " + transaction.id, () -> client.prepareTransaction(transaction.id));
    long staged = info.path("records").asLong(-1);
    long acknowledged = transaction.staged.get();
    if (staged != acknowledged) {
      // A batch resent after a transient error was staged twice, or the daemon lost staged
      // batches: this transaction must not be committed. Abort it and fail: the job replays the
      // interval from the last checkpoint into a new transaction.
      try {
        client.abortTransaction(transaction.id);
        metrics.transactionsAborted.inc();
      } catch (RuntimeException e) {
        LOG.warn("{}: aborting transaction {} failed (the next start aborts it): {}", where, transaction.id,
            ShoalErrors.describe(e));
      }
      throw new ShoalSinkException(where + ": transaction " + transaction.id + " holds " + staged
          + " staged records but the writer saw " + acknowledged + " acknowledged (a batch resent after a transient "
          + "error was staged twice, or the daemon lost staged records); aborted it - the job replays the "
          + "checkpoint interval");
    }
    metrics.transactionsPrepared.inc();
    return List.of(new ShoalCommittable(client.endpoint(), client.table(), transaction.id, staged));
  }

  /** Names the next transaction after the checkpoint that follows this one. */
  @Override
  public List<BufferedRequestState<byte[]>> snapshotState(long checkpointId) {
    nextCheckpointId = Math.max(nextCheckpointId, checkpointId + 1);
    return super.snapshotState(checkpointId);
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
}
