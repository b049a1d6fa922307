package dev.shoal.flink.source;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.lookup.ShoalLookupFunction;
import dev.shoal.flink.table.ShoalConnectorOptions;
import org.apache.flink.api.common.serialization.DeserializationSchema;

/**
 * Builds a {@link ShoalSource}. Endpoint, table and deserializer are required; everything else
 * defaults to the matching {@link ShoalConnectorOptions} option (named in each setter).
 */
public final class ShoalSourceBuilder<T> {

  private String endpoint;
  private String table;
  private String token;
  private DeserializationSchema<T> deserializer;
  private String filter;
  private ShoalSourceSettings.Startup startup = ShoalConnectorOptions.SCAN_STARTUP_MODE.defaultValue();
  private long startAddress = -1;
  private boolean bounded = ShoalConnectorOptions.SCAN_BOUNDED.defaultValue();
  private Duration pollInterval = ShoalConnectorOptions.SCAN_POLL_INTERVAL.defaultValue();
  private long splitBytes = ShoalConnectorOptions.SCAN_SPLIT_SIZE.defaultValue().getBytes();
  private boolean failOnDataLoss = ShoalConnectorOptions.SCAN_FAIL_ON_DATA_LOSS.defaultValue();
  private boolean durableOnly = ShoalConnectorOptions.SCAN_DURABLE_ONLY.defaultValue();
  private Duration requestTimeout = ShoalConnectorOptions.SCAN_REQUEST_TIMEOUT.defaultValue();
  private Duration embeddedKeepAlive = ShoalConnectorOptions.EMBEDDED_KEEP_ALIVE.defaultValue();
  private final Map<String, String> embeddedConfig = new TreeMap<>();

  ShoalSourceBuilder() {}

  /** {@code endpoint}: {@code grpc://host:port}, {@code grpc+tls://host:port}, or {@code embedded:/path}. */
  public ShoalSourceBuilder<T> setEndpoint(String endpoint) {
    this.endpoint = endpoint;
    return this;
  }

  /** {@code table}: the table to read. */
  public ShoalSourceBuilder<T> setTable(String table) {
    this.table = table;
    return this;
  }

  /** {@code token}: bearer token; null for none. */
  public ShoalSourceBuilder<T> setToken(String token) {
    this.token = token;
    return this;
  }

  /** How a record's JSON bytes become {@code T} (e.g. {@code SimpleStringSchema}). */
  public ShoalSourceBuilder<T> setDeserializer(DeserializationSchema<T> deserializer) {
    this.deserializer = deserializer;
    return this;
  }

  /** {@code scan.filter}: only records matching this filter (shoal's filter language); null for all. */
  public ShoalSourceBuilder<T> setFilter(String filter) {
    this.filter = filter;
    return this;
  }

  /** {@code scan.startup.mode} = earliest (the default). */
  public ShoalSourceBuilder<T> startFromEarliest() {
    this.startup = ShoalSourceSettings.Startup.EARLIEST;
    return this;
  }

  /** {@code scan.startup.mode} = latest: only records that land after the job started. */
  public ShoalSourceBuilder<T> startFromLatest() {
    this.startup = ShoalSourceSettings.Startup.LATEST;
    return this;
  }

  /** {@code scan.startup.mode} = address, {@code scan.startup.address} = {@code address} (bytes). */
  public ShoalSourceBuilder<T> startFromAddress(long address) {
    this.startup = ShoalSourceSettings.Startup.ADDRESS;
    this.startAddress = address;
    return this;
  }

  /** {@code scan.bounded}: true reads up to where the table was complete at start, then ends. */
  public ShoalSourceBuilder<T> setBounded(boolean bounded) {
    this.bounded = bounded;
    return this;
  }

  /** {@code scan.poll-interval}: the pause of a caught-up follower. */
  public ShoalSourceBuilder<T> setPollInterval(Duration pollInterval) {
    this.pollInterval = pollInterval;
    return this;
  }

