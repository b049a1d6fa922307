package dev.shoal.sql;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * One real daemon ({@code shoal serve} as a child process, basic authentication on) for the
 * Flight SQL JDBC tests: started, driven by its own CLI, connected to through the JDBC driver,
 * and stopped with SIGTERM (it must exit 0).
 */
final class ShoalProcess implements AutoCloseable {
  static final String USER = "analyst";
  static final String PASSWORD = "pa:ss";
  private static final Pattern READY = Pattern.compile("^shoal ready: listening on [^ ]*:(\\d+)");

  private final Process process;
  private final Path log;
  final int port;

  private ShoalProcess(Process process, Path log, int port) {
    this.process = process;
    this.log = log;
    this.port = port;
  }

  /** The daemon binary ({@code -Dshoal.bin}, else the debug build). */
  static String bin() {
    String bin = System.getProperty("shoal.bin", "../../target/debug/shoal");
    assertTrue(Files.isExecutable(Path.of(bin)), "shoal binary not found at " + bin + ": cargo build -p shoal-server");
    return bin;
  }

  /** The GitHub events sample ({@code -Dshoal.data}). */
  static Path events() {
    Path events = Path.of(System.getProperty("shoal.data", "../../data/github/events.ndjson"));
    assertTrue(Files.exists(events), "GitHub events missing at " + events + ": scripts/fetch-data.sh");
    return events;
  }

  /**
   * Starts a daemon listening on {@code listen} ({@code 127.0.0.1:0}: any port) with its data
   * under {@code dir} and {@code extra} arguments; returns once it is ready.
   */
  static ShoalProcess start(Path dir, String listen, String... extra) throws Exception {
    Files.createDirectories(dir);
    // The daemon's output goes to a file (read for the line that gives the port, and shown
    // when it fails): no pipe whose reader could go away before the daemon's last line.
    Path log = dir.resolve("shoal.log");
    List<String> command = new ArrayList<>(List.of(bin(), "serve", "--listen", listen, "--data-dir", dir.resolve("data").toString(),
        "--basic-auth", USER + ":" + PASSWORD));
    command.addAll(List.of(extra));
    Process process = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    int port = 0;
    while (port == 0) {
      boolean waiting = process.isAlive() && System.nanoTime() < deadline;
      if (!waiting) {
        process.destroyForcibly();
        throw new AssertionError("shoal did not become ready:\n" + lastLines(log));
      }
      try (Stream<String> lines = Files.lines(log)) {
        port = lines.map(READY::matcher).filter(Matcher::find).mapToInt(m -> Integer.parseInt(m.group(1))).findFirst().orElse(0);
      }
      Thread.sleep(50);
    }
    return new ShoalProcess(process, log, port);
  }

  String location() {
    return "grpc://127.0.0.1:" + port;
  }

  /** Runs {@code shoal <args>} against this daemon; it must exit 0. */
  void cli(String... args) throws Exception {
    List<String> command = new ArrayList<>(List.of(bin()));
    command.addAll(List.of(args));
    command.addAll(List.of("--endpoint", location(), "--basic-auth", USER + ":" + PASSWORD));
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, p.waitFor(), String.join(" ", args) + ": " + output);
  }

  /** A JDBC connection through the Flight SQL driver, with the daemon's credentials. */
  Connection connect() throws SQLException {
    Properties properties = new Properties();
    properties.setProperty("user", USER);
    properties.setProperty("password", PASSWORD);
    properties.setProperty("useEncryption", "false");
    return DriverManager.getConnection("jdbc:arrow-flight-sql://127.0.0.1:" + port, properties);
  }

  private static String lastLines(Path log) {
    try {
      List<String> lines = Files.readAllLines(log);
      return String.join("\n", lines.subList(Math.max(0, lines.size() - 30), lines.size()));
    } catch (IOException e) {
      return "(no log: " + e + ")";
    }
  }

  /** Stops the daemon with SIGTERM: it must exit 0 within 60 s. */
  @Override
  public void close() throws InterruptedException {
    process.destroy();
    assertTrue(process.waitFor(60, TimeUnit.SECONDS), "shoal did not stop within 60 s of SIGTERM");
    assertEquals(0, process.exitValue(), () -> "shoal's last lines:\n" + lastLines(log));
  }
}
