package dev.shoal.flink.common;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.flink.sink.ShoalOperation;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The calls of the shoal protocol the sink and the source need (docs/protocol.md), on one table:
 * {@code DoPut} of one batch of JSON records (optionally staged in a transaction), {@code DoAction
 * make_durable} (wait until the log is durable up to an address), {@code stats}, the transaction
 * actions ({@code begin/prepare/commit/abort/list_transactions}) and queries. Blocking;
 * thread-safe (the writer's sender threads put batches in parallel).
 *
 * <p>{@link EndpointTableClient} speaks it over shoal's Java client ({@code dev.shoal.client}),
 * which picks the transport by the {@code endpoint} option: a daemon over Arrow Flight ({@code
 * grpc://host:port}) or the engine inside this JVM ({@code embedded:/path/to/data}); both answer
 * with the same bodies and status codes. {@code sink.KeyRoutingShoalClient} sends each record of a
 * table sharded by key to its shard's node. {@link ShoalErrors} classifies failures (transient
 * or permanent) by shoal's status ({@code dev.shoal.client.ShoalStatus}).
 */
public interface ShoalTableClient extends AutoCloseable {

  ObjectMapper JSON = dev.shoal.client.ShoalClient.JSON;

  /** A {@code DoPut} batch of entries with an operation ({@link OperationEntries}): {@code json} and {@code op}, both Utf8. */
  Schema JSON_OP_BATCH = new Schema(List.of(Field.nullable("json", ArrowType.Utf8.INSTANCE),
      Field.nullable("op", ArrowType.Utf8.INSTANCE)));

  /**
   * A client of {@code table} at {@code endpoint}, by its transport.
   *
   * @throws IllegalArgumentException on a malformed endpoint (naming option {@code endpoint})
   * @throws ShoalSinkException when the embedded engine cannot be opened (naming option {@code
   *     endpoint} and what to do)
   */
  static ShoalTableClient open(String endpoint, String table, ShoalClientOptions options) {
    return EndpointTableClient.open(endpoint, table, options);
  }

  /** The {@code endpoint} option's value this client talks to (for messages and committables). */
  String endpoint();

  /** The table every call addresses. */
  String table();

  /**
   * Sends one batch ({@code DoPut} path {@code [table]}, a Utf8 column {@code json}, one record per
   * row) and returns shoal's acknowledgement of it. With a {@code transaction} (not null) the
   * batch's metadata is {@code {"transaction": id}}: the records are validated and staged,
   * invisible until {@link #commitTransaction}.
   *
   * @param records UTF-8 JSON documents, one each
   * @param bytes their total size in bytes (sizes the vector in one allocation)
   * @param transaction the open transaction to stage the batch in, or null
   */
  PutAcknowledgement put(List<byte[]> records, long bytes, String transaction) throws InterruptedException;

  /** {@link #put(List, long, String)} without a transaction. */
  default PutAcknowledgement put(List<byte[]> records, long bytes) throws InterruptedException {
    return put(records, bytes, null);
  }

  /**
   * The shared client that answers actions on {@code table}: the endpoint's, or, for a shard's
   * table {@code T.shard-i} of a table routed by key, the one of the shard's node.
   */
  dev.shoal.client.ShoalClient transport(String table);

  /**
   * One {@code DoAction} with a JSON body at the node answering for its {@code table} ({@link
   * #transport}); its JSON answer.
   *
   * @throws IllegalStateException when shoal gave no answer
   */
  default JsonNode action(String type, ObjectNode body) {
    String table = body.path("table").asText(table());
    JsonNode answer = transport(table).action(type, body, table);
    if (answer == null) {
      throw new IllegalStateException("shoal table \"" + table + "\" at " + endpoint() + ": " + type + " gave no answer");
    }
    return answer;
  }

  /** {@code create_table} of {@code name} with {@code if_not_exists}; the answer says whether it was created. */
  default JsonNode createTableIfNotExists(String name) {
    return createTableIfNotExists(name, List.of());
  }

  /** {@code create_table} of {@code name} with {@code if_not_exists}, keyed on {@code primaryKey} (empty: append-only). */
  default JsonNode createTableIfNotExists(String name, List<String> primaryKey) {
    return transport(name).createTableIfNotExists(name, primaryKey);
  }

  /** The names of the tables at the endpoint ({@code ListFlights}), for the catalog. */
  List<String> listTables();

  /**
   * Runs one query command (docs/protocol.md, "Queries"): {@code GetFlightInfo}, then {@code DoGet}
   * of every endpoint in order, handing each record batch to {@code batches} (valid only during the
   * call). For the source and the lookup join.
   *
   * @param command the query command ({@code table}, {@code filter}, {@code output}, {@code
   *     from_address}, ...)
   * @param batches receives every batch of the answer, in endpoint order
   * @return the plan ({@code FlightInfo.app_metadata}): {@code complete_until}, {@code truncated}, ...
   */
  JsonNode query(ObjectNode command, java.util.function.Consumer<VectorSchemaRoot> batches) throws InterruptedException;

  /** A table's schema ({@code GetSchema}: inferred from its records), for the catalog. */
  Schema schema(String table);

  /** Releases the client (a daemon connection, or this client's handle on the embedded engine). */
  @Override
  void close() throws InterruptedException;

  /**
   * {@code make_durable}: waits until everything below {@code address} in the log of {@code table}
   * (this client's table, or one of its shards, {@code T.shard-i}) is durable (shoal writes the
   * open page's filled prefix without closing it); the answered {@code durable_address}.
   */
  default long makeDurable(String table, long address) {
    return transport(table).makeDurable(table, address);
  }

  /** {@code stats} of this client's table: counters and log addresses ({@code tail_address}, ...). */
  default JsonNode stats() {
    return stats(table());
  }

  /** {@link #stats()} of {@code table}: this client's table, or one of its shards. */
  default JsonNode stats(String table) {
    return transport(table).stats(table);
  }

  /** {@code begin_transaction} on this client's table: opens the transaction (again: no-op). */
  default JsonNode beginTransaction(String transaction) {
    return transport(table()).beginTransaction(table(), transaction);
  }

  /** {@code prepare_transaction}: syncs the staged records; answers the transaction's info ({@code records}). */
  default JsonNode prepareTransaction(String transaction) {
    return transport(table()).prepareTransaction(table(), transaction);
  }

  /** {@code commit_transaction}: ingests the staged records exactly once, durably; idempotent. */
  default JsonNode commitTransaction(String transaction) {
    return transport(table()).commitTransaction(table(), transaction);
  }

  /** {@code abort_transaction}: drops the staged records; idempotent. */
  default JsonNode abortTransaction(String transaction) {
    return transport(table()).abortTransaction(table(), transaction);
  }

  /** {@code list_transactions}: every transaction of the table, {@code [{"transaction", "state", "records"}]}. */
  default List<JsonNode> listTransactions() {
    return transport(table()).listTransactions(table());
  }

  /** The schema of a batch of {@code records}: with a column {@code op} when an entry carries an operation. */
  static Schema batchSchema(List<byte[]> records) {
    return OperationEntries.anyOperation(records) ? JSON_OP_BATCH : dev.shoal.client.ShoalClient.JSON_BATCH;
  }

  /**
   * Fills {@code root} (of {@link #batchSchema}{@code (records)}) with a batch of the protocol's
   * DoPut shape: one column {@code json} (Utf8), one record per row, and a column {@code op} when
   * an entry carries an operation ({@link OperationEntries}; keyed tables).
   *
   * @param records the records' JSON texts (UTF-8), each optionally behind an operation byte
   * @param bytes their total size in bytes (the data buffer's initial size)
   */
  static void fill(VectorSchemaRoot root, List<byte[]> records, long bytes) {
    VarCharVector json = (VarCharVector) root.getVector(0);
    VarCharVector op = root.getFieldVectors().size() > 1 ? (VarCharVector) root.getVector(1) : null;
    json.allocateNew(Math.max(bytes, 1), records.size());
    if (op != null) {
      op.allocateNew(records.size() * 6L, records.size());
    }
    for (int i = 0; i < records.size(); i++) {
      byte[] entry = records.get(i);
      ShoalOperation operation = OperationEntries.operation(entry);
      int offset = OperationEntries.jsonOffset(operation);
      json.setSafe(i, entry, offset, entry.length - offset);
      if (op != null) {
        op.setSafe(i, operation.wireName().getBytes(StandardCharsets.UTF_8));
      }
    }
    root.setRowCount(records.size());
  }

  /**
   * A {@code PutResult}'s metadata: how many records the batch added and skipped, or, for a batch
   * staged in a transaction, how many were staged ({@code staged}; -1 when the answer is not about
   * a staged batch), and where they went in each log the batch reached ({@code positions}: the
   * table's own, or, for a sharded table, each shard's, {@code T.shard-i}).
   */
  record PutAcknowledgement(long batch, long records, long skipped, long staged, List<LogPosition> positions) {

    /** The answer of a DoPut into {@code table} (a shard table's name, or a sharded table's). */
    static PutAcknowledgement parse(JsonNode node, String table) {
      List<LogPosition> positions = new ArrayList<>();
      JsonNode shards = node.path("shards");
      if (shards.isArray()) {
        // Through a node into a sharded table: each shard's own answer.
        for (JsonNode shard : shards) {
          positions.add(LogPosition.of(table + ".shard-" + shard.path("shard").asInt(), shard));
        }
      } else {
        positions.add(LogPosition.of(table, node));
      }
      return new PutAcknowledgement(
          node.path("batch").asLong(-1),
          node.path("records").asLong(0),
          node.path("skipped").asLong(0),
          node.path("staged").asLong(-1),
          List.copyOf(positions));
    }
  }

  /**
   * Where one batch's records went in one table's log: that table ({@code T}, or a shard's {@code
   * T.shard-i}), how many records it took, one past the last one's byte ({@code endAddress}; -1:
   * none) and how far that log is durable ({@code durableAddress}; -1: not said).
   */
  record LogPosition(String table, long records, long endAddress, long durableAddress) {
    static LogPosition of(String table, JsonNode answer) {
      return new LogPosition(table, answer.path("records").asLong(0), answer.path("end_address").asLong(-1),
          answer.path("durable_address").asLong(-1));
    }
  }
}
