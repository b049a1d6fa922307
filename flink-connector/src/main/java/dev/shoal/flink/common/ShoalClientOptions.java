package dev.shoal.flink.common;

import java.io.Serializable;
import java.time.Duration;
import java.util.Map;
import dev.shoal.flink.table.ShoalConnectorOptions;

/**
 * How a {@link ShoalTableClient} talks to its endpoint, besides the endpoint and the table: what the
 * sink carries to its writers and its committer.
 *
 * @param token bearer token for a daemon ({@code token}); null for none; ignored in embedded mode
 * @param requestTimeout deadline of one Flight call ({@code sink.request-timeout}); embedded calls
 *     have none
 * @param embeddedConfig the engine's configuration keys ({@code embedded.config.KEY}, values as
 *     text), applied when this JVM opens the engine; embedded mode only
 * @param embeddedKeepAlive how long the engine stays open after the last writer or committer of
 *     this JVM released it ({@code embedded.keep-alive}); embedded mode only
 * @param createTable whether each writer creates the table when it does not exist
 *     ({@code sink.create-table}; {@code create_table} with {@code if_not_exists})
 * @param primaryKey the primary key a created table gets (a keyed table; the Flink SQL table's
 *     {@code PRIMARY KEY}); empty: append-only
 * @param routeByKey whether a writer of a table sharded over a cluster sends each record to its
 *     shard's node directly ({@code sink.route-by-key}; {@code sink.KeyRoutingShoalClient}); false: all
 *     through the endpoint node, which forwards them
 */
public record ShoalClientOptions(
    String token, Duration requestTimeout, Map<String, String> embeddedConfig, Duration embeddedKeepAlive,
    boolean createTable, java.util.List<String> primaryKey, boolean routeByKey)
    implements Serializable {

  public ShoalClientOptions {
    primaryKey = primaryKey == null ? java.util.List.of() : java.util.List.copyOf(primaryKey);
    // Immutable and serializable.
    embeddedConfig = embeddedConfig == null ? Map.of() : Map.copyOf(embeddedConfig);
    embeddedKeepAlive = embeddedKeepAlive == null ? ShoalConnectorOptions.EMBEDDED_KEEP_ALIVE.defaultValue() : embeddedKeepAlive;
  }

  /** A daemon's options: token and deadline; the embedded settings at their defaults. */
  public static ShoalClientOptions of(String token, Duration requestTimeout) {
    return new ShoalClientOptions(token, requestTimeout, Map.of(), null, false, null, false);
  }
}
