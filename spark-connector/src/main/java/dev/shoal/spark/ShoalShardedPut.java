package dev.shoal.spark;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.cluster.ShardRouting;

/**
 * A write task's {@code DoPut} into a table sharded by key over a cluster of daemons, routed by
 * key (option {@code write.route-by-key}; docs/deployment.md): each batch is split by {@link
 * ShardRouting} (the daemon's own hash), and each shard's part goes down one {@code DoPut} stream
 * into the shard's table ({@code T.shard-i}) at the node holding it - opened the first time the
 * shard has rows - the parts of a batch in parallel; {@link #send} returns once every part is
 * acknowledged. A record whose key the routing cannot spell goes to the sharded table at the
 * task's endpoint, which routes it. No node forwards what this writer sends.
 */
final class ShoalShardedPut implements ShoalRecordStream {
  private final ShoalClient entry;
  private final ShardRouting routing;
  private final ShoalOptions options;
  /** Connections to the other nodes, by location (the entry's own location reuses it). */
  private final Map<String, ShoalClient> nodes = new LinkedHashMap<>();
  /** The open stream of each shard (index: shard; the last: the records routed by the entry node). */
  private final ShoalClient.Put[] streams;
  private final ExecutorService senders;
  private long records;

  /**
   * The routed put of {@code options.table()} when the cluster that {@code entry} belongs to shards
   * it by key; null otherwise (a daemon outside a cluster answers no sharded tables).
   */
  static ShoalShardedPut open(ShoalClient entry, ShoalOptions options) {
    if (!options.writeRouteByKey() || ShoalEndpoint.isEmbedded(entry.endpoint())) {
      return null;
    }
    JsonNode cluster;
    try {
      cluster = entry.action("cluster", ShoalClient.JSON.createObjectNode(), options.table());
    } catch (ShoalException e) {
      if ("INVALID_ARGUMENT".equals(e.code()) || "UNIMPLEMENTED".equals(e.code())) {
        return null; // a daemon older than clusters: no sharded tables
      }
      throw e;
    }
    ShardRouting routing = cluster == null ? null : ShardRouting.of(cluster, options.table());
    return routing == null ? null : new ShoalShardedPut(entry, routing, options);
  }

  private ShoalShardedPut(ShoalClient entry, ShardRouting routing, ShoalOptions options) {
    this.entry = entry;
    this.routing = routing;
    this.options = options;
    this.streams = new ShoalClient.Put[routing.shards().size() + 1];
    this.senders = Executors.newCachedThreadPool(runnable -> {
      Thread t = new Thread(runnable, "shoal-shard-put-" + routing.table());
      t.setDaemon(true);
      return t;
    });
  }

  /** The stream of {@code part} (a shard, or the last: through the entry node), opened on first use. */
  private synchronized ShoalClient.Put stream(int part) {
    if (streams[part] == null) {
      if (part == routing.shards().size()) {
        streams[part] = entry.startPut(routing.table());
      } else {
        ShardRouting.Shard shard = routing.shards().get(part);
        ShoalClient node = shard.location().equals(entry.endpoint().toString())
            ? entry
            : nodes.computeIfAbsent(shard.location(), location -> options.connect(URI.create(location)));
        streams[part] = node.startPut(shard.table());
      }
    }
    return streams[part];
  }

  @Override
  public JsonNode send(List<String> batch) {
    int unroutable = routing.shards().size();
    List<List<String>> parts = new ArrayList<>(unroutable + 1);
    for (int i = 0; i <= unroutable; i++) {
      parts.add(new ArrayList<>());
    }
    for (String record : batch) {
      int shard = routing.shardOf(record.getBytes(StandardCharsets.UTF_8));
      parts.get(shard == ShardRouting.UNROUTABLE ? unroutable : shard).add(record);
    }
    List<Integer> touched = new ArrayList<>();
    for (int i = 0; i <= unroutable; i++) {
      if (!parts.get(i).isEmpty()) {
        touched.add(i);
      }
    }
    if (touched.size() == 1) {
      int part = touched.get(0);
      stream(part).send(parts.get(part));
    } else {
      List<Future<JsonNode>> pending = new ArrayList<>();
      for (int part : touched) {
        pending.add(senders.submit(() -> stream(part).send(parts.get(part))));
      }
      RuntimeException failure = null;
      for (Future<JsonNode> future : pending) {
        try {
          future.get();
        } catch (ExecutionException e) {
          Throwable cause = e.getCause();
          if (failure == null) {
            failure = cause instanceof RuntimeException r ? r
                : new ShoalException("shoal DoPut on table '" + routing.table() + "' failed: " + cause, cause);
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          pending.forEach(f -> f.cancel(true));
          throw new ShoalException("shoal DoPut on table '" + routing.table() + "' interrupted", e);
        }
      }
      if (failure != null) {
        throw failure;
      }
    }
    records += batch.size();
    return ShoalClient.JSON.createObjectNode().put("records", batch.size()).put("shards", touched.size());
  }

  @Override
  public long records() {
    return records;
  }

  @Override
  public void finish() {
    for (ShoalClient.Put stream : streams) {
      if (stream != null) {
        stream.finish();
      }
    }
  }

  /**
   * Stops the part senders (waiting for any still running: they use the streams), then closes
   * every stream and connection, each even when another fails; the first failure is thrown.
   */
  @Override
  public void close() {
    senders.shutdownNow();
    try {
      senders.awaitTermination(30, java.util.concurrent.TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    RuntimeException failure = null;
    List<AutoCloseable> closing = new ArrayList<>();
    for (ShoalClient.Put stream : streams) {
      if (stream != null) {
        closing.add(stream);
      }
    }
    closing.addAll(nodes.values());
    for (AutoCloseable resource : closing) {
      try {
        resource.close();
      } catch (Exception e) {
        if (failure == null) {
          failure = e instanceof RuntimeException r ? r : new ShoalException("shoal: closing a DoPut stream failed: " + e, e);
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
