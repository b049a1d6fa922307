package dev.shoal.sql;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
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
 * Flight SQL through the JDBC driver against a table sharded over three real daemons
 * (docs/deployment.md): made with {@code shoal create-table --shard-key id} on node 0, loaded
 * through node 1 (routed by key), queried through node 2. Every answer is what the events file
 * holds; rows of statements without a sort come from each shard's node (the driver follows the
 * endpoints' locations, with the same credentials).
 */
class FlightSqlJdbcClusterTest {
  private static final Pattern ID = Pattern.compile("^\\{\"id\":\"(\\d+)\"");

  @TempDir static Path dataDir;
  private static final List<ShoalProcess> nodes = new ArrayList<>();
  private static Map<String, Integer> typeCounts;
  private static List<String> ids;

  @BeforeAll
  static void startClusterAndLoadEvents() throws Exception {
    List<Integer> ports = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      try (ServerSocket socket = new ServerSocket(0)) {
        ports.add(socket.getLocalPort());
      }
    }
    String members = String.join(",", ports.stream().map(p -> "grpc://127.0.0.1:" + p).toList());
    for (int i = 0; i < 3; i++) {
      nodes.add(ShoalProcess.start(dataDir.resolve("node" + i), "127.0.0.1:" + ports.get(i),
          "--cluster-nodes", members, "--node-id", Integer.toString(i),
          "--cluster-secret", "flight-sql-jdbc-cluster-test-secret"));
    }
    Path events = ShoalProcess.events();
    nodes.get(0).cli("create-table", "events", "--shard-key", "id");
    nodes.get(1).cli("ingest", "--table", "events", events.toString());
    typeCounts = FlightSqlJdbcTest.typeCounts(events);
    ids = new ArrayList<>();
    try (Stream<String> lines = Files.lines(events)) {
      lines.map(ID::matcher).filter(Matcher::find).forEach(m -> ids.add(m.group(1)));
    }
    ids.sort(null);
  }

  @AfterAll
  static void stopCluster() throws InterruptedException {
    for (ShoalProcess node : nodes) {
      node.close();
    }
  }

  @Test
  void theShardedTableAnswersAsOneTable() throws SQLException {
    try (Connection connection = nodes.get(2).connect(); Statement statement = connection.createStatement()) {
      List<String> tables = new ArrayList<>();
      try (ResultSet rs = connection.getMetaData().getTables(null, null, "%", null)) {
        while (rs.next()) {
          tables.add(rs.getString("TABLE_NAME"));
        }
      }
      assertEquals(List.of("events"), tables, "the sharded table, once; not its shards' tables");

      // Rows from every shard's endpoint, read at its node.
      int watches = 0;
      try (ResultSet rs = statement.executeQuery("SELECT id, actor.login AS who FROM events WHERE type = 'WatchEvent'")) {
        while (rs.next()) {
          watches++;
        }
      }
      assertEquals((int) typeCounts.get("WatchEvent"), watches);
      // Aggregates merged over the shards; groups and sorts over all of them.
      FlightSqlJdbcTest.assertCountsPerType(statement, typeCounts);
      List<String> first = new ArrayList<>();
      try (ResultSet rs = statement.executeQuery("SELECT id FROM events ORDER BY id LIMIT 5 OFFSET 2")) {
        while (rs.next()) {
          first.add(rs.getString("id"));
        }
      }
      assertEquals(ids.subList(2, 7), first);

      // EXPLAIN: one plan per shard.
      int shards = 0;
      try (ResultSet rs = statement.executeQuery("EXPLAIN SELECT id FROM events WHERE type = 'WatchEvent'")) {
        while (rs.next()) {
          shards += rs.getString("plan_step").equals("shard") ? 1 : 0;
        }
      }
      assertEquals(3, shards);
    }
  }

  @Test
  void aPreparedStatementBindsItsParameterOverTheShards() throws SQLException {
    try (Connection connection = nodes.get(0).connect()) {
      FlightSqlJdbcTest.assertPreparedCountsPerType(connection, typeCounts);
    }
  }
}
