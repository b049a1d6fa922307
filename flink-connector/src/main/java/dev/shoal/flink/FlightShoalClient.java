package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.CallOptions;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.PutResult;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;

/**
 * The calls of the shoal Flight protocol the sink needs (docs/protocol.md): {@code DoPut} of one
 * batch of JSON records into a table (optionally staged in a transaction), {@code DoAction
 * make_durable} (wait until the log is durable up to an address), {@code stats} and the
 * transaction actions ({@code begin/prepare/commit/abort/list_transactions}). Blocking;
 * thread-safe (one gRPC channel, one Arrow allocator; every call builds its own vectors).
 *
 * <p>Errors surface as Arrow's {@code FlightRuntimeException} with the daemon's status code; {@link
 * ShoalErrors} decides which are transient.
 */
public final class ShoalClient implements AutoCloseable {

  private static final ObjectMapper JSON = new ObjectMapper();

  private final String endpoint;
  private final String table;
  private final BufferAllocator allocator;
  private final FlightClient client;
  private final CallOption[] options;

  /**
   * @param endpoint {@code grpc://host:port}, {@code grpc+tls://host:port}, or {@code host:port}
   *     (plain gRPC)
   * @param table the table every call addresses
   * @param token bearer token sent as {@code authorization: Bearer <token>}; null or empty for none
   * @param callTimeout deadline of each call
   */
  public ShoalClient(String endpoint, String table, String token, Duration callTimeout) {
    this.endpoint = endpoint;
    this.table = table;
    this.allocator = new RootAllocator(Long.MAX_VALUE);
    try {
      this.client = FlightClient.builder(allocator, location(endpoint)).build();
    } catch (RuntimeException e) {
      allocator.close();
      throw e;
    }
    List<CallOption> opts = new ArrayList<>();
    opts.add(CallOptions.timeout(callTimeout.toMillis(), TimeUnit.MILLISECONDS));
    if (token != null && !token.isEmpty()) {
      FlightCallHeaders headers = new FlightCallHeaders();
      headers.insert("authorization", "Bearer " + token);
      opts.add(new HeaderCallOption(headers));
    }
    this.options = opts.toArray(new CallOption[0]);
  }

  /** Parses the endpoint option into an Arrow Flight location; {@code host:port} means plain gRPC. */
  static Location location(String endpoint) {
    String uri = endpoint.contains("://") ? endpoint : "grpc://" + endpoint;
    try {
      return new Location(new URI(uri));
    } catch (Exception e) {
      throw new IllegalArgumentException(
          "invalid shoal endpoint '" + endpoint + "': expected grpc://host:port, grpc+tls://host:port or host:port",
          e);
    }
  }

  public String endpoint() {
    return endpoint;
  }

  public String table() {
    return table;
  }

  /**
   * Sends one batch ({@code DoPut} path {@code [table]}, a Utf8 column {@code json}, one record per
   * row) and returns the daemon's acknowledgement of it.
   *
   * @param records UTF-8 JSON documents, one each
   * @param bytes their total size in bytes (sizes the vector in one allocation)
   */
  public PutAcknowledgement put(List<byte[]> records, long bytes) throws InterruptedException {
    return put(records, bytes, null);
  }

  /**
   * Like {@link #put(List, long)}, staging the batch in {@code transaction} (the batch's {@code
   * FlightData.app_metadata} is {@code {"transaction": id}}) when it is not null: the records are
   * validated and kept invisible until {@link #commitTransaction}.
   */
  public PutAcknowledgement put(List<byte[]> records, long bytes, String transaction) throws InterruptedException {
    try (VarCharVector json = new VarCharVector("json", allocator);
        VectorSchemaRoot root = VectorSchemaRoot.of(json);
        SyncPutListener listener = new SyncPutListener()) {
      json.allocateNew(Math.max(bytes, 1), records.size());
      for (int i = 0; i < records.size(); i++) {
        json.setSafe(i, records.get(i));
      }
      root.setRowCount(records.size());
      FlightClient.ClientStreamListener stream =
          client.startPut(FlightDescriptor.path(table), root, listener, options);
      if (transaction == null) {
        stream.putNext();
      } else {
        byte[] metadata =
            JSON.createObjectNode().put("transaction", transaction).toString().getBytes(StandardCharsets.UTF_8);
        ArrowBuf buffer = allocator.buffer(metadata.length);
        buffer.writeBytes(metadata); // (setBytes would leave writerIndex 0: empty metadata on the wire)
        stream.putNext(buffer); // takes ownership of the buffer
      }
      stream.completed();
      // Waits for the end of the call; throws FlightRuntimeException with the daemon's status.
      stream.getResult();
      PutResult result;
      try {
        result = listener.poll(0, TimeUnit.MILLISECONDS);
      } catch (java.util.concurrent.ExecutionException e) {
        throw ShoalErrors.unwrap(e);
      }
      if (result == null) {
        throw new IllegalStateException(
            "shoal table \"" + table + "\" at " + endpoint + ": DoPut ended without a PutResult");
      }
      try (result) {
        ArrowBuf metadata = result.getApplicationMetadata();
        byte[] raw = new byte[metadata == null ? 0 : (int) metadata.readableBytes()];
        if (metadata != null) {
          metadata.getBytes(0, raw);
        }
        return PutAcknowledgement.parse(raw);
      }
    }
  }

