package dev.shoal.flink.source;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The {@link ShoalSource} enumerator's checkpointed state: whether the table's log has been cut
 * into splits yet ({@code discovered}), and the splits not assigned to a reader (the assigned ones
 * are in their readers' state).
 *
 * @param discovered whether the initial splits were created (from the table's {@code stats})
 * @param pending splits waiting for a reader, in assignment order
 */
public record ShoalEnumeratorState(boolean discovered, List<ShoalSplit> pending) {

  public ShoalEnumeratorState {
    pending = List.copyOf(pending);
  }

  /**
   * Version 2: discovered, count, splits (each in {@link ShoalSplit.Serializer}'s version 2, which
   * names a shard's table and location). Version 1 (splits without shards) is still read.
   */
  static final class Serializer implements SimpleVersionedSerializer<ShoalEnumeratorState> {
    static final Serializer INSTANCE = new Serializer();

    @Override
    public int getVersion() {
      return 2;
    }

    @Override
    public byte[] serialize(ShoalEnumeratorState state) throws IOException {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeBoolean(state.discovered());
        out.writeInt(state.pending().size());
        for (ShoalSplit split : state.pending()) {
          ShoalSplit.Serializer.write(out, split);
        }
      }
      return bytes.toByteArray();
    }

    @Override
    public ShoalEnumeratorState deserialize(int version, byte[] serialized) throws IOException {
      if (version != 1 && version != 2) {
        throw new IOException("shoal source: enumerator state of version " + version + " (this connector reads versions 1 and 2)");
      }
      try (DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(serialized))) {
        boolean discovered = in.readBoolean();
        int n = in.readInt();
        List<ShoalSplit> pending = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
          pending.add(ShoalSplit.Serializer.read(in, version));
        }
        return new ShoalEnumeratorState(discovered, pending);
      }
    }
  }
}
