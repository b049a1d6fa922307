package dev.shoal.flink.table;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalTargetExtension;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.catalog.ResolvedSchema;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Flink SQL: {@code CREATE TABLE ... WITH ('connector' = 'shoal', ..., 'format' = 'json')} and
 * {@code INSERT INTO ... SELECT}; the rows are then read back with a query. Against the real daemon
 * ({@link ShoalTableDaemonITCase}: started with a token, which the tables pass) and against the
 * engine in this JVM ({@link ShoalTableEmbeddedITCase}: {@code 'endpoint' = 'embedded:<dir>'}, where
 * the token means nothing).
 */
abstract class ShoalTableITCase {

  @RegisterExtension
  static final MiniClusterExtension FLINK = new MiniClusterExtension(
      new MiniClusterResourceConfiguration.Builder().setNumberTaskManagers(1).setNumberSlotsPerTaskManager(2).build());

  static final String TOKEN = "s3cret-token";

  /**
   * The daemon (started with --auth-token: every call of the sink must carry 'authorization:
   * Bearer ...') or the embedded directory, by the concrete class's {@link ShoalMode}.
   */
  @RegisterExtension
  static final ShoalTargetExtension SHOAL = new ShoalTargetExtension(TOKEN);

  static StreamTableEnvironment tableEnvironment() {
    return StreamTableEnvironment.create(streamEnvironment());
  }

  static StreamExecutionEnvironment streamEnvironment() {
    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(2);
    env.enableCheckpointing(500);
    return env;
  }

  static String shoalTable(String name, String table, String columns, String extraOptions) {
    return "CREATE TABLE " + name + " (" + columns + ") WITH ("
        + "'connector' = 'shoal', 'endpoint' = '" + SHOAL.endpoint() + "', 'table' = '" + table + "', "
        + "'format' = 'json'" + extraOptions + ")";
  }

  static <T> Map<T, Integer> counts(List<T> values) {
    Map<T, Integer> counts = new HashMap<>();
    values.forEach(v -> counts.merge(v, 1, Integer::sum));
    return counts;
  }

