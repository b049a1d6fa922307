package dev.shoal.spark;

import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one endpoint: {@code DoGet(ticket)} and hands each Arrow record batch to Spark as a
 * {@link ColumnarBatch} over the Arrow vectors (no row is rebuilt). Stops after {@code limit}
 * rows (cancelling the stream), and closes the stream, the Flight client and its allocator —
 * the allocator's close fails if Arrow memory leaked.
 */
final class ShoalColumnarPartitionReader implements PartitionReader<ColumnarBatch> {
  private final ShoalInputPartition partition;
  private final String table;
  private final ShoalProjection projection;
  private final long limit;
  private final ShoalClient client;
  private FlightStream stream;
  private ColumnarBatch current;
  private long rows;
  private long bytes;
  private boolean done;
  private boolean finished;

  ShoalColumnarPartitionReader(ShoalInputPartition partition, String table, String token, ShoalProjection projection, long limit) {
    this.partition = partition;
    this.table = table;
    this.projection = projection;
    this.limit = limit;
    this.client = ShoalClient.open(partition.location(), token);
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
      boolean more;
      try {
        more = stream.next();
      } catch (org.apache.arrow.flight.FlightRuntimeException e) {
        throw ShoalErrors.translate(e, partition.location(), table, "DoGet");
      }
      if (!more) {
        done = true;
        finished = true;
        return false;
      }
      VectorSchemaRoot root = stream.getRoot();
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
    // The batches' vectors belong to the stream's root: they are freed with the stream, not here.
    try {
      if (stream != null) {
        if (!finished) {
          stream.cancel("shoal: the reader is done (limit reached or task ended)", null);
        }
        try {
          stream.close();
        } catch (Exception e) {
          if (finished) {
            throw new ShoalException("shoal table '" + table + "': closing the DoGet stream at " + partition.location() + " failed", e);
          }
        }
      }
    } finally {
      client.close();
    }
  }
}
