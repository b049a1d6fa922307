package dev.shoal.spark;

import java.util.ArrayList;
import java.util.List;

import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

/**
 * Creates the write tasks' writers; task {@code p} writes to endpoint {@code p mod endpoints} (of
 * a comma-separated {@code endpoint}), or, for a table sharded by key over a cluster, each record
 * to the node holding its shard ({@link ShoalShardedPut}).
 */
public final class ShoalDataWriterFactory implements DataWriterFactory {
  private static final long serialVersionUID = 1L;

  private final ShoalOptions options;
  private final StructType schema;

  ShoalDataWriterFactory(ShoalOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
    return new ShoalDataWriter(options, schema, partitionId);
  }

  /** The rows a task wrote. */
  public static final class Committed implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    public final long records;

    Committed(long records) {
      this.records = records;
    }
  }

  /** Buffers rows as JSON records and sends them in batches of {@code write.batch-rows}. */
  static final class ShoalDataWriter implements DataWriter<InternalRow> {
    private final ShoalOptions options;
    private final StructType schema;
    private final ShoalClient client;
    private final ShoalRecordStream put;
    private final List<String> buffer = new ArrayList<>();

    ShoalDataWriter(ShoalOptions options, StructType schema, int partitionId) {
      this.options = options;
      this.schema = schema;
      this.client = options.connect(options.endpoints().get(partitionId % options.endpoints().size()));
      ShoalRecordStream started;
      try {
        // A table sharded by key over a cluster: each record straight to its shard's node.
        ShoalShardedPut routed = ShoalShardedPut.open(client, options);
        started = routed != null ? routed : ShoalRecordStream.of(client.startPut(options.table()));
      } catch (RuntimeException e) {
        client.close();
        throw e;
      }
      this.put = started;
    }

    @Override
    public void write(InternalRow row) {
      buffer.add(ShoalJsonRows.toJson(row, schema));
      if (buffer.size() >= options.writeBatchRows()) {
        flush();
      }
    }

    private void flush() {
      if (!buffer.isEmpty()) {
        put.send(buffer);
        buffer.clear();
      }
    }

    @Override
    public WriterCommitMessage commit() {
      flush();
      put.finish();
      return new Committed(put.records());
    }

    @Override
    public void abort() {
      buffer.clear();
    }

    @Override
    public void close() {
      try {
        put.close();
      } finally {
        client.close();
      }
    }
  }
}
