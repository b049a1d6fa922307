package dev.shoal.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Creates the columnar readers of a scan's partitions (shipped to executors). */
public final class ShoalPartitionReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final ShoalOptions options;
  private final ShoalProjection projection;
  private final long limit;

  ShoalPartitionReaderFactory(ShoalOptions options, ShoalProjection projection, long limit) {
    this.options = options;
    this.projection = projection;
    this.limit = limit;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("shoal reads are columnar only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new ShoalColumnarPartitionReader((ShoalInputPartition) partition, options, projection, limit);
  }
}
