package dev.shoal.demo.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import dev.shoal.spark.ShoalCatalog;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec;
import scala.collection.JavaConverters;

/**
 * The Spark half of the demo (README, {@code ./demo.sh}): Spark SQL in local mode over a shoal
 * table through {@link ShoalCatalog} (catalog {@code shoal}). For each of {@link #QUERIES} it
 * prints a few rows, the plan of every shoal scan (the daemon's index scans with their PSFs and
 * log ranges, its full scans with theirs — the scan's description, as {@code EXPLAIN} shows it)
 * and the time; with {@code --json FILE} also the time of the same query over
 * {@code spark.read.json(FILE)} and whether both gave the same rows. Ends with lines starting
 * {@code summary:}.
 *
 * <pre>
 * java --add-opens=java.base/java.nio=ALL-UNNAMED --add-exports=java.base/sun.nio.ch=ALL-UNNAMED ... \
 *   -cp ... dev.shoal.demo.spark.GithubQueries --endpoint grpc://127.0.0.1:50051 [--json data/github/events.ndjson]
 * </pre>
 *
 * Exit code 0 when every query ran (and, with {@code --json}, matched); 1 otherwise.
 */
public final class GithubQueries {
  private GithubQueries() {}

  /**
   * A demo query over {@code shoal.events}. {@code psf} is the PSF expected to answer it with
   * index scans (null: no PSF covers it, the daemon answers with full scans).
   */
  public record DemoQuery(String title, String sql, String psf) {
    /** The same SQL over another relation (the {@code spark.read.json} view). */
    public String over(String relation) {
      return sql.replace("shoal.events", relation);
    }
  }

  /** FishStore's GitHub queries (the PSFs are registered by the Flink half) and one no PSF covers. */
  public static final List<DemoQuery> QUERIES = List.of(
      new DemoQuery("opened issues (count)",
          "SELECT count(*) AS opened_issues FROM shoal.events WHERE type = 'IssuesEvent' AND payload.action = 'opened'",
          "issues_opened"),
      new DemoQuery("C++ pull requests",
          "SELECT id, actor.login, repo.name, payload.pull_request.number AS pr FROM shoal.events "
              + "WHERE type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++' ORDER BY id",
          "cpp_pull_requests"),
      new DemoQuery("events of one actor (actor.id 22169029)",
          "SELECT id, type, repo.name, created_at FROM shoal.events WHERE actor.id = 22169029 ORDER BY created_at, id",
          "actor_id"),
      new DemoQuery("pushes of 10+ commits per repo (no PSF)",
          "SELECT repo.name, count(*) AS pushes, sum(payload.size) AS commits FROM shoal.events "
              + "WHERE payload.size >= 10 GROUP BY repo.name ORDER BY commits DESC, repo.name",
          null));

  /** One run of a query: its rows, the description of each shoal scan in its plan, its time. */
  public record Run(List<Row> rows, List<String> columns, List<String> scans, long millis) {}

  /** A local Spark session whose catalog {@code shoal} points at {@code endpoint}. */
  public static SparkSession session(String endpoint) {
    return SparkSession.builder()
        .master("local[2]")
        .appName("shoal-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.catalog.shoal", ShoalCatalog.class.getName())
        .config("spark.sql.catalog.shoal.endpoint", endpoint)
        .getOrCreate();
  }

  /** Runs {@code sql}, timing the whole of planning and execution. */
  public static Run run(SparkSession spark, String sql) {
    long started = System.nanoTime();
    Dataset<Row> df = spark.sql(sql);
    List<Row> rows = df.collectAsList();
    long millis = (System.nanoTime() - started) / 1_000_000;
    List<String> scans = new ArrayList<>();
    SparkPlan plan = df.queryExecution().executedPlan();
    for (SparkPlan leaf : JavaConverters.seqAsJavaList(plan.collectLeaves())) {
      if (leaf instanceof BatchScanExec) {
        scans.add(((BatchScanExec) leaf).scan().description());
      }
    }
    return new Run(rows, List.of(df.schema().fieldNames()), scans, millis);
  }

  /** Rows as sorted strings: the comparison of two results regardless of order. */
  public static List<String> sorted(List<Row> rows) {
    List<String> out = new ArrayList<>();
    for (Row row : rows) {
      out.add(row.toString());
    }
    Collections.sort(out);
    return out;
  }