  /**
   * {@code DoAction make_durable {"table", "address"}}: waits until everything below {@code address}
   * is durable (the daemon writes the open page's filled prefix without closing it).
   *
   * @return the daemon's {@code durable_address} (at least {@code address})
   */
  public long makeDurable(long address) {
    JsonNode answer = action("make_durable", JSON.createObjectNode().put("table", table).put("address", address));
    long durable = answer.path("durable_address").asLong(-1);
    if (durable < 0) {
      throw new IllegalStateException(
          "shoal table \"" + table + "\" at " + endpoint + ": make_durable answered without durable_address: " + answer);
    }
    return durable;
  }

  /** {@code DoAction stats {"table"}}: counters and log addresses ({@code tail_address}, ...). */
  public JsonNode stats() {
    return action("stats", JSON.createObjectNode().put("table", table));
  }

  /** {@code begin_transaction}: opens the transaction (again: no-op). */
  public JsonNode beginTransaction(String transaction) {
    return transactionAction("begin_transaction", transaction);
  }

  /** {@code prepare_transaction}: syncs the staged records; answers the transaction's info ({@code records}). */
  public JsonNode prepareTransaction(String transaction) {
    return transactionAction("prepare_transaction", transaction);
  }

  /** {@code commit_transaction}: ingests the staged records exactly once, durably; idempotent. */
  public JsonNode commitTransaction(String transaction) {
    return transactionAction("commit_transaction", transaction);
  }

  /** {@code abort_transaction}: drops the staged records; idempotent. */
  public JsonNode abortTransaction(String transaction) {
    return transactionAction("abort_transaction", transaction);
  }

  /** {@code list_transactions}: every transaction of the table, {@code [{"transaction", "state", "records"}]}. */
  public List<JsonNode> listTransactions() {
    JsonNode answer = action("list_transactions", JSON.createObjectNode().put("table", table));
    List<JsonNode> transactions = new ArrayList<>();
    answer.forEach(transactions::add);
    return transactions;
  }

  private JsonNode transactionAction(String type, String transaction) {
    return action(type, JSON.createObjectNode().put("table", table).put("transaction", transaction));
  }

  /** One {@code DoAction} with a JSON body; its (last) JSON answer. */
  JsonNode action(String type, ObjectNode body) {
    Iterator<Result> results =
        client.doAction(new Action(type, body.toString().getBytes(StandardCharsets.UTF_8)), options);
    JsonNode answer = null;
    while (results.hasNext()) {
      answer = readJson(results.next().getBody());
    }
    if (answer == null) {
      throw new IllegalStateException("shoal table \"" + table + "\" at " + endpoint + ": " + type + " gave no answer");
    }
    return answer;
  }

  static JsonNode readJson(byte[] body) {
    try {
      return JSON.readTree(body);
    } catch (java.io.IOException e) {
      throw new IllegalStateException(
          "shoal answered with invalid JSON: " + new String(body, StandardCharsets.UTF_8), e);
    }
  }

  @Override
  public void close() throws InterruptedException {
    try {
      client.close();
    } finally {
      allocator.close();
    }
  }

  /** A {@code PutResult}'s metadata: where the batch's records went in the table's log. */
  /**
   * A {@code PutResult}'s metadata: where the batch's records went in the table's log ({@code
   * endAddress}: one past its last byte), or, for a batch staged in a transaction, how many records
   * were staged ({@code staged}; -1 when the answer is not about a staged batch).
   */
  public record PutAcknowledgement(
      long batch,
      long records,
      long skipped,
      long firstAddress,
      long lastAddress,
      long endAddress,
      long durableAddress,
      long staged) {

    static PutAcknowledgement parse(byte[] raw) {
      JsonNode node = readJson(raw);
      return new PutAcknowledgement(
          node.path("batch").asLong(-1),
          node.path("records").asLong(0),
          node.path("skipped").asLong(0),
          node.path("first_address").asLong(-1),
          node.path("last_address").asLong(-1),
          node.path("end_address").asLong(-1),
          node.path("durable_address").asLong(-1),
          node.path("staged").asLong(-1));
    }
  }
}