  @Test
  void insertIntoSelectWritesEveryEventWithItsNestedFields() throws Exception {
    SHOAL.createTable("sql_events", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql("CREATE TABLE github_events ("
        + "id STRING, type STRING, actor ROW<id BIGINT, login STRING>, repo ROW<id BIGINT, name STRING>, "
        + "created_at STRING) WITH ('connector' = 'filesystem', 'path' = '"
        + ShoalDaemon.events().toAbsolutePath().toUri() + "', 'format' = 'json')");
    tEnv.executeSql(shoalTable("shoal_events", "sql_events",
        "id STRING, type STRING, actor ROW<login STRING>, repo_name STRING, created_at STRING",
        ", 'token' = '" + TOKEN + "', 'sink.buffer-flush.max-rows' = '300', 'sink.buffer-flush.interval' = '200ms', "
            + "'sink.delivery-guarantee' = 'at-least-once'"));

    tEnv.executeSql("INSERT INTO shoal_events "
        + "SELECT id, type, ROW(actor.login), repo.name, created_at FROM github_events").await();

    ObjectMapper mapper = new ObjectMapper();
    List<String> ids = new ArrayList<>();
    List<String> logins = new ArrayList<>();
    for (String line : Files.readAllLines(ShoalDaemon.events(), StandardCharsets.UTF_8)) {
      JsonNode event = mapper.readTree(line);
      ids.add(event.get("id").asText());
      logins.add(event.get("actor").get("login").asText());
    }
    assertEquals(counts(ids), counts(SHOAL.column("sql_events", "id")), "every event id exactly once");
    assertEquals(counts(logins), counts(SHOAL.column("sql_events", "actor.login")),
        "nested ROW fields serialised by Flink's json format");
  }

  /**
   * A bounded scan ('scan.bounded') of what INSERT wrote: the WHERE clause is pushed to shoal (a PSF
   * on type answers it) and only the selected columns are decoded; rows equal the file's.
   */
  @Test
  void aBoundedScanPushesItsFilterToShoalAndReadsTheMatchingRows() throws Exception {
    SHOAL.createTable("sql_scan", "reject");
    SHOAL.action("register_psf", "{\"table\": \"sql_scan\", \"name\": \"type\", \"kind\": \"projection\", \"field\": \"type\"}");
    StreamTableEnvironment tEnv = tableEnvironment();
    String columns = "id STRING, type STRING, actor ROW<login STRING>, payload ROW<size BIGINT>";
    tEnv.executeSql("CREATE TABLE github_events (" + columns + ") WITH ('connector' = 'filesystem', 'path' = '"
        + ShoalDaemon.events().toAbsolutePath().toUri() + "', 'format' = 'json')");
    tEnv.executeSql(shoalTable("scan_events", "sql_scan", columns,
        ", 'token' = '" + TOKEN + "', 'sink.delivery-guarantee' = 'at-least-once', 'scan.bounded' = 'true'"));
    tEnv.executeSql("INSERT INTO scan_events SELECT * FROM github_events").await();

    String query = "SELECT id, actor.login FROM scan_events WHERE type = 'PushEvent' AND payload.size > 5";
    String plan = tEnv.explainSql(query);
    assertTrue(plan.contains("filter=["), () -> "the filter is pushed into the shoal source:\n" + plan);
    List<String> read = rows(tEnv, query, r -> r.getField(0) + "/" + r.getField(1));
    List<String> expected = events(
        event -> event.path("type").asText().equals("PushEvent") && event.path("payload").path("size").asLong(0) > 5,
        event -> event.get("id").asText() + "/" + event.get("actor").get("login").asText());
    assertTrue(expected.size() > 100, "the query selects a real subset: " + expected.size());
    assertEquals(counts(expected), counts(read));

    // LOWER and CHAR_LENGTH of a string field are pushed too.
    String functions = "SELECT id FROM scan_events WHERE LOWER(actor.login) LIKE '%bot%' AND CHAR_LENGTH(type) > 9";
    String functionsPlan = tEnv.explainSql(functions);
    assertTrue(functionsPlan.contains("filter=[and(LIKE(LOWER(actor.login)") || functionsPlan.contains("CHAR_LENGTH(type), 9)"),
        () -> "the functions are pushed into the shoal source:\n" + functionsPlan);
    List<String> bots = rows(tEnv, functions, r -> (String) r.getField(0));
    List<String> expectedBots = events(
        event -> event.get("actor").get("login").asText().toLowerCase(java.util.Locale.ROOT).contains("bot")
            && event.get("type").asText().length() > 9,
        event -> event.get("id").asText());
    assertTrue(expectedBots.size() > 10, "the functions select a real subset: " + expectedBots.size());
    assertEquals(counts(expectedBots), counts(bots));

    // SUBSTRING of a string field is pushed as shoal's substr.
    String prefixed = "SELECT id FROM scan_events WHERE SUBSTRING(actor.login FROM 1 FOR 4) = 'dipp'";
    String prefixedPlan = tEnv.explainSql(prefixed);
    assertTrue(prefixedPlan.contains("filter=[=(SUBSTRING(actor.login, 1, 4)"), () -> "SUBSTRING is pushed:\n" + prefixedPlan);
    List<String> expectedPrefixed = events(event -> event.get("actor").get("login").asText().startsWith("dipp"), event -> event.get("id").asText());
    assertTrue(expectedPrefixed.size() > 100, "the substring selects a real subset: " + expectedPrefixed.size());
    assertEquals(counts(expectedPrefixed), counts(rows(tEnv, prefixed, r -> (String) r.getField(0))));
  }

  /** What {@code query} returns, each row as {@code text} makes it. */
  private static List<String> rows(StreamTableEnvironment tEnv, String query, java.util.function.Function<Row, String> text) throws Exception {
    List<String> out = new ArrayList<>();
    try (CloseableIterator<Row> rows = tEnv.executeSql(query).collect()) {
      rows.forEachRemaining(r -> out.add(text.apply(r)));
    }
    return out;
  }

  /** The events of the file that pass {@code test}, each as {@code text} makes it. */
  private static List<String> events(java.util.function.Predicate<JsonNode> test, java.util.function.Function<JsonNode, String> text)
      throws java.io.IOException {
    ObjectMapper mapper = new ObjectMapper();
    List<String> out = new ArrayList<>();
    for (String line : Files.readAllLines(ShoalDaemon.events(), StandardCharsets.UTF_8)) {
      JsonNode event = mapper.readTree(line);
      if (test.test(event)) {
        out.add(text.apply(event));
      }
    }
    return out;
  }

  /**
   * A TIMESTAMP_LTZ column over RFC 3339 strings (the JSON format's ISO-8601 standard): a time
   * range is pushed as shoal's TIMESTAMP comparison (a timestamp range PSF, backfilled over the
   * records written before it, can serve it), and the rows equal the file's.
   */
  @Test
  void aTimestampRangeIsPushedAndServedByATimestampPsf() throws Exception {
    SHOAL.createTable("sql_time", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.getConfig().set("table.local-time-zone", "UTC");
    tEnv.executeSql("CREATE TABLE github_times (id STRING, created_at STRING) WITH ('connector' = 'filesystem', 'path' = '"
        + ShoalDaemon.events().toAbsolutePath().toUri() + "', 'format' = 'json')");
    tEnv.executeSql(shoalTable("time_sink", "sql_time", "id STRING, created_at STRING",
        ", 'token' = '" + TOKEN + "', 'sink.delivery-guarantee' = 'at-least-once'"));
    tEnv.executeSql("INSERT INTO time_sink SELECT * FROM github_times").await();
    SHOAL.action("register_psf", "{\"table\": \"sql_time\", \"name\": \"minute\", \"kind\": \"range\", "
        + "\"field\": \"created_at\", \"type\": \"timestamp\", \"bucket\": \"1m\"}");
    for (int i = 0; i < 200 && SHOAL.action("list_psfs", "{\"table\": \"sql_time\"}").contains("\"done\":false"); i++) {
      Thread.sleep(50);
    }
    tEnv.executeSql(shoalTable("time_scan", "sql_time", "id STRING, created_at TIMESTAMP_LTZ(3)",
        ", 'token' = '" + TOKEN + "', 'scan.bounded' = 'true', 'json.timestamp-format.standard' = 'ISO-8601'"));
    String query = "SELECT id FROM time_scan WHERE created_at >= TIMESTAMP '2018-01-01 11:05:00' "
        + "AND created_at < TIMESTAMP '2018-01-01 11:07:30'";
    String plan = tEnv.explainSql(query);
    assertTrue(plan.contains("filter=[and(>=(created_at, 2018-01-01 11:05:00), <(created_at, 2018-01-01 11:07:30))]"),
        () -> "the range is pushed into the shoal source:\n" + plan);
    List<String> read = rows(tEnv, query, r -> (String) r.getField(0));
    java.time.Instant from = java.time.Instant.parse("2018-01-01T11:05:00Z");
    java.time.Instant to = java.time.Instant.parse("2018-01-01T11:07:30Z");
    List<String> expected = events(event -> {
      java.time.Instant at = java.time.Instant.parse(event.get("created_at").asText());
      return !at.isBefore(from) && at.isBefore(to);
    }, event -> event.get("id").asText());
    assertTrue(expected.size() > 100, "the range selects a real subset: " + expected.size());
    assertEquals(counts(expected), counts(read));
  }

  /** {@code JOIN t FOR SYSTEM_TIME AS OF p.pt}: each key's latest record (highest log address), none for a missing key. */
  @Test
  void aLookupJoinReturnsTheLatestRecordOfEachKey() throws Exception {
    SHOAL.createTable("sql_dim", "reject");
    SHOAL.action("register_psf", "{\"table\": \"sql_dim\", \"name\": \"id\", \"kind\": \"projection\", \"field\": \"id\"}");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("dim", "sql_dim", "id STRING, v BIGINT", ", 'token' = '" + TOKEN + "'"));
    tEnv.executeSql("INSERT INTO dim VALUES ('a', 1), ('b', 1), ('it''s', 7)").await();
    tEnv.executeSql("INSERT INTO dim VALUES ('a', 2)").await();

    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(1);
    StreamTableEnvironment streams = StreamTableEnvironment.create(env);
    streams.executeSql(shoalTable("dim", "sql_dim", "id STRING, v BIGINT", ", 'token' = '" + TOKEN + "'"));
    streams.createTemporaryView("probe", streams.fromDataStream(env.fromData("a", "b", "c", "it's"),
        org.apache.flink.table.api.Schema.newBuilder().column("f0", "STRING").columnByExpression("pt", "PROCTIME()").build()));
    Map<String, Long> joined = new java.util.TreeMap<>();
    try (CloseableIterator<Row> rows = streams.executeSql(
        "SELECT p.f0, d.v FROM probe AS p JOIN dim FOR SYSTEM_TIME AS OF p.pt AS d ON p.f0 = d.id").collect()) {
      rows.forEachRemaining(r -> joined.put((String) r.getField(0), (Long) r.getField(1)));
    }
    assertEquals(Map.of("a", 2L, "b", 1L, "it's", 7L), joined);

    // The same through Flink's partial lookup cache: 'c' (missing) probed twice, 'a' three times.
    streams.executeSql(shoalTable("cached_dim", "sql_dim", "id STRING, v BIGINT", ", 'token' = '" + TOKEN + "', "
        + "'lookup.cache' = 'PARTIAL', 'lookup.partial-cache.max-rows' = '100', "
        + "'lookup.partial-cache.expire-after-write' = '1 min'"));
    streams.createTemporaryView("probe2", streams.fromDataStream(env.fromData("a", "c", "a", "b", "c", "a"),
        org.apache.flink.table.api.Schema.newBuilder().column("f0", "STRING").columnByExpression("pt", "PROCTIME()").build()));
    List<String> cached = new ArrayList<>();
    try (CloseableIterator<Row> rows = streams.executeSql(
        "SELECT p.f0, d.v FROM probe2 AS p JOIN cached_dim FOR SYSTEM_TIME AS OF p.pt AS d ON p.f0 = d.id").collect()) {
      rows.forEachRemaining(r -> cached.add(r.getField(0) + "=" + r.getField(1)));
    }
    assertEquals(counts(List.of("a=2", "a=2", "a=2", "b=1")), counts(cached));
    streams.executeSql(shoalTable("full_dim", "sql_dim", "id STRING, v BIGINT", ", 'lookup.cache' = 'FULL'"));
    Exception full = assertThrows(Exception.class, () -> streams.explainSql(
        "SELECT p.f0, d.v FROM probe2 AS p JOIN full_dim FOR SYSTEM_TIME AS OF p.pt AS d ON p.f0 = d.id"));
    assertTrue(ExceptionUtils.stringifyException(full).contains("'lookup.cache' = 'FULL' is not supported"),
        ExceptionUtils.stringifyException(full));
  }

  @Test
  void insertValuesWithBuilderDefaults() throws Exception {
    SHOAL.createTable("sql_values", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("shoal_values", "sql_values", "id STRING, n INT", ", 'token' = '" + TOKEN + "'"));
    tEnv.executeSql("INSERT INTO shoal_values VALUES ('a', 1), ('b', 2), ('c', 3)").await();
    assertEquals(counts(List.of("a", "b", "c")), counts(SHOAL.column("sql_values", "id")));
    assertEquals(counts(List.of("1", "2", "3")), counts(SHOAL.column("sql_values", "n")));
  }

  /** Without a 'format' option the rows are written by Flink's json format (as Elasticsearch's connector does). */
  @Test
  void formatDefaultsToJson() throws Exception {
    SHOAL.createTable("sql_default_format", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql("CREATE TABLE shoal_default (id STRING, inner_row ROW<k INT>) WITH ('connector' = 'shoal', 'endpoint' = '"
        + SHOAL.endpoint() + "', 'table' = 'sql_default_format', 'token' = '" + TOKEN + "')");
    tEnv.executeSql("INSERT INTO shoal_default VALUES ('d1', ROW(7)), ('d2', ROW(8))").await();
    assertEquals(counts(List.of("d1", "d2")), counts(SHOAL.column("sql_default_format", "id")));
    assertEquals(counts(List.of("7", "8")), counts(SHOAL.column("sql_default_format", "inner_row.k")));
  }

  /** 'sink.create-table' = 'true': the writers create the missing table (create_table, if_not_exists). */
  @Test
  void createTableOptionCreatesAMissingTable() throws Exception {
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("shoal_made", "sql_made_by_sink", "id STRING", ", 'sink.create-table' = 'true', 'token' = '" + TOKEN + "'"));
    tEnv.executeSql("INSERT INTO shoal_made VALUES ('m1'), ('m2'), ('m3')").await();
    assertEquals(counts(List.of("m1", "m2", "m3")), counts(SHOAL.column("sql_made_by_sink", "id")));
  }

  @Test
  void rawFormatOverAStringColumnOfJsonTextWritesTheDocumentsAsTheyAre() throws Exception {
    SHOAL.createTable("sql_raw", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql("CREATE TABLE shoal_raw (doc STRING) WITH ('connector' = 'shoal', 'endpoint' = '"
        + SHOAL.endpoint() + "', 'table' = 'sql_raw', 'format' = 'raw', 'token' = '" + TOKEN + "')");
    tEnv.executeSql("INSERT INTO shoal_raw VALUES ('{\"id\": \"x1\", \"deep\": {\"k\": 1}}'), ('{\"id\": \"x2\"}')")
        .await();
    assertEquals(counts(List.of("x1", "x2")), counts(SHOAL.column("sql_raw", "id")));
  }

  @Test
  void exactlyOnceInsertIntoSelectCommitsEveryEventOnce() throws Exception {
    SHOAL.createTable("sql_eo", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql("CREATE TABLE github_events_eo (id STRING, type STRING) WITH ('connector' = 'filesystem', "
        + "'path' = '" + ShoalDaemon.events().toAbsolutePath().toUri() + "', 'format' = 'json')");
    tEnv.executeSql(shoalTable("shoal_eo", "sql_eo", "id STRING, type STRING",
        ", 'token' = '" + TOKEN + "', 'sink.delivery-guarantee' = 'exactly-once', "
            + "'sink.transactional-id-prefix' = 'sql-eo', 'sink.buffer-flush.interval' = '200ms'"));

    tEnv.executeSql("INSERT INTO shoal_eo SELECT id, type FROM github_events_eo").await();

    List<String> ids = new ArrayList<>();
    ObjectMapper mapper = new ObjectMapper();
    for (String line : Files.readAllLines(ShoalDaemon.events(), StandardCharsets.UTF_8)) {
      ids.add(mapper.readTree(line).get("id").asText());
    }
    assertEquals(counts(ids), counts(SHOAL.column("sql_eo", "id")), "every event id exactly once");
    JsonNode transactions = mapper.readTree(SHOAL.action("list_transactions", "{\"table\":\"sql_eo\"}"));
    assertTrue(transactions.size() > 0, "the sink wrote through transactions");
    for (JsonNode transaction : transactions) {
      assertTrue(transaction.get("transaction").asText().startsWith("sql-eo-"), transaction.toString());
      assertEquals("committed", transaction.get("state").asText(), transaction.toString());
    }
  }

  /**
   * A changelog (inserts, updates as UPDATE_BEFORE/UPDATE_AFTER pairs, deletes, keys that come
   * back after a delete) written by the upsert sink of a table with a PRIMARY KEY, under
   * at-least-once and exactly-once: the sink creates a keyed shoal table, and the table ends in
   * exactly the changelog's final state.
   */
  @Test
  void aPrimaryKeyTableWritesAChangelogAsUpsertsAndDeletesAndEndsInItsFinalState() throws Exception {
    for (String guarantee : List.of("at-least-once", "exactly-once")) {
      String table = "sql_upsert_" + guarantee.replace('-', '_');
      List<Row> changelog = new ArrayList<>();
      Map<String, Long> expected = new java.util.TreeMap<>();
      java.util.Random random = new java.util.Random(18);
      for (int i = 0; i < 2_000; i++) {
        String key = "k" + random.nextInt(150);
        Long previous = expected.get(key);
        if (previous != null && random.nextInt(4) == 0) {
          changelog.add(Row.ofKind(org.apache.flink.types.RowKind.DELETE, key, previous));
          expected.remove(key);
        } else if (previous != null) {
          changelog.add(Row.ofKind(org.apache.flink.types.RowKind.UPDATE_BEFORE, key, previous));
          changelog.add(Row.ofKind(org.apache.flink.types.RowKind.UPDATE_AFTER, key, (long) i));
          expected.put(key, (long) i);
        } else {
          changelog.add(Row.ofKind(org.apache.flink.types.RowKind.INSERT, key, (long) i));
          expected.put(key, (long) i);
        }
      }
      StreamExecutionEnvironment env = streamEnvironment();
      StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
      org.apache.flink.streaming.api.datastream.DataStream<Row> rows = env.fromData(changelog,
          org.apache.flink.api.common.typeinfo.Types.ROW_NAMED(new String[] {"k", "v"},
              org.apache.flink.api.common.typeinfo.Types.STRING, org.apache.flink.api.common.typeinfo.Types.LONG));
      // The changelog's own key (Flink 2.x asks a primary-key sink's input for an upsert key).
      org.apache.flink.table.api.Schema keyed = org.apache.flink.table.api.Schema.newBuilder()
          .column("k", org.apache.flink.table.api.DataTypes.STRING().notNull())
          .column("v", org.apache.flink.table.api.DataTypes.BIGINT())
          .primaryKey("k")
          .build();
      tEnv.createTemporaryView("changes_" + table,
          tEnv.fromChangelogStream(rows, keyed, org.apache.flink.table.connector.ChangelogMode.all()));
      tEnv.executeSql(shoalTable("shoal_" + table, table, "k STRING, v BIGINT, PRIMARY KEY (k) NOT ENFORCED",
          ", 'token' = '" + TOKEN + "', 'sink.create-table' = 'true', 'sink.delivery-guarantee' = '" + guarantee + "', "
              + "'sink.transactional-id-prefix' = '" + table + "', 'sink.buffer-flush.max-rows' = '97', "
              + "'sink.buffer-flush.interval' = '100ms'"));
      tEnv.executeSql("INSERT INTO shoal_" + table + " SELECT k, v FROM changes_" + table).await();

      List<String> keys = SHOAL.column(table, "k");
      List<String> values = SHOAL.column(table, "v");
      Map<String, Long> actual = new java.util.TreeMap<>();
      for (int i = 0; i < keys.size(); i++) {
        assertEquals(null, actual.put(keys.get(i), Long.parseLong(values.get(i))), guarantee + ": one row per key");
      }
      assertEquals(expected, actual, guarantee + ": the table ends in the changelog's final state");
      JsonNode stats = new ObjectMapper().readTree(SHOAL.action("stats", "{\"table\": \"" + table + "\"}"));
      assertEquals(List.of("k"), List.of(stats.path("keys").path("primary_key").path(0).asText()), stats.toString());
    }
  }

  @Test
  void unknownOptionIsRejectedNamingIt() {
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("shoal_typo", "whatever", "id STRING", ", 'sink.buffer-flush.max-row' = '10'"));
    Exception e = assertThrows(Exception.class, () -> tEnv.executeSql("INSERT INTO shoal_typo VALUES ('a')"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(e, "sink.buffer-flush.max-row").isPresent(),
        () -> ExceptionUtils.stringifyException(e));
  }

  private static List<String> firstColumn(TableResult result) throws Exception {
    List<String> out = new ArrayList<>();
    try (CloseableIterator<Row> rows = result.collect()) {
      rows.forEachRemaining(r -> out.add(String.valueOf(r.getField(0))));
    }
    return out;
  }

  /**
   * CREATE CATALOG ... ('type' = 'shoal'): the endpoint's tables (the daemon's, or the embedded
   * engine's directory) with their inferred schemas, INSERT INTO a catalog table without CREATE
   * TABLE, CREATE and DROP TABLE through the catalog.
   */
  @Test
  void catalogListsTablesWithInferredSchemasAndCreatesAndDropsThem() throws Exception {
    SHOAL.createTable("cat_events", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("fill", "cat_events", "id STRING, n BIGINT, score DOUBLE, ok BOOLEAN, inner_row ROW<k STRING>, tags ARRAY<STRING>",
        ", 'token' = '" + TOKEN + "'"));
    tEnv.executeSql("INSERT INTO fill VALUES ('a', 1, 0.5, true, ROW('x'), ARRAY['t1']), ('b', 2, 1.5, false, ROW('y'), ARRAY['t2'])").await();
    tEnv.executeSql("CREATE CATALOG shoal_cat WITH ('type' = 'shoal', 'endpoint' = '" + SHOAL.endpoint() + "', 'token' = '" + TOKEN + "')");
    assertTrue(firstColumn(tEnv.executeSql("SHOW TABLES IN shoal_cat.`default`")).contains("cat_events"));

    ResolvedSchema schema = tEnv.from("shoal_cat.`default`.cat_events").getResolvedSchema();
    Map<String, String> types = new TreeMap<>();
    schema.getColumns().forEach(c -> types.put(c.getName(), c.getDataType().getLogicalType().asSummaryString()));
    assertEquals(Map.of("id", "STRING", "n", "BIGINT", "score", "DOUBLE", "ok", "BOOLEAN", "inner_row", "ROW<`k` STRING>",
        "tags", "ARRAY<STRING>"), types);

    // INSERT INTO a catalog table needs no CREATE TABLE; the catalog gives connector, endpoint, table and token.
    tEnv.executeSql("INSERT INTO shoal_cat.`default`.cat_events (id, n) VALUES ('c', 3)").await();
    assertEquals(counts(List.of("a", "b", "c")), counts(SHOAL.column("cat_events", "id")));
    // ARRAY_CONTAINS over an array column: Flink 1.20's planner does not offer it to sources
    // (ShoalFiltersTest covers its translation for a planner that does); Flink answers it.
    String contains = "SELECT id FROM fill /*+ OPTIONS('scan.bounded' = 'true') */ WHERE ARRAY_CONTAINS(tags, 't2')";
    assertEquals(List.of("b"), firstColumn(tEnv.executeSql(contains)));
    // SELECT from a catalog table reads it (here a snapshot, by a dynamic option).
    assertEquals(counts(List.of("a", "b", "c")), counts(firstColumn(tEnv.executeSql(
        "SELECT id FROM shoal_cat.`default`.cat_events /*+ OPTIONS('scan.bounded' = 'true') */"))));

    tEnv.executeSql("CREATE TABLE shoal_cat.`default`.cat_new (id STRING, v DOUBLE)");
    assertTrue(SHOAL.action("list_psfs", "{\"table\": \"cat_new\"}") != null, "the table exists on the daemon");
    tEnv.executeSql("INSERT INTO shoal_cat.`default`.cat_new VALUES ('z', 1.5)").await();
    assertEquals(List.of("z"), SHOAL.column("cat_new", "id"));
    Exception exists = assertThrows(Exception.class, () -> tEnv.executeSql("CREATE TABLE shoal_cat.`default`.cat_new (id STRING)"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(exists, "already exists").isPresent(), ExceptionUtils.stringifyException(exists));
    tEnv.executeSql("DROP TABLE shoal_cat.`default`.cat_new");
    assertFalse(firstColumn(tEnv.executeSql("SHOW TABLES IN shoal_cat.`default`")).contains("cat_new"));
    Exception missing = assertThrows(Exception.class, () -> tEnv.executeSql("DROP TABLE shoal_cat.`default`.cat_new"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(missing, "does not exist").isPresent(), ExceptionUtils.stringifyException(missing));
    tEnv.executeSql("DROP CATALOG shoal_cat");
  }
}
