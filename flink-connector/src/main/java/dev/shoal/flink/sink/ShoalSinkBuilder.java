package dev.shoal.flink.sink;

import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.table.ShoalConnectorOptions;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.base.sink.writer.ElementConverter;

/**
 * Builds a {@link ShoalSink}. Endpoint and table are required; everything else defaults to the
 * value of the matching {@link ShoalConnectorOptions} option (named in each setter). Elements of
 * type {@code String} need no serialization schema (each is one JSON document); other types need
 * {@link #setSerializationSchema}.
 */
public class ShoalSinkBuilder<InputT> {

  /** What a transactional id prefix may consist of (the daemon's transaction id characters). */
  static final java.util.regex.Pattern PREFIX = java.util.regex.Pattern.compile("[A-Za-z0-9_.:-]{1,120}");

  private String endpoint;
  private String table;
  private String token;
  private SerializationSchema<InputT> serializationSchema;
  private DeliveryGuarantee deliveryGuarantee = ShoalConnectorOptions.DELIVERY_GUARANTEE.defaultValue();
  private int maxBatchSize = ShoalConnectorOptions.BUFFER_FLUSH_MAX_ROWS.defaultValue();
  private long maxBatchSizeInBytes = ShoalConnectorOptions.BUFFER_FLUSH_MAX_BYTES.defaultValue().getBytes();
  private Duration maxTimeInBuffer = ShoalConnectorOptions.BUFFER_FLUSH_INTERVAL.defaultValue();
  private int maxInFlightRequests = ShoalConnectorOptions.MAX_IN_FLIGHT_REQUESTS.defaultValue();
  private int maxBufferedRequests = ShoalConnectorOptions.MAX_BUFFERED_REQUESTS.defaultValue();
  private int maxRetries = ShoalConnectorOptions.MAX_RETRIES.defaultValue();
  private Duration initialBackoff = ShoalConnectorOptions.RETRY_INITIAL_BACKOFF.defaultValue();
  private Duration maxBackoff = ShoalConnectorOptions.RETRY_MAX_BACKOFF.defaultValue();
  private Duration requestTimeout = ShoalConnectorOptions.REQUEST_TIMEOUT.defaultValue();
  private String transactionalIdPrefix;
  private Duration embeddedKeepAlive = ShoalConnectorOptions.EMBEDDED_KEEP_ALIVE.defaultValue();
  private final Map<String, String> embeddedConfig = new TreeMap<>();
  private boolean createTable = ShoalConnectorOptions.CREATE_TABLE.defaultValue();
  private boolean routeByKey = ShoalConnectorOptions.ROUTE_BY_KEY.defaultValue();
  private ShoalOperationExtractor<InputT> operationExtractor;
  private java.util.List<String> primaryKey = java.util.List.of();

  ShoalSinkBuilder() {}

  /**
   * {@code endpoint}: a daemon's {@code grpc://host:port}, {@code grpc+tls://host:port} or {@code
   * host:port}, or {@code embedded:/path/to/data} for the engine inside the writers' JVM (embedded
   * mode: every writer and committer of the job in one JVM).
   */
  public ShoalSinkBuilder<InputT> setEndpoint(String endpoint) {
    this.endpoint = endpoint;
    return this;
  }

  /** {@code table}: an existing shoal table. */
  public ShoalSinkBuilder<InputT> setTable(String table) {
    this.table = table;
    return this;
  }

  /** {@code token}: bearer token; null for none. */
  public ShoalSinkBuilder<InputT> setToken(String token) {
    this.token = token;
    return this;
  }

  /** How elements become JSON documents; not needed for {@code String} elements. */
  public ShoalSinkBuilder<InputT> setSerializationSchema(SerializationSchema<InputT> serializationSchema) {
    this.serializationSchema = serializationSchema;
    return this;
  }

  /** {@code sink.delivery-guarantee}; {@code EXACTLY_ONCE} builds a {@link ShoalExactlyOnceSink}. */
  public ShoalSinkBuilder<InputT> setDeliveryGuarantee(DeliveryGuarantee deliveryGuarantee) {
    this.deliveryGuarantee = deliveryGuarantee;
    return this;
  }

  /** {@code sink.buffer-flush.max-rows}. */
  public ShoalSinkBuilder<InputT> setMaxBatchSize(int maxBatchSize) {
    this.maxBatchSize = maxBatchSize;
    return this;
  }

  /** {@code sink.buffer-flush.max-bytes}; also the largest record accepted. */
  public ShoalSinkBuilder<InputT> setMaxBatchSizeInBytes(long maxBatchSizeInBytes) {
    this.maxBatchSizeInBytes = maxBatchSizeInBytes;
    return this;
  }