  /** {@code scan.split-size}: bytes of log per split and per request. */
  public ShoalSourceBuilder<T> setSplitBytes(long splitBytes) {
    this.splitBytes = splitBytes;
    return this;
  }

  /** {@code scan.fail-on-data-loss}. */
  public ShoalSourceBuilder<T> setFailOnDataLoss(boolean failOnDataLoss) {
    this.failOnDataLoss = failOnDataLoss;
    return this;
  }

  /** {@code scan.durable-only}: read only durable records (nothing emitted is lost by a daemon crash). */
  public ShoalSourceBuilder<T> setDurableOnly(boolean durableOnly) {
    this.durableOnly = durableOnly;
    return this;
  }

  /** {@code scan.request-timeout}: deadline of one Flight call. */
  public ShoalSourceBuilder<T> setRequestTimeout(Duration requestTimeout) {
    this.requestTimeout = requestTimeout;
    return this;
  }

  /** {@code embedded.keep-alive} ({@code embedded:} endpoints only). */
  public ShoalSourceBuilder<T> setEmbeddedKeepAlive(Duration keepAlive) {
    this.embeddedKeepAlive = keepAlive;
    return this;
  }

  /** {@code embedded.config.KEY} ({@code embedded:} endpoints only). */
  public ShoalSourceBuilder<T> setEmbeddedConfig(String key, String value) {
    this.embeddedConfig.put(key, value);
    return this;
  }

  /**
   * The source.
   *
   * @throws IllegalArgumentException naming the option that is missing or out of range
   */
  public ShoalSource<T> build() {
    require(deserializer != null, "a deserializer is required (setDeserializer; e.g. SimpleStringSchema for JSON text)");
    return new ShoalSource<>(settings(), deserializer);
  }

  /**
   * Checks every option but the deserializer (the SQL source's comes from its format later).
   *
   * @throws IllegalArgumentException naming the option that is missing or out of range
   */
  public void validate() {
    settings();
  }

  /**
   * The lookup join function over the same table, options and deserializer ({@code T} must be
   * {@code RowData}): for each key, the latest record with that key.
   *
   * @param keyPaths the key columns as quoted paths of the filter language ({@code "id"})
   * @param keyTypes their types, in the order of the lookup's key row
   * @throws IllegalArgumentException on a missing option or a key type without a literal
   */
  @SuppressWarnings("unchecked")
  public ShoalLookupFunction buildLookupFunction(List<String> keyPaths, List<org.apache.flink.table.types.logical.LogicalType> keyTypes) {
    require(deserializer != null, "a deserializer is required");
    return new ShoalLookupFunction(settings(), keyPaths, keyTypes,
        (DeserializationSchema<org.apache.flink.table.data.RowData>) deserializer);
  }

  private ShoalSourceSettings settings() {
    require(endpoint != null && !endpoint.isBlank(), "'endpoint' is required");
    ShoalEndpoint.validate(endpoint);
    require(table != null && !table.isBlank(), "'table' is required");
    require(startup != ShoalSourceSettings.Startup.ADDRESS || startAddress >= 0,
        "'scan.startup.mode' = 'address' needs 'scan.startup.address' >= 0");
    require(pollInterval != null && !pollInterval.isNegative() && !pollInterval.isZero(), "'scan.poll-interval' must be > 0");
    require(splitBytes >= 4096, "'scan.split-size' must be at least 4 kb, got " + splitBytes + " bytes");
    require(requestTimeout != null && !requestTimeout.isNegative() && !requestTimeout.isZero(), "'scan.request-timeout' must be > 0");
    ShoalClientOptions client = new ShoalClientOptions(token, requestTimeout, embeddedConfig, embeddedKeepAlive, false, null, false);
    return new ShoalSourceSettings(endpoint, table, client, filter, startup, Math.max(startAddress, 0), bounded,
        pollInterval, splitBytes, failOnDataLoss, durableOnly);
  }

  private static void require(boolean ok, String message) {
    if (!ok) {
      throw new IllegalArgumentException("shoal source: " + message);
    }
  }
}
