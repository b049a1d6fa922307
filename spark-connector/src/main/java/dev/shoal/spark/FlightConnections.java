package dev.shoal.spark;

import java.net.URI;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;

/**
 * Flight connections shared by every {@link FlightShoalClient} of a JVM, one per daemon endpoint
 * and bearer token: a {@link FlightClient} (its gRPC channel and root allocator) and a second gRPC
 * channel for {@code GetFlightInfo} (see {@link FlightShoalClient#getFlightInfo}).
 *
 * <p>Spark opens a client for each step of a query — {@code loadTable} (GetSchema), the scan
 * builder, planning (GetFlightInfo), every partition reader (DoGet) — and each used to build its
 * own channels: a TCP connection, an HTTP/2 handshake and Netty set-up per step, several
 * milliseconds each, more than a point lookup costs in the daemon. A connection here is leased by
 * {@link #acquire} and returned by {@link Connection#release}; once no lease is left it stays open
 * for {@link #IDLE_CLOSE_MILLIS} (the next query of a session reuses it) and is then closed by a
 * daemon thread. gRPC reconnects a channel by itself when the daemon restarts.
 */
final class FlightConnections {
  /** How long a connection without leases stays open, in milliseconds. */
  static final long IDLE_CLOSE_MILLIS = 30_000;

  private static final Map<Key, Connection> OPEN = new HashMap<>();
  private static final ScheduledExecutorService CLOSER = Executors.newSingleThreadScheduledExecutor(runnable -> {
    Thread thread = new Thread(runnable, "shoal-flight-connections");
    thread.setDaemon(true);
    return thread;
  });

  private FlightConnections() {}

  private record Key(URI endpoint, String token) {}

  /** A shared connection; every {@link #acquire} is matched by one {@link #release}. */
  static final class Connection {
    private final Key key;
    private final BufferAllocator allocator;
    private final FlightClient client;
    private ManagedChannel planChannel;
    private int leases;
    private ScheduledFuture<?> closing;

    private Connection(Key key) {
      this.key = key;
      this.allocator = new RootAllocator(Long.MAX_VALUE);
      this.client = FlightClient.builder(allocator, new Location(key.endpoint())).build();
    }

    /** The Flight client; streams it reads allocate from {@link #allocator()}. */
    FlightClient client() {
      return client;
    }

    /** The connection's root allocator (clients take child allocators of it for what they write). */
    BufferAllocator allocator() {
      return allocator;
    }

    /** The gRPC channel for calls made through the generated stub, with the bearer token attached. */
    synchronized ManagedChannel planChannel() {
      if (planChannel == null) {
        URI endpoint = key.endpoint();
        NettyChannelBuilder builder = NettyChannelBuilder.forAddress(endpoint.getHost(), endpoint.getPort())
            .maxInboundMessageSize(64 << 20);
        if (endpoint.getScheme().contains("tls")) {
          builder.useTransportSecurity();
        } else {
          builder.usePlaintext();
        }
        String token = key.token();
        if (token != null && !token.isEmpty()) {
          Metadata headers = new Metadata();
          headers.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + token);
          builder.intercept(MetadataUtils.newAttachHeadersInterceptor(headers));
        }
        planChannel = builder.build();
      }
      return planChannel;
    }

    /** Returns the lease; the last one schedules the close after {@link #IDLE_CLOSE_MILLIS}. */
    void release() {
      synchronized (OPEN) {
        if (leases <= 0) {
          throw new IllegalStateException("shoal: Flight connection to " + key.endpoint() + " released more often than acquired");
        }
        if (--leases == 0) {
          closing = CLOSER.schedule(() -> closeIfIdle(this), IDLE_CLOSE_MILLIS, TimeUnit.MILLISECONDS);
        }
      }
    }

    private void closeNow() {
      try {
        synchronized (this) {
          if (planChannel != null) {
            planChannel.shutdownNow();
            planChannel.awaitTermination(10, TimeUnit.SECONDS);
          }
        }
        client.close();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } finally {
        // Every stream was closed before its lease was returned: a leak here is a bug of ours.
        allocator.close();
      }
    }
  }

  /** A lease on the connection to {@code endpoint} with {@code token} (null or empty: none), opened if needed. */
  static Connection acquire(URI endpoint, String token) {
    Key key = new Key(endpoint, token == null ? "" : token);
    synchronized (OPEN) {
      Connection connection = OPEN.computeIfAbsent(key, Connection::new);
      connection.leases++;
      if (connection.closing != null) {
        connection.closing.cancel(false);
        connection.closing = null;
      }
      return connection;
    }
  }

  private static void closeIfIdle(Connection connection) {
    synchronized (OPEN) {
      if (connection.leases > 0 || OPEN.get(connection.key) != connection) {
        return;
      }
      OPEN.remove(connection.key);
    }
    connection.closeNow();
  }

  /** Number of open connections (leased or idle), for tests. */
  static int openConnections() {
    synchronized (OPEN) {
      return OPEN.size();
    }
  }
}
