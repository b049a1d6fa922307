package dev.shoal.spark;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.embedded.EmbeddedEngines;
import dev.shoal.embedded.PutResult;
import dev.shoal.embedded.ScanPlan;
import dev.shoal.embedded.ShoalEmbedded;
import dev.shoal.embedded.ShoalEmbeddedException;
import dev.shoal.embedded.TableInfo;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The shoal engine inside this JVM ({@code embedded:/path/to/data}): the same protocol as the
 * daemon's — actions, JSON bodies, plans, tickets, status codes — through {@link ShoalEmbedded}
 * (JNI; Arrow data through the C Data Interface, no copies, no sockets).
 *
 * <p>Each client is one handle on the directory's engine; handles on the same directory share
 * one engine in the JVM, which closes (flush, checkpoint, release of the directory's LOCK) with
 * its last handle. {@link EmbeddedEngines} keeps an extra handle for
 * {@code embedded.keep-alive-ms} after the last client closed, so that consecutive queries of a
 * session do not reopen (recover) and close (checkpoint) the engine each time.
 *
 * <p>Spark's driver and tasks must therefore run in one JVM: local mode, or a single executor
 * that plans and reads (a task on another JVM would open the directory again and find it
 * locked, or, on another machine, find another directory).
 */
final class EmbeddedShoalClient implements ShoalClient {
  /** The request name of opening the engine, in error messages. */
  static final String OPEN = "open";

  private final URI endpoint;
  private final Path dataDir;
  private final ShoalEmbedded store;
  private boolean closed;

  private EmbeddedShoalClient(URI endpoint, Path dataDir, ShoalEmbedded store) {
    this.endpoint = endpoint;
    this.dataDir = dataDir;
    this.store = store;
  }

  /**
   * Opens a handle on the engine of {@code endpoint}'s directory (starting the engine, and
   * recovering its tables, if this JVM has none open there).
   *
   * @param config the engine's configuration keys (values as text), empty for the defaults
   * @param keepAliveMillis how long the engine stays open after the last client closed (0: it
   *     closes with the last client)
   */
  static EmbeddedShoalClient open(URI endpoint, Map<String, String> config, long keepAliveMillis) {
    Path dataDir = ShoalOptions.embeddedPath(endpoint);
    ShoalEmbedded store;
    try {
      store = EmbeddedEngines.acquire(dataDir, config, keepAliveMillis);
    } catch (ShoalEmbeddedException e) {
      throw translate(e, endpoint, null, OPEN);
    }
    return new EmbeddedShoalClient(endpoint, dataDir, store);
  }

  static ShoalException translate(ShoalEmbeddedException e, URI endpoint, String table, String request) {
    return ShoalErrors.translate(e.code(), e.detail(), endpoint, table, request, e);
  }

  private ShoalException translate(ShoalEmbeddedException e, String table, String request) {
    return translate(e, endpoint, table, request);
  }

  @Override
  public URI endpoint() {
    return endpoint;
  }

  @Override
  public Schema getSchema(String table) {
    try {
      return store.schema(table);
    } catch (ShoalEmbeddedException e) {
      throw translate(e, table, "GetSchema");
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
      throw translate(e, null, "ListFlights");
    }
  }

  @Override
  public ShoalFlightPlan getFlightInfo(String table, ObjectNode command) {
    ScanPlan plan;
    try {
      plan = store.plan(command);
    } catch (ShoalEmbeddedException e) {
      throw translate(e, table, "GetFlightInfo " + command);
    }
    List<ShoalFlightPlan.Endpoint> endpoints = new ArrayList<>();
    for (ScanPlan.Endpoint endpoint : plan.endpoints()) {
      endpoints.add(new ShoalFlightPlan.Endpoint(endpoint.ticket(), null, endpoint.plan()));
    }
    return new ShoalFlightPlan(endpoint, plan.schema(), plan.metadata(), endpoints);
  }

  @Override
  public ShoalBatchStream doGet(String table, byte[] ticket) {
    try {
      return new EmbeddedBatchStream(store.read(ticket), table);
    } catch (ShoalEmbeddedException e) {
      throw translate(e, table, "DoGet");
    }
  }

  /** The engine's C stream ({@link ShoalEmbedded#read}) as a {@link ShoalBatchStream}. */
  private final class EmbeddedBatchStream implements ShoalBatchStream {
    private final ArrowReader reader;
    private final String table;
    private boolean finished;

    EmbeddedBatchStream(ArrowReader reader, String table) {
      this.reader = reader;
      this.table = table;
    }

    @Override
    public boolean next() {
      try {
        boolean more = reader.loadNextBatch();
        finished = !more;
        return more;
      } catch (ShoalEmbeddedException e) {
        throw translate(e, table, "DoGet");
      } catch (IOException e) {
        throw new ShoalException("shoal DoGet on table '" + table + "' at " + endpoint + " failed: " + e, e);
      }
    }

    @Override
    public VectorSchemaRoot root() {
      try {
        return reader.getVectorSchemaRoot();
      } catch (IOException e) {
        throw new ShoalException("shoal DoGet on table '" + table + "' at " + endpoint + " failed: " + e, e);
      }
    }

    @Override
    public void close() {
      // Closing the reader early stops the engine's scan thread.
      try {
        reader.close();
      } catch (IOException | RuntimeException e) {
        if (finished) {
          throw new ShoalException("shoal table '" + table + "': closing the DoGet stream at " + endpoint + " failed", e);
        }
      }
    }
  }

  @Override
  public JsonNode action(String name, ObjectNode body, String table) {
    try {
      return store.action(name, body);
    } catch (ShoalEmbeddedException e) {
      throw translate(e, table, "action " + name);
    }
  }

  @Override
  public Put startPut(String table) {
    return new EmbeddedPut(table);
  }

  /**
   * DoPut in embedded mode: each batch is one {@link ShoalEmbedded#ingest} call, acknowledged
   * (durable under the table's policy, visible) when it returns.
   */
  private final class EmbeddedPut implements Put {
    private final String table;
    private long records;

    EmbeddedPut(String table) {
      this.table = table;
    }

    @Override
    public JsonNode send(List<String> batch) {
      PutResult result;
      try {
        result = store.ingest(table, batch);
      } catch (ShoalEmbeddedException e) {
        throw translate(e, table, "DoPut");
      }
      records += batch.size();
      return result.raw();
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
      // nothing is open between batches
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
      throw translate(e, null, "close");
    }
  }
}
