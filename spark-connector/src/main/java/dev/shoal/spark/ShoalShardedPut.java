package dev.shoal.spark;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.RoutedPut;
import dev.shoal.client.ShardRouting;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalEndpoint;

/**
 * A write task's {@code DoPut} into a table sharded by key over a cluster of daemons, routed by
 * key (option {@code write.route-by-key}; docs/deployment.md) through the client's {@link
 * RoutedPut}: each batch is split by {@link ShardRouting} (the daemon's own hash), and each
 * shard's part goes down one {@code DoPut} stream into the shard's table ({@code T.shard-i}) at
 * the node holding it - opened the first time the shard has rows - the parts of a batch in
 * parallel; {@link #send} returns once every part is acknowledged. A record whose key the routing
 * cannot spell goes to the sharded table at the task's endpoint, which routes it. No node
 * forwards what this writer sends. What is Spark's here: the streams kept open across batches,
 * and the errors as {@link ShoalException}s.
 */
final class ShoalShardedPut implements ShoalRecordStream {
  private final RoutedPut routed;
  /** The open stream of each part (index: shard; the last: the records routed by the entry node). */
  private final ShoalClient.Put[] streams;
  private long records;

  /**
   * The routed put of {@code options.table()} when the cluster that {@code entry} belongs to shards
   * it by key; null otherwise (a daemon outside a cluster answers no sharded tables).
   */
  static ShoalShardedPut open(ShoalClient entry, ShoalOptions options) {
    if (!options.writeRouteByKey() || ShoalEndpoint.isEmbedded(entry.endpoint())) {
      return null;
    }
    ShardRouting routing = RoutedPut.routingOf(entry, options.table());
    return routing == null ? null
        : new ShoalShardedPut(new RoutedPut(entry, routing, location -> options.connect(URI.create(location))));
  }

  private ShoalShardedPut(RoutedPut routed) {
    this.routed = routed;
    this.streams = new ShoalClient.Put[routed.routing().shards().size() + 1];
  }

  /** The stream of {@code part} (a shard's, or the last: through the entry node), opened on first use. */
  private synchronized ShoalClient.Put stream(RoutedPut.Part<String> part) {
    if (streams[part.index()] == null) {
      streams[part.index()] = part.node().startPut(part.table());
    }
    return streams[part.index()];
  }

  @Override
  public JsonNode send(List<String> batch) {
    ShardRouting routing = routed.routing();
    List<JsonNode> acknowledged;
    try {
      acknowledged = routed.send(batch, record -> routing.shardOf(record.getBytes(StandardCharsets.UTF_8)),
          part -> stream(part).send(part.records()));
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      throw new ShoalException("shoal DoPut on table '" + routing.table() + "' failed: " + cause, cause);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ShoalException("shoal DoPut on table '" + routing.table() + "' interrupted", e);
    }
    records += batch.size();
    return ShoalClient.JSON.createObjectNode().put("records", batch.size()).put("shards", acknowledged.size());
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
    routed.stop();
    RuntimeException failure = null;
    List<AutoCloseable> closing = new ArrayList<>();
    for (ShoalClient.Put stream : streams) {
      if (stream != null) {
        closing.add(stream);
      }
    }
    closing.add(routed);
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
