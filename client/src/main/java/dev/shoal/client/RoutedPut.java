package dev.shoal.client;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.function.ToIntFunction;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * Puts into a table sharded by key over a cluster of daemons, routed by key (docs/deployment.md):
 * each batch is split by {@link ShardRouting} (the daemon's own hash) into one part per shard,
 * and each part goes straight to the shard's own table ({@code T.shard-i}) at the node holding it,
 * the parts of a batch in parallel; nothing passes through a second node. A record whose key the
 * routing cannot spell goes, as the last part, to {@code T} at the entry node (the endpoint the
 * writer was given), which routes it. Records keep their order within a part.
 *
 * <p>How a part is sent is the caller's ({@link PartSender}: a long-lived {@code DoPut} stream
 * per part, or one {@code DoPut} per part and batch, with the caller's metadata); this class
 * splits, opens one client per node (the entry's own endpoint reuses the entry), runs the parts
 * and collects their answers. Both connectors' writers use it (the Spark writer's {@code
 * ShoalShardedPut}, the Flink sink's {@code KeyRoutingShoalClient}). Thread-safe; {@link #send}
 * may be called by one thread at a time or several.
 */
public final class RoutedPut implements AutoCloseable {
  private final ShoalClient entry;
  private final ShardRouting routing;
  private final Function<String, ShoalClient> connect;
  /** The client of each shard's node once opened (index: shard). */
  private final ShoalClient[] byShard;
  /** The clients this opened, by location (closed by {@link #close()}; not the entry). */
  private final Map<String, ShoalClient> opened = new LinkedHashMap<>();
  /** Shard number by the shard's own table name. */
  private final Map<String, Integer> byTable;
  private final ExecutorService senders;
  private boolean closed; // guarded by this

  /**
   * @param entry the client of the writer's endpoint: the unroutable records go to {@code
   *     routing.table()} there, and shards at the same location use it too (not closed here)
   * @param routing the table's routing
   * @param connect opens a client of a node's location (a shard map's {@code location}); each
   *     location is opened once, when a part first goes there (or by {@link #connectAll()})
   */
  public RoutedPut(ShoalClient entry, ShardRouting routing, Function<String, ShoalClient> connect) {
    this.entry = entry;
    this.routing = routing;
    this.connect = connect;
    this.byShard = new ShoalClient[routing.shards().size()];
    Map<String, Integer> tables = new LinkedHashMap<>();
    for (ShardRouting.Shard shard : routing.shards()) {
      tables.put(shard.table(), shard.number());
    }
    this.byTable = Map.copyOf(tables);
    AtomicInteger threads = new AtomicInteger();
    this.senders = Executors.newCachedThreadPool(runnable -> {
      Thread t = new Thread(runnable, "shoal-shard-put-" + routing.table() + "-" + threads.incrementAndGet());
      t.setDaemon(true);
      return t;
    });
  }

  /**
   * The routing of {@code table} by key, from the {@code cluster} action at {@code entry}; null
   * when the table is not sharded by key there (not sharded, sharded without a shard key, or a
   * daemon outside a cluster), or when the daemon is older than clusters (it answers {@code
   * cluster} with {@code INVALID_ARGUMENT} or {@code UNIMPLEMENTED}).
   *
   * @throws IllegalStateException when shoal gave no answer, or the shard map is malformed
   * @throws RuntimeException any other failure of the action (what the entry's options make of it)
   */
  public static ShardRouting routingOf(ShoalClient entry, String table) {
    JsonNode cluster;
    try {
      cluster = entry.action("cluster", ShoalClient.JSON.createObjectNode(), table);
    } catch (RuntimeException e) {
      String code = ShoalStatus.codeOf(e);
      if ("INVALID_ARGUMENT".equals(code) || "UNIMPLEMENTED".equals(code)) {
        return null; // a daemon older than clusters: no sharded tables
      }
      throw e;
    }
    if (cluster == null) {
      throw new IllegalStateException("shoal table \"" + table + "\" at " + entry.endpoint() + ": cluster gave no answer");
    }
    return ShardRouting.of(cluster, table);
  }

  /**
   * Whether {@code error} says that a part's shard is moving to another node or has moved there
   * ({@code shoal cluster move-shard}): {@code UNAVAILABLE} "is moving to node N" while it is
   * handed over, {@code FAILED_PRECONDITION} "is held by node N ... since it moved" after (which
   * reaches Arrow Java as {@code INVALID_ARGUMENT}). Either way the part was not written: a writer
   * asks the shard map again ({@link #routingOf}) and sends the part to the shard's new node.
   */
  public static boolean isShardMoving(Throwable error) {
    ShoalStatus status = ShoalStatus.of(error);
    if (status != ShoalStatus.UNAVAILABLE && status != ShoalStatus.FAILED_PRECONDITION && status != ShoalStatus.INVALID_ARGUMENT) {
      return false;
    }
    for (Throwable t = error; t != null; t = t.getCause() == t ? null : t.getCause()) {
      String message = t.getMessage();
      if (message != null && (message.contains(" is moving to node ") || message.contains(" since it moved"))) {
        return true;
      }
    }
    return false;
  }

  /** The table's routing. */
  public ShardRouting routing() {
    return routing;
  }

  /** The client of the writer's endpoint. */
  public ShoalClient entry() {
    return entry;
  }

  /**
   * The client of the node holding {@code shard}, opened the first time (the entry when the shard
   * is at the entry's endpoint).
   *
   * @throws IllegalStateException after {@link #close()}
   */
  public synchronized ShoalClient node(int shard) {
    if (byShard[shard] == null) {
      if (closed) {
        throw new IllegalStateException("shoal table \"" + routing.table() + "\" at " + entry.endpoint()
            + ": the routed put is closed");
      }
      String location = routing.shards().get(shard).location();
      ShoalClient client = location.equals(entry.endpoint()) ? entry : opened.get(location);
      if (client == null) {
        client = connect.apply(location);
        opened.put(location, client);
      }
      byShard[shard] = client;
    }
    return byShard[shard];
  }

  /** The client of the node holding the shard whose own table is {@code table}, or null when it names no shard. */
  public ShoalClient nodeOfTable(String table) {
    Integer shard = byTable.get(table);
    return shard == null ? null : node(shard);
  }

  /**
   * Opens the client of every shard's node now (else each opens with its shard's first part).
   *
   * @throws RuntimeException the first failure to open one (those opened stay, for {@link #close()})
   */
  public void connectAll() {
    for (int shard = 0; shard < byShard.length; shard++) {
      node(shard);
    }
  }

  /** One part of a batch: the records of one shard (or the unroutable ones), where they go, and their rows in the batch. */
  public final class Part<R> {
    private final int index;
    private final List<R> records;
    private final int[] rows;

    private Part(int index, List<R> records, int[] rows) {
      this.index = index;
      this.records = records;
      this.rows = rows;
    }

    /** The part's number: a shard's number, or the number of shards for the unroutable records. */
    public int index() {
      return index;
    }

    /** Whether these are the records the routing could not place (they go to {@link #table()} at the entry). */
    public boolean unroutable() {
      return index == byShard.length;
    }

    /** The table to put into: the shard's own ({@code T.shard-i}), or the sharded table for the unroutable records. */
    public String table() {
      return unroutable() ? routing.table() : routing.shards().get(index).table();
    }

    /** The client to put through: the shard's node (opened on first use), or the entry. */
    public ShoalClient node() {
      return unroutable() ? entry : RoutedPut.this.node(index);
    }

    /** The part's records, in the batch's order. */
    public List<R> records() {
      return records;
    }

    /** The batch's row of each of the part's records (so that "record N" of a part's answer names the batch's). */
    public int[] rows() {
      return rows.clone();
    }
  }

  /**
   * A part's failure, which a {@link PartSender} may throw: its error (the cause, whose status code
   * {@link ShoalStatus} reads), and the batch's row of each of the part's records, so that "record N
   * of the batch" in the daemon's answer to the part names the record of the whole batch ({@link
   * #batchRow}).
   */
  public static final class PartFailed extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int[] rows;

    /** @param rows the batch's row of each of the part's records ({@link Part#rows()}) */
    public PartFailed(RuntimeException cause, int[] rows) {
      super(cause.getMessage(), cause);
      this.rows = rows.clone();
    }

    /** The batch's row of the part's record {@code partRow} ({@code partRow} itself when outside the part). */
    public int batchRow(int partRow) {
      return partRow >= 0 && partRow < rows.length ? rows[partRow] : partRow;
    }
  }

  /** Sends one part; its answer. */
  @FunctionalInterface
  public interface PartSender<R, A> {
    A send(RoutedPut.Part<R> part) throws InterruptedException;
  }

  /**
   * Splits {@code records} by shard ({@code shardOf}: {@link #routing()}'s {@link
   * ShardRouting#shardOf} of the record's JSON, or {@link ShardRouting#UNROUTABLE}) and sends the
   * parts that have records through {@code sender}: a single part on this thread, several in
   * parallel; returns once every part is answered. A failing part fails the call (the parts that
   * succeeded stay sent).
   *
   * @return the parts' answers, by part number (shards first, the unroutable records last)
   * @throws RuntimeException the failure of the first failing part (by part number), as it was
   *     thrown
   * @throws ExecutionException when that failure is not a {@link RuntimeException} (its cause)
   * @throws InterruptedException when this thread is interrupted while waiting (the parts still
   *     running are cancelled), or a single part's sender was
   */
  public <R, A> List<A> send(List<R> records, ToIntFunction<? super R> shardOf, PartSender<R, A> sender)
      throws InterruptedException, ExecutionException {
    int unroutable = byShard.length;
    List<List<R>> parts = new ArrayList<>(unroutable + 1);
    List<List<Integer>> rows = new ArrayList<>(unroutable + 1);
    for (int i = 0; i <= unroutable; i++) {
      parts.add(new ArrayList<>());
      rows.add(new ArrayList<>());
    }
    for (int row = 0; row < records.size(); row++) {
      R record = records.get(row);
      int shard = shardOf.applyAsInt(record);
      int part = shard == ShardRouting.UNROUTABLE ? unroutable : shard;
      parts.get(part).add(record);
      rows.get(part).add(row);
    }
    List<Part<R>> touched = new ArrayList<>();
    for (int i = 0; i <= unroutable; i++) {
      if (!parts.get(i).isEmpty()) {
        touched.add(new Part<>(i, parts.get(i), rows.get(i).stream().mapToInt(Integer::intValue).toArray()));
      }
    }
    List<A> answers = new ArrayList<>(touched.size());
    if (touched.size() <= 1) {
      for (Part<R> part : touched) {
        answers.add(sender.send(part));
      }
      return answers;
    }
    List<Future<A>> pending = new ArrayList<>(touched.size());
    for (Part<R> part : touched) {
      pending.add(senders.submit(() -> sender.send(part)));
    }
    ExecutionException failure = null;
    for (Future<A> future : pending) {
      try {
        answers.add(future.get());
      } catch (ExecutionException e) {
        if (failure == null) {
          failure = e;
        }
      } catch (InterruptedException e) {
        pending.forEach(f -> f.cancel(true));
        throw e;
      }
    }
    if (failure != null) {
      if (failure.getCause() instanceof RuntimeException cause) {
        throw cause;
      }
      throw failure;
    }
    return answers;
  }

  /**
   * Stops the part senders, waiting (up to 30 s) for any still running: the caller then closes
   * what they use (its streams) before {@link #close()} closes the nodes' clients. Idempotent.
   */
  public void stop() {
    senders.shutdownNow();
    try {
      senders.awaitTermination(30, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * {@link #stop()}, then closes every node client this opened (not the entry), each even when
   * another fails.
   *
   * @throws RuntimeException the first failure, the others suppressed in it
   */
  @Override
  public void close() {
    stop();
    List<ShoalClient> closing;
    synchronized (this) {
      closed = true;
      closing = new ArrayList<>(opened.values());
    }
    RuntimeException failure = null;
    for (ShoalClient client : closing) {
      try {
        client.close();
      } catch (RuntimeException e) {
        if (failure == null) {
          failure = e;
        } else {
          failure.addSuppressed(e);
        }
      }
    }
    if (failure != null) {
      throw failure;
    }
  }
}
