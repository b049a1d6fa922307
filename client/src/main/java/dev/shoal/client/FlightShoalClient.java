package dev.shoal.client;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors;
import com.google.protobuf.Message;
import com.google.protobuf.UnknownFieldSet;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.CallOptions;
import org.apache.arrow.flight.Criteria;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.flight.impl.Flight;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * {@link ShoalClient} of one shoal daemon over Arrow Flight ({@code grpc://host:port}, {@code
 * grpc+tls://host:port} or {@code host:port}). It leases its connection from {@link
 * FlightConnections}, which shares connections between the clients of a JVM, and owns a child
 * allocator for what it writes; closing the client closes that allocator (which throws if Arrow
 * memory leaked) and returns the lease. Thread-safe (each {@link Put} and stream is one thread's).
 */
public final class FlightShoalClient implements ShoalClient {
  private static final int FLIGHT_INFO_APP_METADATA = 7;
  private static final int FLIGHT_ENDPOINT_APP_METADATA = 4;
  /** Deadline of a plan when the options set none, in seconds. */
  private static final long DEFAULT_PLAN_DEADLINE_SECONDS = 120;

  private final String endpoint;
  private final ShoalClientOptions options;
  private final FlightConnections.Connection connection;
  private final BufferAllocator allocator;
  private final FlightClient client;
  private final CallOption[] callOptions;
  private boolean closed;

  /**
   * A client of {@code endpoint} over the JVM's shared connection to it.
   *
   * @throws IllegalArgumentException on a malformed endpoint (naming option {@code endpoint})
   */
  public FlightShoalClient(String endpoint, ShoalClientOptions options) {
    URI uri = ShoalEndpoint.flightUri(endpoint);
    this.endpoint = endpoint;
    this.options = options;
    this.connection = FlightConnections.acquire(uri, options.token(), options.idleCloseMillis());
    try {
      this.allocator = connection.allocator().newChildAllocator("shoal-client " + endpoint, 0, Long.MAX_VALUE);
    } catch (RuntimeException e) {
      // No client to close: return the lease here, or the connection would never close.
      connection.release();
      throw e;
    }
    this.client = connection.client();
    List<CallOption> opts = new ArrayList<>();
    if (options.callTimeout() != null) {
      opts.add(CallOptions.timeout(options.callTimeout().toMillis(), TimeUnit.MILLISECONDS));
    }
    String token = options.token();
    if (token != null && !token.isEmpty()) {
      FlightCallHeaders headers = new FlightCallHeaders();
      headers.insert("authorization", "Bearer " + token);
      opts.add(new HeaderCallOption(headers));
    }
    this.callOptions = opts.toArray(new CallOption[0]);
  }

  @Override
  public String endpoint() {
    return endpoint;
  }

  private RuntimeException fail(FlightRuntimeException e, String table, String request) {
    return options.fail(new ShoalClientException(e.status().code().name(), e.getMessage(), request, table, endpoint, e));
  }

  private RuntimeException fail(String detail, String table, String request, Throwable cause) {
    return options.fail(new ShoalClientException(null, detail, request, table, endpoint, cause));
  }

  @Override
  public Schema getSchema(String table) {
    try {
      return client.getSchema(FlightDescriptor.path(table), callOptions).getSchema();
    } catch (FlightRuntimeException e) {
      throw fail(e, table, "GetSchema");
    }
  }

  @Override
  public List<String> listTables() {
    List<String> names = new ArrayList<>();
    try {
      for (FlightInfo info : client.listFlights(Criteria.ALL, callOptions)) {
        List<String> path = info.getDescriptor().getPath();
        if (!path.isEmpty()) {
          names.add(path.get(0));
        }
      }
    } catch (FlightRuntimeException e) {
      throw fail(e, null, "ListFlights");
    }
    return names;
  }

  /**
   * {@code GetFlightInfo(cmd)}. Arrow Java 12's {@code FlightInfo} predates the {@code
   * app_metadata} fields of FlightInfo (field 7) and FlightEndpoint (field 4), where shoal puts its
   * plan; the call therefore goes through the generated gRPC stub, and the plan is read from the
   * protobuf message by reflection (see {@link #appMetadata}).
   */
  @Override
  public ShoalFlightPlan getFlightInfo(String table, ObjectNode command) {
    byte[] body;
    try {
      body = JSON.writeValueAsBytes(command);
    } catch (IOException e) {
      throw fail("cannot encode the command " + command, table, "GetFlightInfo", e);
    }
    Flight.FlightDescriptor descriptor = Flight.FlightDescriptor.newBuilder()
        .setType(Flight.FlightDescriptor.DescriptorType.CMD)
        .setCmd(ByteString.copyFrom(body))
        .build();
    long deadlineMillis = options.callTimeout() != null
        ? options.callTimeout().toMillis() : TimeUnit.SECONDS.toMillis(DEFAULT_PLAN_DEADLINE_SECONDS);
    Flight.FlightInfo proto;
    try {
      try {
        proto = org.apache.arrow.flight.impl.FlightServiceGrpc.newBlockingStub(connection.planChannel())
            .withDeadlineAfter(deadlineMillis, TimeUnit.MILLISECONDS)
            .getFlightInfo(descriptor);
      } catch (io.grpc.StatusRuntimeException e) {
        throw org.apache.arrow.flight.grpc.StatusUtils.fromGrpcRuntimeException(e);
      }
    } catch (FlightRuntimeException e) {
      throw fail(e, table, "GetFlightInfo " + command);
    }
    return plan(proto, table);
  }

  private ShoalFlightPlan plan(Flight.FlightInfo proto, String table) {
    FlightInfo info;
    try {
      info = FlightInfo.deserialize(proto.toByteString().asReadOnlyByteBuffer());
    } catch (IOException | URISyntaxException e) {
      throw fail("cannot read the FlightInfo: " + e, table, "GetFlightInfo", e);
    }
    List<ShoalFlightPlan.Endpoint> endpoints = new ArrayList<>();
    List<FlightEndpoint> flightEndpoints = info.getEndpoints();
    for (int i = 0; i < flightEndpoints.size(); i++) {
      FlightEndpoint e = flightEndpoints.get(i);
      List<Location> locations = e.getLocations();
      URI location = locations.isEmpty() ? null : locations.get(0).getUri();
      JsonNode metadata = i < proto.getEndpointCount()
          ? appMetadata(proto.getEndpoint(i), FLIGHT_ENDPOINT_APP_METADATA) : NullNode.getInstance();
      endpoints.add(new ShoalFlightPlan.Endpoint(e.getTicket().getBytes(), location, metadata));
    }
    return new ShoalFlightPlan(endpoint, info.getSchema(), appMetadata(proto, FLIGHT_INFO_APP_METADATA), endpoints);
  }

  /**
   * The {@code app_metadata} bytes (field {@code number}) of a Flight message as JSON. Arrow Java
   * 12's generated Flight.proto predates the field, so there it is an unknown field; Arrow Java 14
   * and later know it. Protobuf reflection reads it in both cases.
   */
  private static JsonNode appMetadata(Message message, int number) {
    ByteString value = ByteString.EMPTY;
    Descriptors.FieldDescriptor field = message.getDescriptorForType().findFieldByNumber(number);
    if (field != null && field.getJavaType() == Descriptors.FieldDescriptor.JavaType.BYTE_STRING) {
      value = (ByteString) message.getField(field);
    } else {
      UnknownFieldSet fields = message.getUnknownFields();
      if (fields.hasField(number) && !fields.getField(number).getLengthDelimitedList().isEmpty()) {
        value = fields.getField(number).getLengthDelimitedList().get(0);
      }
    }
    if (value.isEmpty()) {
      return NullNode.getInstance();
    }
    try {
      return JSON.readTree(value.toByteArray());
    } catch (IOException e) {
      return NullNode.getInstance();
    }
  }

  @Override
  public ShoalBatchStream doGet(String table, byte[] ticket) {
    try {
      return new FlightBatchStream(client.getStream(new Ticket(ticket), callOptions), table);
    } catch (FlightRuntimeException e) {
      throw fail(e, table, "DoGet");
    }
  }

  /** A {@link FlightStream} as a {@link ShoalBatchStream}. */
  private final class FlightBatchStream extends TransportBatchStream {
    private final FlightStream stream;
    private final String table;

    FlightBatchStream(FlightStream stream, String table) {
      this.stream = stream;
      this.table = table;
    }

    @Override
    protected boolean load() {
      return stream.next();
    }

    @Override
    protected VectorSchemaRoot current() {
      return stream.getRoot();
    }

    @Override
    protected void closeStream(boolean finished) throws Exception {
      if (!finished) {
        stream.cancel("shoal: the reader is done (limit reached or task ended)", null);
      }
      stream.close();
    }

    @Override
    protected RuntimeException failure(Exception e) {
      return e instanceof FlightRuntimeException flight
          ? fail(flight, table, "DoGet") : fail("the DoGet stream failed: " + e, table, "DoGet", e);
    }
  }

  @Override
  public JsonNode action(String name, ObjectNode body, String table) {
    try {
      Iterator<Result> results = client.doAction(new Action(name, JSON.writeValueAsBytes(body)), callOptions);
      JsonNode first = null;
      while (results.hasNext()) {
        Result r = results.next();
        if (first == null) {
          first = JSON.readTree(r.getBody());
        }
      }
      return first;
    } catch (FlightRuntimeException e) {
      throw fail(e, table, "action " + name);
    } catch (IOException e) {
      throw fail("cannot read the answer: " + e, table, "action " + name, e);
    }
  }

  @Override
  public Put startPut(String table, Schema schema) {
    return new FlightPut(table, schema);
  }

  /** One {@code DoPut} stream; each batch's acknowledgement is read before the next is sent. */
  private final class FlightPut implements Put {
    private final String table;
    private final VectorSchemaRoot root;
    private final SyncPutListener listener = new SyncPutListener();
    private final FlightClient.ClientStreamListener stream;
    private long records;
    private boolean finished;

    FlightPut(String table, Schema schema) {
      this.table = table;
      this.root = VectorSchemaRoot.create(schema, allocator);
      try {
        this.stream = client.startPut(FlightDescriptor.path(table), root, listener, callOptions);
      } catch (FlightRuntimeException e) {
        root.close();
        throw fail(e, table, "DoPut");
      } catch (RuntimeException e) {
        root.close();
        throw e;
      }
    }

    @Override
    public VectorSchemaRoot root() {
      return root;
    }

    @Override
    public JsonNode sendBatch(JsonNode metadata) {
      int rows = root.getRowCount();
      try {
        if (metadata == null) {
          stream.putNext();
        } else {
          byte[] raw = metadata.toString().getBytes(StandardCharsets.UTF_8);
          ArrowBuf buffer = allocator.buffer(raw.length);
          buffer.writeBytes(raw); // (setBytes would leave writerIndex 0: empty metadata on the wire)
          stream.putNext(buffer); // takes ownership of the buffer
        }
        try (org.apache.arrow.flight.PutResult ack = listener.read()) {
          if (ack == null) {
            stream.getResult();
            throw fail("the stream ended without acknowledging the batch", table, "DoPut", null);
          }
          records += rows;
          ArrowBuf answer = ack.getApplicationMetadata();
          byte[] bytes = new byte[answer == null ? 0 : (int) answer.readableBytes()];
          if (answer != null) {
            answer.getBytes(0, bytes);
          }
          return bytes.length == 0 ? JSON.createObjectNode() : JSON.readTree(bytes);
        }
      } catch (FlightRuntimeException e) {
        throw fail(e, table, "DoPut");
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw fail("interrupted", table, "DoPut", e);
      } catch (java.util.concurrent.ExecutionException | IOException e) {
        Throwable cause = e.getCause() != null ? e.getCause() : e;
        if (cause instanceof FlightRuntimeException) {
          throw fail((FlightRuntimeException) cause, table, "DoPut");
        }
        throw fail(String.valueOf(cause), table, "DoPut", cause);
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
      if (!finished) {
        finished = true;
        try {
          stream.completed();
          stream.getResult();
        } catch (FlightRuntimeException e) {
          throw fail(e, table, "DoPut");
        }
      }
    }

    @Override
    public void close() {
      try {
        if (!finished) {
          finished = true;
          try {
            stream.error(new RuntimeException("shoal writer aborted"));
            stream.getResult();
          } catch (RuntimeException ignored) {
            // the stream was cancelled on purpose
          }
        }
      } finally {
        root.close();
      }
    }
  }

  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    try {
      allocator.close();
    } finally {
      connection.release();
    }
  }
}
