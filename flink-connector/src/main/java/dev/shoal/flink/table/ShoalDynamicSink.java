package dev.shoal.flink.table;

import dev.shoal.flink.ShoalSinkBuilder;
import java.util.Objects;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.format.EncodingFormat;
import org.apache.flink.table.connector.sink.DynamicTableSink;
import org.apache.flink.table.connector.sink.SinkV2Provider;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.types.DataType;

/**
 * The planner's view of a shoal table: append-only; each row becomes one JSON document through
 * the table's encoding format and goes to a {@link dev.shoal.flink.ShoalSink}.
 */
public class ShoalDynamicSink implements DynamicTableSink {

  private final ShoalSinkBuilder<RowData> builder;
  private final EncodingFormat<SerializationSchema<RowData>> format;
  private final DataType physicalDataType;
  private final Integer parallelism;

  ShoalDynamicSink(
      ShoalSinkBuilder<RowData> builder,
      EncodingFormat<SerializationSchema<RowData>> format,
      DataType physicalDataType,
      Integer parallelism) {
    this.builder = builder;
    this.format = format;
    this.physicalDataType = physicalDataType;
    this.parallelism = parallelism;
  }

  /** shoal's log is append-only: the sink takes inserts only (the planner rejects updating queries). */
  @Override
  public ChangelogMode getChangelogMode(ChangelogMode requestedMode) {
    return ChangelogMode.insertOnly();
  }

  @Override
  public SinkRuntimeProvider getSinkRuntimeProvider(Context context) {
    SerializationSchema<RowData> schema = format.createRuntimeEncoder(context, physicalDataType);
    return SinkV2Provider.of(builder.setSerializationSchema(schema).build(), parallelism);
  }

  @Override
  public DynamicTableSink copy() {
    return new ShoalDynamicSink(builder, format, physicalDataType, parallelism);
  }

  @Override
  public String asSummaryString() {
    return "shoal";
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof ShoalDynamicSink other)) {
      return false;
    }
    return Objects.equals(format, other.format)
        && Objects.equals(physicalDataType, other.physicalDataType)
        && Objects.equals(parallelism, other.parallelism);
  }

  @Override
  public int hashCode() {
    return Objects.hash(format, physicalDataType, parallelism);
  }
}
