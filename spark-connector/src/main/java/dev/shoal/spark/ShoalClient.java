package dev.shoal.spark;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.Criteria;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.flight.SyncPutListener;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A Flight client of one shoal daemon (one shard): the protocol calls of {@code docs/protocol.md}
 * with JSON bodies, and errors turned into {@link ShoalException}s. Owns its allocator; closing
 * the client closes both (the allocator throws if Arrow memory leaked).
 */
public final class ShoalClient implements AutoCloseable {
  static final ObjectMapper JSON = new ObjectMapper();

  private final URI endpoint;
  private final BufferAllocator allocator;
  private final FlightClient client;
  private final CallOption[] callOptions;
  private final String token;
  private io.grpc.ManagedChannel planChannel;

  private ShoalClient(URI endpoint, String token, BufferAllocator allocator) {
    this.endpoint = endpoint;
    this.allocator = allocator;
    this.token = token;
    this.client = FlightClient.builder(allocator, new Location(endpoint)).build();
    if (token != null && !token.isEmpty()) {
      FlightCallHeaders headers = new FlightCallHeaders();
      headers.insert("authorization", "Bearer " + token);
      this.callOptions = new CallOption[] {new HeaderCallOption(headers)};
    } else {
      this.callOptions = new CallOption[0];
    }
  }

  /** A client of {@code endpoint} with its own root allocator. */
  public static ShoalClient open(URI endpoint, String token) {
    return new ShoalClient(endpoint, token, new RootAllocator(Long.MAX_VALUE));
  }

  public URI endpoint() {
    return endpoint;
  }

  public BufferAllocator allocator() {
    return allocator;
  }

  /** {@code GetSchema(path=[table])}: the table's inferred schema. */
  public Schema getSchema(String table) {
    try {
      return client.getSchema(FlightDescriptor.path(table), callOptions).getSchema();
    } catch (FlightRuntimeException e) {
      throw ShoalErrors.translate(e, endpoint, table, "GetSchema");
    }
  }

