package dev.shoal.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors;
import com.google.protobuf.Message;
import com.google.protobuf.UnknownFieldSet;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
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
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A Flight client of one shoal daemon (one shard, {@code grpc://host:port} or
 * {@code grpc+tls://host:port}). It leases its connection from {@link FlightConnections}, which
 * shares connections between the clients of a JVM, and owns a child allocator for what it writes;
 * closing the client closes that allocator (which throws if Arrow memory leaked) and returns the
 * lease.
 */
final class FlightShoalClient implements ShoalClient {
  private static final int FLIGHT_INFO_APP_METADATA = 7;
  private static final int FLIGHT_ENDPOINT_APP_METADATA = 4;

  private final URI endpoint;
  private final FlightConnections.Connection connection;
  private final BufferAllocator allocator;
  private final FlightClient client;
  private final CallOption[] callOptions;

  private FlightShoalClient(URI endpoint, String token) {
    this.endpoint = endpoint;
    this.connection = FlightConnections.acquire(endpoint, token);
    try {
      this.allocator = connection.allocator().newChildAllocator("shoal-client " + endpoint, 0, Long.MAX_VALUE);
    } catch (RuntimeException e) {
      // No client to close: return the lease here, or the connection would never close.
      connection.release();
      throw e;
    }
    this.client = connection.client();
    if (token != null && !token.isEmpty()) {
      FlightCallHeaders headers = new FlightCallHeaders();
      headers.insert("authorization", "Bearer " + token);
      this.callOptions = new CallOption[] {new HeaderCallOption(headers)};
    } else {
      this.callOptions = new CallOption[0];
    }
  }

  /** A client of {@code endpoint} over the JVM's shared connection to it. */
  static FlightShoalClient open(URI endpoint, String token) {
    return new FlightShoalClient(endpoint, token);
  }

  @Override
  public URI endpoint() {
    return endpoint;
  }

  private ShoalException translate(FlightRuntimeException e, String table, String request) {
    return ShoalErrors.translate(e.status().code().name(), e.getMessage(), endpoint, table, request, e);
  }

  @Override
  public Schema getSchema(String table) {
    try {
      return client.getSchema(FlightDescriptor.path(table), callOptions).getSchema();
    } catch (FlightRuntimeException e) {
      throw translate(e, table, "GetSchema");
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
      throw translate(e, null, "ListFlights");
    }
    return names;
  }

  /**
   * {@code GetFlightInfo(cmd)}. Arrow Java 12's {@code FlightInfo} predates the
   * {@code app_metadata} fields of FlightInfo (field 7) and FlightEndpoint (field 4), where shoal
   * puts its plan; the call therefore goes through the generated gRPC stub, and the plan is read
   * from the protobuf message by reflection (see {@link #appMetadata}).
   */
  @Override
  public ShoalFlightPlan getFlightInfo(String table, ObjectNode command) {
    byte[] body;
    try {
      body = JSON.writeValueAsBytes(command);
    } catch (IOException e) {
      throw new ShoalException("shoal: cannot encode the command " + command, e);
    }
    Flight.FlightDescriptor descriptor = Flight.FlightDescriptor.newBuilder()
        .setType(Flight.FlightDescriptor.DescriptorType.CMD)
        .setCmd(ByteString.copyFrom(body))
        .build();
    Flight.FlightInfo proto;
    try {
      try {
        proto = org.apache.arrow.flight.impl.FlightServiceGrpc.newBlockingStub(connection.planChannel())
            .withDeadlineAfter(120, java.util.concurrent.TimeUnit.SECONDS)
            .getFlightInfo(descriptor);
      } catch (io.grpc.StatusRuntimeException e) {
        throw org.apache.arrow.flight.grpc.StatusUtils.fromGrpcRuntimeException(e);
      }
    } catch (FlightRuntimeException e) {
      throw translate(e, table, "GetFlightInfo " + command);
    }
    return plan(proto);
  }

  private ShoalFlightPlan plan(Flight.FlightInfo proto) {
    FlightInfo info;
    try {
      info = FlightInfo.deserialize(proto.toByteString().asReadOnlyByteBuffer());
    } catch (IOException | URISyntaxException e) {
      throw new ShoalException("shoal at " + endpoint + ": cannot read the FlightInfo: " + e, e);
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
   * 12's generated Flight.proto predates the field, so there it is an unknown field; Arrow Java
   * 14 and later (Spark 4.x builds) know it. Protobuf reflection reads it in both cases.
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
      throw translate(e, table, "DoGet");
    }
  }

  /** A {@link FlightStream} as a {@link ShoalBatchStream}. */
  private final class FlightBatchStream implements ShoalBatchStream {
    private final FlightStream stream;
    private final String table;
    private boolean finished;

    FlightBatchStream(FlightStream stream, String table) {
      this.stream = stream;
      this.table = table;
    }

    @Override
    public boolean next() {
      try {
        boolean more = stream.next();
        finished = !more;
        return more;
      } catch (FlightRuntimeException e) {
        throw translate(e, table, "DoGet");
      }
    }

    @Override
    public VectorSchemaRoot root() {
      return stream.getRoot();
    }

    @Override
    public void close() {
      if (!finished) {
        stream.cancel("shoal: the reader is done (limit reached or task ended)", null);
      }
      try {
        stream.close();
      } catch (Exception e) {
        if (finished) {
          throw new ShoalException("shoal table '" + table + "': closing the DoGet stream at " + endpoint + " failed", e);
        }
      }
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
      throw translate(e, table, "action " + name);
    } catch (IOException e) {
      throw new ShoalException("shoal: action " + name + " on table '" + table + "': cannot read the answer", e);
    }
  }

  @Override
  public Put startPut(String table) {
    return new FlightPut(table);
  }

  /** One {@code DoPut} stream. */
  private final class FlightPut implements Put {
    private final String table;
    private final VectorSchemaRoot root;
    private final VarCharVector json;
    private final SyncPutListener listener = new SyncPutListener();
    private final FlightClient.ClientStreamListener stream;
    private long records;
    private boolean finished;

    FlightPut(String table) {
      this.table = table;
      this.json = new VarCharVector("json", allocator);
      this.root = VectorSchemaRoot.of(json);
      try {
        this.stream = client.startPut(FlightDescriptor.path(table), root, listener, callOptions);
      } catch (FlightRuntimeException e) {
        root.close();
        throw translate(e, table, "DoPut");
      }
    }

    @Override
    public JsonNode send(List<String> batch) {
      json.allocateNew(batch.size());
      for (int i = 0; i < batch.size(); i++) {
        json.setSafe(i, batch.get(i).getBytes(StandardCharsets.UTF_8));
      }
      root.setRowCount(batch.size());
      try {
        stream.putNext();
        try (org.apache.arrow.flight.PutResult ack = listener.read()) {
          if (ack == null) {
            stream.getResult();
            throw new ShoalException("shoal DoPut on table '" + table + "' at " + endpoint + ": the stream ended without acknowledging the batch");
          }
          this.records += batch.size();
          byte[] metadata = new byte[(int) ack.getApplicationMetadata().readableBytes()];
          ack.getApplicationMetadata().getBytes(0, metadata);
          return JSON.readTree(metadata);
        }
      } catch (FlightRuntimeException e) {
        throw translate(e, table, "DoPut");
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new ShoalException("shoal DoPut on table '" + table + "' interrupted", e);
      } catch (java.util.concurrent.ExecutionException | IOException e) {
        Throwable cause = e.getCause() != null ? e.getCause() : e;
        if (cause instanceof FlightRuntimeException) {
          throw translate((FlightRuntimeException) cause, table, "DoPut");
        }
        throw new ShoalException("shoal DoPut on table '" + table + "' at " + endpoint + " failed: " + cause, cause);
      } finally {
        json.clear();
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
          throw translate(e, table, "DoPut");
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
    try {
      allocator.close();
    } finally {
      connection.release();
    }
  }
}