  public static void main(String[] args) {
    Map<String, String> options = new LinkedHashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
    }
    String endpoint = options.get("endpoint");
    if (endpoint == null) {
      System.err.println("usage: GithubQueries --endpoint grpc://HOST:PORT [--json NDJSON_FILE] [--rows N]");
      System.exit(2);
    }
    String json = options.get("json");
    int shown = Integer.parseInt(options.getOrDefault("rows", "5"));
    boolean ok = true;
    long started = System.nanoTime();
    say("starting Spark (local[2]) with catalog shoal -> %s", endpoint);
    SparkSession spark = session(endpoint);
    try {
      Run total = run(spark, "SELECT count(*) FROM shoal.events");
      say("shoal.events: %,d rows (first query, %d ms: Spark's start-up and the connection)", total.rows().get(0).getLong(0),
          total.millis());
      if (json != null) {
        long t0 = System.nanoTime();
        spark.read().json(json).createOrReplaceTempView("events_json");
        say("spark.read.json view events_json over %s (schema inference: %d ms)", json, (System.nanoTime() - t0) / 1_000_000);
      }
      List<String> summary = new ArrayList<>();
      int n = 0;
      for (DemoQuery query : QUERIES) {
        n++;
        System.out.printf("%n[spark] Q%d  %s%n        %s%n", n, query.title(), query.sql());
        Run shoal = run(spark, query.sql());
        printRows(shoal, shown);
        for (String scan : shoal.scans()) {
          printPlan(scan);
        }
        String jsonMillis = "-";
        String same = "-";
        if (json != null) {
          Run oracle = run(spark, query.over("events_json"));
          boolean equal = sorted(oracle.rows()).equals(sorted(shoal.rows()));
          ok &= equal;
          jsonMillis = Long.toString(oracle.millis());
          same = equal ? "yes" : "NO";
          System.out.printf(Locale.ROOT, "  time: %d ms over shoal; %s ms over spark.read.json, same rows: %s%n", shoal.millis(),
              jsonMillis, same);
        } else {
          System.out.printf(Locale.ROOT, "  time: %d ms over shoal%n", shoal.millis());
        }
        summary.add(String.format(Locale.ROOT, "summary:   Q%d %-42s %5d %8d %8s  %-4s  %s", n, shorten(query.title(), 42),
            shoal.rows().size(), shoal.millis(), jsonMillis, same, accessSummary(shoal.scans())));
      }
      System.out.println();
      System.out.printf(Locale.ROOT, "summary: spark:%-42s %5s %8s %8s  %-4s  %s%n", "", "rows", "shoal ms", "json ms", "same",
          "how shoal answered");
      summary.forEach(System.out::println);
      System.out.printf(Locale.ROOT, "summary: spark: %d queries in %.1f s (Spark start-up and spark.read.json included)%n", QUERIES.size(),
          (System.nanoTime() - started) / 1e9);
    } catch (RuntimeException e) {
      System.err.println("[spark] query failed: " + e);
      e.printStackTrace();
      ok = false;
    } finally {
      spark.stop();
    }
    System.exit(ok ? 0 : 1);
  }

  /** "index scan (PSF x)" (+ "full scans" where the plan has some) / "full scans only", from the scans' descriptions. */
  static String accessSummary(List<String> scans) {
    List<String> psfs = new ArrayList<>();
    for (String scan : scans) {
      java.util.regex.Matcher m = java.util.regex.Pattern.compile("PSFs \\[([^\\]]*)\\]").matcher(scan);
      while (m.find()) {
        if (!psfs.contains(m.group(1))) {
          psfs.add(m.group(1));
        }
      }
    }
    boolean full = scans.stream().anyMatch(scan -> scan.matches("(?s).*full scans \\[\\[.*"));
    return psfs.isEmpty() ? "full scans only" : "index scan (PSF " + String.join(", ", psfs) + ")" + (full ? " + full scans" : "");
  }

  private static String shorten(String text, int width) {
    return text.length() <= width ? text : text.substring(0, width - 3) + "...";
  }

  /** The scan description split into the request and one line per shard plan. */
  static void printPlan(String description) {
    String[] parts = description.split(" \\| ");
    String request = parts[0].replaceAll(" endpoint=\\S+", "").replaceAll(" pushedFilters=\\[.*?\\] filter=", " filter=");
    System.out.println("  plan: " + request);
    for (int i = 1; i < parts.length; i++) {
      String shard = parts[i];
      int colon = shard.indexOf(": ");
      String body = colon >= 0 ? shard.substring(colon + 2) : shard;
      for (String piece : body.split("; ")) {
        System.out.println("        " + piece);
      }
    }
  }

  private static void printRows(Run run, int shown) {
    List<List<String>> cells = new ArrayList<>();
    cells.add(run.columns());
    for (int i = 0; i < Math.min(shown, run.rows().size()); i++) {
      Row row = run.rows().get(i);
      List<String> line = new ArrayList<>();
      for (int c = 0; c < row.length(); c++) {
        String value = String.valueOf(row.get(c));
        line.add(value.length() > 40 ? value.substring(0, 37) + "..." : value);
      }
      cells.add(line);
    }
    int[] widths = new int[run.columns().size()];
    for (List<String> line : cells) {
      for (int c = 0; c < line.size(); c++) {
        widths[c] = Math.max(widths[c], line.get(c).length());
      }
    }
    for (List<String> line : cells) {
      StringBuilder sb = new StringBuilder("  ");
      for (int c = 0; c < line.size(); c++) {
        sb.append(String.format("%-" + widths[c] + "s  ", line.get(c)));
      }
      System.out.println(sb.toString().stripTrailing());
    }
    if (run.rows().size() > shown) {
      System.out.printf("  ... %,d rows in all%n", run.rows().size());
    }
  }

  private static void say(String format, Object... args) {
    System.out.println("[spark] " + String.format(Locale.ROOT, format, args));
  }
}
