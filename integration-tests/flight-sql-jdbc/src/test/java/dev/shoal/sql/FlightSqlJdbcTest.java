package dev.shoal.sql;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
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
  /** The top-level {@code type} of a GitHub event line (the archive writes {@code id} first). */
  static final Pattern TYPE = Pattern.compile("^\\{\"id\":\"\\d+\",\"type\":\"(\\w+)\"");

  @TempDir static Path dataDir;
  private static ShoalProcess daemon;
  private static Map<String, Integer> typeCounts;

  @BeforeAll
  static void startDaemonAndLoadEvents() throws Exception {
    Path events = ShoalProcess.events();
    daemon = ShoalProcess.start(dataDir, "127.0.0.1:0");
    cli("create-table", "events");
    cli("psf", "add", "--table", "events", "--name", "type", "--projection", "type");
    cli("ingest", "--table", "events", events.toString());
    typeCounts = typeCounts(events);
  }

  /** The number of events of each {@code type} in {@code events}. */
  static Map<String, Integer> typeCounts(Path events) throws IOException {
    Map<String, Integer> counts = new HashMap<>();
    try (Stream<String> lines = Files.lines(events)) {
      lines.map(TYPE::matcher).filter(Matcher::find).forEach(m -> counts.merge(m.group(1), 1, Integer::sum));
    }
    return counts;
  }

  private static void cli(String... args) throws Exception {
    daemon.cli(args);
  }

  @AfterAll
  static void stopDaemon() throws InterruptedException {
    if (daemon != null) {
      daemon.close();
    }
  }

  private static Connection connect() throws SQLException {
    return daemon.connect();
  }

  /** {@code count(*)} of PushEvents and {@code GROUP BY type}, against the file's {@code counts}. */
  static void assertCountsPerType(Statement statement, Map<String, Integer> counts) throws SQLException {
    try (ResultSet rs = statement.executeQuery("SELECT count(*) AS n FROM events WHERE type = 'PushEvent'")) {
      assertTrue(rs.next());
      assertEquals((long) counts.get("PushEvent"), rs.getLong("n"));
    }
    Map<String, Integer> grouped = new HashMap<>();
    try (ResultSet rs = statement.executeQuery("SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY n DESC")) {
      while (rs.next()) {
        grouped.put(rs.getString("type"), (int) rs.getLong("n"));
      }
    }
    assertEquals(counts, grouped);
  }

  /** A prepared {@code count(*)} per type, bound to two types in turn, against the file's {@code counts}. */
  static void assertPreparedCountsPerType(Connection connection, Map<String, Integer> counts) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement("SELECT count(*) AS n FROM events WHERE type = ?")) {
      for (String type : List.of("IssuesEvent", "ForkEvent")) {
        statement.setString(1, type);
        try (ResultSet rs = statement.executeQuery()) {
          assertTrue(rs.next());
          assertEquals((long) counts.get(type), rs.getLong("n"), type);
        }
      }
    }
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
      assertCountsPerType(statement, typeCounts);
    }
  }

  @Test
  void aPreparedStatementBindsItsParameter() throws SQLException {
    try (Connection connection = connect()) {
      assertPreparedCountsPerType(connection, typeCounts);
    }
  }

  /**
   * A keyed table (made with {@code shoal create-table --primary-key}): {@code getPrimaryKeys} names
   * its key fields in order, and {@code DELETE FROM … WHERE} runs as an update (the driver prepares
   * it) and answers the rows deleted. The table is dropped again, so the others see only events.
   */
  @Test
  void aKeyedTableReportsItsPrimaryKeyAndDeleteRunsAsAnUpdate() throws Exception {
    cli("create-table", "tickets", "--primary-key", "tenant,id");
    try {
      Path file = dataDir.resolve("tickets.ndjson");
      Files.writeString(file, "{\"tenant\": \"a\", \"id\": 1, \"status\": \"open\"}\n"
          + "{\"tenant\": \"a\", \"id\": 2, \"status\": \"closed\"}\n"
          + "{\"tenant\": \"b\", \"id\": 1, \"status\": \"closed\"}\n"
          + "{\"tenant\": \"a\", \"id\": 1, \"status\": \"closed\"}\n");
      cli("ingest", "--table", "tickets", file.toString());
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
      cli("drop-table", "tickets");
    }
  }

  @Test
  void badSqlIsAnErrorNamingTheProblem() throws SQLException {
    try (Connection connection = connect(); Statement statement = connection.createStatement()) {
      SQLException error = org.junit.jupiter.api.Assertions.assertThrows(SQLException.class,
          () -> statement.executeQuery("SELECT count(*) FROM events HAVING count(*) > 1"));
      assertTrue(String.valueOf(error.getMessage()).contains("HAVING"), error.getMessage());
      // The daemon is still there.
      try (ResultSet rs = statement.executeQuery("SELECT id FROM events LIMIT 1")) {
        assertTrue(rs.next());
      }
    }
  }
}
