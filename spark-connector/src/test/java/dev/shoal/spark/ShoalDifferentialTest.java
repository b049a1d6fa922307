package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.stream.Stream;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Differential tests in Spark local mode: every query returns over {@code shoal.events} exactly
 * what Spark's own {@code spark.read.json} returns over the same NDJSON file. The first half of
 * the events is ingested before the PSFs are registered, the second half after, so every query
 * spans index scans and full scans. Runs against the real daemon ({@link
 * ShoalDifferentialDaemonTest}) and the engine in the JVM ({@link ShoalDifferentialEmbeddedTest}).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class ShoalDifferentialTest extends ShoalSparkTestBase {
  SparkSession spark;
  ShoalTarget target;
  private final List<String> timings = new ArrayList<>();

  @BeforeAll
  void setUp(ShoalTarget target) throws Exception {
    this.target = target;
    String endpoint = target.endpoint();
    List<String> events = events();
    int half = events.size() / 2;
    ingest(endpoint, "events", events.subList(0, half), 1000);
    registerPsf(endpoint, psf("events", "type", "projection").put("field", "type"));
    registerPsf(endpoint, psf("events", "login", "projection").put("field", "actor.login"));
    registerPsf(endpoint, psf("events", "opened", "predicate").put("expr", "type = 'IssuesEvent' AND payload.action = 'opened'"));
    ObjectNode size = psf("events", "size", "range").put("field", "payload.size");
    size.putArray("boundaries").add(1).add(5).add(20);
    registerPsf(endpoint, size);
    ingest(endpoint, "events", events.subList(half, events.size()), 1000);
    spark = spark(endpoint);
    spark.read().json(eventsPath().toString()).createOrReplaceTempView("oracle");
    // warm-up, so that the first query's timing is not Spark's start-up
    spark.sql("SELECT count(*) FROM oracle WHERE type = 'PushEvent'").collect();
    spark.sql("SELECT id FROM shoal.events WHERE type = 'PushEvent'").collect();
  }

  @AfterAll
  void tearDown() {
    System.out.println("query timings (" + target.mode() + " mode; ms, shoal vs spark.read.json oracle, one run each after a warm-up query):");
    timings.forEach(System.out::println);
  }

  /** The SQL queries; {@code T} is replaced by {@code shoal.events} or by the JSON oracle. */
  static Stream<String> queries() {
    return Stream.of(
        // equality and IN on projected (PSF) fields
        "SELECT id, type FROM T WHERE type = 'PushEvent'",
        "SELECT id, type FROM T WHERE type IN ('IssuesEvent', 'ForkEvent', 'MemberEvent')",
        "SELECT id, actor.login, repo.name FROM T WHERE actor.login = 'gentoo-repo-qa-bot'",
        "SELECT id FROM T WHERE actor.login IN ('LombiqBot', 'speedtracker-bot') AND type = 'PushEvent'",
        // the registered predicate
        "SELECT id, actor.login, payload.issue.number FROM T WHERE type = 'IssuesEvent' AND payload.action = 'opened'",
        // ranges on the bucketed field
        "SELECT id, payload.size FROM T WHERE payload.size >= 5 AND payload.size < 20",
        "SELECT id, payload.size FROM T WHERE payload.size > 20",
        "SELECT id FROM T WHERE payload.size <= 1",
        "SELECT id, payload.size FROM T WHERE payload.size IN (2, 3, 33)",
        // OR and NOT
        "SELECT id, type FROM T WHERE type = 'ForkEvent' OR actor.login = 'LombiqBot'",
        "SELECT id, type FROM T WHERE type <> 'PushEvent' AND type <> 'CreateEvent'",
        "SELECT id, payload.action FROM T WHERE NOT (payload.action = 'started' OR payload.action = 'created')",
        "SELECT id FROM T WHERE NOT (type IN ('PushEvent', 'CreateEvent', 'WatchEvent'))",
        // STARTS_WITH, IS [NOT] NULL, nested and missing structs
        "SELECT id, repo.name FROM T WHERE repo.name LIKE 'Lombiq/%'",
        "SELECT id, org.login FROM T WHERE org.login IS NOT NULL AND org.login LIKE 'a%'",
        // ENDS_WITH and CONTAINS (Spark's LIKE '%x', LIKE '%x%', contains()) as shoal's LIKE
        "SELECT id, actor.login FROM T WHERE actor.login LIKE '%bot'",
        "SELECT id, actor.login FROM T WHERE actor.login LIKE '%bot%' OR contains(repo.name, '-')",
        "SELECT org.login, count(*) AS n FROM T GROUP BY org.login",
        "SELECT id, payload.pull_request.head.repo.language FROM T WHERE payload.pull_request.head.repo.language = 'Java'",
        "SELECT id, payload.pull_request.merged FROM T WHERE type = 'PullRequestEvent' AND payload.pull_request.merged_at IS NULL",
        "SELECT id, actor.login, actor.id FROM T WHERE actor.id > 10000000 AND actor.id < 20000000",
        "SELECT id, public FROM T WHERE public = true AND type = 'PublicEvent'",
        // filters on unindexed fields (full scans)
        "SELECT id, created_at FROM T WHERE created_at >= '2018-01-01T11:20:00Z'",
        // a timestamp range over the RFC 3339 strings (pushed where Spark hands over the cast;
        // lower case: " T" stands for the table)
        "SELECT id, created_at FROM T WHERE created_at >= timestamp '2018-01-01 11:10:00' AND created_at < timestamp '2018-01-01 11:12:30'",
        "SELECT id, payload.ref_type FROM T WHERE payload.ref_type = 'tag'",
        // functions shoal evaluates (pushed where Spark hands them to the source)
        "SELECT id, actor.login FROM T WHERE length(actor.login) > 20",
        "SELECT id, actor.login FROM T WHERE lower(actor.login) = 'lombiqbot' OR upper(repo.name) LIKE 'LOMBIQ/%'",
        "SELECT id, repo.name FROM T WHERE substring(repo.name, 1, 4) = 'apac' OR substr(actor.login, -3) = 'bot'",
        // filters that stay in Spark (field against field)
        "SELECT id FROM T WHERE actor.display_login <> actor.login",
        // arrays of structs, whole structs, whole rows
        "SELECT id, payload.commits FROM T WHERE type = 'PushEvent' AND payload.size > 25",
        "SELECT id, size(payload.commits) AS n FROM T WHERE payload.size >= 10",
        "SELECT id, actor, repo FROM T WHERE type = 'ReleaseEvent'",
        "SELECT * FROM T WHERE type = 'MemberEvent'",
        // COUNT / MIN / MAX (pushed to the daemon when it can answer them)
        "SELECT count(*) FROM T",
        "SELECT count(*) FROM T WHERE type = 'WatchEvent'",
        "SELECT count(*), min(created_at), max(created_at), max(payload.size) FROM T WHERE type = 'PushEvent'",
        "SELECT min(actor.id), max(actor.id), count(payload.size), min(payload.size) FROM T",
        "SELECT count(payload.action), max(payload.action) FROM T WHERE payload.size IS NULL",
        "SELECT count(*), min(payload.size) FROM T WHERE type = 'NoSuchEvent'",
        "SELECT sum(payload.size), avg(payload.size), sum(actor.id), count(*) FROM T WHERE type = 'PushEvent'",
        "SELECT sum(payload.size), avg(actor.id) FROM T WHERE type = 'NoSuchEvent'",
        // aggregates Spark keeps (GROUP BY, DISTINCT)
        "SELECT type, count(*) AS n, max(payload.size) AS m FROM T GROUP BY type",
        "SELECT count(DISTINCT actor.login) FROM T WHERE type = 'PushEvent'");
  }

  private static List<String> rows(Dataset<Row> df) {
    List<String> out = new ArrayList<>();
    for (Row r : df.collectAsList()) {
      out.add(r.toString());
    }
    Collections.sort(out);
    return out;
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("queries")
  void query_over_shoal_equals_spark_json_reader(String sql) {
    long t0 = System.nanoTime();
    List<String> expected = rows(spark.sql(sql.replace(" T", " oracle")));
    long t1 = System.nanoTime();
    List<String> actual = rows(spark.sql(sql.replace(" T", " shoal.events")));
    long t2 = System.nanoTime();
    timings.add(String.format("%7d %7d  %s", (t2 - t1) / 1_000_000, (t1 - t0) / 1_000_000, sql));
    assertFalse(expected.isEmpty(), "the oracle returns rows for " + sql);
    assertEquals(expected.size(), actual.size(), "row count of " + sql);
    assertEquals(expected, actual, sql);
  }

  @Test
  void limit_returns_exactly_that_many_rows_that_match() {
    List<String> all = rows(spark.sql("SELECT id, type FROM oracle WHERE type = 'PushEvent'"));
    for (int limit : new int[] {1, 7, 1000}) {
      List<String> limited = rows(spark.sql("SELECT id, type FROM shoal.events WHERE type = 'PushEvent' LIMIT " + limit));
      assertEquals(limit, limited.size());
      assertTrue(all.containsAll(limited), "every limited row is a matching row");
    }
    List<String> any = rows(spark.sql("SELECT id FROM shoal.events LIMIT 3"));
    assertEquals(3, any.size());
  }

  @Test
  void data_source_api_reads_the_same_as_the_catalog() {
    Dataset<Row> df = spark.read().format("shoal").option("endpoint", target.endpoint()).option("table", "events").load();
    assertEquals(rows(spark.sql("SELECT id FROM oracle WHERE type = 'GollumEvent'")),
        rows(df.where("type = 'GollumEvent'").select("id")));
    assertEquals(spark.table("oracle").schema().fieldNames().length, df.schema().fieldNames().length);
  }
}
