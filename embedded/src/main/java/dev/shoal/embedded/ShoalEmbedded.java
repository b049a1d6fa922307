package dev.shoal.embedded;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Consumer;
import org.apache.arrow.c.ArrowArray;
import org.apache.arrow.c.ArrowArrayStream;
import org.apache.arrow.c.ArrowSchema;
import org.apache.arrow.c.CDataDictionaryProvider;
import org.apache.arrow.c.Data;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * shoal inside the JVM: the engine of the {@code shoal} daemon, loaded through JNI, with the
 * daemon's operations as methods and Arrow data handed over through the C Data Interface (no
 * copies, no sockets).
 *
 * <p>Everything mirrors the Flight protocol (docs/protocol.md): the actions take and return the
 * same JSON bodies, plans are the same JSON, errors carry the same status code names. A sketch:
 *
 * <pre>{@code
 * try (ShoalEmbedded shoal = ShoalEmbedded.open(Path.of("/tmp/shoal"))) {
 *   shoal.createTable("events");
 *   shoal.registerPsf("events", "actor_id", Map.of("kind", "projection", "field", "actor.id"));
 *   PutResult put = shoal.ingest("events", List.of("{\"actor\":{\"id\":7},\"type\":\"PushEvent\"}"));
 *   shoal.scan("events", "actor.id = 7", List.of("type"), null,
 *       root -> System.out.println(root.contentToTSVString()));
 * }
 * }</pre>
 *
 * <p><b>Units.</b> Record counts are records; sizes are bytes; addresses are logical addresses of a
 * table's hybrid log (byte offsets from the start of the log).
 *
 * <p><b>Errors.</b> Every method throws {@link ShoalEmbeddedException}: {@link
 * ShoalEmbeddedException#operation()} names the call ({@code "action create_table"}, {@code
 * "doPut"}, {@code "getFlightInfo"}, {@code "doGet"}, ...), {@link ShoalEmbeddedException#code()}
 * is the gRPC status the daemon would answer with ({@code INVALID_ARGUMENT}, {@code NOT_FOUND},
 * {@code ALREADY_EXISTS}, ...), {@code CLOSED} after {@link #close()}, {@code PANIC} for a panic
 * of the engine (caught; the JVM lives on). Engine panics never cross into the JVM.
 *
 * <p><b>Threads.</b> An instance may be used from several threads at once; ingestion and scans of
 * different threads run in parallel in the engine. {@link #close()} waits for calls in progress.
 * A reader returned by {@link #read(byte[])} is for one thread at a time (as any {@link
 * ArrowReader}).
 *
 * <p><b>One directory, one process.</b> Opening a directory that another process holds (a daemon,
 * another JVM) fails (the engine's lock file). Opening the same directory twice in one JVM shares
 * one engine; it closes (flush and checkpoint) when the last instance closes.
 *
 * <p><b>Memory.</b> Imported Arrow buffers (schemas, scan batches) and exported batches are
 * accounted to this instance's {@link BufferAllocator}: a {@link RootAllocator} it owns and closes,
 * unless one is passed to {@link #open(Path, Map, BufferAllocator)}.
 */
public final class ShoalEmbedded implements AutoCloseable {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Path dataDir;
  private final long handle;
  private final BufferAllocator allocator;
  private final boolean ownsAllocator;
  private final ReentrantReadWriteLock lifecycle = new ReentrantReadWriteLock();
  private final Set<ShoalStreamReader> openReaders = ConcurrentHashMap.newKeySet();
  private volatile boolean closed;

  private ShoalEmbedded(Path dataDir, long handle, BufferAllocator allocator, boolean ownsAllocator) {
    this.dataDir = dataDir;
    this.handle = handle;
    this.allocator = allocator;
    this.ownsAllocator = ownsAllocator;
  }

  /**
   * Opens the store on a data directory with the default settings.
   *
   * @param dataDir the data directory (created if missing; tables live in {@code
   *     <dataDir>/tables/<name>/}); existing tables are recovered
   * @return the open store
   * @throws ShoalEmbeddedException when the library cannot be loaded ({@code UNAVAILABLE}) or the
   *     directory cannot be opened (e.g. another process holds it)
   */
  public static ShoalEmbedded open(Path dataDir) {
    return open(dataDir, Map.of());
  }

  /**
   * Opens the store on a data directory.
   *
   * @param dataDir the data directory (created if missing); existing tables are recovered
   * @param options the daemon's configuration keys (docs/configuration.md), e.g. {@code
   *     memory_budget_bytes} (bytes per table), {@code durability} ({@code "none"}, {@code
   *     "group_commit"}, {@code "fsync"}), {@code group_commit_ms}, {@code in_memory}, {@code
   *     endpoints_per_query}, {@code batch_rows}, {@code checkpoint_interval_secs}; empty or null
   *     for the defaults. Unknown keys are {@code INVALID_ARGUMENT}.
   * @return the open store, owning a new {@link RootAllocator}
   * @throws ShoalEmbeddedException as {@link #open(Path)}, and {@code INVALID_ARGUMENT} for bad
   *     options
   */
  public static ShoalEmbedded open(Path dataDir, Map<String, ?> options) {
    RootAllocator allocator = new RootAllocator();
    try {
      return open(dataDir, options, allocator, true);
    } catch (RuntimeException e) {
      allocator.close();
      throw e;
    }
  }

  /**
   * Opens the store with a caller's allocator, which the store uses but does not close.
   *
   * @param dataDir the data directory (created if missing); existing tables are recovered
   * @param options configuration keys as in {@link #open(Path, Map)}, or null
   * @param allocator the allocator for imported and exported Arrow data
   * @return the open store
   * @throws ShoalEmbeddedException as {@link #open(Path, Map)}
   */
  public static ShoalEmbedded open(Path dataDir, Map<String, ?> options, BufferAllocator allocator) {
    return open(dataDir, options, Objects.requireNonNull(allocator, "allocator"), false);
  }

  private static ShoalEmbedded open(
      Path dataDir, Map<String, ?> options, BufferAllocator allocator, boolean ownsAllocator) {
    Objects.requireNonNull(dataDir, "dataDir");
    NativeLoader.load();
    String optionsJson = options == null || options.isEmpty() ? null : toJson("open", options);
    Path absolute = dataDir.toAbsolutePath();
    long handle = ShoalNative.open(absolute.toString(), optionsJson);
    return new ShoalEmbedded(absolute, handle, allocator, ownsAllocator);
  }

  /**
   * The data directory this store was opened on.
   *
   * @return the absolute path
   */
  public Path dataDir() {
    return dataDir;
  }

  /**
   * The allocator of imported and exported Arrow data.
   *
   * @return the allocator
   */
  public BufferAllocator allocator() {
    return allocator;
  }

  // ---------------------------------------------------------------- actions

  /**
   * Runs any action of the Flight protocol ({@code DoAction}) with its JSON body.
   *
   * @param type the action: {@code create_table}, {@code drop_table}, {@code register_psf}, {@code
   *     deregister_psf}, {@code list_psfs}, {@code stats}, {@code checkpoint}, {@code truncate},
   *     {@code make_durable}, {@code writer_status}, the transaction actions, ...
   * @param body the body (docs/protocol.md); null for {@code {}}
   * @return the action's JSON result
   * @throws ShoalEmbeddedException operation {@code "action <type>"}: {@code INVALID_ARGUMENT}
   *     (unknown action, malformed body), {@code NOT_FOUND}, {@code ALREADY_EXISTS}, ...
   */
  public JsonNode action(String type, JsonNode body) {
    Objects.requireNonNull(type, "type");
    String operation = "action " + type;
    String bodyJson = body == null ? "{}" : toJson(operation, body);
    lifecycle.readLock().lock();
    try {
      ensureOpen(operation);
      return parse(operation, ShoalNative.action(handle, type, bodyJson));
    } finally {
      lifecycle.readLock().unlock();
    }
  }

  /**
   * Creates a table with the default settings.
   *
   * @param name the table name: 1-128 characters of {@code A-Z a-z 0-9 _ - .}, not starting with
   *     {@code .}
   * @return {@code {"created": true, "name"}}
   * @throws ShoalEmbeddedException {@code ALREADY_EXISTS}, {@code INVALID_ARGUMENT} (bad name)
   */
  public JsonNode createTable(String name) {
    return createTable(object().put("name", name));
  }

  /**
   * Creates a table.
   *
   * @param body {@code {"name", "on_invalid_json"?: "reject"|"skip", "durability"?,
   *     "group_commit_ms"?, "memory_budget_bytes"?, "page_size_bits"?, "index_size_bits"?,
   *     "if_not_exists"?}}
   * @return {@code {"created": bool, "name"}}
   * @throws ShoalEmbeddedException {@code ALREADY_EXISTS}, {@code INVALID_ARGUMENT}
   */
  public JsonNode createTable(ObjectNode body) {
    return action("create_table", body);
  }

  /**
   * Creates a table; the body as a map (see {@link #createTable(ObjectNode)}).
   *
   * @param body e.g. {@code Map.of("name", "events", "on_invalid_json", "skip")}
   * @return {@code {"created": bool, "name"}}
   * @throws ShoalEmbeddedException {@code ALREADY_EXISTS}, {@code INVALID_ARGUMENT}
   */
  public JsonNode createTable(Map<String, ?> body) {
    return action("create_table", JSON.valueToTree(body));
  }

  /**
   * Drops a table and deletes its files.
   *
   * @param name the table
   * @return {@code {"dropped": true, "name"}}
   * @throws ShoalEmbeddedException {@code NOT_FOUND}
   */
  public JsonNode dropTable(String name) {
    return action("drop_table", object().put("name", name));
  }

  /**
   * Registers a PSF while ingestion may continue; records at or above the answer's {@code
   * safe_register_address} are in its chains.
   *
   * @param table the table
   * @param name the PSF's name (unique in the table)
   * @param spec the definition without table and name: {@code {"kind": "projection", "field"}},
   *     {@code {"kind": "predicate", "expr"}}, {@code {"kind": "range", "field", "boundaries"}} or
   *     {@code {"kind": "composite", "fields"}}
   * @return the PSF: {@code {"id", "name", "definition", "active", "safe_register_address",
   *     "safe_deregister_address", "key_pointers"}}
   * @throws ShoalEmbeddedException {@code ALREADY_EXISTS}, {@code NOT_FOUND} (table), {@code
   *     INVALID_ARGUMENT} (bad path, expression or boundaries)
   */
  public JsonNode registerPsf(String table, String name, JsonNode spec) {
    ObjectNode body = object().put("table", table).put("name", name);
    if (spec != null) {
      if (!spec.isObject()) {
        throw new ShoalEmbeddedException(
            "action register_psf", "INVALID_ARGUMENT", "the PSF spec must be a JSON object, not " + spec);
      }
      spec.fields().forEachRemaining(field -> body.set(field.getKey(), field.getValue()));
    }
    return action("register_psf", body);
  }

  /**
   * Registers a PSF; the spec as a map (see {@link #registerPsf(String, String, JsonNode)}).
   *
   * @param table the table
   * @param name the PSF's name
   * @param spec e.g. {@code Map.of("kind", "projection", "field", "actor.id")}
   * @return the PSF
   * @throws ShoalEmbeddedException as {@link #registerPsf(String, String, JsonNode)}
   */
  public JsonNode registerPsf(String table, String name, Map<String, ?> spec) {
    return registerPsf(table, name, (JsonNode) JSON.valueToTree(spec));
  }

  /**
   * Deregisters a PSF: sets its {@code safe_deregister_address}; its chains still serve the log
   * between its two safe boundaries.
   *
   * @param table the table
   * @param name the PSF
   * @return the PSF with its boundaries
   * @throws ShoalEmbeddedException {@code NOT_FOUND} (table or PSF)
   */
  public JsonNode deregisterPsf(String table, String name) {
    return action("deregister_psf", object().put("table", table).put("name", name));
  }

  /**
   * Lists every PSF ever registered on a table, active or not.
   *
   * @param table the table
   * @return a JSON array of PSFs (as {@link #registerPsf(String, String, JsonNode)} answers)
   * @throws ShoalEmbeddedException {@code NOT_FOUND}
   */
  public JsonNode listPsfs(String table) {
    return action("list_psfs", object().put("table", table));
  }

  /**
   * A table's counters.
   *
   * @param table the table
   * @return {@code records}, {@code payload_bytes}, {@code skipped_records}; the log addresses
   *     {@code begin_address}, {@code head_address}, {@code flushed_until_address}, {@code
   *     tail_address}; {@code index_bytes}, {@code psfs}
   * @throws ShoalEmbeddedException {@code NOT_FOUND}
   */
  public JsonNode stats(String table) {
    return action("stats", object().put("table", table));
  }

  /**
   * A fuzzy checkpoint while ingestion continues: the index is copied, the log made durable, the
   * inferred schema saved. Every record below the answer's {@code flushed_until_address} survives
   * a crash.
   *
   * @param table the table
   * @return {@code {"flushed_until_address", "schema_observed_until", "index_checkpoint"}}
   * @throws ShoalEmbeddedException {@code NOT_FOUND}, {@code FAILED_PRECONDITION} (in-memory mode)
   */
  public JsonNode checkpoint(String table) {
    return action("checkpoint", object().put("table", table));
  }

  /**
   * The tables, with their record counts and payload sizes (ListFlights).
   *
   * @return one entry per table
   * @throws ShoalEmbeddedException {@code CLOSED}
   */
  public List<TableInfo> listTables() {
    String operation = "listTables";
    JsonNode answer;
    lifecycle.readLock().lock();
    try {
      ensureOpen(operation);
      answer = parse(operation, ShoalNative.listTables(handle));
    } finally {
      lifecycle.readLock().unlock();
    }
    List<TableInfo> tables = new ArrayList<>();
    for (JsonNode table : answer) {
      tables.add(
          new TableInfo(
              table.path("table").asText(), table.path("records").asLong(), table.path("bytes").asLong()));
    }
    return Collections.unmodifiableList(tables);
  }

  // ---------------------------------------------------------------- ingestion

  /**
   * Ingests one batch of JSON records (DoPut of one batch).
   *
   * @param table the table
   * @param jsonRecords one JSON document per element (UTF-8 text)
   * @return the batch's answer: records written, skipped, log addresses
   * @throws ShoalEmbeddedException operation {@code doPut}: {@code NOT_FOUND} (table), {@code
   *     INVALID_ARGUMENT} (a record that is not valid JSON under {@code on_invalid_json =
   *     "reject"}: nothing of the batch is written; a record larger than a page), {@code
   *     RESOURCE_EXHAUSTED} (disk full)
   */
  public PutResult ingest(String table, List<String> jsonRecords) {
    return ingest(table, jsonRecords, null);
  }

  /**
   * Ingests one batch of JSON records with DoPut's batch metadata.
   *
   * @param table the table
   * @param jsonRecords one JSON document per element (UTF-8 text)
   * @param appMetadata null, {@code {"writer", "serial"}} or {@code {"transaction"}} (see {@link
   *     #ingest(String, VectorSchemaRoot, JsonNode)})
   * @return the batch's answer
   * @throws ShoalEmbeddedException as {@link #ingest(String, List)}, and {@code INVALID_ARGUMENT}
   *     for malformed metadata
   */
  public PutResult ingest(String table, List<String> jsonRecords, JsonNode appMetadata) {
    Objects.requireNonNull(jsonRecords, "jsonRecords");
    lifecycle.readLock().lock();
    try {
      ensureOpen("doPut");
      try (VarCharVector json = new VarCharVector("json", allocator)) {
        json.allocateNew(jsonRecords.size());
        for (int row = 0; row < jsonRecords.size(); row++) {
          String record = jsonRecords.get(row);
          if (record == null) {
            json.setNull(row);
          } else {
            json.setSafe(row, record.getBytes(StandardCharsets.UTF_8));
          }
        }
        json.setValueCount(jsonRecords.size());
        try (VectorSchemaRoot root = VectorSchemaRoot.of(json)) {
          root.setRowCount(jsonRecords.size());
          return putLocked(table, root, appMetadata);
        }
      }
    } finally {
      lifecycle.readLock().unlock();
    }
  }

  /**
   * Ingests one Arrow batch, exported to the engine through the C Data Interface (the engine reads
   * the buffers in place; the caller keeps and closes {@code root}).
   *
   * @param table the table
   * @param root the batch: a column {@code json} of type Utf8, LargeUtf8, Binary or LargeBinary,
   *     one JSON record per row (other columns are ignored)
   * @param appMetadata null, {@code {"writer", "serial"}} (exactly-once writer serials: a batch at
   *     or below the writer's last serial is not ingested again, the answer says {@code
   *     "duplicate": true}) or {@code {"transaction"}} (staged in an open transaction)
   * @return the batch's answer
   * @throws ShoalEmbeddedException as {@link #ingest(String, List)}, and {@code INVALID_ARGUMENT}
   *     when there is no {@code json} column
   */
  public PutResult ingest(String table, VectorSchemaRoot root, JsonNode appMetadata) {
    Objects.requireNonNull(root, "root");
    lifecycle.readLock().lock();
    try {
      ensureOpen("doPut");
      return putLocked(table, root, appMetadata);
    } finally {
      lifecycle.readLock().unlock();
    }
  }

  private PutResult putLocked(String table, VectorSchemaRoot root, JsonNode appMetadata) {
    String operation = "doPut";
    String metadata = appMetadata == null || appMetadata.isNull() ? null : toJson(operation, appMetadata);
    try (ArrowArray array = ArrowArray.allocateNew(allocator);
        ArrowSchema schema = ArrowSchema.allocateNew(allocator)) {
      Data.exportVectorSchemaRoot(allocator, root, null, array, schema);
      try {
        return PutResult.of(
            parse(
                operation,
                ShoalNative.doPut(handle, table, array.memoryAddress(), schema.memoryAddress(), metadata)));
      } finally {
        // The engine moves the structs (their release callbacks become null); on an error before
        // the move, release them here so the exported buffers go back to the allocator.
        if (array.snapshot().release != 0) {
          array.release();
        }
        if (schema.snapshot().release != 0) {
          schema.release();
        }
      }
    }
  }

  // ---------------------------------------------------------------- schema, plans, scans

  /**
   * A table's schema (GetSchema): declared, else inferred from the records seen: one field per
   * top-level key, objects as structs, arrays as lists, integers Int64, mixed numbers Float64,
   * other mixes Utf8 JSON text (field metadata {@code shoal.json_text = true}).
   *
   * @param table the table
   * @return the schema
   * @throws ShoalEmbeddedException operation {@code getSchema}: {@code NOT_FOUND}
   */
  public Schema schema(String table) {
    String operation = "getSchema";
    lifecycle.readLock().lock();
    try {
      ensureOpen(operation);
      try (ArrowSchema schema = ArrowSchema.allocateNew(allocator);
          CDataDictionaryProvider dictionaries = new CDataDictionaryProvider()) {
        ShoalNative.getSchema(handle, table, schema.memoryAddress());
        return importSchema(operation, schema, dictionaries);
      }
    } finally {
      lifecycle.readLock().unlock();
    }
  }

  /**
   * Plans a query (GetFlightInfo).
   *
   * @param table the table
   * @param filter a filter in the PSF/filter language ({@code "type = 'PushEvent' AND actor.id =
   *     7"}), or null for every record
   * @param columns dotted paths of the output columns, or null/empty for every top-level field
   * @param limit at most this many rows in total (each endpoint returns at most {@code limit}), or
   *     null
   * @return the plan: result schema, endpoints, plan JSON
   * @throws ShoalEmbeddedException operation {@code getFlightInfo}: {@code NOT_FOUND} (table),
   *     {@code INVALID_ARGUMENT} (unparsable filter, unknown column)
   */
  public ScanPlan plan(String table, String filter, List<String> columns, Long limit) {
    return plan(command(table, filter, columns, limit));
  }

  /**
   * Plans a query from a full command: {@code {"table", "filter"?, "columns"?, "limit"?,
   * "aggregates"?, "max_endpoints"?, "from_address"?, "to_address"?}} (docs/protocol.md).
   *
   * @param command the command
   * @return the plan
   * @throws ShoalEmbeddedException operation {@code getFlightInfo}: {@code NOT_FOUND}, {@code
   *     INVALID_ARGUMENT}
   */
  public ScanPlan plan(ObjectNode command) {
    String operation = "getFlightInfo";
    String commandJson = toJson(operation, Objects.requireNonNull(command, "command"));
    lifecycle.readLock().lock();
    try {
      ensureOpen(operation);
      try (ArrowSchema schema = ArrowSchema.allocateNew(allocator);
          CDataDictionaryProvider dictionaries = new CDataDictionaryProvider()) {
        String answer = ShoalNative.getFlightInfo(handle, commandJson, schema.memoryAddress());
        Schema resultSchema = importSchema(operation, schema, dictionaries);
        JsonNode info = parse(operation, answer);
        List<ScanPlan.Endpoint> endpoints = new ArrayList<>();
        for (JsonNode endpoint : info.path("endpoints")) {
          endpoints.add(
              new ScanPlan.Endpoint(
                  endpoint.path("ticket").asText().getBytes(StandardCharsets.UTF_8), endpoint.path("plan")));
        }
        return new ScanPlan(
            resultSchema, endpoints, info.path("metadata"), info.path("total_records").asLong(-1));
      }
    } finally {
      lifecycle.readLock().unlock();
    }
  }

  /**
   * Streams one endpoint's rows (DoGet). The batches are the engine's buffers imported through the
   * C stream interface (no copy); the scan runs on a native thread a few batches ahead. Close the
   * reader when done (early close stops the scan); {@link #close()} closes readers still open.
   *
   * @param ticket an endpoint's ticket from {@link #plan}
   * @return a reader of the endpoint's batches; after its close, calls on it throw {@code CLOSED}
   * @throws ShoalEmbeddedException operation {@code doGet}: {@code INVALID_ARGUMENT} (bad ticket),
   *     {@code NOT_FOUND} (table dropped); while reading, operation {@code read} with the scan's
   *     code
   */
  public ArrowReader read(byte[] ticket) {
    String operation = "doGet";
    Objects.requireNonNull(ticket, "ticket");
    lifecycle.readLock().lock();
    try {
      ensureOpen(operation);
      try (ArrowArrayStream stream = ArrowArrayStream.allocateNew(allocator)) {
        ShoalNative.doGet(handle, ticket, stream.memoryAddress());
        ArrowReader imported;
        try {
          imported = Data.importArrayStream(allocator, stream);
        } catch (RuntimeException e) {
          throw new ShoalEmbeddedException(
              operation, "INTERNAL", "cannot import the Arrow stream: " + e.getMessage(), e);
        }
        ShoalStreamReader[] self = new ShoalStreamReader[1];
        ShoalStreamReader reader =
            new ShoalStreamReader(allocator, imported, () -> openReaders.remove(self[0]));
        self[0] = reader;
        openReaders.add(reader);
        return reader;
      }
    } finally {
      lifecycle.readLock().unlock();
    }
  }

  /**
   * Runs a query: plans it and reads every endpoint in turn, handing each batch to {@code
   * consumer}. A batch is valid only during the call (copy what you keep). With a limit, exactly
   * the first {@code limit} rows are handed over (the last batch is cut) and the scan stops.
   *
   * @param table the table
   * @param filter the filter, or null
   * @param columns output paths, or null/empty for every top-level field
   * @param limit at most this many rows, or null
   * @param consumer receives each non-empty batch
   * @return the number of rows handed over
   * @throws ShoalEmbeddedException as {@link #plan(String, String, List, Long)} and {@link
   *     #read(byte[])}
   */
  public long scan(
      String table, String filter, List<String> columns, Long limit, Consumer<VectorSchemaRoot> consumer) {
    Objects.requireNonNull(consumer, "consumer");
    ScanPlan plan = plan(table, filter, columns, limit);
    long rows = 0;
    for (ScanPlan.Endpoint endpoint : plan.endpoints()) {
      try (ArrowReader reader = read(endpoint.ticket())) {
        while (reader.loadNextBatch()) {
          VectorSchemaRoot root = reader.getVectorSchemaRoot();
          int count = root.getRowCount();
          if (limit != null && rows + count > limit) {
            count = (int) (limit - rows);
            root.setRowCount(count);
          }
          if (count > 0) {
            consumer.accept(root);
            rows += count;
          }
          if (limit != null && rows >= limit) {
            return rows;
          }
        }
      } catch (java.io.IOException e) {
        throw new ShoalEmbeddedException("read", "INTERNAL", e.getMessage(), e);
      }
    }
    return rows;
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * Closes the store: waits for calls in progress, closes readers still open, closes the native
   * handle (the engine flushes and checkpoints when the last handle on its directory closes), then
   * the owned allocator. Idempotent. Afterwards every method throws {@code CLOSED}.
   *
   * @throws ShoalEmbeddedException when the engine fails to flush; the handle is closed anyway
   * @throws IllegalStateException when the owned allocator still has memory outstanding (a {@link
   *     VectorSchemaRoot} obtained from this store and not closed)
   */
  @Override
  public void close() {
    lifecycle.writeLock().lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      RuntimeException failure = null;
      for (ShoalStreamReader reader : List.copyOf(openReaders)) {
        try {
          reader.close();
        } catch (RuntimeException e) {
          failure = failure == null ? e : failure;
        }
      }
      try {
        ShoalNative.close(handle);
      } catch (RuntimeException e) {
        failure = failure == null ? e : failure;
      }
      if (ownsAllocator) {
        allocator.close();
      }
      if (failure != null) {
        throw failure;
      }
    } finally {
      lifecycle.writeLock().unlock();
    }
  }

  /**
   * Whether {@link #close()} was called.
   *
   * @return true once closed
   */
  public boolean isClosed() {
    return closed;
  }

  /**
   * The native handle, for tests of the native layer.
   *
   * @return the handle (stays the same after close)
   */
  long handle() {
    return handle;
  }

  // ---------------------------------------------------------------- helpers

  /**
   * A query command as JSON.
   *
   * @param table the table
   * @param filter the filter or null
   * @param columns the columns or null
   * @param limit the limit or null
   * @return {@code {"table", "filter"?, "columns"?, "limit"?}}
   */
  public static ObjectNode command(String table, String filter, List<String> columns, Long limit) {
    ObjectNode command = object().put("table", table);
    if (filter != null) {
      command.put("filter", filter);
    }
    if (columns != null && !columns.isEmpty()) {
      ArrayNode array = command.putArray("columns");
      columns.forEach(array::add);
    }
    if (limit != null) {
      command.put("limit", limit);
    }
    return command;
  }

  private void ensureOpen(String operation) {
    if (closed) {
      throw new ShoalEmbeddedException(
          operation, ShoalEmbeddedException.CLOSED, "the store on " + dataDir + " is closed");
    }
  }

  private static ObjectNode object() {
    return JSON.createObjectNode();
  }

  private Schema importSchema(String operation, ArrowSchema schema, CDataDictionaryProvider dictionaries) {
    try {
      return Data.importSchema(allocator, schema, dictionaries);
    } catch (RuntimeException e) {
      throw new ShoalEmbeddedException(
          operation, "INTERNAL", "cannot import the Arrow schema: " + e.getMessage(), e);
    }
  }

  private static String toJson(String operation, Object value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (JsonProcessingException e) {
      throw new ShoalEmbeddedException(
          operation, "INVALID_ARGUMENT", "cannot write the request as JSON: " + e.getMessage(), e);
    }
  }

  private static JsonNode parse(String operation, String json) {
    try {
      return JSON.readTree(json == null ? "null" : json);
    } catch (JsonProcessingException e) {
      throw new ShoalEmbeddedException(
          operation, "INTERNAL", "the engine answered with malformed JSON: " + e.getOriginalMessage(), e);
    }
  }
}
