package dev.shoal.flink.common;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.nio.charset.StandardCharsets;
import java.util.List;
import dev.shoal.flink.sink.ShoalOperation;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.junit.jupiter.api.Test;

/** The sink's request entries with operations, and the DoPut batches they become. */
class OperationEntriesTest {

  private static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void anUpsertIsThePlainDocumentAndOtherOperationsArePrefixed() {
    byte[] json = utf8("{\"id\":1}");
    assertSame(json, OperationEntries.encode(ShoalOperation.UPSERT, json), "entries of sinks without operations are unchanged");
    for (ShoalOperation operation : ShoalOperation.values()) {
      byte[] entry = OperationEntries.encode(operation, json);
      assertEquals(operation, OperationEntries.operation(entry));
      assertEquals(entry.length - json.length, OperationEntries.jsonOffset(entry));
      assertEquals("{\"id\":1}", ShoalErrors.quote(entry), "messages quote the document, not the prefix");
    }
  }

  /** A DoPut batch of {@code records} as the writers build it: {@link ShoalTableClient#batchSchema}, then {@link ShoalTableClient#fill}. */
  private static VectorSchemaRoot batch(RootAllocator allocator, List<byte[]> records, long bytes) {
    VectorSchemaRoot root = VectorSchemaRoot.create(ShoalTableClient.batchSchema(records), allocator);
    ShoalTableClient.fill(root, records, bytes);
    return root;
  }

  @Test
  void aBatchGetsAnOpColumnOnlyWhenAnEntryHasAnOperation() {
    try (RootAllocator allocator = new RootAllocator()) {
      List<byte[]> plain = List.of(utf8("{\"a\":1}"), utf8("{\"a\":2}"));
      try (VectorSchemaRoot root = batch(allocator, plain, 14)) {
        assertEquals(1, root.getFieldVectors().size());
        assertNull(root.getVector("op"));
      }
      List<byte[]> mixed = List.of(
          utf8("{\"id\":1,\"v\":2}"),
          OperationEntries.encode(ShoalOperation.DELETE, utf8("{\"id\":3}")),
          OperationEntries.encode(ShoalOperation.MERGE, utf8("{\"id\":4,\"v\":null}")));
      try (VectorSchemaRoot root = batch(allocator, mixed, 40)) {
        VarCharVector json = (VarCharVector) root.getVector("json");
        VarCharVector op = (VarCharVector) root.getVector("op");
        assertArrayEquals(utf8("{\"id\":3}"), json.get(1));
        assertEquals(List.of("upsert", "delete", "merge"),
            List.of(op.getObject(0).toString(), op.getObject(1).toString(), op.getObject(2).toString()));
      }
    }
  }

  /** A keyed sink's entries carry their operation before the JSON; the routing reads past it. */
  @Test
  void anOperationsEntryRoutesByItsRecord() {
    dev.shoal.client.ShardRouting routing = new dev.shoal.client.ShardRouting("t", List.of("id"), List.of(
        new dev.shoal.client.ShardRouting.Shard(0, "t.shard-0", "grpc://a:1"), new dev.shoal.client.ShardRouting.Shard(1, "t.shard-1", "grpc://b:1")));
    byte[] json = "{\"id\": \"k\", \"v\": 1}".getBytes(StandardCharsets.UTF_8);
    byte[] entry = OperationEntries.encode(ShoalOperation.DELETE, json);
    int offset = OperationEntries.jsonOffset(entry);
    assertEquals(routing.shardOf(json), routing.shardOf(entry, offset, entry.length - offset));
  }

}
