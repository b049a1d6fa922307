package dev.shoal.flink.table;

import static dev.shoal.flink.table.ShoalConnectorOptions.BUFFER_FLUSH_INTERVAL;
import static dev.shoal.flink.table.ShoalConnectorOptions.BUFFER_FLUSH_MAX_BYTES;
import static dev.shoal.flink.table.ShoalConnectorOptions.BUFFER_FLUSH_MAX_ROWS;
import static dev.shoal.flink.table.ShoalConnectorOptions.CREATE_TABLE;
import static dev.shoal.flink.table.ShoalConnectorOptions.ROUTE_BY_KEY;
import static dev.shoal.flink.table.ShoalConnectorOptions.DELIVERY_GUARANTEE;
import static dev.shoal.flink.table.ShoalConnectorOptions.EMBEDDED_CONFIG_PREFIX;
import static dev.shoal.flink.table.ShoalConnectorOptions.EMBEDDED_KEEP_ALIVE;
import static dev.shoal.flink.table.ShoalConnectorOptions.ENDPOINT;
import static dev.shoal.flink.table.ShoalConnectorOptions.FORMAT;
import static dev.shoal.flink.table.ShoalConnectorOptions.MAX_BUFFERED_REQUESTS;
import static dev.shoal.flink.table.ShoalConnectorOptions.MAX_IN_FLIGHT_REQUESTS;
import static dev.shoal.flink.table.ShoalConnectorOptions.MAX_RETRIES;
import static dev.shoal.flink.table.ShoalConnectorOptions.REQUEST_TIMEOUT;
import static dev.shoal.flink.table.ShoalConnectorOptions.RETRY_INITIAL_BACKOFF;
import static dev.shoal.flink.table.ShoalConnectorOptions.RETRY_MAX_BACKOFF;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_BOUNDED;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_DURABLE_ONLY;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_FAIL_ON_DATA_LOSS;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_FILTER;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_POLL_INTERVAL;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_REQUEST_TIMEOUT;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_SPLIT_SIZE;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_STARTUP_ADDRESS;
import static dev.shoal.flink.table.ShoalConnectorOptions.SCAN_STARTUP_MODE;
import static dev.shoal.flink.table.ShoalConnectorOptions.TABLE;
import static dev.shoal.flink.table.ShoalConnectorOptions.TOKEN;
import static dev.shoal.flink.table.ShoalConnectorOptions.TRANSACTIONAL_ID_PREFIX;

import dev.shoal.flink.sink.ShoalSink;
import dev.shoal.flink.sink.ShoalSinkBuilder;
import dev.shoal.flink.source.ShoalSource;
import dev.shoal.flink.source.ShoalSourceBuilder;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.table.connector.format.DecodingFormat;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.factories.DeserializationFormatFactory;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import java.util.Map;
import java.util.Set;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.format.EncodingFormat;
import org.apache.flink.table.connector.sink.DynamicTableSink;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.factories.DynamicTableSinkFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.factories.SerializationFormatFactory;

/**
 * The Flink SQL / Table API factory of the shoal sink: {@code 'connector' = 'shoal'}.
 *
 * <pre>{@code
 * CREATE TABLE shoal_events (id STRING, type STRING, actor ROW<login STRING>)
 * WITH ('connector' = 'shoal', 'endpoint' = 'grpc://localhost:7700', 'table' = 'events',
 *       'format' = 'json');
 * INSERT INTO shoal_events SELECT ...;
 * }</pre>
 *
 * <p>Rows are serialised by the format named in {@code 'format'}, discovered through {@link
 * FactoryUtil} (normally Flink's own {@code json}; any format that writes one JSON document per
 * row works, e.g. {@code raw} over a single STRING column of JSON text). The options are in
 * {@link dev.shoal.flink.table.ShoalConnectorOptions}. Without a primary key the sink is append-only
 * (insert-only changelog). With {@code PRIMARY KEY (...) NOT ENFORCED} it is an upsert sink of a
 * keyed shoal table (created with that key by {@code 'sink.create-table'}): {@code INSERT} and
 * {@code UPDATE_AFTER} rows upsert their key, {@code DELETE} rows delete it, {@code UPDATE_BEFORE}
 * rows are skipped, under every delivery guarantee.
 *
 * <p>{@code 'endpoint' = 'embedded:/path/to/data'} writes into the shoal engine inside the JVM of
 * the writers (embedded mode), configured by {@code 'embedded.keep-alive'} and {@code
 * 'embedded.config.KEY'} options (any key under that prefix is passed to the engine, which names
 * the unknown ones).
 *
 * <p>The same table is a source ({@link ShoalDynamicSource}): {@code SELECT ... FROM shoal_events}
 * reads it (bounded with {@code 'scan.bounded' = 'true'}, else following the tail), with filters
 * pushed down onto PSFs, and {@code JOIN shoal_events FOR SYSTEM_TIME AS OF ...} looks up the
 * latest record per key. Records are decoded by the same {@code 'format'}.
 */
