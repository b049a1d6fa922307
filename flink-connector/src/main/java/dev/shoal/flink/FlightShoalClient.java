package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
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
import org.apache.arrow.flight.PutResult;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;

/**
 * {@link ShoalClient} over Arrow Flight: a shoal daemon at {@code grpc://host:port}, {@code
 * grpc+tls://host:port} or {@code host:port}. Thread-safe: one gRPC channel, one Arrow allocator;
 * every call builds its own vectors. The channel's threads are its own and end with {@link #close}
 * ({@link FlightTransport}).
 *
 * <p>Errors surface as Arrow's {@code FlightRuntimeException} with the daemon's status code; {@link
 * ShoalErrors} decides which are transient.
 */
final class FlightShoalClient implements ShoalClient {

  private static final ObjectMapper JSON = ShoalClient.JSON;

  private final String endpoint;
  private final String table;
  private final BufferAllocator allocator;
  private final FlightTransport transport;
  private final FlightClient client;
  private final CallOption[] options;

  /**
   * @param endpoint {@code grpc://host:port}, {@code grpc+tls://host:port}, or {@code host:port}
   *     (plain gRPC)
   * @param table the table every call addresses
   * @param token bearer token sent as {@code authorization: Bearer <token>}; null or empty for none
   * @param callTimeout deadline of each call
   */
  FlightShoalClient(String endpoint, String table, String token, Duration callTimeout) {
    this.endpoint = endpoint;
    this.table = table;
    this.allocator = new RootAllocator(Long.MAX_VALUE);
    try {
      this.transport = new FlightTransport(ShoalEndpoint.flightLocation(endpoint).getUri(), allocator);
      this.client = transport.client();
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

  @Override
  public String endpoint() {
    return endpoint;
  }

  @Override
  public String table() {
    return table;
  }

  /** The batch's {@code {"transaction": id}} goes as its {@code FlightData.app_metadata}. */
  @Override
  public PutAcknowledgement put(List<byte[]> records, long bytes, String transaction) throws InterruptedException {
    return put(table, records, bytes, transaction);
  }

  /**
   * {@link #put(List, long, String)} into {@code table} instead of this client's table (a shard's
   * own table {@code T.shard-i}, for {@link KeyRoutingShoalClient}).
   */
  PutAcknowledgement put(String table, List<byte[]> records, long bytes, String transaction) throws InterruptedException {
    try (VectorSchemaRoot root = ShoalClient.jsonBatch(allocator, records, bytes);
        SyncPutListener listener = new SyncPutListener()) {
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
        return PutAcknowledgement.parse(raw, table);
      }
    }
  }

  @Override
  public JsonNode action(String type, ObjectNode body) {
    Iterator<Result> results =
        client.doAction(new Action(type, body.toString().getBytes(StandardCharsets.UTF_8)), options);
    JsonNode answer = null;
    while (results.hasNext()) {
      answer = ShoalClient.readJson(results.next().getBody());
    }
    if (answer == null) {
      throw new IllegalStateException("shoal table \"" + table + "\" at " + endpoint + ": " + type + " gave no answer");
    }
    return answer;
  }

  @Override
  public JsonNode query(ObjectNode command, java.util.function.Consumer<VectorSchemaRoot> batches) {
    org.apache.arrow.flight.FlightInfo info = client.getInfo(
        FlightDescriptor.command(command.toString().getBytes(StandardCharsets.UTF_8)), options);
    byte[] metadata = info.getAppMetadata();
    JsonNode plan = metadata == null || metadata.length == 0 ? JSON.createObjectNode() : ShoalClient.readJson(metadata);
    for (org.apache.arrow.flight.FlightEndpoint part : info.getEndpoints()) {
      try (org.apache.arrow.flight.FlightStream stream = client.getStream(part.getTicket(), options)) {
        while (stream.next()) {
          batches.accept(stream.getRoot());
        }
      } catch (RuntimeException e) {
        throw e;
      } catch (Exception e) {
        throw new IllegalStateException("shoal table \"" + table + "\" at " + endpoint + ": closing a DoGet stream: " + e, e);
      }
    }
    return plan;
  }

  @Override
  public void close() throws InterruptedException {
    try {
      transport.close();
    } finally {
      allocator.close();
    }
  }

  @Override
  public List<String> listTables() {
    List<String> names = new ArrayList<>();
    for (org.apache.arrow.flight.FlightInfo info : client.listFlights(org.apache.arrow.flight.Criteria.ALL, options)) {
      List<String> path = info.getDescriptor().getPath();
      if (!path.isEmpty()) {
        names.add(path.get(0));
      }
    }
    return names;
  }

  @Override
  public org.apache.arrow.vector.types.pojo.Schema schema(String table) {
    return client.getSchema(FlightDescriptor.path(table), options).getSchema();
  }
}
