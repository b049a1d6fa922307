package dev.shoal.it;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The daemon binary ({@code -Dshoal.bin}) as a child process: {@code shoal serve --listen
 * 127.0.0.1:0 --data-dir DIR}, which binds a free port itself; ready when it prints {@code shoal
 * ready: listening on 127.0.0.1:PORT}, which gives the port. Its output goes to {@code shoal.log}
 * next to DIR.
 */
final class LocalDaemonProcess implements DaemonUnderTest {
  private static final String READY = "shoal ready: listening on ";
  private final Process process;
  private final String bin;
  private final Path logFile;
  private int port;

  private LocalDaemonProcess(Process process, String bin, Path logFile) {
    this.process = process;
    this.bin = bin;
    this.logFile = logFile;
  }

  static LocalDaemonProcess start(Path dataDir) throws Exception {
    String bin = System.getProperty("shoal.bin", "../../target/debug/shoal");
    if (!Files.isExecutable(Paths.get(bin))) {
      throw new IllegalStateException("shoal binary not found at " + bin + ": run `cargo build -p shoal-server` (or set -Dshoal.bin)");
    }
    Path logFile = dataDir.resolveSibling("shoal.log");
    Files.createDirectories(dataDir.getParent());
    Process process = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir.toString())
        .redirectErrorStream(true).redirectOutput(logFile.toFile()).start();
    LocalDaemonProcess daemon = new LocalDaemonProcess(process, bin, logFile);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    java.util.Optional<String> ready;
    while ((ready = daemon.log().stream().filter(line -> line.startsWith(READY)).findFirst()).isEmpty()) {
      if (!process.isAlive() || System.nanoTime() > deadline) {
        process.destroyForcibly();
        throw new IllegalStateException("shoal did not become ready in 60 s (exit: "
            + (process.isAlive() ? "still running" : process.exitValue()) + "):\n" + String.join("\n", daemon.log()));
      }
      Thread.sleep(50);
    }
    String address = ready.get().substring(READY.length()).split(" ")[0];
    daemon.port = Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
    return daemon;
  }

  @Override
  public String endpoint() {
    return "grpc://127.0.0.1:" + port;
  }

  @Override
  public String description() {
    return "local process " + bin + " (pid " + process.pid() + ")";
  }

  @Override
  public int stop() throws Exception {
    if (process.isAlive()) {
      process.destroy(); // SIGTERM
      if (!process.waitFor(60, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new IllegalStateException("shoal did not stop within 60 s of SIGTERM");
      }
    }
    return process.exitValue();
  }

  /** The daemon's output so far (stdout and stderr, in the file next to its data directory). */
  List<String> log() {
    try {
      return Files.readAllLines(logFile, StandardCharsets.UTF_8);
    } catch (java.io.IOException e) {
      return List.of("(cannot read " + logFile + ": " + e + ")");
    }
  }
}