  /** {@code sink.buffer-flush.interval}. */
  public ShoalSinkBuilder<InputT> setMaxTimeInBuffer(Duration maxTimeInBuffer) {
    this.maxTimeInBuffer = maxTimeInBuffer;
    return this;
  }

  /** {@code sink.requests.max-in-flight}. */
  public ShoalSinkBuilder<InputT> setMaxInFlightRequests(int maxInFlightRequests) {
    this.maxInFlightRequests = maxInFlightRequests;
    return this;
  }

  /** {@code sink.requests.max-buffered}. */
  public ShoalSinkBuilder<InputT> setMaxBufferedRequests(int maxBufferedRequests) {
    this.maxBufferedRequests = maxBufferedRequests;
    return this;
  }

  /** {@code sink.max-retries}, {@code sink.retry.initial-backoff}, {@code sink.retry.max-backoff}. */
  public ShoalSinkBuilder<InputT> setRetries(int maxRetries, Duration initialBackoff, Duration maxBackoff) {
    this.maxRetries = maxRetries;
    this.initialBackoff = initialBackoff;
    this.maxBackoff = maxBackoff;
    return this;
  }

  /** {@code sink.request-timeout}. */
  public ShoalSinkBuilder<InputT> setRequestTimeout(Duration requestTimeout) {
    this.requestTimeout = requestTimeout;
    return this;
  }

  /**
   * {@code sink.transactional-id-prefix} (exactly-once): the shoal transactions of this sink are
   * named {@code <prefix>-<subtask>-<checkpoint>-<epoch>}. Null (default): {@code flink-<job
   * id>-<hash of the sink's task name and table>}. Set it, unique per sink and stable across
   * submissions of the job, to have transactions of an earlier submission aborted on restore.
   */
  public ShoalSinkBuilder<InputT> setTransactionalIdPrefix(String transactionalIdPrefix) {
    this.transactionalIdPrefix = transactionalIdPrefix;
    return this;
  }

  /**
   * {@code embedded.keep-alive} ({@code embedded:} endpoints only): how long the engine stays open
   * after the last writer or committer of the JVM closed; {@link Duration#ZERO} closes it with the
   * last one.
   */
  public ShoalSinkBuilder<InputT> setEmbeddedKeepAlive(Duration embeddedKeepAlive) {
    this.embeddedKeepAlive = embeddedKeepAlive;
    return this;
  }

  /**
   * {@code embedded.config.KEY} ({@code embedded:} endpoints only): a configuration key of the
   * engine this JVM opens (the daemon's keys, docs/configuration.md, e.g. {@code durability},
   * {@code memory_budget_bytes}); {@code true}/{@code false} and integers are typed, the rest is
   * text.
   */
  public ShoalSinkBuilder<InputT> setEmbeddedConfig(String key, String value) {
    this.embeddedConfig.put(key, value);
    return this;
  }

  /** {@link #setEmbeddedConfig(String, String)} for each entry. */
  public ShoalSinkBuilder<InputT> setEmbeddedConfig(Map<String, String> config) {
    config.forEach(this::setEmbeddedConfig);
    return this;
  }

  /**
   * {@code sink.create-table}: whether the writers create the table when it does not exist
   * ({@code create_table} with {@code if_not_exists}, the daemon's default settings). Default
   * false: a missing table fails the job, naming it.
   */
  public ShoalSinkBuilder<InputT> setCreateTable(boolean createTable) {
    this.createTable = createTable;
    return this;
  }

  /**
   * {@code sink.route-by-key}: whether the writers of a table sharded over a cluster send each
   * record to the node holding its shard (from the {@code cluster} action's shard map). Default
   * true; false sends everything to the {@code endpoint} node, which forwards what it does not hold
   * (slower; for networks where the Flink job reaches only that node).
   */
  public ShoalSinkBuilder<InputT> setRouteByKey(boolean routeByKey) {
    this.routeByKey = routeByKey;
    return this;
  }

  /**
   * What each element does to its key in a keyed table ({@link ShoalOperation}: upsert, delete or
   * merge; null from the extractor skips the element). Default: none (every element is written as
   * is: an append, or an upsert in a keyed table). With an extractor, each writer sends one batch
   * at a time ({@code sink.requests.max-in-flight} is taken as 1): the versions of a key must
   * reach shoal in the order the job produced them.
   */
  public ShoalSinkBuilder<InputT> setOperationExtractor(ShoalOperationExtractor<InputT> operationExtractor) {
    this.operationExtractor = operationExtractor;
    return this;
  }

