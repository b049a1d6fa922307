package dev.shoal.flink.table;

import java.util.Objects;
import dev.shoal.flink.sink.ShoalSinkBuilder;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.format.EncodingFormat;
import org.apache.flink.table.connector.sink.DynamicTableSink;
import org.apache.flink.table.connector.sink.SinkV2Provider;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.types.DataType;

/**
 * The planner's view of a shoal table: append-only, or an upsert sink when the table has a
 * primary key; each row becomes one JSON document through the table's encoding format and goes to
 * a {@link dev.shoal.flink.sink.ShoalSink} (with its operation, for an upsert sink).
 */
public class ShoalDynamicSink implements DynamicTableSink {

  private final ShoalSinkBuilder<RowData> builder;
  private final EncodingFormat<SerializationSchema<RowData>> format;
  private final DataType physicalDataType;
  private final Integer parallelism;
  /** The table has a primary key: an upsert sink of a keyed shoal table. */
  private final boolean upsert;

  ShoalDynamicSink(
      ShoalSinkBuilder<RowData> builder,
      EncodingFormat<SerializationSchema<RowData>> format,
      DataType physicalDataType,
      Integer parallelism,
      boolean upsert) {
    this.builder = builder;
    this.format = format;
    this.physicalDataType = physicalDataType;
    this.parallelism = parallelism;
    this.upsert = upsert;
  }

  /**
   * Inserts only for an append-only table (the planner rejects updating queries); for a table with
   * a primary key, an upsert changelog ({@code INSERT}, {@code UPDATE_AFTER}, {@code DELETE}).
   */
  @Override
  public ChangelogMode getChangelogMode(ChangelogMode requestedMode) {
    return upsert ? ChangelogMode.upsert() : ChangelogMode.insertOnly();
  }

  @Override
  public SinkRuntimeProvider getSinkRuntimeProvider(Context context) {
    SerializationSchema<RowData> schema = format.createRuntimeEncoder(context, physicalDataType);
    return SinkV2Provider.of(builder.setSerializationSchema(schema).build(), parallelism);
  }

  @Override
  public DynamicTableSink copy() {
    return new ShoalDynamicSink(builder, format, physicalDataType, parallelism, upsert);
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
        && Objects.equals(parallelism, other.parallelism)
        && upsert == other.upsert;
  }

  @Override
  public int hashCode() {
    return Objects.hash(format, physicalDataType, parallelism, upsert);
  }
}
