package dev.shoal.flink;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;

/**
 * A TCP port that forwards to the daemon once {@link #open()} is called; until then nothing
 * listens on it, so clients get "connection refused" (gRPC UNAVAILABLE) - a transient outage the
 * sink must ride out with retries.
 */
public final class TcpForwarder implements AutoCloseable {
  private final int port;
  private final int target;
  private ServerSocket server;

  public TcpForwarder(int port, int target) {
    this.port = port;
    this.target = target;
  }

  public void open() throws IOException {
    server = new ServerSocket(port, 50, InetAddress.getLoopbackAddress());
    Thread accept = new Thread(() -> {
      while (!server.isClosed()) {
        try {
          Socket client = server.accept();
          Socket upstream = new Socket(InetAddress.getLoopbackAddress(), target);
          client.setTcpNoDelay(true);
          upstream.setTcpNoDelay(true);
          pipe(client, upstream);
          pipe(upstream, client);
        } catch (IOException e) {
          return;
        }
      }
    }, "tcp-forwarder-accept");
    accept.setDaemon(true);
    accept.start();
  }

  private static void pipe(Socket from, Socket to) {
    Thread t = new Thread(() -> {
      try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
        in.transferTo(out);
      } catch (IOException ignored) {
        // one side closed
      } finally {
        try {
          from.close();
          to.close();
        } catch (IOException ignored) {
          // closing
        }
      }
    }, "tcp-forwarder-pipe");
    t.setDaemon(true);
    t.start();
  }

  @Override
  public void close() throws IOException {
    if (server != null) {
      server.close();
    }
  }
}
