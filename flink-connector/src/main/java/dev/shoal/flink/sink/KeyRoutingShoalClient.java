package dev.shoal.flink.sink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.RoutedPut;
import dev.shoal.client.ShardRouting;
import dev.shoal.client.ShoalClient;
import dev.shoal.flink.common.EndpointTableClient;
import dev.shoal.flink.common.OperationEntries;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalTableClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.function.Consumer;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sink writers' {@link ShoalTableClient} of a daemon's table: when the table turns out to be sharded
 * by key over a cluster of daemons (the {@code cluster} action, asked with the first batch), it
 * routes each batch by key (docs/deployment.md); for any other table every
 * call goes to the endpoint unchanged. Routing is the client's {@link RoutedPut}: the batch's
 * records are split by {@link ShardRouting} and each shard's part goes straight to its own table
 * ({@code T.shard-i}) on the node holding it, the parts of one batch in parallel; the batch is
 * acknowledged when every part is. Nothing passes through a second node (a node forwarding records
 * costs a hop and a key parse per record). A record whose key the routing cannot spell goes
 * through the {@code endpoint} node, which routes it. What is Flink's here: one {@code DoPut} per
 * part and batch with the batch's transaction, the operation byte of a request entry skipped for
 * the key, the parts' answers merged, and a part's failure naming the batch's rows.
 *
 * <p>Everything else goes to the {@code endpoint} node as for any table - actions on {@code T}
 * fan out there (transactions too: a batch staged on a shard joins the transaction that {@code
 * begin_transaction} on {@code T} opened on every shard, and {@code commit_transaction} on {@code
 * T} commits it on each) - except actions naming a shard's table ({@code make_durable}, {@code
 * stats} of {@code T.shard-i}: the at-least-once writer waits for each shard's log), which go to
 * the shard's node.
 *
 * <p>A shard moved to another node ({@code shoal cluster move-shard}) is followed: a part refused
 * because its shard is moving or has moved ({@link RoutedPut#isShardMoving}: it was not written) is
 * sent again, after a short wait, to the shard's node in the shard map asked again of the endpoint
 * - the batch's other parts are not sent twice, and the job goes on without a restart.
 *
 * <p>One Flight connection per node, opened with the first batch; thread-safe.
 */
final class KeyRoutingShoalClient implements ShoalTableClient {
  private static final Logger LOG = LoggerFactory.getLogger(KeyRoutingShoalClient.class);

  /**
   * A part refused because its shard is moving is sent again up to 39 times (40 attempts, about
   * 30 s of waits), after 50 ms doubled up to 1 s.
   */
  static final RetryPolicy MOVED_RETRIES = new RetryPolicy(39, Duration.ofMillis(50), Duration.ofSeconds(1));

  private final EndpointTableClient entry;
  private final ShoalClientOptions options;
  /** The shard map and connections, once the first batch asked for them; null before. */
  private volatile Shards shards;
  /** Routed puts of shard maps replaced since (their connections may still be in use): closed with this. */
  private final List<RoutedPut> replaced = new ArrayList<>(); // guarded by this
  private boolean closed; // guarded by this

  /**
   * The table's routed put, with a connection per node; {@link #NONE} for a table that is not
   * sharded by key (everything goes to the endpoint).
   */
  private record Shards(RoutedPut routed) {
    static final Shards NONE = new Shards(null);
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
        ShoalClient endpoint = entry.transport(entry.table());
        ShardRouting routing = RoutedPut.routingOf(endpoint, entry.table());
        if (routing == null) {
          shards = Shards.NONE;
        } else {
          LOG.info("shoal table \"{}\" is sharded over {} shards by key: writing each record to its shard's node ({})",
              routing.table(), routing.shards().size(),
              routing.shards().stream().map(ShardRouting.Shard::location).distinct().toList());
          shards = new Shards(connected(endpoint, routing));
        }
      }
      return shards;
    }
  }

  /** A routed put of {@code routing}, every node's connection open. */
  private RoutedPut connected(ShoalClient endpoint, ShardRouting routing) {
    RoutedPut routed = new RoutedPut(endpoint, routing,
        location -> EndpointTableClient.connect(location, routing.table(), options));
    try {
      routed.connectAll();
    } catch (RuntimeException e) {
      closeQuietly(routed);
      throw e;
    }
    return routed;
  }

  /**
   * The shard map asked again of the endpoint after a part found {@code stale}'s out of date (a
   * shard moved); {@code stale} itself while the endpoint's map says the same (the move is under
   * way), the current one when another part refreshed it first.
   *
   * @throws IllegalStateException when the table is no longer sharded the same way (other shards)
   */
  private synchronized RoutedPut refreshed(RoutedPut stale) {
    RoutedPut current = shards.routed();
    if (current != stale) {
      return current;
    }
    if (closed) {
      throw new IllegalStateException("shoal table \"" + entry.table() + "\" at " + entry.endpoint() + ": the client is closed");
    }
    ShardRouting routing = RoutedPut.routingOf(stale.entry(), entry.table());
    List<String> tables = stale.routing().shards().stream().map(ShardRouting.Shard::table).toList();
    if (routing == null || !routing.shards().stream().map(ShardRouting.Shard::table).toList().equals(tables)) {
      throw new IllegalStateException("shoal table \"" + entry.table() + "\" at " + entry.endpoint()
          + ": its shards changed while writing (was " + tables + ", now " + (routing == null ? "not sharded" : routing.shards()) + ")");
    }
    if (routing.shards().equals(stale.routing().shards())) {
      return stale;
    }
    LOG.info("shoal table \"{}\": a shard moved, writing to the nodes of its new shard map ({})", routing.table(),
        routing.shards().stream().map(s -> s.number() + "@" + s.location()).toList());
    RoutedPut routed = connected(stale.entry(), routing);
    replaced.add(stale);
    shards = new Shards(routed);
    return routed;
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
    RoutedPut routed = shards().routed();
    if (routed == null) {
      return entry.put(records, bytes, transaction);
    }
    ShardRouting routing = routed.routing();
    try {
      return merge(routed.send(records, record -> {
        int offset = OperationEntries.jsonOffset(record);
        return routing.shardOf(record, offset, record.length - offset);
      }, part -> putPart(routed, part, transaction)), transaction != null);
    } catch (ExecutionException e) {
      throw ShoalErrors.unwrap(e);
    }
  }

  /**
   * One {@code DoPut} of a part into its table at its node, sent again to the shard's new node
   * while it is refused because the shard is moving or moved ({@link #refreshed}); a failure as a
   * {@link RoutedPut.PartFailed} (naming the batch's rows).
   */
  private PutAcknowledgement putPart(RoutedPut routed, RoutedPut.Part<byte[]> part, String transaction) throws InterruptedException {
    long bytes = 0;
    for (byte[] record : part.records()) {
      bytes += record.length;
    }
    ShoalClient node = part.node();
    for (int attempt = 1; ; attempt++) {
      try {
        return EndpointTableClient.put(node, part.table(), part.records(), bytes, transaction);
      } catch (RuntimeException e) {
        if (part.unroutable() || attempt > MOVED_RETRIES.maxRetries() || !RoutedPut.isShardMoving(e)) {
          throw new RoutedPut.PartFailed(e, part.rows());
        }
        LOG.warn("shoal table \"{}\": {} records refused (attempt {} of {}), sending them again: {}", part.table(),
            part.records().size(), attempt, MOVED_RETRIES.maxRetries() + 1, ShoalErrors.describe(e));
        Thread.sleep(MOVED_RETRIES.backoffMillis(attempt));
        try {
          routed = refreshed(routed);
        } catch (RuntimeException refresh) {
          refresh.addSuppressed(e);
          throw new RoutedPut.PartFailed(refresh, part.rows());
        }
        node = routed.node(part.index());
      }
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
  public ShoalClient transport(String table) {
    Shards map = shards;
    ShoalClient node = map == null || map.routed() == null ? null : map.routed().nodeOfTable(table);
    return node == null ? entry.transport(table) : node;
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
    List<RoutedPut> old;
    synchronized (this) {
      closed = true;
      map = shards;
      old = List.copyOf(replaced);
    }
    try {
      old.forEach(KeyRoutingShoalClient::closeQuietly);
      if (map != null && map.routed() != null) {
        closeQuietly(map.routed());
      }
    } finally {
      entry.close();
    }
  }

  /** Stops the part senders, waiting for any still running (they use the connections), then closes the nodes' connections. */
  private static void closeQuietly(RoutedPut routed) {
    try {
      routed.close();
    } catch (RuntimeException e) {
      LOG.warn("closing the connections to the nodes of table {} failed", routed.routing().table(), e);
    }
  }
}
