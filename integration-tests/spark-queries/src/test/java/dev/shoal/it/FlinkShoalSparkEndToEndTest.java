package dev.shoal.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.client.ShoalClient;
import dev.shoal.demo.spark.GithubQueries;
import dev.shoal.demo.spark.GithubQueries.DemoQuery;
import dev.shoal.demo.spark.GithubQueries.Run;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The README's main job as a test, against the real daemon (a local process here; a container of
 * {@code docker/Dockerfile} where a Docker engine runs - see {@link DaemonUnderTest}):
 *
 * <ol>
 *   <li>the demo's Flink job (its own JVM, a MiniCluster) streams the GitHub Archive events into
 *       table {@code events} through {@code ShoalSink} and registers the demo's PSFs while the
 *       stream runs;
 *   <li>the demo's Spark SQL queries ({@link GithubQueries#QUERIES}) run in this JVM through the
 *       shoal catalog and must return exactly what Spark's own {@code spark.read.json} returns over
 *       the same NDJSON file; the queries a PSF covers must have used index scans on that PSF, the
 *       one no PSF covers only full scans;
 *   <li>a plain pyarrow client ({@code integration-tests/python/check_table.py}) reads the same table.
 * </ol>
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FlinkShoalSparkEndToEndTest {
  static final String TABLE = "events";
  static final ObjectMapper JSON = new ObjectMapper();

  private final Path repo = Paths.get(System.getProperty("shoal.repo", "../..")).toAbsolutePath().normalize();
  private final Path events = Paths.get(System.getProperty("shoal.data", repo.resolve("data/github/events.ndjson").toString()))
      .toAbsolutePath();
  private DaemonUnderTest daemon;
  private FlinkJobProcess.Result flink;
  private SparkSession spark;
  private long lines;
  private final Map<String, String> timings = new TreeMap<>();

  @BeforeAll
  void streamTheEventsThroughFlink() throws Exception {
    // Under the module's target/ (kept: the daemon's data and the Flink job's stderr, for a look
    // after a failure; mvn clean removes it).
    Files.createDirectories(Paths.get("target"));
    Path tmp = Files.createTempDirectory(Paths.get("target").toAbsolutePath(), "e2e-");
    if (!Files.exists(events)) {
      throw new IllegalStateException("test data not found at " + events + ": run scripts/fetch-data.sh (or set -Dshoal.data)");
    }
    try (Stream<String> all = Files.lines(events)) {
      lines = all.filter(line -> !line.isBlank()).count();
    }
    daemon = DaemonUnderTest.start(repo, tmp.resolve("shoal"));
    Path flinkJob = Paths.get(System.getProperty("shoal.flink.job.dir", repo.resolve("integration-tests/flink-job").toString()));
    System.out.println("[it] Flink job (own JVM, MiniCluster): " + events.getFileName() + " -> " + daemon.endpoint() + " table " + TABLE);
    // 2,500 events/s: about 4 s of stream, so the PSFs (registered at 40 %) land mid-stream.
    flink = FlinkJobProcess.run(flinkJob, tmp.resolve("flink-job.stderr.log"), "--endpoint", daemon.endpoint(),
        "--data", events.toString(), "--table", TABLE, "--rate", "2500", "--register-psfs-at", "0.4");
    if (flink.exitCode() != 0) {
      throw new IllegalStateException("the Flink job failed (exit " + flink.exitCode() + "); its stderr:\n"
          + Files.readString(tmp.resolve("flink-job.stderr.log")));
    }
    System.setProperty("spark.sql.warehouse.dir", tmp.resolve("spark-warehouse").toString());
    spark = GithubQueries.session(daemon.endpoint());
    spark.read().json(events.toString()).createOrReplaceTempView("events_json");
    // Spark's first query in a JVM pays its start-up; keep that out of the per-query timings.
    GithubQueries.run(spark, "SELECT count(*) FROM shoal.events WHERE type = 'PushEvent'");
  }

  @AfterAll
  void stopEverything() throws Exception {
    timings.forEach((query, line) -> System.out.println("[it] " + line));
    if (spark != null) {
      spark.stop();
    }
    if (daemon != null) {
      int exit = daemon.stop();
      System.out.println("[it] daemon stopped with SIGTERM: exit " + exit);
      if (exit != 0 && daemon instanceof LocalDaemonProcess process) {
        System.out.println("[it] the daemon's log:\n" + String.join("\n", process.log()));
      }
      assertEquals(0, exit, "the daemon shuts down cleanly on SIGTERM");
    }
  }

  @Test
  void every_event_of_the_file_is_in_the_table_once() {
    Run shoal = GithubQueries.run(spark, "SELECT count(*), count(DISTINCT id) FROM shoal.events");
    Run file = GithubQueries.run(spark, "SELECT count(*), count(DISTINCT id) FROM events_json");
    assertEquals(lines, shoal.rows().get(0).getLong(0), "records in the table");
    assertEquals(file.rows().get(0).getLong(1), shoal.rows().get(0).getLong(1), "distinct ids");
  }

  @Test
  void psfs_were_registered_while_the_stream_ran() {
    assertTrue(flink.output().stream().anyMatch(line -> line.startsWith("summary: psfs: 6 registered while the stream ran")),
        "the Flink job reports the PSFs registered mid-stream");
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(daemon.endpoint()), null)) {
      JsonNode stats = client.action("stats", JSON.createObjectNode().put("table", TABLE), TABLE);
      JsonNode psfs = client.action("list_psfs", JSON.createObjectNode().put("table", TABLE), TABLE);
      long tail = stats.path("tail_address").asLong();
      List<String> names = new ArrayList<>();
      for (JsonNode psf : psfs) {
        long safe = psf.path("safe_register_address").asLong();
        names.add(psf.path("name").asText());
        // Records below the boundary came before the PSF (full scans), records above after it.
        assertTrue(safe > 64 && safe < tail, psf + " registered strictly inside the log [64, " + tail + ")");
      }
      assertEquals(List.of("id", "actor_id", "repo_id", "type", "issues_opened", "cpp_pull_requests"), names);
    }
  }

  static Stream<DemoQuery> demoQueries() {
    return GithubQueries.QUERIES.stream();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("demoQueries")
  void demo_query_over_shoal_equals_spark_json_reader(DemoQuery query) {
    Run shoal = GithubQueries.run(spark, query.sql());
    Run oracle = GithubQueries.run(spark, query.over("events_json"));
    timings.put(query.title(), String.format("%5d ms shoal, %5d ms spark.read.json, %4d rows: %s", shoal.millis(),
        oracle.millis(), shoal.rows().size(), query.title()));
    assertFalse(oracle.rows().isEmpty(), "the oracle returns rows for " + query.sql());
    assertEquals(GithubQueries.sorted(oracle.rows()), GithubQueries.sorted(shoal.rows()), query.sql());
    // ORDER BY queries: the order too.
    if (query.sql().contains("ORDER BY")) {
      assertEquals(oracle.rows().toString(), shoal.rows().toString(), "order of " + query.sql());
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("demoQueries")
  void psf_queries_use_index_scans_and_the_others_full_scans(DemoQuery query) {
    Run shoal = GithubQueries.run(spark, query.sql());
    assertEquals(1, shoal.scans().size(), "one shoal scan in the plan of " + query.sql());
    String scan = shoal.scans().get(0);
    System.out.println("[it] " + query.title() + ": " + scan.substring(scan.indexOf(" | ") + 3));
    if (query.psf() != null) {
      assertTrue(scan.contains("index scans [PSFs [" + query.psf() + "] on ["), "index scan on PSF " + query.psf() + ": " + scan);
      // The log before the PSF's registration is backfilled (the job waited for it): no full
      // scan of it; where the columnar tier's files cover a dense PSF, columnar scans.
      assertFalse(scan.matches(".*full scans \\[\\[64, \\d+\\).*"),
          "the log before the PSF's registration is covered by its backfill, not full-scanned: " + scan);
    } else {
      assertTrue(scan.contains("index scans []; ") && scan.matches(".*(full|columnar) scans \\[\\[64, .*"),
          "no PSF covers it: full or columnar scans only: " + scan);
    }
  }

  @Test
  void pyarrow_client_reads_the_same_table() throws Exception {
    Path python = Paths.get(System.getProperty("shoal.python", repo.resolve(".venv/bin/python").toString()));
    boolean hasPyarrow = Files.isExecutable(python)
        && new ProcessBuilder(python.toString(), "-c", "import pyarrow.flight").start().waitFor() == 0;
    if (!hasPyarrow) {
      System.out.println("[it] pyarrow check NOT RUN: no python with pyarrow at " + python
          + " (scripts/test.sh creates .venv; or set -Dshoal.python)");
    }
    Assumptions.assumeTrue(hasPyarrow, "no python with pyarrow at " + python);
    Process check = new ProcessBuilder(python.toString(), repo.resolve("integration-tests/python/check_table.py").toString(),
        daemon.endpoint(), TABLE, events.toString()).redirectErrorStream(true).start();
    String output = new String(check.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
    assertTrue(check.waitFor(120, TimeUnit.SECONDS), "the pyarrow check ends");
    System.out.print(output.replaceAll("(?m)^", "[it] "));
    assertEquals(0, check.exitValue(), "pyarrow check:\n" + output);
  }
}
