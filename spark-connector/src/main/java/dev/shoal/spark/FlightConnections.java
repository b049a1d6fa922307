package dev.shoal.spark;

import java.net.URI;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioSocketChannel;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightGrpcUtils;
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
 *
 * <p>A connection's channels run on a Netty event loop and an executor of its own (daemon threads
 * named {@code shoal-flight-HOST:PORT-*}), which its close ends: gRPC's JVM-wide shared event
 * loops and their {@code grpc-shared-destroyer} thread would outlive it, keeping the class loader
 * of whatever thread first connected (issue 19).
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
    private final EventLoopGroup eventLoop;
    private final ExecutorService executor;
    private final ManagedChannel channel;
    private final FlightClient client;
    /** Every thread the event loop and executor started, joined by {@link #closeNow}. */
    private final java.util.List<Thread> started = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    private ManagedChannel planChannel;
    private int leases;
    private ScheduledFuture<?> closing;

    private Connection(Key key) {
      this.key = key;
      String scheme = key.endpoint().getScheme();
      if (!"grpc".equals(scheme) && !"grpc+tcp".equals(scheme) && !"grpc+tls".equals(scheme)) {
        throw new IllegalArgumentException("shoal: endpoint '" + key.endpoint() + "' has scheme '" + scheme
            + "'; expected grpc://host:port or grpc+tls://host:port");
      }
      this.allocator = new RootAllocator(Long.MAX_VALUE);
      String name = "shoal-flight-" + key.endpoint().getHost() + ":" + key.endpoint().getPort();
      this.eventLoop = new NioEventLoopGroup(1, threads(name + "-loop", started));
      this.executor = Executors.newCachedThreadPool(threads(name + "-call", started));
      ManagedChannel built = null;
      try {
        // What FlightClient.Builder sets: no inbound size limit below Flight's own, no tracing.
        built = channelBuilder().maxInboundMessageSize(Integer.MAX_VALUE).maxInboundMetadataSize(Integer.MAX_VALUE)
            .maxTraceEvents(0).build();
        this.client = FlightGrpcUtils.createFlightClientWithSharedChannel(allocator, built);
        this.channel = built;
      } catch (Throwable e) {
        if (built != null) {
          built.shutdownNow();
        }
        eventLoop.shutdownGracefully(0, 0, TimeUnit.SECONDS);
        executor.shutdownNow();
        allocator.close();
        throw e;
      }
    }

    /** A channel builder on this connection's event loop and executor, with the endpoint's transport security. */
    private NettyChannelBuilder channelBuilder() {
      URI endpoint = key.endpoint();
      NettyChannelBuilder builder = NettyChannelBuilder.forAddress(endpoint.getHost(), endpoint.getPort())
          .eventLoopGroup(eventLoop)
          .channelType(NioSocketChannel.class)
          .executor(executor)
          .offloadExecutor(executor);
      if ("grpc+tls".equals(endpoint.getScheme())) {
        builder.useTransportSecurity();
      } else {
        builder.usePlaintext();
      }
      return builder;
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
        NettyChannelBuilder builder = channelBuilder().maxInboundMessageSize(64 << 20);
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

    /**
     * Shuts everything down first (so that one failing step cannot leave threads running), then
     * waits for it; the allocator is closed last.
     */
    private void closeNow() {
      ManagedChannel plan;
      synchronized (this) {
        plan = planChannel;
      }
      try {
        try {
          client.close();
        } catch (Exception e) {
          // the channel below is shut down regardless
        }
        if (plan != null) {
          plan.shutdownNow();
        }
        channel.shutdownNow();
        eventLoop.shutdownGracefully(0, 10, TimeUnit.SECONDS);
        executor.shutdownNow();
        if (plan != null) {
          plan.awaitTermination(10, TimeUnit.SECONDS);
        }
        channel.awaitTermination(10, TimeUnit.SECONDS);
        eventLoop.terminationFuture().await(10, TimeUnit.SECONDS);
        executor.awaitTermination(10, TimeUnit.SECONDS);
        // Termination is signalled from inside the last task: the threads themselves end just after.
        java.util.List<Thread> threads;
        synchronized (started) {
          threads = new java.util.ArrayList<>(started);
        }
        for (Thread thread : threads) {
          thread.join(10_000);
        }
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

  /** Daemon threads whose context class loader is the connector's, not that of the thread that starts them. */
  private static ThreadFactory threads(String prefix, java.util.List<Thread> started) {
    AtomicInteger n = new AtomicInteger();
    ClassLoader connector = FlightConnections.class.getClassLoader();
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + "-" + n.incrementAndGet());
      thread.setDaemon(true);
      thread.setContextClassLoader(connector);
      synchronized (started) {
        started.removeIf(t -> t.getState() == Thread.State.TERMINATED); // the executor's expired threads
        started.add(thread);
      }
      return thread;
    };
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

  /** Closes every connection without a lease now rather than after {@link #IDLE_CLOSE_MILLIS}, for tests. */
  static void closeIdleNow() {
    java.util.List<Connection> idle = new java.util.ArrayList<>();
    synchronized (OPEN) {
      for (Connection c : OPEN.values()) {
        if (c.leases == 0) {
          idle.add(c);
        }
      }
    }
    idle.forEach(FlightConnections::closeIfIdle);
  }

  /** Number of open connections (leased or idle), for tests. */
  static int openConnections() {
    synchronized (OPEN) {
      return OPEN.size();
    }
  }
}
