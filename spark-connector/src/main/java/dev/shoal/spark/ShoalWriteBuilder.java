package dev.shoal.spark;

import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

/**
 * Appends ({@code mode("append")}): every Spark write task streams its rows as JSON records to
 * one shard through {@code DoPut}. A batch is durable and visible once the daemon acknowledges
 * it; a failed job keeps the batches acknowledged before the failure (no cross-task
 * transaction — the daemon's transaction actions are not used yet).
 */
public final class ShoalWriteBuilder implements WriteBuilder {
  private final ShoalOptions options;
  private final StructType schema;

  ShoalWriteBuilder(ShoalOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public Write build() {
    return new Write() {
      @Override
      public String description() {
        return "ShoalWrite table=" + options.table() + " endpoint=" + options.endpointText();
      }

      @Override
      public BatchWrite toBatch() {
        return new ShoalBatchWrite(options, schema);
      }
    };
  }

  /** The batch append: nothing to do on the driver beyond creating the table. */
  static final class ShoalBatchWrite implements BatchWrite {
    private final ShoalOptions options;
    private final StructType schema;

    ShoalBatchWrite(ShoalOptions options, StructType schema) {
      this.options = options;
      this.schema = schema;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      if (options.writeCreateTable()) {
        for (java.net.URI shard : options.endpoints()) {
          try (ShoalClient client = options.connect(shard)) {
            client.createTableIfNotExists(options.table());
          }
        }
      }
      return new ShoalDataWriterFactory(options, schema);
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      // Each task's batches were acknowledged (durable, visible) when the task committed.
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      // Acknowledged batches stay: shoal appends are not transactional across tasks.
    }
  }
}
