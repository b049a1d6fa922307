package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.embedded.EmbeddedEngines;
import dev.shoal.embedded.ShoalEmbedded;
import dev.shoal.embedded.ShoalEmbeddedException;
import java.nio.file.Path;
import java.util.List;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link ShoalClient} on the shoal engine inside this JVM ({@code embedded:/path/to/data}), through
 * {@link ShoalEmbedded}: the daemon's own code behind JNI, so the same actions, JSON bodies,
 * answers and status codes as over Flight, without a network. A batch is exported to the engine
 * through the Arrow C Data Interface (read in place, no copy, no IPC encoding).
 *
 * <p>Each client (one per writer, one per committer and table) is one handle on the directory's
 * engine, taken from shoal-embedded's {@link EmbeddedEngines} (shared with the Spark connector):
 * the handles of a directory share one engine in the JVM, which a keeper handle keeps open for
 * {@code embedded.keep-alive} after the last client closed, so that a failover (which closes every
 * writer and committer and creates new ones a moment later) does not close and recover the engine.
 * A job in embedded mode therefore needs all its writers and committers in one JVM (a MiniCluster /
 * local execution, or a single TaskManager): a second JVM on the same machine finds the directory
 * locked (and one on another machine would write into a directory of its own).
 *
 * <p>Errors are {@link ShoalEmbeddedException}s with the daemon's status code names ({@link
 * ShoalErrors} reads them); a failure to open the engine becomes a {@link ShoalSinkException}
 * naming option {@code endpoint} and what to do. {@code token} and {@code sink.request-timeout}
 * mean nothing here (no authentication, no network deadline).
 */
final class EmbeddedShoalClient implements ShoalClient {

  private static final Logger LOG = LoggerFactory.getLogger(EmbeddedShoalClient.class);

  private final String endpoint;
  private final String table;
  private final Path dataDir;
  private final ShoalEmbedded store;
  private boolean closed;

  private EmbeddedShoalClient(String endpoint, String table, Path dataDir, ShoalEmbedded store) {
    this.endpoint = endpoint;
    this.table = table;
    this.dataDir = dataDir;
    this.store = store;
  }

  /**
   * A handle on the engine of {@code endpoint}'s directory, opening the engine (and recovering its
   * tables) if this JVM has none open there.
   *
   * @throws IllegalArgumentException on a malformed endpoint
   * @throws ShoalSinkException when the engine cannot be opened
   */
  static EmbeddedShoalClient open(String endpoint, String table, ShoalClientOptions options) {
    Path dataDir = ShoalEndpoint.embeddedPath(endpoint);
    if (options.token() != null && !options.token().isEmpty()) {
      LOG.info("shoal table \"{}\" at {}: option 'token' is ignored in embedded mode (no network, no authentication)",
          table, endpoint);
    }
    ShoalEmbedded store;
    try {
      store = EmbeddedEngines.acquire(dataDir, options.embeddedConfig(), options.embeddedKeepAlive().toMillis());
    } catch (ShoalEmbeddedException e) {
      throw ShoalErrors.embeddedOpenFailed(endpoint, table, dataDir, e);
    }
    return new EmbeddedShoalClient(endpoint, table, dataDir, store);
  }

  @Override
  public String endpoint() {
    return endpoint;
  }

  @Override
  public String table() {
    return table;
  }

  /** One {@link ShoalEmbedded#ingest(String, VectorSchemaRoot, JsonNode)}: acknowledged when it returns. */
  @Override
  public PutAcknowledgement put(List<byte[]> records, long bytes, String transaction) {
    try (VectorSchemaRoot root = ShoalClient.jsonBatch(store.allocator(), records, bytes)) {
      JsonNode metadata = transaction == null ? null : JSON.createObjectNode().put("transaction", transaction);
      return PutAcknowledgement.parse(store.ingest(table, root, metadata).raw(), table);
    }
  }

  @Override
  public JsonNode action(String type, ObjectNode body) {
    return store.action(type, body);
  }

  /** {@link ShoalEmbedded#plan(ObjectNode)}, then {@link ShoalEmbedded#read(byte[])} of each endpoint. */
  @Override
  public JsonNode query(ObjectNode command, java.util.function.Consumer<VectorSchemaRoot> batches) {
    dev.shoal.embedded.ScanPlan plan = store.plan(command);
    for (dev.shoal.embedded.ScanPlan.Endpoint part : plan.endpoints()) {
      try (org.apache.arrow.vector.ipc.ArrowReader reader = store.read(part.ticket())) {
        while (reader.loadNextBatch()) {
          batches.accept(reader.getVectorSchemaRoot());
        }
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException("shoal table \"" + table + "\" at " + endpoint + ": reading a scan: " + e, e);
      }
    }
    return plan.metadata();
  }

  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    EmbeddedEngines.release(dataDir, store);
  }

  @Override
  public List<String> listTables() {
    List<String> names = new java.util.ArrayList<>();
    store.listTables().forEach(t -> names.add(t.name()));
    return names;
  }

  @Override
  public org.apache.arrow.vector.types.pojo.Schema schema(String table) {
    return store.schema(table);
  }
}