public class ShoalDynamicTableFactory implements DynamicTableSinkFactory, DynamicTableSourceFactory {

  public static final String IDENTIFIER = "shoal";

  @Override
  public String factoryIdentifier() {
    return IDENTIFIER;
  }

  @Override
  public Set<ConfigOption<?>> requiredOptions() {
    return Set.of(ENDPOINT, TABLE);
  }

  @Override
  public Set<ConfigOption<?>> optionalOptions() {
    return Set.of(
        FORMAT,
        CREATE_TABLE,
        ROUTE_BY_KEY,
        TOKEN,
        DELIVERY_GUARANTEE,
        BUFFER_FLUSH_MAX_ROWS,
        BUFFER_FLUSH_MAX_BYTES,
        BUFFER_FLUSH_INTERVAL,
        MAX_IN_FLIGHT_REQUESTS,
        MAX_BUFFERED_REQUESTS,
        MAX_RETRIES,
        RETRY_INITIAL_BACKOFF,
        RETRY_MAX_BACKOFF,
        REQUEST_TIMEOUT,
        TRANSACTIONAL_ID_PREFIX,
        EMBEDDED_KEEP_ALIVE,
        FactoryUtil.SINK_PARALLELISM,
        SCAN_STARTUP_MODE,
        SCAN_STARTUP_ADDRESS,
        SCAN_BOUNDED,
        SCAN_POLL_INTERVAL,
        SCAN_SPLIT_SIZE,
        SCAN_FILTER,
        SCAN_FAIL_ON_DATA_LOSS,
        SCAN_DURABLE_ONLY,
        SCAN_REQUEST_TIMEOUT,
        org.apache.flink.table.connector.source.lookup.LookupOptions.CACHE_TYPE,
        org.apache.flink.table.connector.source.lookup.LookupOptions.PARTIAL_CACHE_EXPIRE_AFTER_ACCESS,
        org.apache.flink.table.connector.source.lookup.LookupOptions.PARTIAL_CACHE_EXPIRE_AFTER_WRITE,
        org.apache.flink.table.connector.source.lookup.LookupOptions.PARTIAL_CACHE_MAX_ROWS,
        org.apache.flink.table.connector.source.lookup.LookupOptions.PARTIAL_CACHE_CACHE_MISSING_KEY);
  }

  @Override
  public Set<ConfigOption<?>> forwardOptions() {
    return Set.of(ENDPOINT, TABLE, TOKEN);
  }

  @Override
  public DynamicTableSink createDynamicTableSink(Context context) {
    FactoryUtil.TableFactoryHelper helper = FactoryUtil.createTableFactoryHelper(this, context);
    EncodingFormat<SerializationSchema<RowData>> format =
        helper.discoverEncodingFormat(SerializationFormatFactory.class, FORMAT);
    // embedded.config.* keys are the engine's configuration, checked by the engine when it opens.
    helper.validateExcept(EMBEDDED_CONFIG_PREFIX);
    ReadableConfig options = helper.getOptions();
    ShoalSinkBuilder<RowData> builder = ShoalSink.<RowData>builder()
        .setEndpoint(options.get(ENDPOINT))
        .setTable(options.get(TABLE))
        .setToken(options.getOptional(TOKEN).orElse(null))
        .setDeliveryGuarantee(options.get(DELIVERY_GUARANTEE))
        .setMaxBatchSize(options.get(BUFFER_FLUSH_MAX_ROWS))
        .setMaxBatchSizeInBytes(options.get(BUFFER_FLUSH_MAX_BYTES).getBytes())
        .setMaxTimeInBuffer(options.get(BUFFER_FLUSH_INTERVAL))
        .setMaxInFlightRequests(options.get(MAX_IN_FLIGHT_REQUESTS))
        .setMaxBufferedRequests(options.get(MAX_BUFFERED_REQUESTS))
        .setRetries(options.get(MAX_RETRIES), options.get(RETRY_INITIAL_BACKOFF), options.get(RETRY_MAX_BACKOFF))
        .setRequestTimeout(options.get(REQUEST_TIMEOUT))
        .setTransactionalIdPrefix(options.getOptional(TRANSACTIONAL_ID_PREFIX).orElse(null))
        .setEmbeddedKeepAlive(options.get(EMBEDDED_KEEP_ALIVE))
        .setCreateTable(options.get(CREATE_TABLE))
        .setRouteByKey(options.get(ROUTE_BY_KEY));
    // A PRIMARY KEY (NOT ENFORCED) makes the sink an upsert sink of a keyed shoal table.
    java.util.List<String> primaryKey = context.getCatalogTable().getResolvedSchema().getPrimaryKey()
        .map(org.apache.flink.table.catalog.UniqueConstraint::getColumns)
        .orElse(java.util.List.of());
    if (!primaryKey.isEmpty()) {
      builder.setPrimaryKey(primaryKey).setOperationExtractor(new RowKindOperations());
    }
    embeddedConfig(context, builder::setEmbeddedConfig);
    try {
      // Validates the limits now, so a bad option fails at planning time, not in the job.
      builder.build();
    } catch (IllegalArgumentException e) {
      throw new ValidationException(
          "table " + context.getObjectIdentifier().asSummaryString() + ": " + e.getMessage(), e);
    }
    return new ShoalDynamicSink(
        builder,
        format,
        context.getPhysicalRowDataType(),
        options.getOptional(FactoryUtil.SINK_PARALLELISM).orElse(null),
        !primaryKey.isEmpty());
  }