  /**
   * The primary key (dotted paths) of the table {@link #setCreateTable} creates: a keyed table.
   * Default: none (an append-only table). An existing table keeps its own key.
   */
  public ShoalSinkBuilder<InputT> setPrimaryKey(java.util.List<String> primaryKey) {
    this.primaryKey = primaryKey == null ? java.util.List.of() : java.util.List.copyOf(primaryKey);
    return this;
  }

  /**
   * @throws IllegalArgumentException on a missing endpoint or table, a malformed prefix, or limits
   *     that contradict each other (the message names the option)
   */
  public ShoalSink<InputT> build() {
    require(endpoint != null && !endpoint.isBlank(), "shoal sink: 'endpoint' is required");
    require(table != null && !table.isBlank(), "shoal sink: 'table' is required");
    ShoalEndpoint.validate(endpoint); // fails early on a malformed endpoint
    require(deliveryGuarantee != null, "shoal sink: 'sink.delivery-guarantee' must not be null");
    require(
        transactionalIdPrefix == null || PREFIX.matcher(transactionalIdPrefix).matches(),
        "shoal sink: 'sink.transactional-id-prefix' must be 1-120 characters of A-Z a-z 0-9 _ - . :, was '"
            + transactionalIdPrefix + "'");
    require(maxBatchSize > 0, "shoal sink: 'sink.buffer-flush.max-rows' must be > 0, was " + maxBatchSize);
    require(maxBatchSizeInBytes > 0, "shoal sink: 'sink.buffer-flush.max-bytes' must be > 0, was " + maxBatchSizeInBytes);
    require(
        !maxTimeInBuffer.isNegative() && !maxTimeInBuffer.isZero(),
        "shoal sink: 'sink.buffer-flush.interval' must be > 0, was " + maxTimeInBuffer);
    require(maxInFlightRequests > 0, "shoal sink: 'sink.requests.max-in-flight' must be > 0, was " + maxInFlightRequests);
    require(
        maxBufferedRequests > maxBatchSize,
        "shoal sink: 'sink.requests.max-buffered' (" + maxBufferedRequests
            + ") must be greater than 'sink.buffer-flush.max-rows' (" + maxBatchSize + ")");
    require(
        !requestTimeout.isNegative() && !requestTimeout.isZero(),
        "shoal sink: 'sink.request-timeout' must be > 0, was " + requestTimeout);
    require(
        embeddedKeepAlive != null && !embeddedKeepAlive.isNegative(),
        "shoal sink: 'embedded.keep-alive' must be >= 0, was " + embeddedKeepAlive);
    for (Map.Entry<String, String> e : embeddedConfig.entrySet()) {
      require(e.getKey() != null && !e.getKey().isBlank() && e.getValue() != null,
          "shoal sink: '" + ShoalConnectorOptions.EMBEDDED_CONFIG_PREFIX + e.getKey() + "' needs a key and a value");
    }
    RetryPolicy retryPolicy = new RetryPolicy(maxRetries, initialBackoff, maxBackoff);
    // Batches in flight at once could reach shoal in another order: not for a key's versions.
    int maxInFlightRequests = operationExtractor == null ? this.maxInFlightRequests : 1;
    ShoalClientOptions clientOptions =
        new ShoalClientOptions(token, requestTimeout, embeddedConfig, embeddedKeepAlive, createTable, primaryKey, routeByKey);
    if (deliveryGuarantee == DeliveryGuarantee.EXACTLY_ONCE) {
      return new ShoalExactlyOnceSink<>(
          converter(),
          maxBatchSize,
          maxInFlightRequests,
          maxBufferedRequests,
          maxBatchSizeInBytes,
          maxTimeInBuffer.toMillis(),
          endpoint,
          table,
          clientOptions,
          retryPolicy,
          transactionalIdPrefix);
    }
    return new ShoalSink<>(
        converter(),
        maxBatchSize,
        maxInFlightRequests,
        maxBufferedRequests,
        maxBatchSizeInBytes,
        maxTimeInBuffer.toMillis(),
        endpoint,
        table,
        clientOptions,
        deliveryGuarantee,
        retryPolicy,
        transactionalIdPrefix);
  }

  private ElementConverter<InputT, byte[]> converter() {
    ElementConverter<InputT, byte[]> documents = serializationSchema != null
        ? new SerializationSchemaElementConverter<>(serializationSchema)
        : new JsonStringElementConverter<>();
    return operationExtractor == null ? documents : new OperationElementConverter<>(documents, operationExtractor);
  }

  private static void require(boolean condition, String message) {
    if (!condition) {
      throw new IllegalArgumentException(message);
    }
  }
}
