package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * Writes through DoPut, sharded tables (two daemons, or two embedded directories), columns of
 * mixed JSON types, and structs that are missing in some records — each checked against Spark's
 * JSON reader. Runs in both modes ({@link ShoalReadWriteDaemonTest}, {@link
 * ShoalReadWriteEmbeddedTest}).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class ShoalReadWriteTest extends ShoalSparkTestBase {
  SparkSession spark;
  String endpoint;
  private ShoalTarget second;
  /** Checkpoint locations and Spark's JSON input files (JUnit deletes it after the class). */
  @TempDir Path tmp;
  Dataset<Row> oracle;

  @BeforeAll
  void setUp(ShoalTarget target) throws Exception {
    endpoint = target.endpoint();
    second = ShoalTarget.start(target.mode());
    spark = spark(endpoint);
    oracle = spark.read().json(eventsPath().toString());
  }

  @AfterAll
  void tearDown() throws Exception {
    if (second != null) {
      second.close();
    }
  }

  static List<String> rows(Dataset<Row> df) {
    List<String> out = new ArrayList<>();
    for (Row r : df.collectAsList()) {
      out.add(r.toString());
    }
    Collections.sort(out);
    return out;
  }

  Dataset<Row> read(String endpoints, String table) {
    return spark.read().format("shoal").option("endpoint", endpoints).option("table", table).load();
  }

  @Test
  void append_through_doput_reads_back_what_was_written() {
    Dataset<Row> source = oracle.where("type IN ('IssuesEvent', 'ForkEvent', 'ReleaseEvent')");
    source.write().format("shoal").option("endpoint", endpoint).option("table", "written")
        .option(ShoalOptions.WRITE_BATCH_ROWS, "100").mode("append").save();
    String cols = "id, type, actor.login, actor.id, payload.action, payload.issue.number, payload.forkee.full_name, created_at, public";
    assertEquals(rows(source.selectExpr(cols.split(", "))), rows(read(endpoint, "written").selectExpr(cols.split(", "))));
    assertEquals(source.count(), read(endpoint, "written").where("type = 'IssuesEvent' OR type <> 'IssuesEvent'").count());
  }

  @Test
  void a_sharded_table_is_the_union_of_its_shards() throws Exception {
    List<String> events = events();
    List<String> even = new ArrayList<>();
    List<String> odd = new ArrayList<>();
    for (int i = 0; i < events.size(); i++) {
      (i % 2 == 0 ? even : odd).add(events.get(i));
    }
    ingest(endpoint, "sharded", even, 1000);
    ingest(second.endpoint(), "sharded", odd, 1000);
    Dataset<Row> both = read(endpoint + "," + second.endpoint(), "sharded");
    assertEquals(events.size(), both.count());
    String where = "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language IS NOT NULL";
    assertEquals(rows(oracle.where(where).select("id", "payload.pull_request.head.repo.language")),
        rows(both.where(where).select("id", "payload.pull_request.head.repo.language")));
    assertEquals(rows(oracle.selectExpr("count(*)", "min(payload.size)", "max(created_at)")),
        rows(both.selectExpr("count(*)", "min(payload.size)", "max(created_at)")));
    assertEquals(5, both.where("type = 'PushEvent'").limit(5).collectAsList().size());
    String plan = both.where("type = 'PushEvent'").queryExecution().executedPlan().toString();
    assertTrue(plan.contains("shard " + endpoint) && plan.contains("shard " + second.endpoint()), plan);
  }

  @Test
  void columns_of_mixed_json_types_are_json_text_and_their_filters_stay_in_spark() throws Exception {
    List<String> records = List.of(
        "{\"k\": 1, \"m\": 1, \"o\": {\"x\": 1}}",
        "{\"k\": 2, \"m\": \"1\", \"o\": {\"x\": \"a\"}}",
        "{\"k\": 3, \"m\": \"x\"}",
        "{\"k\": 4, \"m\": true, \"o\": null}",
        "{\"k\": 5}");
    ingest(endpoint, "mixed", records, 10);
    Path file = Files.createTempFile(tmp, "mixed", ".json");
    Files.write(file, records);
    Dataset<Row> json = spark.read().json(file.toString());
    Dataset<Row> shoal = read(endpoint, "mixed");
    for (String where : new String[] {"m = '1'", "m = 'x'", "m IS NULL", "o.x = '1'", "o IS NULL", "o.x IS NULL"}) {
      assertEquals(rows(json.where(where).select("k")), rows(shoal.where(where).select("k")), where);
    }
    String plan = shoal.where("m = '1'").select("k").queryExecution().executedPlan().toString();
    assertTrue(plan.contains("Filter "), "filters on JSON-text columns are evaluated by Spark: " + plan);
    assertFalse(plan.contains("filter=[\"m\""), plan);
  }

  /**
   * Structured Streaming: a query follows the table by log address. Trigger.AvailableNow reads
   * what is there, a restart from the checkpoint reads only what landed since (every record
   * once), maxRecordsPerTrigger splits the backlog into several micro-batches, and the filter
   * option is evaluated by the daemon.
   */
  @Test
  void a_stream_reads_every_record_once_across_restarts() throws Exception {
    List<String> events = events();
    String table = "streamed";
    ingest(endpoint, table, events.subList(0, 3000), 500);
    Path checkpoint = Files.createTempDirectory(tmp, "shoal-stream");
    List<String> seen = Collections.synchronizedList(new ArrayList<>());
    List<Long> batchSizes = Collections.synchronizedList(new ArrayList<>());
    Runnable run = () -> {
      try {
        spark.readStream().format("shoal").option("endpoint", endpoint).option("table", table)
            .option("maxRecordsPerTrigger", "700").load()
            .select("id").writeStream()
            .foreachBatch((org.apache.spark.api.java.function.VoidFunction2<Dataset<Row>, Long>) (batch, id) -> {
              List<Row> rows = batch.collectAsList();
              batchSizes.add((long) rows.size());
              rows.forEach(r -> seen.add(r.getString(0)));
            })
            .option("checkpointLocation", checkpoint.toString())
            .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow())
            .start().awaitTermination();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    run.run();
    List<String> expected = new ArrayList<>();
    for (String e : events.subList(0, 3000)) {
      expected.add(ShoalClient.JSON.readTree(e).path("id").asText());
    }
    assertSameOnce(expected, seen, "the first run");
    assertTrue(batchSizes.size() >= 3, "maxRecordsPerTrigger=700 over 3000 records: " + batchSizes);
    ingest(endpoint, table, events.subList(3000, 4000), 500);
    run.run();
    for (String e : events.subList(3000, 4000)) {
      expected.add(ShoalClient.JSON.readTree(e).path("id").asText());
    }
    assertSameOnce(expected, seen, "after the restart from the checkpoint");

    // The filter option: a PSF subset followed from the earliest offset.
    List<String> issues = Collections.synchronizedList(new ArrayList<>());
    spark.readStream().format("shoal").option("endpoint", endpoint).option("table", table)
        .option("filter", "type = 'IssuesEvent'").load()
        .select("id", "type").writeStream()
        .foreachBatch((org.apache.spark.api.java.function.VoidFunction2<Dataset<Row>, Long>) (batch, id) ->
            batch.collectAsList().forEach(r -> issues.add(r.getString(1))))
        .option("checkpointLocation", Files.createTempDirectory(tmp, "shoal-stream-f").toString())
        .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow())
        .start().awaitTermination();
    long expectedIssues = events.subList(0, 4000).stream().filter(e -> e.contains("\"type\":\"IssuesEvent\"")).count();
    assertEquals(expectedIssues, issues.size());
    assertTrue(issues.stream().allMatch("IssuesEvent"::equals));
  }

  /**
   * durableOnly: a stream stops at the durable address, so it reads nothing a daemon crash could
   * take back; once make_durable wrote the open page, the next run reads the rest, each record once.
   */
  @Test
  void a_durable_only_stream_reads_only_what_is_durable() throws Exception {
    String table = "durable_streamed";
    List<String> events = events().subList(0, 200); // a few hundred KB: in the open page (durability none)
    ingest(endpoint, table, events, 100);
    Path checkpoint = Files.createTempDirectory(tmp, "shoal-stream-durable");
    List<String> seen = Collections.synchronizedList(new ArrayList<>());
    Runnable run = () -> {
      try {
        spark.readStream().format("shoal").option("endpoint", endpoint).option("table", table)
            .option("durableOnly", "true").load()
            .select("id").writeStream()
            .foreachBatch((org.apache.spark.api.java.function.VoidFunction2<Dataset<Row>, Long>) (batch, id) ->
                batch.collectAsList().forEach(r -> seen.add(r.getString(0))))
            .option("checkpointLocation", checkpoint.toString())
            .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow())
            .start().awaitTermination();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    java.util.function.Supplier<Long> durable = () -> {
      try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
        return client.action("stats", ShoalClient.JSON.createObjectNode().put("table", table), table).path("durable_address").asLong();
      }
    };
    run.run();
    if (durable.get() <= 64) { // nothing became durable meanwhile (no page filled, no timed checkpoint)
      assertEquals(List.of(), seen, "nothing durable, nothing read");
    }
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      client.action("make_durable", ShoalClient.JSON.createObjectNode().put("table", table), table);
    }
    run.run();
    List<String> expected = new ArrayList<>();
    for (String e : events) {
      expected.add(ShoalClient.JSON.readTree(e).path("id").asText());
    }
    assertSameOnce(expected, seen, "after make_durable");
  }

  /**
   * A stream whose offset retention has passed fails naming the range that is gone
   * (failOnDataLoss, the default), or resumes at the table's begin address.
   */
  @Test
  void a_stream_behind_retention_fails_or_resumes_at_the_begin_address() throws Exception {
    String table = "retained";
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      client.action("create_table", ShoalClient.JSON.createObjectNode().put("name", table).put("page_size_bits", 16), table);
    }
    ingest(endpoint, table, events().subList(0, 2000), 500);
    long begin;
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      client.action("make_durable", ShoalClient.JSON.createObjectNode().put("table", table), table);
      begin = client.action("truncate", ShoalClient.JSON.createObjectNode().put("table", table).put("keep_bytes", 200_000), table)
          .path("begin_address").asLong();
    }
    assertTrue(begin > 64, "truncated: " + begin);
    String shard = ShoalOptions.forTable(Map.of("endpoint", endpoint, "table", table)).endpoints().get(0).toString();
    String behind = ShoalClient.JSON.createObjectNode().put(shard, 64).toString();
    java.util.function.Function<Boolean, Long> run = failOnDataLoss -> {
      List<Long> rows = Collections.synchronizedList(new ArrayList<>());
      try {
        spark.readStream().format("shoal").option("endpoint", endpoint).option("table", table)
            .option("startingOffsets", behind).option("failOnDataLoss", failOnDataLoss.toString()).load()
            .select("id").writeStream()
            .foreachBatch((org.apache.spark.api.java.function.VoidFunction2<Dataset<Row>, Long>) (batch, id) -> rows.add(batch.count()))
            .option("checkpointLocation", Files.createTempDirectory(tmp, "shoal-stream-r").toString())
            .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow())
            .start().awaitTermination();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
      return rows.stream().mapToLong(Long::longValue).sum();
    };
    RuntimeException failure = org.junit.jupiter.api.Assertions.assertThrows(RuntimeException.class, () -> run.apply(true));
    String message = String.valueOf(failure.getCause() != null ? failure.getCause().getMessage() : failure.getMessage());
    assertTrue(message.contains("[64, " + begin + ") were dropped"), message);
    long resumed = run.apply(false);
    assertTrue(resumed > 0 && resumed < 2000, "resumed at the begin address: " + resumed + " of 2000 records");
  }

  /** Every expected id exactly once (the message counts the missing and the repeated ones). */
  private static void assertSameOnce(List<String> expected, List<String> seen, String when) {
    java.util.Set<String> unique = new java.util.HashSet<>(seen);
    java.util.Set<String> missing = new java.util.HashSet<>(expected);
    missing.removeAll(unique);
    java.util.Set<String> extra = new java.util.HashSet<>(unique);
    extra.removeAll(new java.util.HashSet<>(expected));
    assertTrue(missing.isEmpty() && extra.isEmpty() && unique.size() == seen.size(), when + ": " + missing.size() + " missing, "
        + extra.size() + " unexpected, " + (seen.size() - unique.size()) + " read twice (of " + expected.size() + ")");
  }

  /** SQL keywords of the daemon's parser (and Spark's) as column names: one filter per column, pushed down. */
  static final String[] KEYWORD_COLUMNS = {
      "trim", "struct", "some", "with", "select", "from", "where", "end", "order", "group", "by", "limit", "table",
      "values", "case", "null", "true", "false", "interval", "array", "map", "date", "timestamp", "user", "left",
      "join", "on", "as", "union", "all", "any", "exists", "not", "and", "or", "in", "is", "like", "between",
      "escape", "distinct", "cast", "when", "then", "else", "substring", "position", "extract", "current_date",
      "default", "key", "value", "type", "row", "rows", "over", "filter", "window", "natural", "collate"};

  @Test
  void filters_on_columns_named_like_sql_keywords_are_pushed_down_and_agree_with_spark() throws Exception {
    List<String> records = new ArrayList<>();
    for (int k = 0; k < 6; k++) {
      StringBuilder r = new StringBuilder("{\"k\": " + k);
      for (String kw : KEYWORD_COLUMNS) {
        r.append(", \"").append(kw).append("\": \"").append(kw).append(k % 3).append('"');
      }
      records.add(r.append(", \"nested\": {\"select\": ").append(k).append("}}").toString());
    }
    ingest(endpoint, "keywords", records, 10);
    Path file = Files.createTempFile(tmp, "keywords", ".json");
    Files.write(file, records);
    Dataset<Row> json = spark.read().json(file.toString());
    Dataset<Row> shoal = read(endpoint, "keywords");
    for (String kw : KEYWORD_COLUMNS) {
      String where = "`" + kw + "` = '" + kw + "1'";
      Dataset<Row> filtered = shoal.where(where).select("k", kw);
      assertEquals(rows(json.where(where).select("k", kw)), rows(filtered), where);
      String plan = filtered.queryExecution().executedPlan().toString();
      assertTrue(plan.contains("filter=[\"" + kw + "\" = '" + kw + "1']"), "pushed down: " + plan);
    }
    String nested = "nested.`select` >= 3";
    assertEquals(rows(json.where(nested).select("k")), rows(shoal.where(nested).select("k")), nested);
    assertEquals(rows(json.selectExpr("min(`trim`)", "max(nested.`select`)")),
        rows(shoal.selectExpr("min(`trim`)", "max(nested.`select`)")));
  }

  @Test
  void pruned_structs_match_spark_when_the_struct_is_missing_or_partial() throws Exception {
    List<String> records = List.of(
        "{\"k\": 1, \"s\": {\"a\": 1, \"b\": \"x\", \"t\": {\"c\": 1}}}",
        "{\"k\": 2, \"s\": {\"b\": \"y\"}}",
        "{\"k\": 3}",
        "{\"k\": 4, \"s\": null}",
        "{\"k\": 5, \"s\": {\"t\": {}}}");
    ingest(endpoint, "structs", records, 10);
    Path file = Files.createTempFile(tmp, "structs", ".json");
    Files.write(file, records);
    Dataset<Row> json = spark.read().json(file.toString());
    Dataset<Row> shoal = read(endpoint, "structs");
    String[][] projections = {{"k", "s.a"}, {"k", "s.b", "s.t.c"}, {"k", "s"}, {"k", "s.t"}};
    for (String[] p : projections) {
      assertEquals(rows(json.selectExpr(p)), rows(shoal.selectExpr(p)), String.join(",", p));
    }
    for (String where : new String[] {"s.a IS NULL", "s.b = 'y'", "s.t.c IS NULL", "s IS NULL"}) {
      assertEquals(rows(json.where(where).select("k")), rows(shoal.where(where).select("k")), where);
    }
    assertEquals(rows(json.selectExpr("k", "s.a IS NULL AS n")), rows(shoal.selectExpr("k", "s.a IS NULL AS n")));
  }

  @Test
  void catalog_create_table_and_insert() {
    spark.sql("CREATE TABLE shoal.made (id STRING, n BIGINT)");
    spark.read().json(spark.createDataset(List.of("{\"id\": \"a\", \"n\": 1}", "{\"id\": \"b\", \"n\": 2}"), Encoders.STRING()))
        .write().format("shoal").option("endpoint", endpoint).option("table", "made").mode("append").save();
    assertEquals(List.of("[b,2]"), rows(spark.sql("SELECT id, n FROM shoal.made WHERE n > 1")));
    List<Row> tables = spark.sql("SHOW TABLES IN shoal").collectAsList();
    assertTrue(tables.stream().anyMatch(r -> r.getString(1).equals("made")), tables.toString());
  }

  /**
   * A keyed table (TBLPROPERTIES 'shoal.primary-key'): INSERT INTO upserts by key, DELETE FROM ...
   * WHERE deletes the matching rows (SupportsDeleteV2, the delete action), and every query sees one
   * row per key. DELETE on an append-only table is refused, naming why.
   */
  @Test
  @org.junit.jupiter.api.Timeout(120)
  void catalog_keyed_table_upserts_by_key_and_delete_from_deletes() {
    spark.sql("CREATE TABLE shoal.keyed (id STRING, n BIGINT, s STRING) TBLPROPERTIES ('shoal.primary-key' = 'id')");
    // (ACCEPT_ANY_SCHEMA: the query's column names are the records' keys.)
    spark.sql("INSERT INTO shoal.keyed SELECT * FROM VALUES ('a', 1, 'x'), ('b', 2, 'x'), ('c', 3, 'y') AS v(id, n, s)");
    spark.sql("INSERT INTO shoal.keyed SELECT * FROM VALUES ('a', 10, 'x'), ('d', 4, 'y') AS v(id, n, s)");
    assertEquals(List.of("[a,10,x]", "[b,2,x]", "[c,3,y]", "[d,4,y]"), rows(spark.sql("SELECT id, n, s FROM shoal.keyed")));
    assertEquals(List.of("[4]"), rows(spark.sql("SELECT count(*) FROM shoal.keyed")));
    spark.sql("DELETE FROM shoal.keyed WHERE s = 'y'");
    assertEquals(List.of("[a,10,x]", "[b,2,x]"), rows(spark.sql("SELECT id, n, s FROM shoal.keyed")));
    spark.sql("DELETE FROM shoal.keyed WHERE n > 5 AND id IN ('a', 'z')");
    assertEquals(List.of("[b,2,x]"), rows(spark.sql("SELECT id, n, s FROM shoal.keyed")));
    assertEquals(List.of("[1]"), rows(spark.sql("SELECT count(*) FROM shoal.keyed WHERE n < 100")));
    spark.sql("CREATE TABLE shoal.appended (id STRING, n BIGINT)");
    spark.sql("INSERT INTO shoal.appended SELECT * FROM VALUES ('a', 1) AS v(id, n)");
    Exception refused = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("DELETE FROM shoal.appended WHERE n = 1"));
    assertTrue(refused.getMessage().contains("keyed table"), refused.getMessage());
  }

  private Map<String, String> tblproperties(String table) {
    Map<String, String> out = new java.util.TreeMap<>();
    for (Row r : spark.sql("SHOW TBLPROPERTIES " + table).collectAsList()) {
      if (r.getString(0).startsWith("shoal.")) {
        out.put(r.getString(0), r.getString(1));
      }
    }
    return out;
  }

  /** TBLPROPERTIES: creation settings and PSFs (ShoalTableProperties), with the errors users can meet. */
  @Test
  void catalog_table_properties_set_settings_and_manage_psfs() {
    spark.sql("CREATE TABLE shoal.props (id STRING, n BIGINT) TBLPROPERTIES ('shoal.on-invalid-json' = 'skip',"
        + " 'shoal.columnar.enabled' = 'false', 'shoal.retention.keep-bytes' = '100000000',"
        + " 'shoal.psf.by_n' = 'projection:n', 'shoal.psf.big' = 'predicate:n > 10')");
    assertEquals(Map.of("shoal.psf.by_n", "projection:n", "shoal.psf.big", "predicate:n > 10"), tblproperties("shoal.props"));
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      com.fasterxml.jackson.databind.JsonNode stats =
          client.action("stats", ShoalClient.JSON.createObjectNode().put("table", "props"), "props");
      assertEquals(100000000L, stats.path("retention").path("keep_bytes").asLong(), "the retention property reached the daemon: " + stats);
      assertTrue(stats.path("columnar").path("enabled").isBoolean() && !stats.path("columnar").path("enabled").asBoolean(), stats.toString());
    }
    // on-invalid-json = skip: the bad record is skipped, the batch is kept.
    ingest(endpoint, "props", List.of("{\"id\": \"a\", \"n\": 1}", "not json", "{\"id\": \"b\", \"n\": 20}"), 10);
    assertEquals(List.of("[b]"), rows(spark.sql("SELECT id FROM shoal.props WHERE n > 10")));
    String plan = spark.sql("SELECT id FROM shoal.props WHERE n = 1").queryExecution().executedPlan().toString();
    assertTrue(plan.contains("PSFs [by_n]"), "the PSF set in TBLPROPERTIES serves the query: " + plan);

    spark.sql("ALTER TABLE shoal.props SET TBLPROPERTIES ('shoal.psf.ids' = 'composite:id,n',"
        + " 'shoal.psf.sizes' = 'range:n:5,15')");
    spark.sql("ALTER TABLE shoal.props UNSET TBLPROPERTIES ('shoal.psf.big')");
    assertEquals(Map.of("shoal.psf.by_n", "projection:n", "shoal.psf.ids", "composite:id,n", "shoal.psf.sizes", "range:n:5.0,15.0"),
        tblproperties("shoal.props"));

    Exception unknown = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("CREATE TABLE shoal.bad1 (id STRING) TBLPROPERTIES ('shoal.partition-by' = 'id')"));
    assertTrue(unknown.getMessage().contains("unknown property 'shoal.partition-by'") && unknown.getMessage().contains("shoal.durability"),
        unknown.getMessage());
    Exception badPsf = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("CREATE TABLE shoal.bad2 (id STRING) TBLPROPERTIES ('shoal.psf.x' = 'index on id')"));
    assertTrue(badPsf.getMessage().contains("'shoal.psf.x' = 'index on id' is not projection:PATH"), badPsf.getMessage());
    Exception badPredicate = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("CREATE TABLE shoal.bad5 (id STRING) TBLPROPERTIES ('shoal.psf.x' = 'predicate:id = = 1')"));
    assertTrue(badPredicate.getMessage().contains("register_psf"), badPredicate.getMessage());
    Exception badValue = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("CREATE TABLE shoal.bad3 (id STRING) TBLPROPERTIES ('shoal.durability' = 'sometimes')"));
    assertTrue(badValue.getMessage().contains("property 'shoal.durability' must be one of none, group_commit, fsync, not 'sometimes'"),
        badValue.getMessage());
    Exception badRows = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("CREATE TABLE shoal.bad4 (id STRING) TBLPROPERTIES ('shoal.columnar.row-group-rows' = '0')"));
    assertTrue(badRows.getMessage().contains("row_group_rows must be positive"), "the daemon names the setting: " + badRows.getMessage());
    List<Row> tables = spark.sql("SHOW TABLES IN shoal").collectAsList();
    assertTrue(tables.stream().noneMatch(r -> r.getString(1).startsWith("bad")),
        "a refused property creates no table: " + tables);
    Exception alter = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("ALTER TABLE shoal.props SET TBLPROPERTIES ('shoal.durability' = 'fsync')"));
    assertTrue(alter.getMessage().contains("only PSFs (shoal.psf.NAME) and the retention policy"), alter.getMessage());

    // The retention policy is alterable: SET one rule (the other kept), UNSET one.
    spark.sql("ALTER TABLE shoal.props SET TBLPROPERTIES ('shoal.retention.max-age-secs' = '86400')");
    java.util.function.Supplier<com.fasterxml.jackson.databind.JsonNode> retention = () -> {
      try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
        return client.action("stats", ShoalClient.JSON.createObjectNode().put("table", "props"), "props").path("retention");
      }
    };
    assertEquals(100000000L, retention.get().path("keep_bytes").asLong(), retention.get().toString());
    assertEquals(86400L, retention.get().path("max_age_secs").asLong(), retention.get().toString());
    spark.sql("ALTER TABLE shoal.props UNSET TBLPROPERTIES ('shoal.retention.keep-bytes')");
    assertTrue(retention.get().path("keep_bytes").isNull() || retention.get().path("keep_bytes").isMissingNode(), retention.get().toString());
    assertEquals(86400L, retention.get().path("max_age_secs").asLong());
    Exception zero = org.junit.jupiter.api.Assertions.assertThrows(Exception.class,
        () -> spark.sql("ALTER TABLE shoal.props SET TBLPROPERTIES ('shoal.retention.keep-bytes' = '0')"));
    assertTrue(zero.getMessage().contains("must be positive"), "the daemon's check: " + zero.getMessage());
  }
}