  /** {@code ListFlights}: the names of the daemon's tables. */
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
      throw ShoalErrors.translate(e, endpoint, null, "ListFlights");
    }
    return names;
  }

  /** {@code GetFlightInfo(cmd)}: plans a query. */
  public ShoalFlightPlan getFlightInfo(String table, ObjectNode command) {
    try {
      return getFlightInfoRaw(command);
    } catch (FlightRuntimeException e) {
      throw ShoalErrors.translate(e, endpoint, table, "GetFlightInfo " + command);
    }
  }

  /**
   * {@code GetFlightInfo(cmd)} without translating errors (capability probes). Arrow Java 12's
   * {@code FlightInfo} predates the {@code app_metadata} fields of FlightInfo (field 7) and
   * FlightEndpoint (field 4), where shoal puts its plan; the call therefore goes through the
   * generated gRPC stub, and the plan is read from the protobuf message's unknown fields.
   */
  ShoalFlightPlan getFlightInfoRaw(ObjectNode command) {
    byte[] body;
    try {
      body = JSON.writeValueAsBytes(command);
    } catch (java.io.IOException e) {
      throw new ShoalException("shoal: cannot encode the command " + command, e);
    }
    org.apache.arrow.flight.impl.Flight.FlightDescriptor descriptor = org.apache.arrow.flight.impl.Flight.FlightDescriptor.newBuilder()
        .setType(org.apache.arrow.flight.impl.Flight.FlightDescriptor.DescriptorType.CMD)
        .setCmd(com.google.protobuf.ByteString.copyFrom(body))
        .build();
    org.apache.arrow.flight.impl.Flight.FlightInfo proto;
    try {
      proto = org.apache.arrow.flight.impl.FlightServiceGrpc.newBlockingStub(planChannel())
          .withDeadlineAfter(120, java.util.concurrent.TimeUnit.SECONDS)
          .getFlightInfo(descriptor);
    } catch (io.grpc.StatusRuntimeException e) {
      throw org.apache.arrow.flight.grpc.StatusUtils.fromGrpcRuntimeException(e);
    }
    return ShoalFlightPlan.fromProtocol(endpoint, proto);
  }

  private synchronized io.grpc.ManagedChannel planChannel() {
    if (planChannel == null) {
      io.grpc.netty.NettyChannelBuilder builder = io.grpc.netty.NettyChannelBuilder.forAddress(endpoint.getHost(), endpoint.getPort())
          .maxInboundMessageSize(64 << 20);
      if (endpoint.getScheme().contains("tls")) {
        builder.useTransportSecurity();
      } else {
        builder.usePlaintext();
      }
      if (token != null && !token.isEmpty()) {
        io.grpc.Metadata headers = new io.grpc.Metadata();
        headers.put(io.grpc.Metadata.Key.of("authorization", io.grpc.Metadata.ASCII_STRING_MARSHALLER), "Bearer " + token);
        builder.intercept(io.grpc.stub.MetadataUtils.newAttachHeadersInterceptor(headers));
      }
      planChannel = builder.build();
    }
    return planChannel;
  }

  /** {@code DoGet(ticket)}: the stream of a query's record batches. */
  public FlightStream doGet(String table, byte[] ticket) {
    try {
      return client.getStream(new Ticket(ticket), callOptions);
    } catch (FlightRuntimeException e) {
      throw ShoalErrors.translate(e, endpoint, table, "DoGet");
    }
  }

  /** {@code DoAction(name, body)}: the first result's JSON body (or null when there is none). */
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
      throw ShoalErrors.translate(e, endpoint, table, "action " + name);
    } catch (java.io.IOException e) {
      throw new ShoalException("shoal: action " + name + " on table '" + table + "': cannot read the answer", e);
    }
  }

  /** Creates {@code table} unless it exists. */
  public void createTableIfNotExists(String table) {
    ObjectNode body = JSON.createObjectNode().put("name", table).put("if_not_exists", true);
    action("create_table", body, table);
  }

  /**
   * An open {@code DoPut} stream to {@code table}: batches of JSON records, each acknowledged by
   * the daemon before {@link Put#send} returns.
   */
  public Put startPut(String table) {
    return new Put(table);
  }

  /** One {@code DoPut} stream. */
  public final class Put implements AutoCloseable {
    private final String table;
    private final VectorSchemaRoot root;
    private final VarCharVector json;
    private final SyncPutListener listener = new SyncPutListener();
    private final FlightClient.ClientStreamListener stream;
    private long records;
    private boolean finished;

    private Put(String table) {
      this.table = table;
      this.json = new VarCharVector("json", allocator);
      this.root = VectorSchemaRoot.of(json);
      try {
        this.stream = client.startPut(FlightDescriptor.path(table), root, listener, callOptions);
      } catch (FlightRuntimeException e) {
        root.close();
        throw ShoalErrors.translate(e, endpoint, table, "DoPut");
      }
    }

    /** Sends one batch of records and waits for its acknowledgement; returns its metadata. */
    public JsonNode send(List<String> records) {
      json.allocateNew(records.size());
      for (int i = 0; i < records.size(); i++) {
        json.setSafe(i, records.get(i).getBytes(StandardCharsets.UTF_8));
      }
      root.setRowCount(records.size());
      try {
        stream.putNext();
        try (org.apache.arrow.flight.PutResult ack = listener.read()) {
          if (ack == null) {
            stream.getResult();
            throw new ShoalException("shoal DoPut on table '" + table + "' at " + endpoint + ": the stream ended without acknowledging the batch");
          }
          this.records += records.size();
          byte[] metadata = new byte[(int) ack.getApplicationMetadata().readableBytes()];
          ack.getApplicationMetadata().getBytes(0, metadata);
          return JSON.readTree(metadata);
        }
      } catch (FlightRuntimeException e) {
        throw ShoalErrors.translate(e, endpoint, table, "DoPut");
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new ShoalException("shoal DoPut on table '" + table + "' interrupted", e);
      } catch (java.util.concurrent.ExecutionException | java.io.IOException e) {
        Throwable cause = e.getCause() != null ? e.getCause() : e;
        if (cause instanceof FlightRuntimeException) {
          throw ShoalErrors.translate((FlightRuntimeException) cause, endpoint, table, "DoPut");
        }
        throw new ShoalException("shoal DoPut on table '" + table + "' at " + endpoint + " failed: " + cause, cause);
      } finally {
        json.clear();
      }
    }

    /** Records acknowledged so far. */
    public long records() {
      return records;
    }

    /** Ends the stream and waits for the daemon to close it. */
    public void finish() {
      if (!finished) {
        finished = true;
        try {
          stream.completed();
          stream.getResult();
        } catch (FlightRuntimeException e) {
          throw ShoalErrors.translate(e, endpoint, table, "DoPut");
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
      if (planChannel != null) {
        planChannel.shutdownNow();
        planChannel.awaitTermination(10, java.util.concurrent.TimeUnit.SECONDS);
      }
      client.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      allocator.close();
    }
  }
}
