package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * What is pushed down and what EXPLAIN and the metrics say: the PSFs used, full scans for
 * filters no PSF covers, no Spark Filter above exact pushed filters, nested column pruning,
 * aggregates answered by shoal. Runs against the daemon ({@link ShoalPushdownDaemonTest}) and
 * the embedded engine ({@link ShoalPushdownEmbeddedTest}): same plans either way.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class ShoalPushdownTest extends ShoalSparkTestBase {
  private SparkSession spark;
  private String endpoint;

  @BeforeAll
  void setUp(ShoalTarget target) throws Exception {
    endpoint = target.endpoint();
    List<String> events = events().subList(0, 4000);
    ingest(endpoint, "pushdown", events.subList(0, 2000), 500);
    registerPsf(endpoint, psf("pushdown", "type", "projection").put("field", "type"));
    ObjectNode size = psf("pushdown", "size", "range").put("field", "payload.size");
    size.putArray("boundaries").add(1).add(5).add(20);
    registerPsf(endpoint, size);
    registerPsf(endpoint, psf("pushdown", "minute", "range").put("field", "created_at").put("type", "timestamp").put("bucket", "1m"));
    ingest(endpoint, "pushdown", events.subList(2000, 4000), 500);
    spark = spark(endpoint);
    spark.conf().set("spark.sql.catalog.pd", ShoalCatalog.class.getName());
    spark.conf().set("spark.sql.catalog.pd.endpoint", endpoint);
  }

  @AfterAll
  void tearDown() {
    // the session is shared with the other test classes of this JVM; it stops with the JVM
  }

  private String explain(String sql) {
    return spark.sql(sql).queryExecution().executedPlan().toString();
  }

  private static BatchScanExec scan(Dataset<Row> df) {
    SparkPlan plan = df.queryExecution().executedPlan();
    scala.collection.Iterator<SparkPlan> leaves = plan.collectLeaves().iterator();
    while (leaves.hasNext()) {
      SparkPlan leaf = leaves.next();
      if (leaf instanceof BatchScanExec) {
        return (BatchScanExec) leaf;
      }
    }
    throw new AssertionError("no BatchScanExec in " + plan);
  }

  private static long metric(BatchScanExec scan, String name) {
    SQLMetric m = scan.metrics().get(name).get();
    return m.value();
  }

  @Test
  void explain_names_the_psfs_of_an_index_scan_and_the_filter_is_not_evaluated_again() {
    String plan = explain("SELECT id FROM pd.pushdown WHERE type = 'WatchEvent'");
    assertTrue(plan.contains("ShoalScan table=pushdown"), plan);
    assertTrue(plan.contains("filter=[\"type\" = 'WatchEvent']"), plan);
    assertTrue(plan.contains("PSFs [type]"), plan);
    // The columnar tier may have compacted the flushed pages by now (idle_ms 1 s): then the
    // half ingested before registration is a columnar scan instead of a full scan.
    assertTrue(plan.matches("(?s).*(full|columnar) scans \\[\\[.*"),
        "the half ingested before registration is a full or columnar scan: " + plan);
    assertFalse(plan.contains("Filter "), "exact pushed filters are not re-evaluated by Spark: " + plan);
  }

  @Test
  void explain_shows_the_range_psf_for_a_bucketed_field() {
    String plan = explain("SELECT id FROM pd.pushdown WHERE payload.size >= 5 AND payload.size < 20");
    assertTrue(plan.contains("PSFs [size]"), plan);
  }

  @Test
  void a_timestamp_range_over_a_string_column_uses_the_timestamp_psf() {
    // Spark 3.5 hands a column's cast to the source only in ANSI mode (Spark 4's default).
    String ansi = spark.conf().get("spark.sql.ansi.enabled");
    spark.conf().set("spark.sql.ansi.enabled", "true");
    try {
      String where = "created_at >= TIMESTAMP '2018-01-01 11:05:00' AND created_at < TIMESTAMP '2018-01-01 11:07:00'";
      String plan = explain("SELECT id FROM pd.pushdown WHERE " + where);
      assertTrue(plan.contains("\"created_at\" >= TIMESTAMP '2018-01-01T11:05:00Z'"), plan);
      assertTrue(plan.contains("PSFs [minute]"), plan);
      assertFalse(plan.contains("Filter "), "the pushed range is exact: " + plan);
      long expected = spark.read().json(eventsPath().toString()).limit(4000).where(where).count();
      assertTrue(expected > 100, "the range holds events: " + expected);
      assertEquals(expected, spark.sql("SELECT id FROM pd.pushdown WHERE " + where).count());
    } finally {
      spark.conf().set("spark.sql.ansi.enabled", ansi);
    }
  }

  @Test
  void lower_and_length_of_a_string_column_are_pushed() {
    String plan = explain("SELECT id FROM pd.pushdown WHERE lower(actor.login) = 'lombiqbot' AND length(repo.name) > 10"
        + " AND substring(repo.name, 1, 6) = 'Lombiq'");
    assertTrue(plan.contains("lower(\"actor\".\"login\") = 'lombiqbot'") && plan.contains("length(\"repo\".\"name\") > 10")
        && plan.contains("substr(\"repo\".\"name\", 1, 6) = 'Lombiq'"), plan);
    assertFalse(plan.contains("Filter "), "exact pushed filters are not re-evaluated by Spark: " + plan);
  }

  @Test
  void a_filter_no_psf_covers_runs_as_a_full_scan_and_is_correct() {
    String sql = "SELECT id FROM pd.pushdown WHERE created_at >= '2018-01-01T11:05:00Z' AND public = true";
    String plan = explain(sql);
    assertTrue(plan.contains("index scans []"), plan);
    assertTrue(plan.matches("(?s).*(full|columnar) scans \\[\\[.*"), plan);
    Dataset<Row> df = spark.sql(sql);
    long expected = spark.read().json(eventsPath().toString()).limit(4000)
        .where("created_at >= '2018-01-01T11:05:00Z' AND public = true").count();
    assertEquals(expected, df.count());
    List<Row> rows = df.collectAsList();
    BatchScanExec scan = scan(df);
    assertEquals(expected, rows.size());
    assertEquals(0, metric(scan, ShoalMetrics.INDEX_SCANS));
    assertTrue(metric(scan, ShoalMetrics.FULL_SCANS) > 0);
  }

  @Test
  void metrics_count_rows_bytes_and_index_scans() {
    Dataset<Row> df = spark.sql("SELECT id, actor.login FROM pd.pushdown WHERE type = 'WatchEvent'");
    List<Row> rows = df.collectAsList();
    BatchScanExec scan = scan(df);
    assertEquals(rows.size(), metric(scan, ShoalMetrics.ROWS_READ));
    assertTrue(metric(scan, ShoalMetrics.BYTES_READ) > 0);
    assertTrue(metric(scan, ShoalMetrics.INDEX_SCANS) > 0);
  }

  @Test
  void filters_that_cannot_be_pushed_stay_in_spark() {
    String plan = explain("SELECT id FROM pd.pushdown WHERE abs(actor.id) > 10 AND type = 'PushEvent'");
    assertTrue(plan.contains("Filter "), plan);
    assertTrue(plan.contains("AND \"type\" = 'PushEvent']"), plan);
  }

  @Test
  void nested_columns_are_pruned_to_their_paths() {
    String plan = explain("SELECT actor.login, payload.pull_request.head.repo.language FROM pd.pushdown");
    assertTrue(plan.contains("columns=[\"actor\".\"login\", \"payload\".\"pull_request\".\"head\".\"repo\".\"language\"]"), plan);
  }

  @Test
  void count_without_columns_reads_one_cheap_column() {
    Dataset<Row> df = spark.read().format("shoal").option("endpoint", endpoint).option("table", "pushdown")
        .option(ShoalOptions.AGGREGATE_PUSHDOWN, "false").load();
    assertEquals(4000, df.count());
    String plan = df.groupBy().count().queryExecution().executedPlan().toString();
    assertFalse(plan.contains("aggregates="), plan);
    assertTrue(plan.contains("columns=[\"public\"]"), plan);
  }

  @Test
  void aggregates_are_answered_by_the_daemon_when_it_can() {
    Dataset<Row> df = spark.sql("SELECT count(*), min(payload.size), max(created_at) FROM pd.pushdown WHERE type = 'PushEvent'");
    String plan = df.queryExecution().executedPlan().toString();
    assertTrue(plan.contains("aggregates=[count(*), min(\"payload\".\"size\"), max(\"created_at\")]"), plan);
    Row row = df.collectAsList().get(0);
    Row expected = spark.read().json(eventsPath().toString()).limit(4000).where("type = 'PushEvent'")
        .selectExpr("count(*)", "min(payload.size)", "max(created_at)").collectAsList().get(0);
    assertEquals(expected.toString(), row.toString());

    // SUM, and AVG as Spark's SUM and COUNT, of a number column.
    Dataset<Row> sums = spark.sql("SELECT sum(payload.size), avg(payload.size) FROM pd.pushdown WHERE type = 'PushEvent'");
    String sumPlan = sums.queryExecution().executedPlan().toString();
    assertTrue(sumPlan.contains("sum(\"payload\".\"size\")"), sumPlan);
    Row expectedSums = spark.read().json(eventsPath().toString()).limit(4000).where("type = 'PushEvent'")
        .selectExpr("sum(payload.size)", "avg(payload.size)").collectAsList().get(0);
    assertEquals(expectedSums.toString(), sums.collectAsList().get(0).toString());

    // GROUP BY of scalar columns: partial aggregates per group from every endpoint, merged by Spark.
    Dataset<Row> grouped = spark.sql("SELECT type, count(*), sum(payload.size) FROM pd.pushdown GROUP BY type ORDER BY type");
    String groupedPlan = grouped.queryExecution().executedPlan().toString();
    assertTrue(groupedPlan.contains("group_by=[\"type\"]"), groupedPlan);
    List<Row> expectedGroups = spark.read().json(eventsPath().toString()).limit(4000)
        .groupBy("type").agg(org.apache.spark.sql.functions.count("*"), org.apache.spark.sql.functions.sum("payload.size"))
        .orderBy("type").collectAsList();
    assertEquals(expectedGroups.toString(), grouped.collectAsList().toString());
  }

  @Test
  void limit_is_pushed_to_every_endpoint() {
    String plan = explain("SELECT id FROM pd.pushdown WHERE type = 'PushEvent' LIMIT 5");
    assertTrue(plan.contains("limit=5"), plan);
    assertEquals(5, spark.sql("SELECT id FROM pd.pushdown WHERE type = 'PushEvent' LIMIT 5").collectAsList().size());
  }

  @Test
  void reader_stopped_at_the_limit_cancels_its_stream_and_leaks_no_arrow_memory() {
    ShoalOptions options = ShoalOptions.forTable(java.util.Map.of("endpoint", endpoint, "table", "pushdown"));
    org.apache.spark.sql.types.StructType schema = ShoalDataSource.daemonSchema(options);
    ShoalScanBuilder builder = new ShoalScanBuilder(options, schema, schema, org.apache.spark.sql.util.CaseInsensitiveStringMap.empty());
    builder.pruneColumns(new org.apache.spark.sql.types.StructType().add("id", "string")
        .add("actor", new org.apache.spark.sql.types.StructType().add("login", "string")));
    builder.pushLimit(3);
    ShoalScan scan = (ShoalScan) builder.build();
    org.apache.spark.sql.connector.read.InputPartition[] partitions = scan.planInputPartitions();
    // A query with a limit is planned as one endpoint, so that the endpoints' rows together are
    // exactly the limit (docs/protocol.md); the reader still stops at the limit itself.
    assertEquals(1, partitions.length, "a pushed limit is one endpoint");
    org.apache.spark.sql.connector.read.PartitionReaderFactory factory = scan.createReaderFactory();
    for (org.apache.spark.sql.connector.read.InputPartition partition : partitions) {
      // close() closes the allocator, which throws if a buffer of the stream leaked
      try (org.apache.spark.sql.connector.read.PartitionReader<org.apache.spark.sql.vectorized.ColumnarBatch> reader =
          factory.createColumnarReader(partition)) {
        long rows = 0;
        while (reader.next()) {
          org.apache.spark.sql.vectorized.ColumnarBatch batch = reader.get();
          for (int i = 0; i < batch.numRows(); i++) {
            assertFalse(batch.getRow(i).getUTF8String(0) == null);
            assertFalse(batch.getRow(i).getStruct(1, 1).isNullAt(0), "every event has actor.login");
          }
          rows += batch.numRows();
        }
        assertEquals(3, rows, "exactly the limit");
      } catch (java.io.IOException e) {
        throw new AssertionError(e);
      }
    }
  }

  @Test
  void every_endpoint_is_one_input_partition_and_max_endpoints_bounds_them() {
    // A filter no PSF covers: one full scan, which splits at page boundaries (an index
    // scan's chain walk stays whole, and in memory a dense chain stays an index scan).
    Dataset<Row> one = spark.read().format("shoal").option("endpoint", endpoint).option("table", "pushdown")
        .option(ShoalOptions.MAX_ENDPOINTS, "1").load().where("public = true").select("id");
    assertEquals(1, one.rdd().getNumPartitions());
    assertTrue(one.queryExecution().executedPlan().toString().contains("endpoints=1"));
    Dataset<Row> many = spark.read().format("shoal").option("endpoint", endpoint).option("table", "pushdown")
        .option(ShoalOptions.MAX_ENDPOINTS, "3").load().where("public = true").select("id");
    assertEquals(3, many.rdd().getNumPartitions());
    assertEquals(one.count(), many.count());
  }

  @Test
  void show_tables_lists_the_daemons_tables() {
    List<Row> tables = spark.sql("SHOW TABLES IN pd").collectAsList();
    assertTrue(tables.stream().anyMatch(r -> r.getString(1).equals("pushdown")), tables.toString());
  }
}
