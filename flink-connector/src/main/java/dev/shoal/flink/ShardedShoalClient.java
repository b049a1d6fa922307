package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
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
 * {@link ShoalClient} of a table sharded over a cluster of daemons (docs/deployment.md, scale-out
 * issue item 4), routing each batch by key: its records are split by {@link ShardRouting} and
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
 * <p>One Flight connection per node, opened when the client is; thread-safe.
 */
final class ShardedShoalClient implements ShoalClient {
  private static final Logger LOG = LoggerFactory.getLogger(ShardedShoalClient.class);

  private final FlightShoalClient entry;
  private final ShardRouting routing;
  /** The client of each shard's node, by shard number (clients are shared between a node's shards). */
  private final List<FlightShoalClient> shardClients;
  private final List<FlightShoalClient> opened;
  private final Map<String, Integer> shardByTable = new LinkedHashMap<>();
  private final ExecutorService senders;

  private ShardedShoalClient(FlightShoalClient entry, ShardRouting routing, ShoalClientOptions options) {
    this.entry = entry;
    this.routing = routing;
    Map<String, FlightShoalClient> byLocation = new LinkedHashMap<>();
    List<FlightShoalClient> clients = new ArrayList<>();
    List<FlightShoalClient> mine = new ArrayList<>();
    try {
      for (ShardRouting.Shard shard : routing.shards()) {
        String location = shard.location();
        FlightShoalClient client = location.equals(entry.endpoint()) ? entry : byLocation.get(location);
        if (client == null) {
          client = new FlightShoalClient(location, routing.table(), options.token(), options.requestTimeout());
          byLocation.put(location, client);
          mine.add(client);
        }
        clients.add(client);
        shardByTable.put(shard.table(), shard.number());
      }
    } catch (RuntimeException e) {
      closeAll(mine);
      throw e;
    }
    this.shardClients = List.copyOf(clients);
    this.opened = List.copyOf(mine);
    AtomicInteger threads = new AtomicInteger();
    this.senders = Executors.newCachedThreadPool(runnable -> {
      Thread t = new Thread(runnable, "shoal-shard-put-" + routing.table() + "-" + threads.incrementAndGet());
      t.setDaemon(true);
      return t;
    });
  }

  /**
   * {@code client} itself, or, when its table is sharded with a shard key on the cluster its
   * endpoint belongs to (the {@code cluster} action says so), a client routing by key on top of it
   * (which then owns it). A daemon that is no node of a cluster answers no tables.
   */
  static ShoalClient routingByKey(ShoalClient client, ShoalClientOptions options) {
    if (!(client instanceof FlightShoalClient flight)) {
      return client; // embedded: one engine, no cluster
    }
    ShardRouting routing = ShardRouting.of(flight.action("cluster", JSON.createObjectNode()), flight.table());
    if (routing == null) {
      return client;
    }
    LOG.info("shoal table \"{}\" is sharded over {} shards by {}: writing each record to its shard's node directly",
        routing.table(), routing.shards().size(), routing.shards().stream().map(ShardRouting.Shard::location).distinct().toList());
    return new ShardedShoalClient(flight, routing, options);
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
    int shards = shardClients.size();
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
        acks.add(putPart(part, parts.get(part), rows.get(part), partBytes[part], transaction));
      }
    } else {
      List<Future<PutAcknowledgement>> pending = new ArrayList<>(touched.size());
      for (int part : touched) {
        pending.add(senders.submit(() -> putPart(part, parts.get(part), rows.get(part), partBytes[part], transaction)));
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

  private PutAcknowledgement putPart(int part, List<byte[]> records, List<Integer> rows, long bytes, String transaction)
      throws InterruptedException {
    try {
      if (part == shardClients.size()) {
        return entry.put(records, bytes, transaction);
      }
      return shardClients.get(part).put(routing.shards().get(part).table(), records, bytes, transaction);
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

  /** The batch's answer: counts summed, every part's log positions (no one log address). */
  private static PutAcknowledgement merge(List<PutAcknowledgement> acks, boolean staged) {
    long records = 0;
    long skipped = 0;
    long stagedRecords = 0;
    List<LogPosition> positions = new ArrayList<>();
    for (PutAcknowledgement ack : acks) {
      records += ack.records();
      skipped += ack.skipped();
      stagedRecords += Math.max(ack.staged(), 0);
      positions.addAll(ack.positions());
    }
    return new PutAcknowledgement(-1, records, skipped, -1, -1, -1, -1, staged ? stagedRecords : -1, List.copyOf(positions));
  }

  /** At the node holding the shard when {@code body} names a shard's table; else at the endpoint. */
  @Override
  public JsonNode action(String type, ObjectNode body) {
    Integer shard = shardByTable.get(body.path("table").asText(""));
    return shard == null ? entry.action(type, body) : shardClients.get(shard).action(type, body);
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
    senders.shutdownNow();
    try {
      closeAll(opened);
    } finally {
      entry.close();
    }
  }

  private static void closeAll(List<FlightShoalClient> clients) {
    for (FlightShoalClient client : clients) {
      try {
        client.close();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } catch (RuntimeException e) {
        LOG.warn("closing the connection to {} failed", client.endpoint(), e);
      }
    }
  }
}
