package dev.shoal.client;

import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * One endpoint of shoal: the calls of its protocol ({@code docs/protocol.md}) with their JSON
 * bodies. Two transports speak it, chosen by the endpoint ({@link ShoalEndpoint}):
 *
 * <ul>
 *   <li>{@link FlightShoalClient}: a daemon over Arrow Flight ({@code grpc://host:port}, {@code
 *       grpc+tls://host:port}, {@code host:port}), on a pooled connection ({@link FlightConnections});
 *   <li>{@code dev.shoal.embedded.EmbeddedShoalClient}: the engine inside this JVM through JNI
 *       ({@code embedded:/path/to/data}), which answers with the same plans, tickets, bodies and
 *       status codes. It is shoal-embedded's {@link ShoalTransport}, found on the class path.
 * </ul>
 *
 * <p>Reads yield Arrow {@link VectorSchemaRoot} batches in the transport's own buffers (no copy).
 * Every failure is a {@link ShoalClientException} naming the request, table, endpoint and shoal's
 * status code ({@link ShoalStatus} classifies it), or what {@link ShoalClientOptions#errors} makes
 * of it. Clients are thread-safe except for a {@link Put} or {@link ShoalBatchStream}, which one
 * thread uses at a time.
 */
public interface ShoalClient extends AutoCloseable {
  /** The JSON mapper of request and answer bodies. */
  ObjectMapper JSON = new ObjectMapper();

  /** The schema of a {@code DoPut} batch of plain records: one Utf8 column {@code json}, one record per row. */
  Schema JSON_BATCH = new Schema(List.of(Field.nullable("json", ArrowType.Utf8.INSTANCE)));

  /**
   * A client of {@code endpoint} by its transport.
   *
   * @throws IllegalArgumentException on a malformed endpoint (naming option {@code endpoint})
   * @throws RuntimeException what {@code options.errors} makes of a failure to open the embedded
   *     engine (request {@link ShoalClientException#OPEN}), also when no transport of embedded
   *     endpoints is on the class path (shoal-embedded; status {@link ShoalStatus#CLIENT})
   */
  static ShoalClient open(String endpoint, ShoalClientOptions options) {
    if (ShoalEndpoint.isEmbedded(endpoint)) {
      ShoalEndpoint.embeddedPath(endpoint); // a malformed endpoint is an IllegalArgumentException, as always
      ShoalTransport transport;
      try {
        transport = ShoalTransports.of(ShoalEndpoint.EMBEDDED_SCHEME);
      } catch (IllegalStateException e) {
        throw options.fail(new ShoalClientException(null, e.getMessage(), ShoalClientException.OPEN, null, endpoint, e));
      }
      return transport.open(endpoint, options);
    }
    return new FlightShoalClient(endpoint, options);
  }

  /**
   * A client of {@code endpoint} with bearer {@code token} (null: none; ignored in embedded mode)
   * and the defaults otherwise. An embedded URI's path is taken as written (decoded), not as its
   * percent-encoded text.
   */
  static ShoalClient open(URI endpoint, String token) {
    return open(ShoalEndpoint.text(endpoint), ShoalClientOptions.withToken(token));
  }

  /** The endpoint this client talks to, as it was given. */
  String endpoint();

  /** {@code GetSchema(path=[table])}: the table's schema (declared, else inferred from its records). */
  Schema getSchema(String table);

  /** {@code ListFlights}: the names of the tables. */
  List<String> listTables();

  /**
   * {@code GetFlightInfo(cmd)}: plans a query ({@code {"table", "filter", "columns", "limit",
   * "aggregates", "max_endpoints", "from_address", ...}}).
   *
   * @param table the table the command names (for error messages)
   */
  ShoalFlightPlan getFlightInfo(String table, ObjectNode command);

  /** {@code DoGet(ticket)}: the record batches of one endpoint of a plan, read at this endpoint. */
  ShoalBatchStream doGet(String table, byte[] ticket);

  /**
   * {@code DoAction(name, body)}: the first result's JSON body, or null when there is none.
   *
   * @param table the table the action is about, or null (for error messages)
   */
  JsonNode action(String name, ObjectNode body, String table);

  /**
   * An open {@code DoPut} to {@code table} whose batches have {@code schema} (usually {@link
   * #JSON_BATCH}; keyed tables also take a Utf8 column {@code op}): fill {@link Put#root()}, then
   * {@link Put#sendBatch}; each batch is acknowledged (durable under the table's policy, visible)
   * before that returns.
   */
  Put startPut(String table, Schema schema);

  /** {@link #startPut(String, Schema)} of plain records ({@link #JSON_BATCH}). */
  default Put startPut(String table) {
    return startPut(table, JSON_BATCH);
  }

  /**
   * Runs one query: {@link #getFlightInfo}, then {@link #doGet} of every endpoint in order, here,
   * handing each batch to {@code batches} (valid only during the call).
   *
   * @return the plan's JSON ({@code FlightInfo.app_metadata}: {@code complete_until}, {@code truncated}, ...)
   */
  default JsonNode query(String table, ObjectNode command, Consumer<VectorSchemaRoot> batches) {
    ShoalFlightPlan plan = getFlightInfo(table, command);
    for (ShoalFlightPlan.Endpoint part : plan.endpoints()) {
      try (ShoalBatchStream stream = doGet(table, part.ticket())) {
        while (stream.next()) {
          batches.accept(stream.root());
        }
      }
    }
    return plan.metadata();
  }

  /** {@code create_table} of {@code name} with {@code if_not_exists}; the answer says whether it was created. */
  default JsonNode createTableIfNotExists(String name) {
    return createTableIfNotExists(name, List.of());
  }

  /**
   * {@code create_table} of {@code name} with {@code if_not_exists}, keyed on {@code primaryKey}
   * (dotted paths; empty: an append-only table); the answer says whether it was created.
   */
  default JsonNode createTableIfNotExists(String name, List<String> primaryKey) {
    ObjectNode body = JSON.createObjectNode().put("name", name).put("if_not_exists", true);
    if (!primaryKey.isEmpty()) {
      primaryKey.forEach(body.putArray("primary_key")::add);
    }
    return action("create_table", body, name);
  }

  /** {@code stats {"table"}}: counters and log addresses ({@code tail_address}, ...). */
  default JsonNode stats(String table) {
    return answered("stats", table, action("stats", JSON.createObjectNode().put("table", table), table));
  }

  /** {@code cluster {}}: the cluster's nodes and sharded tables (none outside a cluster). */
  default JsonNode cluster() {
    return answered("cluster", null, action("cluster", JSON.createObjectNode(), null));
  }

  /**
   * {@code make_durable {"table", "address"}}: waits until everything below {@code address} (a log
   * address, bytes) in the log of {@code table} is durable.
   *
   * @return the answered {@code durable_address} (at least {@code address})
   * @throws IllegalStateException when there is no answer or it has no {@code durable_address}
   */
  default long makeDurable(String table, long address) {
    JsonNode answer = answered("make_durable", table,
        action("make_durable", JSON.createObjectNode().put("table", table).put("address", address), table));
    long durable = answer.path("durable_address").asLong(-1);
    if (durable < 0) {
      throw new IllegalStateException(
          "shoal table \"" + table + "\" at " + endpoint() + ": make_durable answered without durable_address: " + answer);
    }
    return durable;
  }

  /** {@code begin_transaction}: opens the transaction (again: no-op). */
  default JsonNode beginTransaction(String table, String transaction) {
    return transactionAction("begin_transaction", table, transaction);
  }

  /** {@code prepare_transaction}: syncs the staged records; answers the transaction's info ({@code records}). */
  default JsonNode prepareTransaction(String table, String transaction) {
    return transactionAction("prepare_transaction", table, transaction);
  }

  /** {@code commit_transaction}: ingests the staged records exactly once, durably; idempotent. */
  default JsonNode commitTransaction(String table, String transaction) {
    return transactionAction("commit_transaction", table, transaction);
  }

  /** {@code abort_transaction}: drops the staged records; idempotent. */
  default JsonNode abortTransaction(String table, String transaction) {
    return transactionAction("abort_transaction", table, transaction);
  }

  /** {@code list_transactions}: every transaction of the table, {@code [{"transaction", "state", "records"}]}. */
  default List<JsonNode> listTransactions(String table) {
    JsonNode answer = action("list_transactions", JSON.createObjectNode().put("table", table), table);
    List<JsonNode> transactions = new ArrayList<>();
    answered("list_transactions", table, answer).forEach(transactions::add);
    return transactions;
  }

  private JsonNode transactionAction(String type, String table, String transaction) {
    return answered(type, table,
        action(type, JSON.createObjectNode().put("table", table).put("transaction", transaction), table));
  }

  /**
   * {@code answer}, which an action that always answers gave.
   *
   * @throws IllegalStateException when it is null (shoal gave no answer)
   */
  private JsonNode answered(String type, String table, JsonNode answer) {
    if (answer == null) {
      throw new IllegalStateException("shoal " + type + (table == null ? "" : " on table '" + table + "'") + " at "
          + endpoint() + " gave no answer");
    }
    return answer;
  }

  /** Releases the client (its lease on a pooled connection, or its handle on the embedded engine). */
  @Override
  void close();

  /** One {@code DoPut} stream; one thread at a time. */
  interface Put extends AutoCloseable {
    /** The batch to fill (the schema given to {@link ShoalClient#startPut}); emptied by each send. */
    VectorSchemaRoot root();

    /**
     * Sends the rows of {@link #root()} with {@code metadata} as the batch's {@code app_metadata}
     * (e.g. {@code {"transaction": id}}; null: none), waits for shoal's acknowledgement and
     * returns it ({@code records}, {@code skipped}, addresses, ...), then empties the root.
     */
    JsonNode sendBatch(JsonNode metadata);

    /** Fills {@link #root()}'s first column (Utf8 {@code json}) with {@code records} and sends them. */
    default JsonNode send(List<String> records) {
      VarCharVector json = (VarCharVector) root().getVector(0);
      json.allocateNew(records.size());
      for (int i = 0; i < records.size(); i++) {
        json.setSafe(i, records.get(i).getBytes(java.nio.charset.StandardCharsets.UTF_8));
      }
      root().setRowCount(records.size());
      return sendBatch(null);
    }

    /** Records acknowledged so far. */
    long records();

    /** Ends the stream and waits for shoal to close it. */
    void finish();

    /** Releases the stream; a stream not finished is cancelled (batches acknowledged so far stay). */
    @Override
    void close();
  }
}
