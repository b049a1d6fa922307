package dev.shoal.flink.sink;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * What an exactly-once writer hands to the {@link ShoalCommitter} at a checkpoint: a prepared shoal
 * transaction ({@code prepare_transaction} answered) holding the records of one checkpoint interval
 * of one subtask.
 *
 * @param endpoint the daemon the transaction lives in
 * @param table its table
 * @param transaction its id ({@code <prefix>-<subtask>-<checkpoint>-<epoch>})
 * @param records records staged in it (for logs and metrics)
 */
public record ShoalCommittable(String endpoint, String table, String transaction, long records) {

  /** Version 1: endpoint, table, transaction (modified UTF-8), records (long). */
  static final class Serializer implements SimpleVersionedSerializer<ShoalCommittable> {

    @Override
    public int getVersion() {
      return 1;
    }

    @Override
    public byte[] serialize(ShoalCommittable committable) throws IOException {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        out.writeUTF(committable.endpoint());
        out.writeUTF(committable.table());
        out.writeUTF(committable.transaction());
        out.writeLong(committable.records());
      }
      return bytes.toByteArray();
    }

    @Override
    public ShoalCommittable deserialize(int version, byte[] serialized) throws IOException {
      if (version != 1) {
        throw new IOException("unknown version " + version + " of a shoal committable (this connector reads 1)");
      }
      try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
        return new ShoalCommittable(in.readUTF(), in.readUTF(), in.readUTF(), in.readLong());
      }
    }
  }
}
