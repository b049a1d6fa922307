package dev.shoal.spark;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;

import dev.shoal.client.testing.DaemonProcess;
import dev.shoal.client.testing.TargetMode;

/**
 * The real {@code shoal} daemon as a child process ({@code shoal serve --listen 127.0.0.1:0
 * --data-dir DIR}, shoal-client's {@link DaemonProcess}): the {@link ShoalTarget} of the daemon
 * mode, stopped with SIGTERM.
 */
public final class ShoalDaemon implements ShoalTarget {
  private final DaemonProcess process;
  /** The temporary directory to delete on {@link #close()} ({@link #deletingOnClose}), or null. */
  private Path ownedDir;

  private ShoalDaemon(DaemonProcess process) {
    this.process = process;
  }

  /** Starts a daemon over a fresh data directory. */
  public static ShoalDaemon start(Path dataDir, String... extraArgs) throws IOException, InterruptedException {
    return startAt("127.0.0.1:0", dataDir, extraArgs);
  }

  /** Starts a daemon listening on {@code listen} ({@code 127.0.0.1:PORT}; port 0: a free one). */
  public static ShoalDaemon startAt(String listen, Path dataDir, String... extraArgs) throws IOException, InterruptedException {
    return new ShoalDaemon(DaemonProcess.startAt(listen, dataDir, List.of(extraArgs)));
  }

  @Override
  public TargetMode mode() {
    return TargetMode.DAEMON;
  }

  /** {@code grpc://127.0.0.1:PORT}. */
  @Override
  public String endpoint() {
    return process.endpoint();
  }

  public int port() {
    return process.port();
  }

  public List<String> log() {
    return process.output();
  }

  /** SIGTERM (graceful shutdown), then waits; kills after 60 s. */
  @Override
  public void close() throws InterruptedException {
    process.stop();
    ShoalTarget.deleteTree(ownedDir);
  }

  /** Deletes {@code dir} (the temporary directory holding the data directory) on {@link #close()}. */
  ShoalDaemon deletingOnClose(Path dir) {
    this.ownedDir = dir;
    return this;
  }
}
