package dev.shoal.sql;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Flight SQL through the Arrow Flight SQL JDBC driver against the real daemon ({@code shoal
 * serve} as a child process, basic authentication on), loaded with the GitHub events sample
 * by the daemon's own CLI ({@code shoal create-table}, {@code psf add}, {@code ingest}).
 */
class FlightSqlJdbcTest {
  private static final String USER = "analyst";
  private static final String PASSWORD = "pa:ss";
  private static final Pattern READY = Pattern.compile("^shoal ready: listening on [^ ]*:(\\d+)");
  /** The top-level {@code type} of a GitHub event line (the archive writes {@code id} first). */
  private static final Pattern TYPE = Pattern.compile("^\\{\"id\":\"\\d+\",\"type\":\"(\\w+)\"");

  @TempDir static Path dataDir;
  private static Process daemon;
  private static Path daemonLog;
  private static int port;
  private static Map<String, Integer> typeCounts;

  @BeforeAll
  static void startDaemonAndLoadEvents() throws Exception {
    String bin = System.getProperty("shoal.bin", "../../target/debug/shoal");
    Path events = Path.of(System.getProperty("shoal.data", "../../data/github/events.ndjson"));
    assertTrue(Files.isExecutable(Path.of(bin)), "shoal binary not found at " + bin + ": cargo build -p shoal-server");
    assertTrue(Files.exists(events), "GitHub events missing at " + events + ": scripts/fetch-data.sh");
    // The daemon's output goes to a file (read for the line that gives the port, and shown
    // when it fails): no pipe whose reader could go away before the daemon's last line.
    daemonLog = dataDir.resolve("shoal.log");
    daemon = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir.resolve("data").toString(),
        "--basic-auth", USER + ":" + PASSWORD).redirectErrorStream(true).redirectOutput(daemonLog.toFile()).start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (port == 0) {
      assertTrue(daemon.isAlive() && System.nanoTime() < deadline, () -> "shoal did not become ready:\n" + lastLines());
      try (Stream<String> lines = Files.lines(daemonLog)) {
        port = lines.map(READY::matcher).filter(Matcher::find).mapToInt(m -> Integer.parseInt(m.group(1))).findFirst().orElse(0);
      }
      Thread.sleep(50);
    }
    cli(bin, "create-table", "events");
    cli(bin, "psf", "add", "--table", "events", "--name", "type", "--projection", "type");
    cli(bin, "ingest", "--table", "events", events.toString());
    typeCounts = new HashMap<>();
    try (Stream<String> lines = Files.lines(events)) {
      lines.map(TYPE::matcher).filter(Matcher::find).forEach(m -> typeCounts.merge(m.group(1), 1, Integer::sum));
    }
  }

  private static String lastLines() {
    try {
      List<String> lines = Files.readAllLines(daemonLog);
      return String.join("\n", lines.subList(Math.max(0, lines.size() - 30), lines.size()));
    } catch (IOException e) {
      return "(no log: " + e + ")";
    }
  }

  private static void cli(String bin, String... args) throws Exception {
    List<String> command = new ArrayList<>(List.of(bin));
    command.addAll(List.of(args));
    command.addAll(List.of("--endpoint", "grpc://127.0.0.1:" + port, "--basic-auth", USER + ":" + PASSWORD));
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, p.waitFor(), String.join(" ", args) + ": " + output);
  }

  @AfterAll
  static void stopDaemon() throws InterruptedException {
    if (daemon != null) {
      daemon.destroy();
      assertTrue(daemon.waitFor(60, TimeUnit.SECONDS), "shoal did not stop within 60 s of SIGTERM");
      assertEquals(0, daemon.exitValue(), () -> "shoal's last lines:\n" + lastLines());
    }
  }

  private static Connection connect() throws SQLException {
    Properties properties = new Properties();
    properties.setProperty("user", USER);
    properties.setProperty("password", PASSWORD);
    properties.setProperty("useEncryption", "false");
    return DriverManager.getConnection("jdbc:arrow-flight-sql://127.0.0.1:" + port, properties);
  }

  @Test
  void metadataListsTheTablesAndTheirColumns() throws SQLException {
    try (Connection connection = connect()) {
      DatabaseMetaData meta = connection.getMetaData();
      assertEquals("shoal", meta.getDatabaseProductName());
      List<String> tables = new ArrayList<>();
      try (ResultSet rs = meta.getTables(null, null, "%", null)) {
        while (rs.next()) {
          assertEquals("shoal", rs.getString("TABLE_CAT"));
          assertEquals("public", rs.getString("TABLE_SCHEM"));
          assertEquals("TABLE", rs.getString("TABLE_TYPE"));
          tables.add(rs.getString("TABLE_NAME"));
        }
      }
      assertEquals(List.of("events"), tables);
      List<String> columns = new ArrayList<>();
      try (ResultSet rs = meta.getColumns(null, null, "events", "%")) {
        while (rs.next()) {
          columns.add(rs.getString("COLUMN_NAME"));
        }
      }
      assertTrue(columns.containsAll(List.of("id", "type", "actor", "repo", "payload", "created_at")), columns.toString());
    }
  }

  @Test
  void aQueryWhoseWhereUsesAPsfAnswersTheRecordsAndExplainShowsTheIndexScan() throws SQLException {
    int watches = typeCounts.get("WatchEvent");
    assertTrue(watches > 0);
    try (Connection connection = connect(); Statement statement = connection.createStatement()) {
      int rows = 0;
      try (ResultSet rs = statement.executeQuery("SELECT id, actor.login AS who FROM events WHERE type = 'WatchEvent'")) {
        assertEquals("who", rs.getMetaData().getColumnLabel(2));
        while (rs.next()) {
          assertTrue(rs.getString("id").matches("\\d+"));
          rows++;
        }
      }
      assertEquals(watches, rows);
      List<String> steps = new ArrayList<>();
      String index = null;
      try (ResultSet rs = statement.executeQuery("EXPLAIN SELECT id FROM events WHERE type = 'WatchEvent'")) {
        while (rs.next()) {
          steps.add(rs.getString("plan_step"));
          if (rs.getString("plan_step").equals("index_scan")) {
            index = rs.getString("detail");
          }
        }
      }
      assertTrue(index != null && index.contains("\"psfs\":[\"type\"]"), steps + " " + index);
      try (ResultSet rs = statement.executeQuery("SELECT count(*) AS n FROM events WHERE type = 'PushEvent'")) {
        assertTrue(rs.next());
        assertEquals((long) typeCounts.get("PushEvent"), rs.getLong("n"));
      }
      Map<String, Integer> grouped = new HashMap<>();
      try (ResultSet rs = statement.executeQuery("SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY n DESC")) {
        while (rs.next()) {
          grouped.put(rs.getString("type"), (int) rs.getLong("n"));
        }
      }
      assertEquals(typeCounts, grouped);
    }
  }

  @Test
  void aPreparedStatementBindsItsParameter() throws SQLException {
    try (Connection connection = connect();
        PreparedStatement statement = connection.prepareStatement("SELECT count(*) AS n FROM events WHERE type = ?")) {
      for (String type : List.of("IssuesEvent", "ForkEvent")) {
        statement.setString(1, type);
        try (ResultSet rs = statement.executeQuery()) {
          assertTrue(rs.next());
          assertEquals((long) typeCounts.get(type), rs.getLong("n"), type);
        }
      }
    }
  }

  /**
   * A keyed table (made with {@code shoal create-table --primary-key}): {@code getPrimaryKeys} names
   * its key fields in order, and {@code DELETE FROM … WHERE} runs as an update (the driver prepares
   * it) and answers the rows deleted. The table is dropped again, so the others see only events.
   */
  @Test
  void aKeyedTableReportsItsPrimaryKeyAndDeleteRunsAsAnUpdate() throws Exception {
    String bin = System.getProperty("shoal.bin", "../../target/debug/shoal");
    cli(bin, "create-table", "tickets", "--primary-key", "tenant,id");
    try {
      Path file = dataDir.resolve("tickets.ndjson");
      Files.writeString(file, "{\"tenant\": \"a\", \"id\": 1, \"status\": \"open\"}\n"
          + "{\"tenant\": \"a\", \"id\": 2, \"status\": \"closed\"}\n"
          + "{\"tenant\": \"b\", \"id\": 1, \"status\": \"closed\"}\n"
          + "{\"tenant\": \"a\", \"id\": 1, \"status\": \"closed\"}\n");
      cli(bin, "ingest", "--table", "tickets", file.toString());
      try (Connection connection = connect(); Statement statement = connection.createStatement()) {
        List<String> keys = new ArrayList<>();
        try (ResultSet rs = connection.getMetaData().getPrimaryKeys(null, null, "tickets")) {
          while (rs.next()) {
            keys.add(rs.getString("COLUMN_NAME") + ":" + rs.getInt("KEY_SEQ"));
          }
        }
        assertEquals(List.of("tenant:1", "id:2"), keys);
        try (ResultSet rs = connection.getMetaData().getPrimaryKeys(null, null, "events")) {
          assertTrue(!rs.next(), "an append-only table has no primary key");
        }
        // The last line upserted key (a, 1): both of tenant a's rows are closed.
        assertEquals(2, statement.executeUpdate("DELETE FROM tickets WHERE status = 'closed' AND tenant = 'a'"));
        try (ResultSet rs = statement.executeQuery("SELECT count(*) AS n FROM tickets")) {
          assertTrue(rs.next());
          assertEquals(1L, rs.getLong("n"));
        }
      }
    } finally {
      cli(bin, "drop-table", "tickets");
    }
  }

  @Test
  void badSqlIsAnErrorNamingTheProblem() throws SQLException {
    try (Connection connection = connect(); Statement statement = connection.createStatement()) {
      SQLException error = org.junit.jupiter.api.Assertions.assertThrows(SQLException.class,
          () -> statement.executeQuery("SELECT type, count(*) FROM events GROUP BY type HAVING count(*) > 1"));
      assertTrue(String.valueOf(error.getMessage()).contains("HAVING"), error.getMessage());
      // The daemon is still there.
      try (ResultSet rs = statement.executeQuery("SELECT id FROM events LIMIT 1")) {
        assertTrue(rs.next());
      }
    }
  }
}
