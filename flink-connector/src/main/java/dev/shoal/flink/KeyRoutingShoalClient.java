package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.cluster.ShardRouting;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sink writers' {@link ShoalTableClient} of a daemon's table: when the table turns out to be sharded
 * by key over a cluster of daemons (the {@code cluster} action, asked with the first batch), it
 * routes each batch by key (docs/deployment.md, scale-out issue item 4); for any other table every
 * call goes to the endpoint unchanged. Routing: the batch's records are split by {@link ShardRouting} and
 * each shard's part goes straight to its own table ({@code T.shard-i}) on the node holding it, the
 * parts of one batch in parallel; the batch is acknowledged when every part is. Nothing passes
 * through a second node (a node forwarding records costs a hop and a key parse per record). A
 * record whose key the routing cannot spell goes through the {@code endpoint} node, which routes
 * it.
 *
 * <p>Everything else goes to the {@code endpoint} node as for any table - actions on {@code T}
 * fan out there (transactions too: a batch staged on a shard joins the transaction that {@code
 * begin_transaction} on {@code T} opened on every shard, and {@code commit_transaction} on {@code
 * T} commits it on each) - except actions naming a shard's table ({@code make_durable}, {@code
 * stats} of {@code T.shard-i}: the at-least-once writer waits for each shard's log), which go to
 * the shard's node.
 *
 * <p>One Flight connection per node, opened with the first batch; thread-safe.
 */
final class KeyRoutingShoalClient implements ShoalTableClient {
  private static final Logger LOG = LoggerFactory.getLogger(KeyRoutingShoalClient.class);

  private final EndpointTableClient entry;
  private final ShoalClientOptions options;
  /** The shard map and connections, once the first batch asked for them; null before. */
  private volatile Shards shards;
  private boolean closed; // guarded by this

