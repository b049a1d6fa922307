package dev.shoal.spark;

import java.io.Serializable;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalClientOptions;
import dev.shoal.client.ShoalEndpoint;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The options of the shoal source, sink and catalog, parsed once. Every option is documented
 * here with its default and how it interacts with the others; the same keys work in
 * {@code spark.read.format("shoal").option(...)}, {@code df.write.format("shoal").option(...)} and
 * as catalog properties ({@code spark.sql.catalog.shoal.endpoint = ...}).
 */
public final class ShoalOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /**
   * {@code endpoint} (required): the daemon's Flight location, {@code grpc://host:port} (or
   * {@code grpc+tls://host:port}), or {@code embedded:/path/to/data} for the engine inside this
   * JVM on that data directory (embedded mode: one JVM only — Spark local mode or a single
   * executor —, and not a directory a daemon holds). A comma-separated list names the shards of a
   * sharded table: reads are the union of every shard's endpoints, writes spread Spark's write
   * tasks over the shards round-robin.
   */
  public static final String ENDPOINT = "endpoint";
  /** The scheme of an embedded endpoint: {@code embedded:/path/to/data}. */
  public static final String EMBEDDED_SCHEME = "embedded";
  /**
   * {@code embedded.config.KEY} (default: the engine's defaults; embedded endpoints only): the
   * daemon's configuration key {@code KEY} (docs/configuration.md: {@code memory_budget_bytes},
   * {@code durability}, {@code group_commit_ms}, {@code in_memory}, {@code endpoints_per_query},
   * {@code batch_rows}, {@code checkpoint_interval_secs}) for the engine this JVM opens on the
   * directory. It applies when the engine is opened; a directory the JVM has open already must be
   * opened with the same keys or none. Ignored for {@code grpc://} endpoints.
   */
  public static final String EMBEDDED_CONFIG_PREFIX = "embedded.config.";
  /**
   * {@code embedded.keep-alive-ms} (default: 60000; embedded endpoints only): how long the engine
   * stays open after the last reader, writer or plan of the connector released it, so that the
   * queries of a session do not recover and checkpoint it each time. While it is open, the data
   * directory stays locked against other processes. {@code 0}: the engine closes (flushes,
   * checkpoints, unlocks) as soon as the last one is done.
   */
  public static final String EMBEDDED_KEEP_ALIVE = "embedded.keep-alive-ms";
  static final long DEFAULT_EMBEDDED_KEEP_ALIVE_MS = 60_000;
  /** {@code table} (required for the data source, ignored by the catalog): the shoal table name. */
  public static final String TABLE = "table";
  /**
   * {@code token} (default: none): bearer token sent as {@code authorization: Bearer TOKEN} on
   * every call, for daemons started with {@code --auth-token}.
   */
  public static final String TOKEN = "token";
  /**
   * {@code scan.max-endpoints} (default: the daemon's {@code endpoints_per_query}): the most
   * endpoints (= Spark input partitions) each shard splits a query's log range into. Lower it
   * for many small queries, raise it for more read parallelism.
   */
  public static final String MAX_ENDPOINTS = "scan.max-endpoints";
  /**
   * {@code scan.aggregate-pushdown} (default: {@code true}): push {@code COUNT(*)},
   * {@code COUNT(col)}, {@code MIN}, {@code MAX} without {@code GROUP BY} to the daemon when it
   * supports them (probed once per query). Only applies when every filter was pushed (Spark's
   * rule).
   */
  public static final String AGGREGATE_PUSHDOWN = "scan.aggregate-pushdown";
  /**
   * {@code write.batch-rows} (default: 4096): rows per {@code DoPut} batch; each batch is
   * acknowledged by the daemon before the next is sent.
   */
  public static final String WRITE_BATCH_ROWS = "write.batch-rows";
  /**
   * {@code write.create-table} (default: {@code true}): an append to a table that does not exist
   * creates it ({@code create_table} with {@code if_not_exists}); with {@code false} the write
   * fails naming the table.
   */
  public static final String WRITE_CREATE_TABLE = "write.create-table";
  /**
   * {@code write.route-by-key} (default: {@code true}): a write to a table sharded by key over a
   * cluster of daemons sends each record straight to the node holding its shard (the shard map of
   * the {@code cluster} action); {@code false} sends everything to the task's {@code endpoint},
   * which forwards the records of shards it does not hold (slower; for networks where executors
   * reach only that node).
   */
  public static final String WRITE_ROUTE_BY_KEY = "write.route-by-key";

  private final List<URI> endpoints;
  private final String table;
  private final String token;
  private final Integer maxEndpoints;
  private final boolean aggregatePushdown;
  private final int writeBatchRows;
  private final boolean writeCreateTable;
  private final boolean writeRouteByKey;
  private final Map<String, String> embeddedConfig;
  private final long embeddedKeepAliveMillis;
  /** The JVM that parsed the options (Spark's driver); embedded endpoints work only there. */
  private final String originJvm;

  private ShoalOptions(List<URI> endpoints, String table, String token, Integer maxEndpoints,
      boolean aggregatePushdown, int writeBatchRows, boolean writeCreateTable, boolean writeRouteByKey,
      Map<String, String> embeddedConfig, long embeddedKeepAliveMillis, String originJvm) {
    this.endpoints = endpoints;
    this.table = table;
    this.token = token;
    this.maxEndpoints = maxEndpoints;
    this.aggregatePushdown = aggregatePushdown;
    this.writeBatchRows = writeBatchRows;
    this.writeCreateTable = writeCreateTable;
    this.writeRouteByKey = writeRouteByKey;
    this.embeddedConfig = embeddedConfig;
    this.embeddedKeepAliveMillis = embeddedKeepAliveMillis;
    this.originJvm = originJvm;
  }

  /** Options of a data source read or write: {@code endpoint} and {@code table} are required. */
  public static ShoalOptions forTable(Map<String, String> options) {
    ShoalOptions parsed = parse(options, null);
    if (parsed.table == null || parsed.table.isEmpty()) {
      throw new IllegalArgumentException(
          "shoal: option 'table' is required (the name of the shoal table to read or write), e.g. .option(\"table\", \"events\")");
    }
    return parsed;
  }

  /** Options of the catalog: {@code endpoint} is required; the table comes from the identifier. */
  public static ShoalOptions forCatalog(Map<String, String> options) {
    return parse(options, null);
  }

  /** These options with another table (the catalog's tables). */
  public ShoalOptions withTable(String newTable) {
    return new ShoalOptions(endpoints, newTable, token, maxEndpoints, aggregatePushdown, writeBatchRows, writeCreateTable,
        writeRouteByKey, embeddedConfig, embeddedKeepAliveMillis, originJvm);
  }

  /** These options as if parsed in JVM {@code jvm} (tests of the one-JVM check). */
  ShoalOptions withOriginJvm(String jvm) {
    return new ShoalOptions(endpoints, table, token, maxEndpoints, aggregatePushdown, writeBatchRows, writeCreateTable,
        writeRouteByKey, embeddedConfig, embeddedKeepAliveMillis, jvm);
  }

  private static ShoalOptions parse(Map<String, String> raw, String defaultTable) {
    CaseInsensitiveStringMap options = raw instanceof CaseInsensitiveStringMap
        ? (CaseInsensitiveStringMap) raw : new CaseInsensitiveStringMap(raw);
    String endpoint = options.get(ENDPOINT);
    if (endpoint == null || endpoint.isBlank()) {
      throw new IllegalArgumentException(
          "shoal: option 'endpoint' is required: the daemon's Flight location, e.g. grpc://127.0.0.1:50051 (comma-separated for shards),"
              + " or embedded:/path/to/data for the engine inside this JVM");
    }
    List<URI> uris = new ArrayList<>();
    for (String part : endpoint.split(",")) {
      String trimmed = part.trim();
      if (trimmed.isEmpty()) {
        continue;
      }
      if (trimmed.regionMatches(true, 0, EMBEDDED_SCHEME + ":", 0, EMBEDDED_SCHEME.length() + 1)) {
        uris.add(embeddedEndpoint(trimmed));
        continue;
      }
      URI uri;
      try {
        uri = URI.create(trimmed);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("shoal: option 'endpoint' has an invalid location '" + trimmed + "': " + e.getMessage(), e);
      }
      if (uri.getScheme() == null || uri.getHost() == null || uri.getPort() < 0) {
        throw new IllegalArgumentException("shoal: option 'endpoint' must be grpc://host:port, grpc+tls://host:port"
            + " or embedded:/path/to/data, got '" + trimmed + "'");
      }
      uris.add(uri);
    }
    if (uris.isEmpty()) {
      throw new IllegalArgumentException("shoal: option 'endpoint' names no location: '" + endpoint + "'");
    }
    String table = options.getOrDefault(TABLE, defaultTable);
    String token = options.get(TOKEN);
    Integer maxEndpoints = null;
    if (options.containsKey(MAX_ENDPOINTS)) {
      maxEndpoints = positiveInt(options, MAX_ENDPOINTS);
    }
    boolean aggregates = options.getBoolean(AGGREGATE_PUSHDOWN, true);
    int batchRows = options.containsKey(WRITE_BATCH_ROWS) ? positiveInt(options, WRITE_BATCH_ROWS) : 4096;
    boolean create = options.getBoolean(WRITE_CREATE_TABLE, true);
    boolean routeByKey = options.getBoolean(WRITE_ROUTE_BY_KEY, true);
    Map<String, String> embeddedConfig = new TreeMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      if (key.startsWith(EMBEDDED_CONFIG_PREFIX) && key.length() > EMBEDDED_CONFIG_PREFIX.length()) {
        embeddedConfig.put(key.substring(EMBEDDED_CONFIG_PREFIX.length()), e.getValue());
      }
    }
    long keepAlive = DEFAULT_EMBEDDED_KEEP_ALIVE_MS;
    if (options.containsKey(EMBEDDED_KEEP_ALIVE)) {
      String value = options.get(EMBEDDED_KEEP_ALIVE);
      try {
        keepAlive = Long.parseLong(value.trim());
      } catch (NumberFormatException e) {
        keepAlive = -1;
      }
      if (keepAlive < 0) {
        throw new IllegalArgumentException("shoal: option '" + EMBEDDED_KEEP_ALIVE + "' must be a number of milliseconds >= 0, got '"
            + value + "'");
      }
    }
    return new ShoalOptions(Collections.unmodifiableList(uris), table, token, maxEndpoints, aggregates, batchRows, create, routeByKey,
        Collections.unmodifiableMap(embeddedConfig), keepAlive, currentJvm());
  }

  /**
   * {@code embedded:/path/to/data} (also {@code embedded:///path} and a relative
   * {@code embedded:path}, resolved against the JVM's working directory) as a URI whose
   * scheme-specific part is the path.
   */
  private static URI embeddedEndpoint(String text) {
    // A host, no directory or an invalid path: an IllegalArgumentException naming option 'endpoint'.
    ShoalEndpoint.validate(text);
    String path = text.substring(EMBEDDED_SCHEME.length() + 1);
    if (path.startsWith("///")) {
      // embedded:///path, and any more slashes (embedded:////path), name /path as the client
      // reads them (ShoalEndpoint.embeddedPath): a URI's "//x" would be an authority.
      path = "/" + path.replaceFirst("^/+", "");
    }
    try {
      return new URI(EMBEDDED_SCHEME, path, null);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("shoal: option 'endpoint' has an invalid data directory '" + path + "': " + e.getMessage(), e);
    }
  }


  /**
   * An identifier of this JVM, the same for every class loader in it (Spark may load the
   * connector in more than one): a random id kept as a system property.
   */
  static String currentJvm() {
    return (String) System.getProperties().computeIfAbsent("shoal.spark.jvm-id", k -> java.util.UUID.randomUUID().toString());
  }

  /** The JVM that parsed these options: on Spark's driver, where the query was planned. */
  String originJvm() {
    return originJvm;
  }

  /**
   * The URI of an endpoint as a client names it ({@code ShoalClient#endpoint()}): an embedded
   * one's path as written (it may hold characters a URI quotes), a daemon's as it is.
   */
  static URI endpointUri(String text) {
    if (ShoalEndpoint.isEmbedded(text)) {
      return embeddedEndpoint(text);
    }
    return URI.create(text);
  }


  private static int positiveInt(CaseInsensitiveStringMap options, String key) {
    long value = positiveLong(options, key);
    if (value > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("shoal: option '" + key + "' must be at most " + Integer.MAX_VALUE + ", got " + value);
    }
    return (int) value;
  }

  /** A positive integer option, or -1 when it is absent. */
  static long positiveLong(CaseInsensitiveStringMap options, String key) {
    String value = options.get(key);
    if (value == null) {
      return -1;
    }
    try {
      long parsed = Long.parseLong(value.trim());
      if (parsed > 0) {
        return parsed;
      }
    } catch (NumberFormatException ignored) {
      // reported below
    }
    throw new IllegalArgumentException("shoal: option '" + key + "' must be a positive integer, got '" + value + "'");
  }

  /** The shards' Flight locations, in the order given. */
  public List<URI> endpoints() {
    return endpoints;
  }

  /** The {@code endpoint} option as given (for error messages). */
  public String endpointText() {
    return String.join(",", endpoints.stream().map(URI::toString).toArray(String[]::new));
  }

  public String table() {
    return table;
  }

  public String token() {
    return token;
  }

  public Integer maxEndpoints() {
    return maxEndpoints;
  }

  public boolean aggregatePushdown() {
    return aggregatePushdown;
  }

  public int writeBatchRows() {
    return writeBatchRows;
  }

  public boolean writeCreateTable() {
    return writeCreateTable;
  }

  /** {@link #WRITE_ROUTE_BY_KEY}. */
  public boolean writeRouteByKey() {
    return writeRouteByKey;
  }

  /** The {@code embedded.config.*} options, by configuration key (without the prefix). */
  public Map<String, String> embeddedConfig() {
    return embeddedConfig;
  }

  public long embeddedKeepAliveMillis() {
    return embeddedKeepAliveMillis;
  }

  /**
   * A client of {@code endpoint} (an entry of option {@code endpoint}, or a shard's location)
   * with these options' connection settings (token; embedded configuration and keep-alive), whose
   * failures are {@link ShoalException}s naming the table and the option to fix ({@link
   * ShoalErrors#translate}).
   *
   * @throws ShoalException for an embedded endpoint in a JVM other than the one that planned the
   *     query (a Spark cluster's executor): embedded mode works in local mode only
   */
  ShoalClient connect(URI endpoint) {
    if (ShoalEndpoint.isEmbedded(endpoint) && !currentJvm().equals(originJvm)) {
      throw new ShoalException("shoal table '" + table + "': option 'endpoint' " + endpoint + " runs the engine inside"
          + " the JVM of Spark's driver, but this task runs in another JVM (a Spark cluster's executor). Embedded mode works"
          + " in Spark local mode only (driver and tasks in one JVM: --master local[N]); on a cluster, serve the directory"
          + " with `shoal serve --data-dir` and use its grpc://host:port endpoint.");
    }
    return ShoalClient.open(ShoalEndpoint.text(endpoint), new ShoalClientOptions(token, null, embeddedConfig,
        embeddedKeepAliveMillis, ShoalClientOptions.DEFAULT_IDLE_CLOSE_MS, ShoalErrors::translate));
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof ShoalOptions)) {
      return false;
    }
    ShoalOptions other = (ShoalOptions) o;
    return endpoints.equals(other.endpoints) && Objects.equals(table, other.table) && Objects.equals(token, other.token)
        && Objects.equals(maxEndpoints, other.maxEndpoints) && aggregatePushdown == other.aggregatePushdown
        && writeBatchRows == other.writeBatchRows && writeCreateTable == other.writeCreateTable
        && writeRouteByKey == other.writeRouteByKey
        && embeddedConfig.equals(other.embeddedConfig) && embeddedKeepAliveMillis == other.embeddedKeepAliveMillis;
  }

  @Override
  public int hashCode() {
    return Objects.hash(endpoints, table, token, maxEndpoints);
  }
}
