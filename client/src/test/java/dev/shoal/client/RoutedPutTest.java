package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.Test;

/** {@link RoutedPut}: a batch split by shard, each part sent to its shard's node, answers by part (no daemon needed). */
class RoutedPutTest {
  /** Three shards: 0 at the entry's endpoint, 1 and 2 on one other node. */
  private static final ShardRouting ROUTING = new ShardRouting("t", List.of("id"), List.of(
      new ShardRouting.Shard(0, "t.shard-0", "grpc://a:1"),
      new ShardRouting.Shard(1, "t.shard-1", "grpc://b:1"),
      new ShardRouting.Shard(2, "t.shard-2", "grpc://b:1")));

  /** A client of {@code endpoint} that only knows its endpoint and counts its closes. */
  private static ShoalClient client(String endpoint, AtomicInteger closes) {
    return (ShoalClient) Proxy.newProxyInstance(ShoalClient.class.getClassLoader(), new Class<?>[] {ShoalClient.class},
        (proxy, method, args) -> switch (method.getName()) {
          case "endpoint" -> endpoint;
          case "close" -> {
            closes.incrementAndGet();
            yield null;
          }
          case "toString" -> "client of " + endpoint;
          default -> throw new UnsupportedOperationException(method.getName());
        });
  }

  private static int shardOf(String record) {
    return ROUTING.shardOf(record.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void each_part_goes_to_its_shards_node_and_the_unroutable_ones_to_the_entry() throws Exception {
    AtomicInteger entryCloses = new AtomicInteger();
    AtomicInteger nodeCloses = new AtomicInteger();
    AtomicInteger connects = new AtomicInteger();
    ShoalClient entry = client("grpc://a:1", entryCloses);
    List<String> batch = new ArrayList<>();
    for (int i = 0; i < 60; i++) {
      batch.add("{\"id\": " + i + "}");
    }
    batch.add(7, "not json");
    Map<Integer, RoutedPut.Part<String>> seen = new ConcurrentHashMap<>();
    try (RoutedPut routed = new RoutedPut(entry, ROUTING, location -> {
      connects.incrementAndGet();
      return client(location, nodeCloses);
    })) {
      List<Integer> answers = routed.send(batch, RoutedPutTest::shardOf, part -> {
        seen.put(part.index(), part);
        return part.index();
      });
      assertEquals(List.of(0, 1, 2, 3), answers, "one answer per part, by part number, the unroutable last");
      for (int shard = 0; shard < 3; shard++) {
        RoutedPut.Part<String> part = seen.get(shard);
        assertEquals("t.shard-" + shard, part.table());
        for (int i = 0; i < part.records().size(); i++) {
          assertEquals(shard, shardOf(part.records().get(i)));
          assertEquals(part.records().get(i), batch.get(part.rows()[i]), "rows name the batch's records");
        }
      }
      RoutedPut.Part<String> unroutable = seen.get(3);
      assertTrue(unroutable.unroutable());
      assertEquals(List.of("not json"), unroutable.records());
      assertArrayEquals(new int[] {7}, unroutable.rows());
      assertEquals("t", unroutable.table());
      assertSame(entry, unroutable.node());
      assertSame(entry, routed.node(0), "a shard at the entry's endpoint uses the entry");
      assertSame(routed.node(1), routed.node(2), "one client per node");
      assertSame(routed.node(2), routed.nodeOfTable("t.shard-2"));
      assertEquals(null, routed.nodeOfTable("t"));
      assertEquals(1, connects.get());
      // One part only: sent on this thread.
      Thread caller = Thread.currentThread();
      assertEquals(List.of(true), routed.send(List.of("{\"id\": 1}"), RoutedPutTest::shardOf, part -> Thread.currentThread() == caller));
      assertEquals(List.of(), routed.send(List.of(), RoutedPutTest::shardOf, part -> part));
    }
    assertEquals(1, nodeCloses.get(), "the node's client closes with the routed put");
    assertEquals(0, entryCloses.get(), "the entry is the caller's");
  }

  @Test
  void the_first_failing_part_fails_the_send_and_the_others_are_still_sent() throws Exception {
    AtomicInteger closes = new AtomicInteger();
    List<String> batch = new ArrayList<>();
    for (int i = 0; i < 30; i++) {
      batch.add("{\"id\": " + i + "}");
    }
    try (RoutedPut routed = new RoutedPut(client("grpc://a:1", closes), ROUTING, location -> client(location, closes))) {
      List<Integer> sent = java.util.Collections.synchronizedList(new ArrayList<>());
      IllegalStateException failure = assertThrows(IllegalStateException.class,
          () -> routed.send(batch, RoutedPutTest::shardOf, part -> {
            sent.add(part.index());
            if (part.index() >= 1) {
              throw new IllegalStateException("part " + part.index());
            }
            return part.index();
          }));
      assertEquals("part 1", failure.getMessage());
      assertEquals(List.of(0, 1, 2), sent.stream().sorted().toList());
      // A failure that is not a RuntimeException comes as an ExecutionException with it as the cause.
      java.util.concurrent.ExecutionException wrapped = assertThrows(java.util.concurrent.ExecutionException.class,
          () -> routed.send(batch, RoutedPutTest::shardOf, part -> {
            if (part.index() == 2) {
              throw new AssertionError("part 2");
            }
            return part.index();
          }));
      assertEquals("part 2", wrapped.getCause().getMessage());
      // A sender's PartFailed names the batch's rows of the part's records.
      RoutedPut.PartFailed named = assertThrows(RoutedPut.PartFailed.class,
          () -> routed.send(batch, RoutedPutTest::shardOf, part -> {
            if (part.index() == 1) {
              throw new RoutedPut.PartFailed(new IllegalArgumentException("record 1 of the batch is bad"), part.rows());
            }
            return part.index();
          }));
      List<Integer> rowsOfShard1 = new ArrayList<>();
      for (int row = 0; row < batch.size(); row++) {
        if (shardOf(batch.get(row)) == 1) {
          rowsOfShard1.add(row);
        }
      }
      assertEquals(rowsOfShard1.get(1), named.batchRow(1));
      assertEquals(99, named.batchRow(99), "a row outside the part is itself");
      assertEquals("record 1 of the batch is bad", named.getMessage());
    }
  }
}
