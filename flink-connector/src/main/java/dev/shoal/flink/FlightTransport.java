package dev.shoal.flink;

import java.net.URI;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import io.grpc.ManagedChannel;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioSocketChannel;
import io.netty.util.concurrent.GlobalEventExecutor;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightGrpcUtils;
import org.apache.arrow.memory.BufferAllocator;

/**
 * A Flight client whose threads belong to the connector: its gRPC channel runs on an event loop
 * and an executor that the connector's open clients share, and that the last {@link #close} ends
 * before it returns.
 *
 * <p>{@code FlightClient.builder(...).build()} puts channels on gRPC's JVM-wide shared event loop
 * group ({@code grpc-nio-worker-ELG-*}), which gRPC releases a second after its last channel
 * closes, from a {@code grpc-shared-destroyer} thread that never ends, and runs calls on
 * {@code grpc-default-executor} threads. The first task thread that connects starts them, and they
 * keep its context class loader: on a Flink session cluster they outlived the job, kept its
 * user-code class loader alive and failed with "Trying to access closed classloader" once Flink
 * closed it (issue 19). Here the writers and committers of a job (the users of the connector's
 * classes in one class loader) share one event-loop thread and one executor, counted; the last
 * close shuts them down and also waits for Netty's {@link GlobalEventExecutor} thread, which the
 * event loop's termination notifies through, to end (up to about a second).
 */
final class FlightTransport implements AutoCloseable {
  /** How long a close waits for the channel and the threads to end, in seconds. */
  private static final long CLOSE_WAIT_SECONDS = 10;

  private static final Object LOCK = new Object();
  /** Open transports; the threads below exist while it is above zero. */
  private static int users;
  private static EventLoopGroup sharedLoop;
  private static ExecutorService sharedExecutor;

  private final EventLoopGroup eventLoop;
  private final ExecutorService executor;
  private final ManagedChannel channel;
  private final FlightClient client;
  private boolean closed;

  /**
   * Opens a channel to {@code endpoint} ({@code grpc://}, {@code grpc+tcp://} or {@code
   * grpc+tls://host:port}) on the shared event loop ({@code shoal-flight-loop-*}) and executor
   * ({@code shoal-flight-call-*}), both of daemon threads.
   *
   * @throws IllegalArgumentException for another scheme
   */
  FlightTransport(URI endpoint, BufferAllocator allocator) {
    String scheme = endpoint.getScheme();
    if (!ShoalEndpoint.FLIGHT_SCHEMES.contains(scheme)) {
      throw new IllegalArgumentException("shoal: endpoint '" + endpoint + "' has scheme '" + scheme
          + "'; expected grpc://host:port, grpc+tls://host:port or host:port");
    }
    synchronized (LOCK) {
      acquire();
      eventLoop = sharedLoop;
      executor = sharedExecutor;
    }
    ManagedChannel built = null;
    try {
      NettyChannelBuilder builder = NettyChannelBuilder.forAddress(endpoint.getHost(), endpoint.getPort())
          .eventLoopGroup(eventLoop)
          .channelType(NioSocketChannel.class)
          .executor(executor)
          .offloadExecutor(executor)
          // What FlightClient.Builder sets: no inbound size limit below Flight's own, no tracing.
          .maxInboundMessageSize(Integer.MAX_VALUE)
          .maxInboundMetadataSize(Integer.MAX_VALUE)
          .maxTraceEvents(0);
      if ("grpc+tls".equals(scheme)) {
        builder.useTransportSecurity();
      } else {
        builder.usePlaintext();
      }
      built = builder.build();
      this.client = FlightGrpcUtils.createFlightClientWithSharedChannel(allocator, built);
      this.channel = built;
    } catch (Throwable e) {
      if (built != null) {
        built.shutdownNow();
      }
      try {
        release();
      } catch (InterruptedException interrupted) {
        Thread.currentThread().interrupt();
      }
      throw e;
    }
  }

  /**
   * Counts a user of the shared threads, starting them for the first; nothing is counted if
   * starting fails. Called holding {@link #LOCK}.
   */
  private static void acquire() {
    if (users == 0) {
      EventLoopGroup loop = new NioEventLoopGroup(1, threads("shoal-flight-loop"));
      try {
        sharedExecutor = Executors.newCachedThreadPool(threads("shoal-flight-call"));
      } catch (Throwable e) {
        loop.shutdownGracefully(0, 0, TimeUnit.SECONDS);
        throw e;
      }
      sharedLoop = loop;
    }
    users++;
  }

  /** The Flight client on this transport's channel. */
  FlightClient client() {
    return client;
  }

  /**
   * Daemon threads whose context class loader is the connector's own, not that of the task thread
   * that happens to start them: with the jar in Flink's lib/, the threads serve every job.
   */
  private static ThreadFactory threads(String prefix) {
    AtomicInteger n = new AtomicInteger();
    ClassLoader connector = FlightTransport.class.getClassLoader();
    return runnable -> {
      Thread t = new Thread(runnable, prefix + "-" + n.incrementAndGet());
      t.setDaemon(true);
      t.setContextClassLoader(connector);
      return t;
    };
  }

  /**
   * Closes the client and its channel; the last open transport also ends the shared threads. Waits
   * for all of it (each step up to {@value #CLOSE_WAIT_SECONDS} s). A second call does nothing.
   */
  @Override
  public void close() throws InterruptedException {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    try {
      client.close();
    } finally {
      channel.shutdownNow();
      try {
        channel.awaitTermination(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
      } finally {
        release();
      }
    }
  }

  private static void release() throws InterruptedException {
    EventLoopGroup loop;
    ExecutorService calls;
    synchronized (LOCK) {
      if (--users > 0) {
        return;
      }
      loop = sharedLoop;
      calls = sharedExecutor;
      sharedLoop = null;
      sharedExecutor = null;
    }
    loop.shutdownGracefully(0, CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
    calls.shutdownNow();
    loop.terminationFuture().await(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
    calls.awaitTermination(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
    GlobalEventExecutor.INSTANCE.awaitInactivity(CLOSE_WAIT_SECONDS, TimeUnit.SECONDS);
  }
}
