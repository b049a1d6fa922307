package dev.shoal.embedded;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalBatchStream;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalClientException;
import dev.shoal.client.ShoalClientOptions;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.client.ShoalFlightPlan;
import dev.shoal.client.TransportBatchStream;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * {@link ShoalClient} of the shoal engine inside this JVM ({@code embedded:/path/to/data}): the
 * same protocol as the daemon's — actions, JSON bodies, plans, tickets, status codes — through
 * {@link ShoalEmbedded} (JNI; Arrow data through the C Data Interface, no copies, no sockets).
 *
 * <p>Each client is one handle on the directory's engine, taken from {@link EmbeddedEngines}:
 * handles on the same directory share one engine in the JVM, which a keeper handle keeps open
 * for {@link ShoalClientOptions#embeddedKeepAliveMillis} after the last client closed (so that
 * consecutive queries, or a job's failover, do not recover and close the engine each time). A
 * second JVM on the same machine finds the directory locked; every user of an embedded endpoint
 * must therefore run in the JVM that opened it. {@code token} and {@code callTimeout} mean
 * nothing here (no authentication, no network deadline).
 *
 * <p>{@link ShoalClient#open} finds it through {@link EmbeddedTransport} (this jar's {@code
 * META-INF/services/dev.shoal.client.ShoalTransport}).
 */
public final class EmbeddedShoalClient implements ShoalClient {
  /** The request name of opening the engine, in {@link ShoalClientException#request()} ({@link ShoalClientException#OPEN}). */
  public static final String OPEN = ShoalClientException.OPEN;

  private final String endpoint;
  private final ShoalClientOptions options;
  private final Path dataDir;
  private final ShoalEmbedded store;
  private boolean closed;

  private EmbeddedShoalClient(String endpoint, ShoalClientOptions options, Path dataDir, ShoalEmbedded store) {
    this.endpoint = endpoint;
    this.options = options;
    this.dataDir = dataDir;
    this.store = store;
  }

  /**
   * A handle on the engine of {@code endpoint}'s directory, opening the engine (and recovering its
   * tables) if this JVM has none open there.
   *
   * @throws IllegalArgumentException on a malformed endpoint
   * @throws RuntimeException what {@code options.errors} makes of the failure to open (request
   *     {@link #OPEN}; the cause is the engine's {@link ShoalEmbeddedException})
   */
  public static EmbeddedShoalClient open(String endpoint, ShoalClientOptions options) {
    Path dataDir = ShoalEndpoint.embeddedPath(endpoint);
    ShoalEmbedded store;
    try {
      store = EmbeddedEngines.acquire(dataDir, options.embeddedConfig(), options.embeddedKeepAliveMillis());
    } catch (ShoalEmbeddedException e) {
      throw options.fail(new ShoalClientException(e.code(), e.detail(), OPEN, null, endpoint, e));
    }
    return new EmbeddedShoalClient(endpoint, options, dataDir, store);
  }

  /** The engine's data directory (absolute, normalised). */
  public Path dataDir() {
    return dataDir;
  }

  private RuntimeException fail(ShoalEmbeddedException e, String table, String request) {
    return options.fail(new ShoalClientException(e.code(), e.detail(), request, table, endpoint, e));
  }

  private RuntimeException fail(Exception e, String table, String request) {
    return options.fail(new ShoalClientException(null, String.valueOf(e), request, table, endpoint, e));
  }

  @Override
  public String endpoint() {
    return endpoint;
  }

  @Override
  public Schema getSchema(String table) {
    try {
      return store.schema(table);
    } catch (ShoalEmbeddedException e) {
      throw fail(e, table, "GetSchema");
    }
  }

  @Override
  public List<String> listTables() {
    try {
      List<String> names = new ArrayList<>();
      for (TableInfo table : store.listTables()) {
        names.add(table.name());
      }
      return names;
    } catch (ShoalEmbeddedException e) {
      throw fail(e, null, "ListFlights");
    }
  }

  @Override
  public ShoalFlightPlan getFlightInfo(String table, ObjectNode command) {
    ScanPlan plan;
    try {
      plan = store.plan(command);
    } catch (ShoalEmbeddedException e) {
      throw fail(e, table, "GetFlightInfo " + command);
    }
    List<ShoalFlightPlan.Endpoint> endpoints = new ArrayList<>();
    for (ScanPlan.Endpoint part : plan.endpoints()) {
      endpoints.add(new ShoalFlightPlan.Endpoint(part.ticket(), null, part.plan()));
    }
    return new ShoalFlightPlan(endpoint, plan.schema(), plan.metadata(), endpoints);
  }

  @Override
  public ShoalBatchStream doGet(String table, byte[] ticket) {
    try {
      return new EmbeddedBatchStream(store.read(ticket), table);
    } catch (ShoalEmbeddedException e) {
      throw fail(e, table, "DoGet");
    }
  }

  /** The engine's C stream ({@link ShoalEmbedded#read}) as a {@link ShoalBatchStream}. */
  private final class EmbeddedBatchStream extends TransportBatchStream {
    private final ArrowReader reader;
    private final String table;

    EmbeddedBatchStream(ArrowReader reader, String table) {
      this.reader = reader;
      this.table = table;
    }

    @Override
    protected boolean load() throws IOException {
      return reader.loadNextBatch();
    }

    @Override
    protected VectorSchemaRoot current() throws IOException {
      return reader.getVectorSchemaRoot();
    }

    /** Closing the reader early stops the engine's scan thread. */
    @Override
    protected void closeStream(boolean finished) throws IOException {
      reader.close();
    }

    @Override
    protected RuntimeException failure(Exception e) {
      return e instanceof ShoalEmbeddedException embedded ? fail(embedded, table, "DoGet") : fail(e, table, "DoGet");
    }
  }

  @Override
  public JsonNode action(String name, ObjectNode body, String table) {
    try {
      return store.action(name, body);
    } catch (ShoalEmbeddedException e) {
      throw fail(e, table, "action " + name);
    }
  }

  @Override
  public Put startPut(String table, Schema schema) {
    return new EmbeddedPut(table, schema);
  }

  /**
   * DoPut in embedded mode: each batch is one {@link ShoalEmbedded#ingest(String, VectorSchemaRoot,
   * JsonNode)} call (exported through the C Data Interface, read in place), acknowledged (durable
   * under the table's policy, visible) when it returns.
   */
  private final class EmbeddedPut implements Put {
    private final String table;
    private final VectorSchemaRoot root;
    private long records;

    EmbeddedPut(String table, Schema schema) {
      this.table = table;
      this.root = VectorSchemaRoot.create(schema, store.allocator());
    }

    @Override
    public VectorSchemaRoot root() {
      return root;
    }

    @Override
    public JsonNode sendBatch(JsonNode metadata) {
      try {
        JsonNode answer = store.ingest(table, root, metadata).raw();
        records += root.getRowCount();
        return answer;
      } catch (ShoalEmbeddedException e) {
        throw fail(e, table, "DoPut");
      } finally {
        root.clear();
      }
    }

    @Override
    public long records() {
      return records;
    }

    @Override
    public void finish() {
      // every batch was acknowledged by its send
    }

    @Override
    public void close() {
      root.close();
    }
  }

  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    try {
      EmbeddedEngines.release(dataDir, store);
    } catch (ShoalEmbeddedException e) {
      throw fail(e, null, "close");
    }
  }
}
