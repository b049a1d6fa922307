package dev.shoal.sql;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import dev.shoal.client.testing.DaemonProcess;

/**
 * One real daemon ({@code shoal serve} as a child process through shoal-client's {@link
 * DaemonProcess}, basic authentication on) for the Flight SQL JDBC tests: started, driven by its
 * own CLI, connected to through the JDBC driver, and stopped with SIGTERM (it must exit 0).
 */
final class ShoalProcess implements AutoCloseable {
  static final String USER = "analyst";
  static final String PASSWORD = "pa:ss";

  private final DaemonProcess process;
  final int port;

  private ShoalProcess(DaemonProcess process) {
    this.process = process;
    this.port = process.port();
  }

  /** The daemon binary ({@code -Dshoal.bin}, else the debug build). */
  static String bin() {
    return DaemonProcess.binary().toString();
  }

  /** The GitHub events sample ({@code -Dshoal.data}). */
  static Path events() {
    return DaemonProcess.events();
  }

  /**
   * Starts a daemon listening on {@code listen} ({@code 127.0.0.1:0}: any port) with its data
   * under {@code dir} and {@code extra} arguments; returns once it is ready.
   */
  static ShoalProcess start(Path dir, String listen, String... extra) throws Exception {
    List<String> args = new ArrayList<>(List.of("--basic-auth", USER + ":" + PASSWORD));
    args.addAll(List.of(extra));
    return new ShoalProcess(DaemonProcess.startAt(listen, dir.resolve("data"), args));
  }

  String location() {
    return process.endpoint();
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

  /** Stops the daemon with SIGTERM: it must exit 0 within 60 s. */
  @Override
  public void close() throws InterruptedException {
    int status = process.stop();
    assertEquals(0, status, () -> {
      List<String> lines = process.output();
      return "shoal's last lines:\n" + String.join("\n", lines.subList(Math.max(0, lines.size() - 30), lines.size()));
    });
  }
}
