package dev.shoal.spark;

import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalBatchStream;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one endpoint: {@code DoGet(ticket)} (over Flight, or from the embedded engine) and hands
 * each Arrow record batch to Spark as a {@link ColumnarBatch} over the Arrow vectors (no row is
 * rebuilt, no buffer copied). Stops after {@code limit} rows (cancelling the stream), and closes
 * the stream and the client with its allocator — the allocator's close fails if Arrow memory
 * leaked.
 */
final class ShoalColumnarPartitionReader implements PartitionReader<ColumnarBatch> {
  private final ShoalInputPartition partition;
  private final String table;
  private final ShoalProjection projection;
  private final long limit;
  private final ShoalClient client;
  private ShoalBatchStream stream;
  private ColumnarBatch current;
  private long rows;
  private long bytes;
  private boolean done;

  ShoalColumnarPartitionReader(ShoalInputPartition partition, ShoalOptions options, ShoalProjection projection, long limit) {
    this.partition = partition;
    this.table = options.table();
    this.projection = projection;
    this.limit = limit;
    this.client = options.connect(partition.location());
  }

  @Override
  public boolean next() {
    if (done) {
      return false;
    }
    if (limit >= 0 && rows >= limit) {
      done = true;
      return false;
    }
    if (stream == null) {
      stream = client.doGet(table, partition.ticket());
    }
    while (true) {
      if (!stream.next()) {
        done = true;
        return false;
      }
      VectorSchemaRoot root = stream.root();
      int n = root.getRowCount();
      if (n == 0) {
        continue;
      }
      for (FieldVector v : root.getFieldVectors()) {
        bytes += v.getBufferSize();
      }
      ColumnVector[] columns = projection.columns(root, table);
      int take = limit >= 0 ? (int) Math.min(n, limit - rows) : n;
      current = new ColumnarBatch(columns, take);
      rows += take;
      return true;
    }
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return new CustomTaskMetric[] {
        ShoalMetrics.task(ShoalMetrics.ROWS_READ, rows),
        ShoalMetrics.task(ShoalMetrics.BYTES_READ, bytes),
        ShoalMetrics.task(ShoalMetrics.INDEX_SCANS, partition.indexScans()),
        ShoalMetrics.task(ShoalMetrics.FULL_SCANS, partition.fullScans()),
    };
  }

  @Override
  public void close() {
    // The batches' vectors belong to the stream: they are freed with the stream, not here.
    try {
      if (stream != null) {
        stream.close();
      }
    } finally {
      client.close();
    }
  }
}
