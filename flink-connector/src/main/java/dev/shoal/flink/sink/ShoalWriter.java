package dev.shoal.flink.sink;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalSinkException;
import dev.shoal.flink.common.ShoalTableClient;
import org.apache.flink.api.connector.sink2.CommittingSinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.base.sink.writer.AsyncSinkWriter;
import org.apache.flink.connector.base.sink.writer.BufferedRequestState;
import org.apache.flink.connector.base.sink.writer.ElementConverter;
import org.apache.flink.connector.base.sink.writer.ResultHandler;
import org.apache.flink.connector.base.sink.writer.config.AsyncSinkWriterConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The writer of {@link ShoalSink} (one per parallel subtask), and itself the writer of the {@code
 * none} delivery guarantee; {@link AtLeastOnceShoalWriter} and {@link ExactlyOnceShoalWriter} add
 * their guarantees to it ({@link #create} picks one).
 *
 * <p>It talks to shoal through a {@link ShoalTableClient}: a daemon over Arrow Flight, or the engine
 * inside this JVM for an {@code embedded:} endpoint; both answer the same, so everything below holds
 * for either.
 *
 * <p>From {@link AsyncSinkWriter} it gets the buffer, the batching by rows/bytes/time, the bound on
 * in-flight batches (the writer blocks in {@code write} when reached: backpressure) and the wait
 * for in-flight batches at a checkpoint. It adds {@link #submitRequestEntries}: one {@code DoPut}
 * per batch, run on a sender thread so the task thread never blocks on the network; transient
 * errors are retried there with exponential backoff (the batch keeps its in-flight slot
 * meanwhile), permanent ones fail the job with a {@link ShoalSinkException} naming the table and,
 * for rejected JSON, the record. Under {@code none} a checkpoint only waits for the batches in
 * flight (the buffer goes into the checkpoint state), as {@link AsyncSinkWriter} does.
 *
 * <p>Metrics: {@link ShoalWriterMetrics}.
 */
public class ShoalWriter<InputT> extends AsyncSinkWriter<InputT, byte[]>
    implements CommittingSinkWriter<InputT, ShoalCommittable> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalWriter.class);

  protected final ShoalTableClient client;
  protected final RetryPolicy retryPolicy;
  /** Names the table and endpoint in messages. */
  protected final String where;
  protected final ShoalWriterMetrics metrics;
  protected final ShoalActionRetries actions;
  private final ExecutorService senders;
  /** The converter of a sink with operations (keyed tables), which may skip elements; else null. */
  private final OperationElementConverter<InputT> operations;

  /**
   * Per log this writer's batches reached (the table's, or each shard's of a sharded table), the
   * highest {@code end_address} of its acknowledged records; absent before the first.
   */
  protected final Map<String, Long> acknowledgedEnds = new ConcurrentHashMap<>();
  /** Per log, the highest durable address the daemon reported (PutResult durable_address or make_durable). */
  protected final Map<String, Long> durableAddresses = new ConcurrentHashMap<>();
  private volatile boolean closed;

  /** The writer of {@code deliveryGuarantee} ({@code transactionalIdPrefix}: exactly-once's; null: derived). */
  static <InputT> ShoalWriter<InputT> create(
      ElementConverter<InputT, byte[]> elementConverter,
      WriterInitContext context,
      AsyncSinkWriterConfiguration configuration,
      Collection<BufferedRequestState<byte[]>> states,
      ShoalTableClient client,
      DeliveryGuarantee deliveryGuarantee,
      RetryPolicy retryPolicy,
      String transactionalIdPrefix) {
    return switch (deliveryGuarantee) {
      case AT_LEAST_ONCE -> new AtLeastOnceShoalWriter<>(elementConverter, context, configuration, states, client, retryPolicy);
      case EXACTLY_ONCE -> new ExactlyOnceShoalWriter<>(
          elementConverter, context, configuration, states, client, retryPolicy, transactionalIdPrefix);
      default -> new ShoalWriter<>(elementConverter, context, configuration, states, client, retryPolicy);
    };
  }

  ShoalWriter(
      ElementConverter<InputT, byte[]> elementConverter,
      WriterInitContext context,
      AsyncSinkWriterConfiguration configuration,
      Collection<BufferedRequestState<byte[]>> states,
      ShoalTableClient client,
      RetryPolicy retryPolicy) {
    super(elementConverter, context, configuration, states);
    // Opened here rather than in ElementConverter.open, whose parameter differs between Flink 1.20
    // (Sink.InitContext) and 2.x (WriterInitContext).
    ElementConverter<InputT, byte[]> documents = elementConverter instanceof OperationElementConverter<InputT> operations
        ? operations.documents()
        : elementConverter;
    if (documents instanceof SerializationSchemaElementConverter<?> converter) {
      converter.openSchema(context.asSerializationSchemaInitializationContext());
    }
    this.operations = elementConverter instanceof OperationElementConverter<InputT> operations ? operations : null;
    int subtask = context.getTaskInfo().getIndexOfThisSubtask();
    this.client = client;
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
    this.metrics = new ShoalWriterMetrics(context.metricGroup(), this::leastDurableAddress);
    this.actions = new ShoalActionRetries(where, retryPolicy, metrics);
  }

  /** Writes the element unless its operation extractor skips it (an {@code UPDATE_BEFORE}). */
  @Override
  public void write(InputT element, Context context) throws java.io.IOException, InterruptedException {
    if (operations != null && operations.skips(element)) {
      return;
    }
    super.write(element, context);
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
    Object batchContext = batchContext();
    senders.execute(() -> send(requestEntries, batchBytes, batchContext, resultHandler));
  }

  /**
   * What a batch submitted now needs on its sender thread besides its records (exactly-once: the
   * interval's transaction); called on the task thread. Null here.
   */
  protected Object batchContext() {
    return null;
  }

  /**
   * Sends one batch once (one attempt; sender thread): here a plain DoPut, whose acknowledged end
   * and durable addresses are tracked.
   */
  protected ShoalTableClient.PutAcknowledgement putBatch(List<byte[]> records, long bytes, Object batchContext)
      throws InterruptedException {
    ShoalTableClient.PutAcknowledgement ack = client.put(records, bytes);
    for (ShoalTableClient.LogPosition position : ack.positions()) {
      if (position.records() > 0 && position.endAddress() >= 0) {
        acknowledgedEnds.merge(position.table(), position.endAddress(), Math::max);
      }
      noteDurable(position.table(), position.durableAddress());
    }
    return ack;
  }

  /** Records that {@code table}'s log is durable up to {@code address} (-1: nothing said). */
  protected void noteDurable(String table, long address) {
    if (address >= 0) {
      durableAddresses.merge(table, address, Math::max);
    }
  }

  /** The durable address of {@code table}'s log as the daemon last reported it; -1 before. */
  protected long durableAddress(String table) {
    return durableAddresses.getOrDefault(table, -1L);
  }

  /**
   * The logs holding acknowledged records not known durable yet, with the address each must be
   * durable up to (a table's log, or each shard's), in a stable order.
   */
  protected SortedMap<String, Long> notYetDurable() {
    SortedMap<String, Long> pending = new TreeMap<>();
    acknowledgedEnds.forEach((table, end) -> {
      if (durableAddress(table) < end) {
        pending.put(table, end);
      }
    });
    return pending;
  }

  /** The {@code shoalDurableAddress} gauge: the least durable address over the logs written (-1: none). */
  private long leastDurableAddress() {
    return durableAddresses.values().stream().mapToLong(Long::longValue).min().orElse(-1);
  }

  /** An attempt to send a batch failed with {@code e} (sender thread); nothing here. */
  protected void onSendFailure(RuntimeException e) {}

  /** Runs on a sender thread: one batch, with retries on transient errors. */
  private void send(List<byte[]> records, long bytes, Object batchContext, ResultHandler<byte[]> resultHandler) {
    long started = System.nanoTime();
    for (int attempt = 1; ; attempt++) {
      try {
        putBatch(records, bytes, batchContext);
        metrics.batchesOut.inc();
        metrics.ackLatencyMs.update(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
        resultHandler.complete();
        return;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        resultHandler.completeExceptionally(
            new ShoalSinkException(where + ": DoPut interrupted", e));
        return;
      } catch (RuntimeException e) {
        metrics.sendErrors.inc(records.size());
        onSendFailure(e);
        boolean retry = !closed && ShoalErrors.isTransient(e) && attempt <= retryPolicy.maxRetries();
        if (!retry) {
          resultHandler.completeExceptionally(ShoalErrors.putFailed(client, records, e, attempt));
          return;
        }
        long backoff = retryPolicy.backoffMillis(attempt);
        metrics.retries.inc();
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

  /** No transactions here: nothing to commit. */
  @Override
  public Collection<ShoalCommittable> prepareCommit() throws InterruptedException {
    return List.of();
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
}
