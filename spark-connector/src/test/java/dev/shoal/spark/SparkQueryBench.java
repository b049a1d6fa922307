package dev.shoal.spark;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * End-to-end benchmark (run by {@code bench/spark_bench.sh}): the same Spark SQL over shoal
 * (index scans, full scans, aggregates pushed) and over {@code spark.read.json} of the same
 * NDJSON, in Spark local mode. Prints a table of median wall-clock times.
 *
 * <p>Arguments: {@code copies} (the GitHub events repeated, default 5 ≈ 100 MB), {@code reps}
 * (default 3). System properties {@code shoal.bin} and {@code shoal.data} as in the tests.
 */
public final class SparkQueryBench extends ShoalSparkTestBase {
  private static final String[] QUERIES = {
      "SELECT count(*) FROM T WHERE type = 'ReleaseEvent'",
      "SELECT id, actor.login FROM T WHERE actor.login = 'speedtracker-bot'",
      "SELECT id, payload.issue.number FROM T WHERE type = 'IssuesEvent' AND payload.action = 'opened'",
      "SELECT id, payload.size FROM T WHERE payload.size > 20",
      "SELECT id FROM T WHERE created_at >= '2018-01-01T11:21:00Z' AND public = true",
      "SELECT count(*), min(created_at), max(payload.size) FROM T",
      "SELECT type, count(*) FROM T GROUP BY type",
  };

  public static void main(String[] args) throws Exception {
    int copies = args.length > 0 ? Integer.parseInt(args[0]) : 5;
    int reps = args.length > 1 ? Integer.parseInt(args[1]) : 3;
    List<String> events = events();
    Path dir = Files.createTempDirectory("shoal-spark-bench");
    Path json = dir.resolve("events.ndjson");
    List<String> all = new ArrayList<>();
    for (int i = 0; i < copies; i++) {
      all.addAll(events);
    }
    Files.write(json, all);
    try (ShoalDaemon daemon = ShoalDaemon.start(dir.resolve("data"))) {
      String endpoint = daemon.endpoint();
      long t0 = System.nanoTime();
      registerAndIngest(endpoint, all);
      double ingestSeconds = (System.nanoTime() - t0) / 1e9;
      SparkSession spark = spark(endpoint);
      spark.sparkContext().setLogLevel("WARN");
      spark.read().json(json.toString()).createOrReplaceTempView("json_events");
      System.out.printf("records %d (%.0f MB), ingested through DoPut in %.1f s; daemon %s; median of %d runs%n",
          all.size(), Files.size(json) / 1e6, ingestSeconds, System.getProperty("shoal.bin"), reps);
      System.out.printf("%-100s %8s %10s %10s %8s%n", "query", "rows", "shoal ms", "json ms", "speedup");
      for (String q : QUERIES) {
        long[] shoal = new long[reps];
        long[] oracle = new long[reps];
        long rows = 0;
        for (int r = 0; r < reps; r++) {
          long a = System.nanoTime();
          List<Row> out = spark.sql(q.replace(" T", " shoal.events")).collectAsList();
          long b = System.nanoTime();
          List<Row> expected = spark.sql(q.replace(" T", " json_events")).collectAsList();
          long c = System.nanoTime();
          shoal[r] = (b - a) / 1_000_000;
          oracle[r] = (c - b) / 1_000_000;
          rows = out.size();
          if (out.size() != expected.size()) {
            throw new AssertionError("different row counts for " + q + ": " + out.size() + " vs " + expected.size());
          }
        }
        Arrays.sort(shoal);
        Arrays.sort(oracle);
        long s = shoal[reps / 2];
        long o = oracle[reps / 2];
        System.out.printf("%-100s %8d %10d %10d %7.1fx%n", q, rows, s, o, o / (double) Math.max(1, s));
      }
      spark.stop();
    }
  }

  private static void registerAndIngest(String endpoint, List<String> all) {
    int half = all.size() / 2;
    ingest(endpoint, "events", all.subList(0, half), 2000);
    registerPsf(endpoint, psf("events", "type", "projection").put("field", "type"));
    registerPsf(endpoint, psf("events", "login", "projection").put("field", "actor.login"));
    registerPsf(endpoint, psf("events", "opened", "predicate").put("expr", "type = 'IssuesEvent' AND payload.action = 'opened'"));
    ObjectNode size = psf("events", "size", "range").put("field", "payload.size");
    size.putArray("boundaries").add(1).add(5).add(20);
    registerPsf(endpoint, size);
    ingest(endpoint, "events", all.subList(half, all.size()), 2000);
  }
}
