package dev.shoal.client;

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
import io.netty.util.concurrent.GlobalEventExecutor;

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
 * Flight connections shared by every {@link FlightShoalClient} of a JVM (of this class loader),
 * one per daemon endpoint and bearer token: a {@link FlightClient} (its gRPC channel and root
 * allocator) and a second gRPC channel for {@code GetFlightInfo} (see {@link
 * FlightShoalClient#getFlightInfo}).
 *
 * <p>Spark, for instance, opens a client for each step of a query — {@code loadTable} (GetSchema), the scan
 * builder, planning (GetFlightInfo), every partition reader (DoGet) — and each used to build its
 * own channels: a TCP connection, an HTTP/2 handshake and Netty set-up per step, several
 * milliseconds each, more than a point lookup costs in the daemon. A connection here is leased by
 * {@link #acquire} and returned by {@link Connection#release}; once no lease is left it stays open
 * for the idle time its clients asked for ({@link ShoalClientOptions#idleCloseMillis}; the next
 * query of a session reuses it) and is then closed by a daemon thread ({@code
 * shoal-flight-connections}, started with the first such close). With an idle time of 0 (the Flink
 * connector's: its threads must not outlive a job) the last release closes the connection itself
 * and waits for its threads to end. gRPC reconnects a channel by itself when the daemon restarts.
 *
 * <p>A connection's channels run on a Netty event loop and an executor of its own (daemon threads
 * named {@code shoal-flight-HOST:PORT-*}), which its close ends: gRPC's JVM-wide shared event
 * loops and their {@code grpc-shared-destroyer} thread would outlive it, keeping the class loader
 * of whatever thread first connected.
 */
public final class FlightConnections {
  /** How long a close waits for each step (channels, event loop, executor, threads), in seconds. */
  private static final long CLOSE_WAIT_SECONDS = 10;

  private static final Map<Key, Connection> OPEN = new HashMap<>();
  /** Closes idle connections after their idle time; started by the first delayed close. Guarded by OPEN. */
  private static ScheduledExecutorService closer;

  private FlightConnections() {}

  private record Key(URI endpoint, String token) {}

  /** A shared connection; every {@link #acquire} is matched by one {@link #release}. */
  public static final class Connection {
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
    /** The shortest idle time its clients asked for, in milliseconds. Guarded by OPEN. */
    private long idleCloseMillis = Long.MAX_VALUE;
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
    public FlightClient client() {
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

    /**
     * Returns the lease; the last one closes the connection after its idle time, or now (waiting
     * for its threads) when that is 0.
     */
    public void release() {
      synchronized (OPEN) {
        if (leases <= 0) {
          throw new IllegalStateException("shoal: Flight connection to " + key.endpoint() + " released more often than acquired");
        }
        if (--leases > 0) {
          return;
        }
        if (idleCloseMillis > 0) {
          closing = closer().schedule(() -> closeIfIdle(this), idleCloseMillis, TimeUnit.MILLISECONDS);
          return;
        }
      }
      closeIfIdle(this);
    }

    /**
     * Shuts everything down first (so that one failing step cannot leave threads running), then
     * waits for it; the allocator is closed last. {@code leaveNoThread} (a client asked for no idle
     * time): also waits for Netty's JVM-wide GlobalEventExecutor thread to go idle, which the event
     * loop's termination started (where Netty is the application's own, e.g. Spark's, it may never
     * be, so other clients do not wait for it).
     */
    private void closeNow(boolean leaveNoThread) {
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
        eventLoop.shutdownGracefully(0, CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
        executor.shutdownNow();
        if (plan != null) {
          plan.awaitTermination(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
        }
        channel.awaitTermination(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
        eventLoop.terminationFuture().await(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
        executor.awaitTermination(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
        // Termination is signalled from inside the last task: the threads themselves end just after.
        java.util.List<Thread> threads;
        synchronized (started) {
          threads = new java.util.ArrayList<>(started);
        }
        for (Thread thread : threads) {
          thread.join(CLOSE_WAIT_SECONDS * 1000);
        }
        // Netty notifies the event loop's termination through its GlobalEventExecutor thread,
        // which ends about a second after its last task.
        if (leaveNoThread) {
          GlobalEventExecutor.INSTANCE.awaitInactivity(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } finally {
        // Every stream was closed before its lease was returned: a leak here is a bug of ours.
        allocator.close();
      }
    }
  }

  /**
   * A lease on the connection to {@code endpoint} with {@code token} (null or empty: none), opened
   * if needed, with {@link ShoalClientOptions#DEFAULT_IDLE_CLOSE_MS}.
   */
  public static Connection acquire(URI endpoint, String token) {
    return acquire(endpoint, token, ShoalClientOptions.DEFAULT_IDLE_CLOSE_MS);
  }

  /**
   * A lease on the connection to {@code endpoint} with {@code token} (null or empty: none), opened
   * if needed; once no lease is left it stays open for {@code idleCloseMillis} (the shortest any
   * of its clients asked for; 0: the last release closes it).
   */
  public static Connection acquire(URI endpoint, String token, long idleCloseMillis) {
    Key key = new Key(endpoint, token == null ? "" : token);
    synchronized (OPEN) {
      Connection connection = OPEN.computeIfAbsent(key, Connection::new);
      connection.leases++;
      connection.idleCloseMillis = Math.min(connection.idleCloseMillis, idleCloseMillis);
      if (connection.closing != null) {
        connection.closing.cancel(false);
        connection.closing = null;
      }
      return connection;
    }
  }

  /** The thread closing idle connections, started on first use. Called holding OPEN. */
  private static ScheduledExecutorService closer() {
    if (closer == null) {
      ClassLoader client = FlightConnections.class.getClassLoader();
      closer = Executors.newSingleThreadScheduledExecutor(runnable -> {
        Thread thread = new Thread(runnable, "shoal-flight-connections");
        thread.setDaemon(true);
        thread.setContextClassLoader(client);
        return thread;
      });
    }
    return closer;
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
    boolean leaveNoThread;
    synchronized (OPEN) {
      if (connection.leases > 0 || OPEN.get(connection.key) != connection) {
        return;
      }
      OPEN.remove(connection.key);
      leaveNoThread = connection.idleCloseMillis == 0;
    }
    connection.closeNow(leaveNoThread);
  }

  /** Closes every connection without a lease now rather than after its idle time, for tests. */
  public static void closeIdleNow() {
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
}