  @Override
  public DynamicTableSource createDynamicTableSource(Context context) {
    FactoryUtil.TableFactoryHelper helper = FactoryUtil.createTableFactoryHelper(this, context);
    DecodingFormat<DeserializationSchema<RowData>> format =
        helper.discoverDecodingFormat(DeserializationFormatFactory.class, FORMAT);
    helper.validateExcept(EMBEDDED_CONFIG_PREFIX);
    ReadableConfig options = helper.getOptions();
    ShoalSourceBuilder<RowData> builder = ShoalSource.<RowData>builder()
        .setEndpoint(options.get(ENDPOINT))
        .setTable(options.get(TABLE))
        .setToken(options.getOptional(TOKEN).orElse(null))
        .setBounded(options.get(SCAN_BOUNDED))
        .setPollInterval(options.get(SCAN_POLL_INTERVAL))
        .setSplitBytes(options.get(SCAN_SPLIT_SIZE).getBytes())
        .setFailOnDataLoss(options.get(SCAN_FAIL_ON_DATA_LOSS))
        .setDurableOnly(options.get(SCAN_DURABLE_ONLY))
        .setRequestTimeout(options.get(SCAN_REQUEST_TIMEOUT))
        .setEmbeddedKeepAlive(options.get(EMBEDDED_KEEP_ALIVE));
    switch (options.get(SCAN_STARTUP_MODE)) {
      case EARLIEST -> builder.startFromEarliest();
      case LATEST -> builder.startFromLatest();
      case ADDRESS -> builder.startFromAddress(options.getOptional(SCAN_STARTUP_ADDRESS).orElseThrow(() ->
          new ValidationException("table " + context.getObjectIdentifier().asSummaryString()
              + ": 'scan.startup.mode' = 'address' needs 'scan.startup.address'")));
    }
    embeddedConfig(context, builder::setEmbeddedConfig);
    try {
      // Validates the options now, so a bad one fails at planning time (the format gives the deserializer later).
      builder.validate();
    } catch (IllegalArgumentException e) {
      throw new ValidationException("table " + context.getObjectIdentifier().asSummaryString() + ": " + e.getMessage(), e);
    }
    // Flink's own lookup cache options ('lookup.cache' = 'PARTIAL', 'lookup.partial-cache.*').
    org.apache.flink.table.connector.source.lookup.cache.LookupCache cache = null;
    switch (options.get(org.apache.flink.table.connector.source.lookup.LookupOptions.CACHE_TYPE)) {
      case PARTIAL -> cache = org.apache.flink.table.connector.source.lookup.cache.DefaultLookupCache.fromConfig(options);
      case NONE -> { }
      default -> throw new ValidationException("table " + context.getObjectIdentifier().asSummaryString()
          + ": 'lookup.cache' = 'FULL' is not supported by shoal (use 'PARTIAL' or 'NONE')");
    }
    return new ShoalDynamicSource(builder, format, context.getPhysicalRowDataType(),
        options.getOptional(SCAN_FILTER).orElse(null), context.getObjectIdentifier().asSummaryString(), cache,
        sessionZone(context.getConfiguration()));
  }

  /** The session's {@code table.local-time-zone} ("default": the JVM's zone, as Flink reads it). */
  private static java.time.ZoneId sessionZone(ReadableConfig config) {
    String zone = config.get(org.apache.flink.table.api.config.TableConfigOptions.LOCAL_TIME_ZONE);
    return org.apache.flink.table.api.config.TableConfigOptions.LOCAL_TIME_ZONE.defaultValue().equals(zone)
        ? java.time.ZoneId.systemDefault() : java.time.ZoneId.of(zone);
  }

  /** Each {@code embedded.config.KEY} option of the table, as (KEY, value). */
  private static void embeddedConfig(Context context, java.util.function.BiConsumer<String, String> set) {
    for (Map.Entry<String, String> e : context.getCatalogTable().getOptions().entrySet()) {
      if (e.getKey().startsWith(EMBEDDED_CONFIG_PREFIX) && e.getKey().length() > EMBEDDED_CONFIG_PREFIX.length()) {
        set.accept(e.getKey().substring(EMBEDDED_CONFIG_PREFIX.length()), e.getValue());
      }
    }
  }
}
