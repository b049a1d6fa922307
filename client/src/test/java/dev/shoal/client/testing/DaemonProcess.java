package dev.shoal.client.testing;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The real {@code shoal} daemon as a child process, for the JVM modules' tests (published in
 * shoal-client's test-jar): {@code shoal serve --listen ADDRESS --data-dir DIR ARGS...}. With port
 * 0 the daemon binds a free port itself; it is ready when its output prints {@code shoal ready:
 * listening on HOST:PORT}, which gives the port (a {@link #restart} listens on the same one). Its
 * output (stdout and stderr) goes to {@code DIR.log} next to the data directory {@code DIR} — a
 * file, not a pipe, so no reader can go away before the daemon's last line — appended across
 * restarts.
 *
 * <p>The binary is the system property {@code shoal.bin} (the Maven build sets it), else {@code
 * target/debug/shoal} of the first folder above the working directory that has one; the GitHub
 * events sample is {@code shoal.data}, else {@code data/github/events.ndjson} found the same way.
 */
public final class DaemonProcess implements AutoCloseable {
  /** The line the daemon prints once it serves, followed by the address it listens on. */
  public static final String READY = "shoal ready: listening on ";
  /** How long a start waits for {@link #READY}, and a stop for the exit, in seconds. */
  private static final long WAIT_SECONDS = 60;

  private final Path dataDir;
  private final List<String> args;
  private final Path logFile;
  private Process process;
  private int port;

  private DaemonProcess(Path dataDir, List<String> args) {
    this.dataDir = dataDir;
    this.args = List.copyOf(args);
    Path absolute = dataDir.toAbsolutePath();
    this.logFile = absolute.resolveSibling(absolute.getFileName() + ".log");
  }

  /** The daemon binary: {@code -Dshoal.bin}, else {@code target/debug/shoal} above the working directory. */
  public static Path binary() {
    Path bin = configured("shoal.bin", "target/debug/shoal");
    if (!Files.isExecutable(bin)) {
      throw new IllegalStateException("shoal binary not found at " + bin.toAbsolutePath()
          + ": run `cargo build -p shoal-server` (or set -Dshoal.bin)");
    }
    return bin;
  }

  /** The GitHub Archive events sample: {@code -Dshoal.data}, else {@code data/github/events.ndjson} above. */
  public static Path events() {
    Path events = configured("shoal.data", "data/github/events.ndjson");
    if (!Files.isReadable(events)) {
      throw new IllegalStateException("GitHub Archive events not found at " + events.toAbsolutePath()
          + ": run scripts/fetch-data.sh (or set -Dshoal.data)");
    }
    return events;
  }

  private static Path configured(String property, String relative) {
    String value = System.getProperty(property);
    if (value != null && !value.isBlank()) {
      return Paths.get(value);
    }
    for (Path dir = Paths.get("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
      if (Files.exists(dir.resolve(relative))) {
        return dir.resolve(relative);
      }
    }
    return Paths.get(relative);
  }

  /** Starts a daemon on a free port of 127.0.0.1 over {@code dataDir} (created if missing; its tables recovered). */
  public static DaemonProcess start(Path dataDir, String... args) throws IOException, InterruptedException {
    return startAt("127.0.0.1:0", dataDir, List.of(args));
  }

  /**
   * Starts a daemon listening on {@code listen} ({@code HOST:PORT}; port 0: a free one) over
   * {@code dataDir} with more {@code serve} arguments; returns once it is ready.
   *
   * @throws IllegalStateException when it exits or is not ready within 60 s (with its output)
   */
  public static DaemonProcess startAt(String listen, Path dataDir, List<String> args) throws IOException, InterruptedException {
    DaemonProcess daemon = new DaemonProcess(dataDir, args);
    daemon.launch(listen);
    return daemon;
  }

  private void launch(String listen) throws IOException, InterruptedException {
    Files.createDirectories(logFile.getParent());
    List<String> command = new ArrayList<>(List.of(
        binary().toString(), "serve", "--listen", listen, "--data-dir", dataDir.toString()));
    command.addAll(args);
    int linesBefore = output().size();
    process = new ProcessBuilder(command).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile())).start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_SECONDS);
    while (true) {
      List<String> lines = output();
      for (String line : lines.subList(Math.min(linesBefore, lines.size()), lines.size())) {
        if (line.startsWith(READY)) {
          String address = line.substring(READY.length()).split(" ")[0];
          port = Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
          return;
        }
      }
      if (!process.isAlive()) {
        throw new IllegalStateException("shoal exited with status " + process.exitValue() + " before it was ready ("
            + dataDir + "):\n" + String.join("\n", output()));
      }
      if (System.nanoTime() > deadline) {
        process.destroyForcibly();
        throw new IllegalStateException("shoal did not become ready in " + WAIT_SECONDS + " s:\n"
            + String.join("\n", output()));
      }
      Thread.sleep(20);
    }
  }

  /** The port it listens on. */
  public int port() {
    return port;
  }

  /** {@code grpc://127.0.0.1:PORT}. */
  public String endpoint() {
    return "grpc://127.0.0.1:" + port;
  }

  /** The data directory. */
  public Path dataDir() {
    return dataDir;
  }

  /** The process id (of the current run). */
  public long pid() {
    return process.pid();
  }

  public boolean isAlive() {
    return process.isAlive();
  }

  /** The daemon's output so far (every run's), by line. */
  public List<String> output() {
    try {
      return Files.exists(logFile) ? Files.readAllLines(logFile, StandardCharsets.UTF_8) : List.of();
    } catch (IOException e) {
      return List.of("(cannot read " + logFile + ": " + e + ")");
    }
  }

  /** The file holding its output. */
  public File logFile() {
    return logFile.toFile();
  }

  /**
   * SIGTERM (a graceful shutdown: flush, checkpoint), then waits for the exit; SIGKILL after 60 s.
   *
   * @return the exit status
   * @throws IllegalStateException when it did not stop within 60 s
   */
  public int stop() throws InterruptedException {
    if (process.isAlive()) {
      process.destroy(); // SIGTERM on Unix
      if (!process.waitFor(WAIT_SECONDS, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new IllegalStateException("shoal did not stop within " + WAIT_SECONDS + " s of SIGTERM:\n"
            + String.join("\n", output()));
      }
    }
    return process.exitValue();
  }

  /** SIGKILL: the daemon dies at once, with whatever was not durable. */
  public void kill() throws InterruptedException {
    if (process.isAlive()) {
      process.destroyForcibly(); // SIGKILL on Linux
      if (!process.waitFor(WAIT_SECONDS, TimeUnit.SECONDS)) {
        throw new IllegalStateException("shoal did not die within " + WAIT_SECONDS + " s of SIGKILL");
      }
    }
  }

  /** Kills the daemon if it runs and starts it again on the same port and data directory (it recovers its tables). */
  public void restart() throws IOException, InterruptedException {
    kill();
    launch("127.0.0.1:" + port);
  }

  /** {@link #stop()}. */
  @Override
  public void close() throws InterruptedException {
    stop();
  }
}
