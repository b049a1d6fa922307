package dev.shoal.flink;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * A range of a table's log that one {@link ShoalSource} reader answers: every matching record
 * whose log address is in {@code [from, to)} (docs/protocol.md, "Following a table"). {@code from}
 * is where reading resumes (the checkpointed offset: one past the last emitted record — each
 * answer is emitted in address order, so every lower record of it is out — or the last answer's
 * {@code complete_until}); {@code to} is {@link #UNBOUNDED} for the split that
 * follows the tail. Immutable.
 *
 * @param id the split's id, unique within the source
 * @param from the first log address still to read (bytes into the log)
 * @param to one past the last log address of the split, or {@link #UNBOUNDED}
 */
public record ShoalSplit(String id, long from, long to) implements SourceSplit {

  /** {@code to} of the split that follows the tail and never ends. */
  public static final long UNBOUNDED = Long.MAX_VALUE;

  @Override
  public String splitId() {
    return id;
  }

  /** Whether the split follows the tail (never finishes). */
  public boolean unbounded() {
    return to == UNBOUNDED;
  }

  @Override
  public String toString() {
    return "ShoalSplit{" + id + " [" + from + ", " + (unbounded() ? "tail" : String.valueOf(to)) + ")}";
  }

  /** The split with reading resumed at {@code next}. */
  ShoalSplit resumeAt(long next) {
    return new ShoalSplit(id, next, to);
  }

  /** Version 1: id (UTF), from, to. */
  static final class Serializer implements SimpleVersionedSerializer<ShoalSplit> {
    static final Serializer INSTANCE = new Serializer();

    @Override
    public int getVersion() {
      return 1;
    }

    @Override
    public byte[] serialize(ShoalSplit split) throws IOException {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(32);
      try (DataOutputStream out = new DataOutputStream(bytes)) {
        write(out, split);
      }
      return bytes.toByteArray();
    }

    @Override
    public ShoalSplit deserialize(int version, byte[] serialized) throws IOException {
      if (version != 1) {
        throw new IOException("shoal source: split state of version " + version + " (this connector reads version 1)");
      }
      try (DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(serialized))) {
        return read(in);
      }
    }

    static void write(DataOutputStream out, ShoalSplit split) throws IOException {
      out.writeUTF(split.id());
      out.writeLong(split.from());
      out.writeLong(split.to());
    }

    static ShoalSplit read(DataInputStream in) throws IOException {
      return new ShoalSplit(in.readUTF(), in.readLong(), in.readLong());
    }
  }
}
