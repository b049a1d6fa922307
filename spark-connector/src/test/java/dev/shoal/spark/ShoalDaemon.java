package dev.shoal.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The real {@code shoal} daemon as a child process ({@code shoal serve --listen 127.0.0.1:0
 * --data-dir DIR}): it binds a free port itself and is ready when it prints {@code shoal ready:
 * listening on 127.0.0.1:PORT}, which gives the port; stopped with SIGTERM.
 * The binary comes from the system property {@code shoal.bin}.
 */
public final class ShoalDaemon implements ShoalTarget {
  /** The line the daemon prints once it serves, followed by the address it listens on. */
  static final String READY = "shoal ready: listening on ";
  private final Process process;
  private volatile int port;
  /** The temporary directory to delete on {@link #close()} ({@link #deletingOnClose}), or null. */
  private Path ownedDir;
  private final List<String> log = Collections.synchronizedList(new ArrayList<>());

  private ShoalDaemon(Process process) {
    this.process = process;
  }

  /** The port in a {@link #READY} line ({@code shoal ready: listening on 127.0.0.1:PORT (grpc)}). */
  static int readyPort(String line) {
    String address = line.substring(READY.length()).split(" ")[0];
    return Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
  }

  /** Starts a daemon over a fresh data directory. */
  public static ShoalDaemon start(Path dataDir, String... extraArgs) throws IOException, InterruptedException {
    return startAt("127.0.0.1:0", dataDir, extraArgs);
  }

  /** Starts a daemon listening on {@code listen} ({@code 127.0.0.1:PORT}; port 0: a free one). */
  public static ShoalDaemon startAt(String listen, Path dataDir, String... extraArgs) throws IOException, InterruptedException {
    String bin = System.getProperty("shoal.bin", "../target/debug/shoal");
    if (!Files.isExecutable(Paths.get(bin))) {
      throw new IllegalStateException("shoal binary not found at " + bin
          + ": run `cargo build -p shoal-server` (or set -Dshoal.bin)");
    }
    List<String> command = new ArrayList<>(List.of(bin, "serve", "--listen", listen, "--data-dir", dataDir.toString()));
    command.addAll(List.of(extraArgs));
    Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
    ShoalDaemon daemon = new ShoalDaemon(process);
    CountDownLatch ready = new CountDownLatch(1);
    Thread pump = new Thread(() -> {
      try (BufferedReader reader = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = reader.readLine()) != null) {
          daemon.log.add(line);
          if (line.startsWith(READY)) {
            daemon.port = readyPort(line);
            ready.countDown();
          }
        }
      } catch (IOException ignored) {
        // the process ended
      }
    }, "shoal-daemon-" + process.pid());
    pump.setDaemon(true);
    pump.start();
    if (!ready.await(60, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      throw new IllegalStateException("shoal did not become ready in 60 s:\n" + String.join("\n", daemon.log));
    }
    return daemon;
  }

  @Override
  public Mode mode() {
    return Mode.DAEMON;
  }

  /** {@code grpc://127.0.0.1:PORT}. */
  @Override
  public String endpoint() {
    return "grpc://127.0.0.1:" + port;
  }

  public int port() {
    return port;
  }

  public List<String> log() {
    return new ArrayList<>(log);
  }

  /** SIGTERM (graceful shutdown), then waits; kills after 60 s. Returns the exit code. */
  @Override
  public void close() throws InterruptedException {
    if (process.isAlive()) {
      process.destroy(); // SIGTERM on Unix
      if (!process.waitFor(60, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new IllegalStateException("shoal did not stop within 60 s of SIGTERM");
      }
    }
    ShoalTarget.deleteTree(ownedDir);
  }

  /** Deletes {@code dir} (the temporary directory holding the data directory) on {@link #close()}. */
  ShoalDaemon deletingOnClose(Path dir) {
    this.ownedDir = dir;
    return this;
  }
}