  /**
   * The table's routing and a connection per node; {@link #NONE} for a table that is not sharded
   * by key (everything goes to the endpoint).
   */
  private record Shards(ShardRouting routing, List<EndpointTableClient> byShard, List<EndpointTableClient> opened,
      Map<String, Integer> byTable, ExecutorService senders) {
    static final Shards NONE = new Shards(null, List.of(), List.of(), Map.of(), null);

    static Shards open(EndpointTableClient entry, ShardRouting routing, ShoalClientOptions options) {
      Map<String, EndpointTableClient> byLocation = new LinkedHashMap<>();
      Map<String, Integer> byTable = new LinkedHashMap<>();
      List<EndpointTableClient> byShard = new ArrayList<>();
      List<EndpointTableClient> opened = new ArrayList<>();
      try {
        for (ShardRouting.Shard shard : routing.shards()) {
          String location = shard.location();
          EndpointTableClient client = location.equals(entry.endpoint()) ? entry : byLocation.get(location);
          if (client == null) {
            client = EndpointTableClient.open(location, routing.table(), options);
            byLocation.put(location, client);
            opened.add(client);
          }
          byShard.add(client);
          byTable.put(shard.table(), shard.number());
        }
      } catch (RuntimeException e) {
        closeAll(opened);
        throw e;
      }
      AtomicInteger threads = new AtomicInteger();
      ExecutorService senders = Executors.newCachedThreadPool(runnable -> {
        Thread t = new Thread(runnable, "shoal-shard-put-" + routing.table() + "-" + threads.incrementAndGet());
        t.setDaemon(true);
        return t;
      });
      return new Shards(routing, List.copyOf(byShard), List.copyOf(opened), Map.copyOf(byTable), senders);
    }

    /** Stops the part senders, waiting for any still running (they use the connections), then closes these. */
    void close() {
      if (senders != null) {
        senders.shutdownNow();
        try {
          senders.awaitTermination(30, java.util.concurrent.TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      closeAll(opened);
    }
  }

  private KeyRoutingShoalClient(EndpointTableClient entry, ShoalClientOptions options) {
    this.entry = entry;
    this.options = options;
  }

  /**
   * A client routing by key on top of {@code client} (which it then owns) when that is a daemon's
   * ({@code grpc://}); {@code client} itself for the embedded engine. Whether the table is sharded
   * is asked ({@code cluster} action) with the first batch, not here: a writer starts while the
   * daemon is still unreachable, and its batches are retried until it answers.
   */
  static ShoalTableClient routingByKey(ShoalTableClient client, ShoalClientOptions options) {
    return client instanceof EndpointTableClient flight && !flight.embedded()
        ? new KeyRoutingShoalClient(flight, options) : client;
  }

  /** The shard map, asked of the endpoint the first time (a daemon outside a cluster answers no tables). */
  private Shards shards() {
    Shards known = shards;
    if (known != null) {
      return known;
    }
    synchronized (this) {
      if (shards == null) {
        if (closed) {
          throw new IllegalStateException("shoal table \"" + entry.table() + "\" at " + entry.endpoint() + ": the client is closed");
        }
        ShardRouting routing;
        try {
          routing = ShardRouting.of(entry.action("cluster", JSON.createObjectNode()), entry.table());
        } catch (RuntimeException e) {
          String code = ShoalErrors.code(e);
          if (!ShoalErrors.INVALID_ARGUMENT.equals(code) && !"UNIMPLEMENTED".equals(code)) {
            throw e;
          }
          routing = null; // a daemon older than clusters: no sharded tables
        }
        if (routing == null) {
          shards = Shards.NONE;
        } else {
          LOG.info("shoal table \"{}\" is sharded over {} shards by key: writing each record to its shard's node ({})",
              routing.table(), routing.shards().size(),
              routing.shards().stream().map(ShardRouting.Shard::location).distinct().toList());
          shards = Shards.open(entry, routing, options);
        }
      }
      return shards;
    }
  }

  @Override
  public String endpoint() {
    return entry.endpoint();
  }

  @Override
  public String table() {
    return entry.table();
  }

  /**
   * Splits the batch by shard and puts each part into its shard's table at its node, in parallel
   * (the records a routing cannot place go to {@code T} at the endpoint node). Records keep their
   * order within a shard. A failing part fails the call with its error (the parts that succeeded
   * stay ingested or staged, as when one daemon fails a batch after a partial write: the writer's
   * retry may send them twice, which the at-least-once guarantee allows and the exactly-once
   * writer detects at {@code prepare}).
   */
  @Override
  public PutAcknowledgement put(List<byte[]> records, long bytes, String transaction) throws InterruptedException {
    Shards map = shards();
    if (map.routing() == null) {
      return entry.put(records, bytes, transaction);
    }
    ShardRouting routing = map.routing();
    int shards = map.byShard().size();
    List<List<byte[]>> parts = new ArrayList<>(shards + 1);
    List<List<Integer>> rows = new ArrayList<>(shards + 1);
    long[] partBytes = new long[shards + 1];
    for (int i = 0; i <= shards; i++) {
      parts.add(new ArrayList<>());
      rows.add(new ArrayList<>());
    }
    for (int row = 0; row < records.size(); row++) {
      byte[] record = records.get(row);
      int offset = OperationEntries.jsonOffset(record);
      int shard = routing.shardOf(record, offset, record.length - offset);
      int part = shard == ShardRouting.UNROUTABLE ? shards : shard;
      parts.get(part).add(record);
      rows.get(part).add(row);
      partBytes[part] += record.length;
    }
    List<Integer> touched = new ArrayList<>();
    for (int i = 0; i <= shards; i++) {
      if (!parts.get(i).isEmpty()) {
        touched.add(i);
      }
    }
    List<PutAcknowledgement> acks = new ArrayList<>(touched.size());
    if (touched.size() <= 1) {
      for (int part : touched) {
        acks.add(putPart(map, part, parts.get(part), rows.get(part), partBytes[part], transaction));
      }
    } else {
      List<Future<PutAcknowledgement>> pending = new ArrayList<>(touched.size());
      for (int part : touched) {
        pending.add(map.senders().submit(() -> putPart(map, part, parts.get(part), rows.get(part), partBytes[part], transaction)));
      }
      RuntimeException failure = null;
      for (Future<PutAcknowledgement> future : pending) {
        try {
          acks.add(future.get());
        } catch (ExecutionException e) {
          RuntimeException cause = ShoalErrors.unwrap(e);
          if (failure == null) {
            failure = cause;
          }
        } catch (InterruptedException e) {
          pending.forEach(f -> f.cancel(true));
          throw e;
        }
      }
      if (failure != null) {
        throw failure;
      }
    }
    return merge(acks, transaction != null);
  }

  private PutAcknowledgement putPart(
      Shards map, int part, List<byte[]> records, List<Integer> rows, long bytes, String transaction)
      throws InterruptedException {
    try {
      if (part == map.byShard().size()) {
        return entry.put(records, bytes, transaction);
      }
      return map.byShard().get(part).put(map.routing().shards().get(part).table(), records, bytes, transaction);
    } catch (RuntimeException e) {
      throw new PartFailed(e, rows);
    }
  }

  /**
   * A part of a batch failed: its error (the cause, whose status code {@link ShoalErrors} reads),
   * and the batch's row of each of the part's records, so that "record N of the batch" in the
   * daemon's answer names the record of the whole batch ({@link #batchRow}).
   */
  static final class PartFailed extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int[] rows;

    PartFailed(RuntimeException cause, List<Integer> rows) {
      super(cause.getMessage(), cause);
      this.rows = rows.stream().mapToInt(Integer::intValue).toArray();
    }

    /** The batch's row of the part's record {@code partRow} ({@code partRow} itself when outside the part). */
    int batchRow(int partRow) {
      return partRow >= 0 && partRow < rows.length ? rows[partRow] : partRow;
    }
  }

  /** The batch's answer: counts summed, every part's log positions. */
  private static PutAcknowledgement merge(List<PutAcknowledgement> acks, boolean staged) {
    long records = 0;
    long skipped = 0;
    long stagedRecords = 0;
    List<LogPosition> positions = new ArrayList<>();
    for (PutAcknowledgement ack : acks) {
      records += ack.records();
      skipped += ack.skipped();
      // A part answered without "staged": the batch's too (the writer says so).
      stagedRecords = stagedRecords < 0 || ack.staged() < 0 ? -1 : stagedRecords + ack.staged();
      positions.addAll(ack.positions());
    }
    return new PutAcknowledgement(-1, records, skipped, staged ? stagedRecords : -1, List.copyOf(positions));
  }

  /**
   * The node holding the shard when {@code table} is a shard's table (known once a batch was
   * routed); else the endpoint.
   */
  @Override
  public dev.shoal.client.ShoalClient transport(String table) {
    Shards map = shards;
    Integer shard = map == null ? null : map.byTable().get(table);
    return shard == null ? entry.transport(table) : map.byShard().get(shard).transport(table);
  }

  @Override
  public List<String> listTables() {
    return entry.listTables();
  }

  @Override
  public JsonNode query(ObjectNode command, Consumer<VectorSchemaRoot> batches) throws InterruptedException {
    return entry.query(command, batches);
  }

  @Override
  public Schema schema(String table) {
    return entry.schema(table);
  }

  @Override
  public void close() throws InterruptedException {
    Shards map;
    synchronized (this) {
      closed = true;
      map = shards;
    }
    try {
      if (map != null) {
        map.close();
      }
    } finally {
      entry.close();
    }
  }

  private static void closeAll(List<EndpointTableClient> clients) {
    for (EndpointTableClient client : clients) {
      try {
        client.close();
      } catch (RuntimeException e) {
        LOG.warn("closing the connection to {} failed", client.endpoint(), e);
      }
    }
  }
}
