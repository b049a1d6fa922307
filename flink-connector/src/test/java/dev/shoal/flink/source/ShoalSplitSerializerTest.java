package dev.shoal.flink.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The source's checkpointed splits: a shard's split keeps its table and location through a
 * checkpoint, and state written by the previous version (splits without shards) is still read.
 */
class ShoalSplitSerializerTest {

  @Test
  void splitsOfShardsAndOfTheSourcesTableRoundTrip() throws IOException {
    ShoalSplit.Serializer serializer = ShoalSplit.Serializer.INSTANCE;
    for (ShoalSplit split : List.of(
        new ShoalSplit("backlog-64", 64, 4096),
        new ShoalSplit("shard-2-tail-128", 128, ShoalSplit.UNBOUNDED, "events.shard-2", "grpc://shoal-2.shoal:50051"))) {
      assertEquals(split, serializer.deserialize(serializer.getVersion(), serializer.serialize(split)));
    }
    ShoalEnumeratorState state = new ShoalEnumeratorState(true, List.of(
        new ShoalSplit("shard-0-tail-64", 64, ShoalSplit.UNBOUNDED, "events.shard-0", "grpc://a:1"), new ShoalSplit("tail-64", 64, ShoalSplit.UNBOUNDED)));
    ShoalEnumeratorState.Serializer states = ShoalEnumeratorState.Serializer.INSTANCE;
    assertEquals(state, states.deserialize(states.getVersion(), states.serialize(state)));
  }

  @Test
  void version1StateIsStillRead() throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeUTF("backlog-64");
      out.writeLong(64);
      out.writeLong(4096);
    }
    assertEquals(new ShoalSplit("backlog-64", 64, 4096), ShoalSplit.Serializer.INSTANCE.deserialize(1, bytes.toByteArray()));
    ByteArrayOutputStream state = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(state)) {
      out.writeBoolean(true);
      out.writeInt(1);
      out.writeUTF("tail-64");
      out.writeLong(64);
      out.writeLong(ShoalSplit.UNBOUNDED);
    }
    assertEquals(new ShoalEnumeratorState(true, List.of(new ShoalSplit("tail-64", 64, ShoalSplit.UNBOUNDED))),
        ShoalEnumeratorState.Serializer.INSTANCE.deserialize(1, state.toByteArray()));
    assertThrows(IOException.class, () -> ShoalSplit.Serializer.INSTANCE.deserialize(3, bytes.toByteArray()));
  }
}
