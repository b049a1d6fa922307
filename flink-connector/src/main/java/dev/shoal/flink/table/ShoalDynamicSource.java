package dev.shoal.flink.table;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import dev.shoal.flink.source.ShoalSourceBuilder;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.format.DecodingFormat;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.LookupTableSource;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.connector.source.SourceProvider;
import org.apache.flink.table.connector.source.abilities.SupportsFilterPushDown;
import org.apache.flink.table.connector.source.abilities.SupportsProjectionPushDown;
import org.apache.flink.table.connector.source.lookup.LookupFunctionProvider;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.expressions.ResolvedExpression;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

/**
 * The planner's view of a shoal table as a source: a scan ({@link dev.shoal.flink.source.ShoalSource},
 * bounded or following the tail by {@code scan.bounded}) and a lookup join ({@link
 * dev.shoal.flink.lookup.ShoalLookupFunction}: the latest record per key). Records are read as they were
 * put and decoded by the table's {@code format}.
 *
 * <p>Filters that have an exact translation ({@link ShoalFilters}) are pushed to shoal, ANDed with
 * {@code scan.filter}: the planner maps them onto PSFs, so a subset is what is read (and
 * followed). Flink still evaluates every filter on the rows (they are all reported as
 * remaining): shoal evaluates over the JSON values, and a column declared with another type than
 * its values (a STRING column over JSON numbers) could differ. A projection decodes only the
 * selected columns (top-level; nested projection is not pushed).
 */
public class ShoalDynamicSource
    implements ScanTableSource, LookupTableSource, SupportsFilterPushDown, SupportsProjectionPushDown {

  private final ShoalSourceBuilder<RowData> builder;
  private final DecodingFormat<DeserializationSchema<RowData>> format;
  private final String filter;
  private final String tableName;
  /** Flink's partial lookup cache ('lookup.cache' = 'PARTIAL'), or null. */
  private final org.apache.flink.table.connector.source.lookup.cache.LookupCache cache;
  private DataType producedDataType;
  /** The session's {@code table.local-time-zone}: how Flink reads a TIMESTAMP literal against an LTZ column. */
  private final java.time.ZoneId sessionZone;
  private final List<String> pushedFilters = new ArrayList<>();

  ShoalDynamicSource(
      ShoalSourceBuilder<RowData> builder,
      DecodingFormat<DeserializationSchema<RowData>> format,
      DataType physicalDataType,
      String filter,
      String tableName,
      org.apache.flink.table.connector.source.lookup.cache.LookupCache cache,
      java.time.ZoneId sessionZone) {
    this.builder = builder;
    this.sessionZone = sessionZone;
    this.cache = cache;
    this.format = format;
    this.producedDataType = physicalDataType;
    this.filter = filter;
    this.tableName = tableName;
  }

  @Override
  public ChangelogMode getChangelogMode() {
    return ChangelogMode.insertOnly();
  }

  /** {@code scan.filter} AND the pushed filters; null when there is none. */
  String combinedFilter() {
    List<String> parts = new ArrayList<>();
    if (filter != null && !filter.isBlank()) {
      parts.add("(" + filter + ")");
    }
    parts.addAll(pushedFilters);
    return parts.isEmpty() ? null : String.join(" AND ", parts);
  }

  @Override
  public ScanRuntimeProvider getScanRuntimeProvider(ScanContext context) {
    DeserializationSchema<RowData> decoder = format.createRuntimeDecoder(context, producedDataType);
    return SourceProvider.of(builder.setDeserializer(decoder).setFilter(combinedFilter()).build());
  }

  @Override
  public LookupRuntimeProvider getLookupRuntimeProvider(LookupContext context) {
    RowType row = (RowType) producedDataType.getLogicalType();
    List<String> paths = new ArrayList<>();
    List<LogicalType> types = new ArrayList<>();
    for (int[] key : context.getKeys()) {
      if (key.length != 1) {
        throw new ValidationException("shoal table " + tableName + ": a lookup key must be a top-level column");
      }
      paths.add(ShoalFilters.quote(row.getFieldNames().get(key[0])));
      types.add(row.getTypeAt(key[0]));
    }
    DeserializationSchema<RowData> decoder = format.createRuntimeDecoder(context, producedDataType);
    try {
      // Only 'scan.filter' (the subset the table stands for): a pushed filter would pick the latest
      // record that matches it, where the join wants the latest record, then the filter (Flink's).
      dev.shoal.flink.lookup.ShoalLookupFunction function =
          builder.setDeserializer(decoder).setFilter(filter).buildLookupFunction(paths, types);
      return cache == null
          ? LookupFunctionProvider.of(function)
          : org.apache.flink.table.connector.source.lookup.PartialCachingLookupProvider.of(function, cache);
    } catch (IllegalArgumentException e) {
      throw new ValidationException("shoal table " + tableName + ": " + e.getMessage(), e);
    }
  }

  @Override
  public Result applyFilters(List<ResolvedExpression> filters) {
    List<ResolvedExpression> accepted = new ArrayList<>();
    for (ResolvedExpression expression : filters) {
      Optional<String> translated = ShoalFilters.toShoal(expression, sessionZone);
      if (translated.isPresent()) {
        pushedFilters.add(translated.get());
        accepted.add(expression);
      }
    }
    return Result.of(accepted, filters);
  }

  @Override
  public boolean supportsNestedProjection() {
    return false;
  }

  @Override
  public void applyProjection(int[][] projectedFields, DataType producedDataType) {
    this.producedDataType = producedDataType;
  }

  @Override
  public DynamicTableSource copy() {
    ShoalDynamicSource copy = new ShoalDynamicSource(builder, format, producedDataType, filter, tableName, cache, sessionZone);
    copy.pushedFilters.addAll(pushedFilters);
    return copy;
  }

  @Override
  public String asSummaryString() {
    String combined = combinedFilter();
    return "shoal" + (combined == null ? "" : "(filter=" + combined + ")");
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof ShoalDynamicSource other
        && Objects.equals(format, other.format)
        && Objects.equals(producedDataType, other.producedDataType)
        && Objects.equals(filter, other.filter)
        && Objects.equals(pushedFilters, other.pushedFilters);
  }

  @Override
  public int hashCode() {
    return Objects.hash(format, producedDataType, filter, pushedFilters);
  }
}
