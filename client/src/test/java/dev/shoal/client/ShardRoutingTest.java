package dev.shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** {@link ShardRouting}: the daemon's routing hash, spelled the same on the JVM. */
class ShardRoutingTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static ShardRouting routing(int shards, String... key) {
    List<ShardRouting.Shard> map = new ArrayList<>();
    for (int i = 0; i < shards; i++) {
      map.add(new ShardRouting.Shard(i, "t.shard-" + i, "grpc://127.0.0.1:" + (50051 + i % 3)));
    }
    return new ShardRouting("t", List.of(key), map);
  }

  private static Long hash(ShardRouting routing, String record) {
    byte[] bytes = record.getBytes(StandardCharsets.UTF_8);
    return routing.keyHash(bytes, 0, bytes.length);
  }

  /** The vectors the daemon's own test checks (flight-server/tests/data/shard-key-hashes.json). */
  @Test
  void theHashAgreesWithTheDaemonsVectors() throws Exception {
    JsonNode file = JSON.readTree(Path.of("../flight-server/tests/data/shard-key-hashes.json").toFile());
    int checked = 0;
    for (JsonNode vector : file.get("vectors")) {
      List<String> key = new ArrayList<>();
      vector.get("shard_key").forEach(k -> key.add(k.asText()));
      ShardRouting routing = routing(7, key.toArray(String[]::new));
      String record = vector.get("record").asText();
      long expected = Long.parseUnsignedLong(vector.get("hash").asText());
      assertEquals(expected, hash(routing, record), record);
      assertEquals((int) Long.remainderUnsigned(expected, 7), routing.shardOf(record.getBytes(StandardCharsets.UTF_8)), record);
      checked++;
    }
    assertTrue(checked >= 10, "the file holds the vectors: " + checked);
  }

  /** What the JVM cannot spell as serde_json does goes through a node, which routes it. */
  @Test
  void keysOnlyTheDaemonCanSpellAreUnroutable() {
    ShardRouting routing = routing(3, "id");
    for (String record : new String[] {
        "{\"id\": 1.5}", "{\"id\": 1e3}", "{\"id\": {\"a\": 1}}", "{\"id\": [1]}", "{\"id\": -0}",
        "{\"id\": 18446744073709551616}", "{\"id\": \"\\ud800\"}", "[1, 2]", "\"id\"", "{\"id\": \"a\"", "{\"id\": 1} x",
        "not json"}) {
      assertNull(hash(routing, record), record);
      assertEquals(ShardRouting.UNROUTABLE, routing.shardOf(record.getBytes(StandardCharsets.UTF_8)), record);
    }
    // Unroutable values elsewhere in the record do not matter.
    assertEquals(hash(routing, "{\"id\": \"a\"}"), hash(routing, "{\"x\": 1.5, \"id\": \"a\", \"y\": {\"id\": 2.5}}"));
  }

  /** The shard map of a {@code cluster} answer; tables without a shard key are not routed. */
  @Test
  void theRoutingComesFromTheClusterAction() throws Exception {
    JsonNode cluster = JSON.readTree("{\"node_id\": 0, \"nodes\": [{\"id\": 0, \"location\": \"grpc://a:1\"}, "
        + "{\"id\": 1, \"location\": \"grpc://b:1\"}], \"tables\": ["
        + "{\"name\": \"e\", \"shards\": 2, \"shard_key\": [\"id\"], \"nodes\": 2, \"shard_map\": ["
        + "{\"shard\": 0, \"table\": \"e.shard-0\", \"node\": 0, \"location\": \"grpc://a:1\"},"
        + "{\"shard\": 1, \"table\": \"e.shard-1\", \"node\": 1, \"location\": \"grpc://b:1\"}]},"
        + "{\"name\": \"spread\", \"shards\": 1, \"shard_key\": [], \"nodes\": 2, \"shard_map\": ["
        + "{\"shard\": 0, \"table\": \"spread.shard-0\", \"node\": 0, \"location\": \"grpc://a:1\"}]}],"
        + "\"forwarded_records\": 0}");
    ShardRouting routing = ShardRouting.of(cluster, "e");
    assertEquals(List.of(new ShardRouting.Shard(0, "e.shard-0", "grpc://a:1"), new ShardRouting.Shard(1, "e.shard-1", "grpc://b:1")),
        routing.shards());
    assertNull(ShardRouting.of(cluster, "spread"));
    assertNull(ShardRouting.of(cluster, "other"));
    assertNull(ShardRouting.of(JSON.readTree("{\"node_id\": null, \"nodes\": [], \"tables\": []}"), "e"));
    // What a reader follows: every shard, with a shard key or spread by batch.
    assertEquals(routing.shards(), ShardRouting.shardsOf(cluster, "e"));
    assertEquals(List.of(new ShardRouting.Shard(0, "spread.shard-0", "grpc://a:1")), ShardRouting.shardsOf(cluster, "spread"));
    assertNull(ShardRouting.shardsOf(cluster, "other"));
    JsonNode malformed = JSON.readTree("{\"tables\": [{\"name\": \"m\", \"shards\": 2, \"shard_key\": [], \"shard_map\": ["
        + "{\"shard\": 0, \"table\": \"m.shard-0\", \"node\": 0, \"location\": \"grpc://a:1\"}]}]}");
    org.junit.jupiter.api.Assertions.assertThrows(IllegalStateException.class, () -> ShardRouting.shardsOf(malformed, "m"));
  }
}
