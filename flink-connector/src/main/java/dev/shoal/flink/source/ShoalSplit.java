package dev.shoal.flink.source;

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
 * follows the tail. Of a table sharded over several daemons (docs/deployment.md), each split is
 * one shard's: its own table ({@code events.shard-2}, whose log addresses the range counts) at
 * the location of the node holding it. Immutable.
 *
 * @param id the split's id, unique within the source
 * @param from the first log address still to read (bytes into the log)
 * @param to one past the last log address of the split, or {@link #UNBOUNDED}
 * @param shardTable the shard's table when the source's table is sharded, else null (the
 *     source's table)
 * @param location the Flight location of the node holding {@code shardTable}, else null (the
 *     source's endpoint)
 */
public record ShoalSplit(String id, long from, long to, String shardTable, String location) implements SourceSplit {

  /** {@code to} of the split that follows the tail and never ends. */
  public static final long UNBOUNDED = Long.MAX_VALUE;

  /** A split of the source's own table at its endpoint. */
  public ShoalSplit(String id, long from, long to) {
    this(id, from, to, null, null);
  }

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
    return "ShoalSplit{" + id + " [" + from + ", " + (unbounded() ? "tail" : String.valueOf(to)) + ")"
        + (shardTable == null ? "" : " of " + shardTable + " at " + location) + "}";
  }

  /** The split with reading resumed at {@code next}. */
  ShoalSplit resumeAt(long next) {
    return new ShoalSplit(id, next, to, shardTable, location);
  }

  /** The table the split reads: its shard's, else {@code sourceTable}. */
  String table(String sourceTable) {
    return shardTable == null ? sourceTable : shardTable;
  }

  /** Where the split is read: its shard's node, else {@code sourceEndpoint}. */
  String endpoint(String sourceEndpoint) {
    return location == null ? sourceEndpoint : location;
  }

  /**
   * Version 2: id (UTF), from, to, whether the split is a shard's (boolean), then its table and
   * location (UTF). Version 1 (id, from, to: no shards) is still read.
   */
  static final class Serializer implements SimpleVersionedSerializer<ShoalSplit> {
    static final Serializer INSTANCE = new Serializer();

    @Override
    public int getVersion() {
      return 2;
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
      if (version != 1 && version != 2) {
        throw new IOException("shoal source: split state of version " + version + " (this connector reads versions 1 and 2)");
      }
      try (DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(serialized))) {
        return read(in, version);
      }
    }

    /** Writes {@code split} in the current version. */
    static void write(DataOutputStream out, ShoalSplit split) throws IOException {
      out.writeUTF(split.id());
      out.writeLong(split.from());
      out.writeLong(split.to());
      out.writeBoolean(split.shardTable() != null);
      if (split.shardTable() != null) {
        out.writeUTF(split.shardTable());
        out.writeUTF(split.location());
      }
    }

    /** Reads a split written in {@code version}. */
    static ShoalSplit read(DataInputStream in, int version) throws IOException {
      String id = in.readUTF();
      long from = in.readLong();
      long to = in.readLong();
      if (version >= 2 && in.readBoolean()) {
        return new ShoalSplit(id, from, to, in.readUTF(), in.readUTF());
      }
      return new ShoalSplit(id, from, to);
    }
  }
}
