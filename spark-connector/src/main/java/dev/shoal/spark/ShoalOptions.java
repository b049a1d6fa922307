package dev.shoal.spark;

import java.io.Serializable;
import java.net.URI;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;

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
   * {@code grpc+tls://host:port}). A comma-separated list names the shards of a sharded table:
   * reads are the union of every shard's endpoints, writes spread Spark's write tasks over the
   * shards round-robin.
   */
  public static final String ENDPOINT = "endpoint";
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

  private final List<URI> endpoints;
  private final String table;
  private final String token;
  private final Integer maxEndpoints;
  private final boolean aggregatePushdown;
  private final int writeBatchRows;
  private final boolean writeCreateTable;

  private ShoalOptions(List<URI> endpoints, String table, String token, Integer maxEndpoints,
      boolean aggregatePushdown, int writeBatchRows, boolean writeCreateTable) {
    this.endpoints = endpoints;
    this.table = table;
    this.token = token;
    this.maxEndpoints = maxEndpoints;
    this.aggregatePushdown = aggregatePushdown;
    this.writeBatchRows = writeBatchRows;
    this.writeCreateTable = writeCreateTable;
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
    return new ShoalOptions(endpoints, newTable, token, maxEndpoints, aggregatePushdown, writeBatchRows, writeCreateTable);
  }

  private static ShoalOptions parse(Map<String, String> raw, String defaultTable) {
    CaseInsensitiveStringMap options = raw instanceof CaseInsensitiveStringMap
        ? (CaseInsensitiveStringMap) raw : new CaseInsensitiveStringMap(raw);
    String endpoint = options.get(ENDPOINT);
    if (endpoint == null || endpoint.isBlank()) {
      throw new IllegalArgumentException(
          "shoal: option 'endpoint' is required: the daemon's Flight location, e.g. grpc://127.0.0.1:50051 (comma-separated for shards)");
    }
    List<URI> uris = new ArrayList<>();
    for (String part : endpoint.split(",")) {
      String trimmed = part.trim();
      if (trimmed.isEmpty()) {
        continue;
      }
      URI uri;
      try {
        uri = URI.create(trimmed);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("shoal: option 'endpoint' has an invalid location '" + trimmed + "': " + e.getMessage(), e);
      }
      if (uri.getScheme() == null || uri.getHost() == null || uri.getPort() < 0) {
        throw new IllegalArgumentException("shoal: option 'endpoint' must be grpc://host:port or grpc+tls://host:port, got '" + trimmed + "'");
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
    return new ShoalOptions(Collections.unmodifiableList(uris), table, token, maxEndpoints, aggregates, batchRows, create);
  }

  private static int positiveInt(CaseInsensitiveStringMap options, String key) {
    String value = options.get(key);
    try {
      int parsed = Integer.parseInt(value.trim());
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

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof ShoalOptions)) {
      return false;
    }
    ShoalOptions other = (ShoalOptions) o;
    return endpoints.equals(other.endpoints) && Objects.equals(table, other.table) && Objects.equals(token, other.token)
        && Objects.equals(maxEndpoints, other.maxEndpoints) && aggregatePushdown == other.aggregatePushdown
        && writeBatchRows == other.writeBatchRows && writeCreateTable == other.writeCreateTable;
  }

  @Override
  public int hashCode() {
    return Objects.hash(endpoints, table, token, maxEndpoints);
  }
}
