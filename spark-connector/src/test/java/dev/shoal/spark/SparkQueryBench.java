package dev.shoal.spark;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalFlightPlan;
import dev.shoal.client.ShoalBatchStream;
import dev.shoal.embedded.ShoalEmbedded;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.storage.RDDInfo;

/**
 * The Spark benchmark (run by {@code bench/spark_bench.sh}): FishStore's GitHub queries in
 * Spark SQL, local[2], over
 *
 * <ul>
 *   <li><b>shoal daemon</b>: catalog {@code shoal} on {@code grpc://} of {@code shoal serve}
 *       (the binary of {@code -Dshoal.bin}, the release build from the script);
 *   <li><b>shoal embedded</b>: catalog {@code shoal_embedded} on {@code embedded:DIR}, the engine
 *       in this JVM ({@code -Dshoal.jni.library});
 *   <li><b>JSON inferred</b>: {@code spark.read.json(file)} with schema inference, created anew
 *       for every run of a query, so each run pays the inference pass and the read (no cache);
 *   <li><b>JSON given</b>: {@code spark.read.schema(<the inferred schema>).json(file)}: each run
 *       re-reads the file, no inference;
 *   <li><b>cached</b>: the given-schema DataFrame {@code .cache()}d and materialised
 *       ({@code count()}) before any timing: Spark's own floor.
 * </ul>
 *
 * <p>Data: {@code data/github/events.ndjson} repeated {@code copies} times with {@code id} made
 * unique per copy ({@code bench/flight_bench.py}'s {@code replicated()}: the copy number appended
 * to the id), written to one NDJSON file that every system reads. shoal: table {@code events}
 * created and FishStore's six GitHub PSFs registered <b>before</b> ingestion (projections
 * {@code id}, {@code actor.id}, {@code repo.id}, {@code type}; predicates opened issues and C++
 * pull requests, as {@code bench/compare.py}), then the file ingested in 4096-record batches:
 * through DoPut into the daemon, through {@link ShoalEmbedded#ingest} into the embedded engine.
 * Both engines get a memory budget of twice the file (at least 256 MiB), so the data stays in
 * memory as it does in Spark's cache.
 *
 * <p>Every query runs once untimed on every system, then {@code reps} rounds in which each system
 * runs it once (systems interleaved, so that the machine's noise falls on all of them); the table
 * gives median and min-max wall-clock ms of {@code spark.sql(q).collectAsList()}, the rows, and
 * whether the results agree (row count and an order-independent hash of {@code id}). Then the
 * ratios, a breakdown of shoal's time (GetFlightInfo and DoGet measured with the connector's
 * client, without Spark; Spark's own cost of a job measured on a cached two-row DataFrame), and
 * the targets (bench/README.md, "Spark and PySpark"). The target queries (Q3, Q3n, Q2) are also
 * timed the way the spark-sql
 * shell runs a statement ({@code HiveResult.hiveResultString} of the executed plan: rows printed
 * as text through Spark's interpreted converters), which does not generate a {@code Row}
 * deserializer for the result's schema as {@code collectAsList} does; the targets are reported
 * for both paths.
 *
 * <p>Arguments: {@code copies} (default 5), {@code reps} (default 3). System properties:
 * {@code shoal.bin}, {@code shoal.data}, {@code shoal.jni.library}, {@code bench.dir} (where the
 * NDJSON and the data directories go; default a new temporary directory, deleted at the end),
 * {@code bench.verbose} (every timed run on stderr with the JVM's uptime, to line up with a GC log),
 * {@code bench.queries} (only these queries, by the first word of their names, e.g. {@code Q3,Q3n}).
 * The output starts with a line beginning {@code records } ({@code bench/compare.py --spark}
 * copies what follows).
 */
public final class SparkQueryBench extends ShoalSparkTestBase {
  private static final String TABLE = "events";
  private static final long ACTOR = 299787L; // line 100 of the events (as compare.py): one event per copy
  private static final Pattern ID = Pattern.compile("^\\{\"id\":\"(\\d+)\"");

  /** One query: its SQL over {@code T}, and the same as shoal's filter and columns (for the breakdown). */
  record Query(String name, String sql, String filter, List<String> columns, boolean context) {
  }

  private static final List<Query> QUERIES = List.of(
      new Query("Q3 actor.id point lookup, all columns",
          "SELECT * FROM T WHERE actor.id = " + ACTOR, "actor.id = " + ACTOR, List.of(), false),
      new Query("Q3n actor.id point lookup, id, type",
          "SELECT id, type FROM T WHERE actor.id = " + ACTOR, "actor.id = " + ACTOR, List.of("id", "type"), false),
      new Query("Q2 opened issues (~2%): id, actor.login",
          "SELECT id, actor.login FROM T WHERE type = 'IssuesEvent' AND payload.action = 'opened'",
          "type = 'IssuesEvent' AND payload.action = 'opened'", List.of("id", "actor.login"), false),
      new Query("Q4 C++ pull requests, all columns",
          "SELECT * FROM T WHERE type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'",
          "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'", List.of(), true),
      new Query("Q5 payload.size > 5 (no PSF): id, actor.login",
          "SELECT id, actor.login FROM T WHERE payload.size > 5", "payload.size > 5", List.of("id", "actor.login"), true),
      new Query("Q0 actor.id = -1 (finds nothing): id, type",
          "SELECT id, type FROM T WHERE actor.id = -1", "actor.id = -1", List.of("id", "type"), true));

  private static final String[] SYSTEMS = {"shoal daemon", "shoal embedded", "JSON inferred", "JSON given", "cached"};

  /** A system's answer to one run: rows and an order-independent hash of the {@code id} column. */
  record Answer(long rows, long idHash) {
  }

  public static void main(String[] args) throws Exception {
    int copies = args.length > 0 ? Integer.parseInt(args[0]) : 5;
    int reps = args.length > 1 ? Integer.parseInt(args[1]) : 3;
    String benchDir = System.getProperty("bench.dir");
    Path dir = benchDir == null ? Files.createTempDirectory("shoal-spark-bench") : Files.createDirectories(Path.of(benchDir));
    try {
      run(dir, copies, reps);
    } finally {
      if (benchDir == null) {
        deleteTree(dir);
      }
    }
  }

  private static void run(Path dir, int copies, int reps) throws Exception {
    Path json = dir.resolve("events.ndjson");
    long records = writeCopies(json, copies);
    // A kept bench.dir holds the engines of an earlier run: start both from empty directories.
    for (String engine : new String[] {"daemon", "embedded"}) {
      if (Files.exists(dir.resolve(engine))) {
        deleteTree(dir.resolve(engine));
      }
    }
    long bytes = Files.size(json);
    long budget = Math.max(256L << 20, 2 * bytes);
    String date = ZonedDateTime.now().toString();

    try (ShoalDaemon daemon = ShoalDaemon.start(dir.resolve("daemon"), "--memory-budget-mb", Long.toString(budget >> 20));
         ShoalEmbedded embedded = ShoalEmbedded.open(dir.resolve("embedded"), Map.of("memory_budget_bytes", budget))) {
      String grpc = daemon.endpoint();
      String embeddedEndpoint = "embedded:" + dir.resolve("embedded").toAbsolutePath();

      // shoal: table and PSFs first, then the records.
      double daemonIngest;
      try (ShoalClient client = ShoalClient.open(URI.create(grpc), null)) {
        client.createTableIfNotExists(TABLE);
        for (ObjectNode psf : githubPsfs()) {
          client.action("register_psf", psf, TABLE);
        }
        long t0 = System.nanoTime();
        try (ShoalClient.Put put = client.startPut(TABLE)) {
          forEachBatch(json, 4096, put::send);
          put.finish();
        }
        daemonIngest = seconds(t0);
      }
      embedded.createTable(TABLE);
      for (ObjectNode psf : githubPsfs()) {
        embedded.registerPsf(TABLE, psf.get("name").asText(), psf);
      }
      long t1 = System.nanoTime();
      forEachBatch(json, 4096, batch -> embedded.ingest(TABLE, batch));
      double embeddedIngest = seconds(t1);

      SparkSession spark = spark(grpc);
      spark.sparkContext().setLogLevel("WARN");
      spark.conf().set("spark.sql.catalog.shoal_embedded", ShoalCatalog.class.getName());
      spark.conf().set("spark.sql.catalog.shoal_embedded.endpoint", embeddedEndpoint);
      // The engine stays open through ShoalEmbedded above; without the connector's keep-alive it
      // closes when that handle does, before the directory is deleted.
      spark.conf().set("spark.sql.catalog.shoal_embedded.embedded.keep-alive-ms", "0");

      long t2 = System.nanoTime();
      StructType schema = spark.read().json(json.toString()).schema();
      double inferSeconds = seconds(t2);
      Dataset<Row> given = spark.read().schema(schema).json(json.toString());
      given.createOrReplaceTempView("json_given");
      // Spark's CacheManager answers any query whose plan matches a cached one: with the same
      // read as json_given, the given-schema and the inferred-schema queries would read the
      // cache too. An option set to its default value makes the cached relation another one
      // (run() checks which queries read the cache).
      Dataset<Row> cached = spark.read().schema(schema).option("mode", "PERMISSIVE").json(json.toString()).cache();
      long t3 = System.nanoTime();
      long cachedRows = cached.count();
      double cacheSeconds = seconds(t3);
      cached.createOrReplaceTempView("json_cached");
      long cacheMem = 0;
      long cacheDisk = 0;
      for (RDDInfo info : spark.sparkContext().getRDDStorageInfo()) {
        cacheMem += info.memSize();
        cacheDisk += info.diskSize();
      }
      if (cachedRows != records) {
        throw new AssertionError("cached DataFrame has " + cachedRows + " rows, the file " + records);
      }
      // Spark's own cost of a job: a cached two-row DataFrame in two partitions, a filter that keeps nothing.
      Dataset<Row> tiny = spark.range(0, 2, 1, 2).toDF("x").cache();
      tiny.count();
      tiny.createOrReplaceTempView("tiny");

      System.out.printf(Locale.ROOT, "records %d (%.0f MB, %d copies of data/github/events.ndjson, ids unique per copy); %s; "
              + "Spark %s local[2]; %d runs after one warm-up, systems interleaved%n",
          records, bytes / 1e6, copies, date, spark.version(), reps);
      System.out.printf(Locale.ROOT, "shoal: table '%s', FishStore's 6 GitHub PSFs registered before ingestion; memory budget %d MiB; "
          + "daemon %s%n", TABLE, budget >> 20, System.getProperty("shoal.bin"));
      System.out.printf(Locale.ROOT, "ingest daemon (DoPut, 4096-record batches, 1 stream): %.1f s = %.0f MB/s%n", daemonIngest, bytes / 1e6 / daemonIngest);
      System.out.printf(Locale.ROOT, "ingest embedded (ShoalEmbedded.ingest, 4096-record batches): %.1f s = %.0f MB/s%n", embeddedIngest, bytes / 1e6 / embeddedIngest);
      System.out.printf(Locale.ROOT, "Spark schema inference (spark.read.json(file).schema): %.1f s; %d top-level columns%n", inferSeconds, schema.fields().length);
      System.out.printf(Locale.ROOT, "time to cache (read with the given schema, cache(), count()): %.1f s; cache %d MB in memory, %d MB on disk%n",
          cacheSeconds, cacheMem >> 20, cacheDisk >> 20);

      List<Query> queries = selectedQueries();
      Map<String, double[]> medians = new LinkedHashMap<>();
      Map<String, Long> answersRows = new LinkedHashMap<>();
      Map<String, double[]> phases = new LinkedHashMap<>();
      StringBuilder table = new StringBuilder();
      table.append(String.format(Locale.ROOT, "%n%-46s %-15s %10s %19s %8s  %s%n", "query", "system", "median ms", "min-max ms", "rows", "agrees"));
      Map<String, Source> sources = sources(spark, json);
      for (Query q : queries) {
        Map<String, Supplier<Run>> systems = new LinkedHashMap<>();
        sources.forEach((system, from) -> systems.put(system, () -> run(spark, from.sql(q), from.before(), system.equals("cached"))));
        Map<String, Answer> answers = new LinkedHashMap<>();
        for (Map.Entry<String, Supplier<Run>> s : systems.entrySet()) {
          answers.put(s.getKey(), s.getValue().get().answer()); // warm-up
        }
        Map<String, double[]> times = new LinkedHashMap<>();
        Map<String, double[][]> phaseTimes = new LinkedHashMap<>();
        for (String s : SYSTEMS) {
          times.put(s, new double[reps]);
          phaseTimes.put(s, new double[3][reps]);
        }
        for (int r = 0; r < reps; r++) {
          for (Map.Entry<String, Supplier<Run>> s : systems.entrySet()) {
            long a = System.nanoTime();
            Run run = s.getValue().get();
            times.get(s.getKey())[r] = (System.nanoTime() - a) / 1e6;
            if (Boolean.getBoolean("bench.verbose")) { // each run, stamped with the JVM's uptime (as -Xlog:gc stamps its lines)
              System.err.printf(Locale.ROOT, "run %s | %s | %d: %.0f ms, ended at uptime %.3f s%n", q.name(), s.getKey(), r,
                  times.get(s.getKey())[r], java.lang.management.ManagementFactory.getRuntimeMXBean().getUptime() / 1e3);
            }
            for (int ph = 0; ph < 3; ph++) {
              phaseTimes.get(s.getKey())[ph][r] = run.phases()[ph];
            }
            if (!run.answer().equals(answers.get(s.getKey()))) {
              throw new AssertionError(q.name() + " on " + s.getKey() + ": " + run.answer() + " differs from its warm-up " + answers.get(s.getKey()));
            }
          }
        }
        for (String s : SYSTEMS) {
          double[] m = new double[3];
          for (int ph = 0; ph < 3; ph++) {
            double[] t = phaseTimes.get(s)[ph].clone();
            Arrays.sort(t);
            m[ph] = median(t);
          }
          phases.put(q.name() + "\u0000" + s, m);
        }
        Answer reference = answers.get("cached");
        double[] med = new double[SYSTEMS.length];
        for (int i = 0; i < SYSTEMS.length; i++) {
          double[] t = times.get(SYSTEMS[i]).clone();
          Arrays.sort(t);
          med[i] = median(t);
          Answer a = answers.get(SYSTEMS[i]);
          table.append(String.format(Locale.ROOT, "%-46s %-15s %10.0f %19s %8d  %s%n", i == 0 ? q.name() : "", SYSTEMS[i], med[i],
              String.format(Locale.ROOT, "%.0f-%.0f", t[0], t[t.length - 1]), a.rows(), a.equals(reference) ? "yes" : "NO"));
        }
        medians.put(q.name(), med);
        answersRows.put(q.name(), reference.rows());
        for (String s : SYSTEMS) {
          if (!answers.get(s).equals(reference)) {
            System.out.print(table);
            throw new AssertionError(q.name() + ": " + s + " answered " + answers.get(s) + ", cached DataFrame " + reference);
          }
        }
      }
      System.out.print(table);

      System.out.printf(Locale.ROOT, "%nratios of medians (> 1: shoal faster; shoal / cached < 1: shoal faster than the cache)%n");
      System.out.printf(Locale.ROOT, "%-46s %-15s %14s %14s %14s%n", "query", "shoal via", "inferred/shoal", "given/shoal", "shoal/cached");
      for (Map.Entry<String, double[]> e : medians.entrySet()) {
        double[] m = e.getValue();
        for (int s = 0; s < 2; s++) {
          System.out.printf(Locale.ROOT, "%-46s %-15s %13.1fx %13.1fx %13.2fx%n", s == 0 ? e.getKey() : "", s == 0 ? "daemon" : "embedded",
              m[2] / m[s], m[3] / m[s], m[s] / m[4]);
        }
      }

      System.out.printf(Locale.ROOT, "%nphases in Spark (median ms of the timed runs): analyse = spark.sql(q) (parse, resolve: the catalog's loadTable and "
          + "GetSchema; JSON inferred: spark.read.json(file) with its inference job too); plan = queryExecution().executedPlan() (optimiser, "
          + "pushdown, physical plan); run = collectAsList() (jobs: GetFlightInfo, DoGet / file reads, rows to the driver)%n");
      System.out.printf(Locale.ROOT, "%-46s %-15s %9s %9s %9s%n", "query", "system", "analyse", "plan", "run");
      for (Query q : queries) {
        for (int i = 0; i < SYSTEMS.length; i++) {
          double[] m = phases.get(q.name() + "\u0000" + SYSTEMS[i]);
          System.out.printf(Locale.ROOT, "%-46s %-15s %9.0f %9.0f %9.0f%n", i == 0 ? q.name() : "", SYSTEMS[i], m[0], m[1], m[2]);
        }
      }

      // Breakdown: shoal without Spark (the connector's client, GetFlightInfo then DoGet of each
      // endpoint in turn), and Spark's cost of a job on a cached two-row DataFrame.
      System.out.printf(Locale.ROOT, "%nbreakdown (median of %d runs after one warm-up, ms): shoal's plan (GetFlightInfo) and read (DoGet of every endpoint, "
          + "in turn, rows counted) through the connector's client without Spark; endpoints; index and full scans of the plan%n", Math.max(reps, 5));
      System.out.printf(Locale.ROOT, "%-46s %-9s %8s %8s %8s %9s %5s %6s%n", "query", "shoal", "plan", "read", "p+r", "in Spark", "endp", "idx/full");
      for (Query q : queries) {
        for (int s = 0; s < 2; s++) {
          String endpoint = s == 0 ? grpc : embeddedEndpoint;
          double[] r = direct(endpoint, q, Math.max(reps, 5));
          System.out.printf(Locale.ROOT, "%-46s %-9s %8.1f %8.1f %8.1f %9.0f %5d %3d/%d%n", s == 0 ? q.name() : "", s == 0 ? "daemon" : "embedded",
              r[0], r[1], r[0] + r[1], medians.get(q.name())[s], (int) r[2], (int) r[3], (int) r[4]);
        }
      }
      double[] floor = new double[Math.max(reps, 5)];
      spark.sql("SELECT x FROM tiny WHERE x < 0").collectAsList();
      for (int i = 0; i < floor.length; i++) {
        long a = System.nanoTime();
        spark.sql("SELECT x FROM tiny WHERE x < 0").collectAsList();
        floor[i] = (System.nanoTime() - a) / 1e6;
      }
      Arrays.sort(floor);
      System.out.printf(Locale.ROOT, "Spark floor: SELECT x FROM <cached 2-row DataFrame, 2 partitions> WHERE x < 0: median %.0f ms (%.0f-%.0f): "
          + "parse, analyse, optimise, plan, schedule 2 tasks, collect%n", median(floor), floor[0], floor[floor.length - 1]);

      // The queries that return whole events: how much of Spark's "run" phase is the job (the
      // executed plan's executeCollect, InternalRows) and how much the conversion to Rows that
      // collectAsList adds (an encoder generated for the result's schema, on the driver).
      System.out.printf(Locale.ROOT, "%nwhole events (SELECT *): the job alone (executedPlan().executeCollect(), InternalRows) against collectAsList "
          + "(the job + Rows through an encoder generated for the schema on the driver), median of %d ms%n", Math.max(reps, 5));
      System.out.printf(Locale.ROOT, "%-46s %-15s %9s %14s %12s %8s%n", "query", "system", "job", "collectAsList", "conversion", "columns");
      for (Query q : queries) {
        if (!q.columns().isEmpty()) {
          continue;
        }
        for (String system : new String[] {"shoal daemon", "shoal embedded", "cached"}) {
          Source from = sources.get(system);
          int n = Math.max(reps, 5);
          double[] job = new double[n];
          double[] collect = new double[n];
          int leaves = 0;
          for (int r = -1; r < n; r++) {
            Dataset<Row> df = spark.sql(from.sql(q));
            org.apache.spark.sql.execution.SparkPlan plan = df.queryExecution().executedPlan();
            long a = System.nanoTime();
            plan.executeCollect();
            long b = System.nanoTime();
            Dataset<Row> df2 = spark.sql(from.sql(q));
            df2.queryExecution().executedPlan();
            long c = System.nanoTime();
            df2.collectAsList();
            long d = System.nanoTime();
            if (r >= 0) {
              job[r] = (b - a) / 1e6;
              collect[r] = (d - c) / 1e6;
            }
            leaves = leafFields(df.schema());
          }
          Arrays.sort(job);
          Arrays.sort(collect);
          System.out.printf(Locale.ROOT, "%-46s %-15s %9.0f %14.0f %12.0f %8d%n", system.equals("shoal daemon") ? q.name() : "", system,
              median(job), median(collect), median(collect) - median(job), leaves);
        }
      }

      // The same target queries the way the spark-sql shell runs them (SparkSQLDriver): the
      // Dataset of spark.sql(q), then HiveResult.hiveResultString(executedPlan) inside
      // SQLExecution.withNewExecutionId. The rows become text through Spark's interpreted
      // converters (executeCollectPublic), so no Row deserializer is generated for the schema;
      // that is collectAsList's cost above for whole events.
      System.out.printf(Locale.ROOT, "%nthe spark-sql shell's path (SparkSQLDriver: spark.sql(q), then HiveResult.hiveResultString(executedPlan) in "
          + "SQLExecution.withNewExecutionId: rows printed as text, no Row encoder generated), the target queries, one warm-up, %d rounds, "
          + "systems interleaved; median ms (min-max)%n", reps);
      System.out.printf(Locale.ROOT, "%-46s %-15s %10s %19s %8s%n", "query", "system", "median ms", "min-max ms", "lines");
      Map<String, double[]> shellMedians = new LinkedHashMap<>();
      for (Query q : queries.stream().filter(q -> !q.context()).toList()) {
        Map<String, Supplier<Long>> systems = new LinkedHashMap<>();
        sources.forEach((system, from) -> systems.put(system, () -> shellRun(spark, from.sql(q), from.before())));
        long expected = answersRows.get(q.name());
        double[][] times = new double[SYSTEMS.length][reps];
        for (int r = -1; r < reps; r++) {
          for (int i = 0; i < SYSTEMS.length; i++) {
            long a = System.nanoTime();
            long lines = systems.get(SYSTEMS[i]).get();
            if (r >= 0) {
              times[i][r] = (System.nanoTime() - a) / 1e6;
            }
            if (lines != expected) {
              throw new AssertionError(q.name() + " on " + SYSTEMS[i] + " through the spark-sql path: " + lines + " lines, " + expected + " rows from collectAsList");
            }
          }
        }
        double[] med = new double[SYSTEMS.length];
        for (int i = 0; i < SYSTEMS.length; i++) {
          Arrays.sort(times[i]);
          med[i] = median(times[i]);
          System.out.printf(Locale.ROOT, "%-46s %-15s %10.0f %19s %8d%n", i == 0 ? q.name() : "", SYSTEMS[i], med[i],
              String.format(Locale.ROOT, "%.0f-%.0f", times[i][0], times[i][reps - 1]), expected);
        }
        shellMedians.put(q.name(), med);
      }

      System.out.printf(Locale.ROOT, "%ntargets (~1 GB, local[2]); this run: %.0f MB%n", bytes / 1e6);
      Map<String, Map<String, double[]>> paths = new LinkedHashMap<>();
      paths.put("collectAsList (Java/Scala Rows)", medians);
      paths.put("the spark-sql shell's path", shellMedians);
      for (Map.Entry<String, Map<String, double[]>> e : paths.entrySet()) {
        System.out.printf(Locale.ROOT, "through %s:%n", e.getKey());
        for (int i = 0; i < 3; i++) {
          String q = QUERIES.get(i).name();
          if (e.getValue().containsKey(q)) {
            target(q, e.getValue().get(q), i < 2 ? 20 : 5);
          }
        }
      }
      spark.stop();
    }
  }

  /** Where a system reads from: its table or view, and what runs first in every run ({@code null}: nothing). */
  record Source(String table, Runnable before) {
    /** The query's SQL over this source. */
    String sql(Query q) {
      return q.sql().replace(" T", " " + table);
    }
  }

  /**
   * The sources of {@link #SYSTEMS}, in that order. "JSON inferred" makes its view anew before
   * every run, so that each run pays the inference pass as {@code spark.read.json(path)} does.
   */
  private static Map<String, Source> sources(SparkSession spark, Path json) {
    Map<String, Source> sources = new LinkedHashMap<>();
    sources.put("shoal daemon", new Source("shoal." + TABLE, null));
    sources.put("shoal embedded", new Source("shoal_embedded." + TABLE, null));
    sources.put("JSON inferred", new Source("json_inferred",
        () -> spark.read().json(json.toString()).createOrReplaceTempView("json_inferred")));
    sources.put("JSON given", new Source("json_given", null));
    sources.put("cached", new Source("json_cached", null));
    return sources;
  }

  /** {@link #QUERIES}, or those that {@code bench.queries} names (first word of the name). */
  private static List<Query> selectedQueries() {
    String only = System.getProperty("bench.queries", "").trim();
    if (only.isEmpty()) {
      return QUERIES;
    }
    List<String> names = Arrays.stream(only.split(",")).map(String::trim).toList();
    List<Query> selected = QUERIES.stream().filter(q -> names.contains(q.name().split(" ")[0])).toList();
    if (selected.isEmpty()) {
      throw new IllegalArgumentException("bench.queries=" + only + " names none of the queries (Q3, Q3n, Q2, Q4, Q5, Q0)");
    }
    return selected;
  }

  private static void target(String query, double[] m, double faster) {
    for (int s = 0; s < 2; s++) {
      String via = s == 0 ? "daemon" : "embedded";
      System.out.printf(Locale.ROOT, "%-46s %-8s >= %2.0fx JSON inferred: %6.1fx %-6s >= %2.0fx JSON given: %6.1fx %-6s within 1.5x of cached: %5.2fx %s%n",
          query, via, faster, m[2] / m[s], verdict(m[2] / m[s] >= faster), faster, m[3] / m[s], verdict(m[3] / m[s] >= faster),
          m[s] / m[4], verdict(m[s] / m[4] <= 1.5));
    }
  }

  private static String verdict(boolean met) {
    return met ? "met" : "MISSED";
  }

  /** [plan ms, read ms, endpoints, index scans, full scans] of a query through the connector's client. */
  private static double[] direct(String endpoint, Query q, int reps) {
    double[] plan = new double[reps];
    double[] read = new double[reps];
    int endpoints = 0;
    int index = 0;
    int full = 0;
    try (ShoalClient client = ShoalClient.open(URI.create(endpoint), null)) {
      for (int r = -1; r < reps; r++) {
        ObjectNode command = ShoalClient.JSON.createObjectNode().put("table", TABLE).put("filter", q.filter());
        ArrayNode columns = command.putArray("columns");
        q.columns().forEach(columns::add);
        long a = System.nanoTime();
        ShoalFlightPlan p = client.getFlightInfo(TABLE, command);
        long b = System.nanoTime();
        long rows = 0;
        for (ShoalFlightPlan.Endpoint e : p.endpoints()) {
          try (ShoalBatchStream stream = client.doGet(TABLE, e.ticket())) {
            while (stream.next()) {
              rows += stream.root().getRowCount();
            }
          }
        }
        long c = System.nanoTime();
        if (r >= 0) {
          plan[r] = (b - a) / 1e6;
          read[r] = (c - b) / 1e6;
        }
        endpoints = p.endpoints().size();
        index = p.metadata().path("plan").path("index_scans").size();
        full = p.metadata().path("plan").path("full_scans").size();
      }
    }
    Arrays.sort(plan);
    Arrays.sort(read);
    return new double[] {median(plan), median(read), endpoints, index, full};
  }

  /** One timed run: the answer and the ms of [analyse, plan, run]. */
  record Run(Answer answer, double[] phases) {
  }

  private static Run run(SparkSession spark, String sql, Runnable before, boolean cached) {
    long a = System.nanoTime();
    if (before != null) {
      before.run();
    }
    Dataset<Row> df = spark.sql(sql);
    long b = System.nanoTime();
    String plan = df.queryExecution().executedPlan().toString();
    long c = System.nanoTime();
    if (plan.contains("InMemoryTableScan") != cached) {
      throw new AssertionError((cached ? "not served from" : "served from") + " Spark's cache: " + sql + "\n" + plan);
    }
    Answer answer = answer(df);
    long d = System.nanoTime();
    return new Run(answer, new double[] {(b - a) / 1e6, (c - b) / 1e6, (d - c) / 1e6});
  }

  /**
   * One run the way the spark-sql shell runs a statement ({@code SparkSQLDriver.run}): the
   * Dataset of {@code spark.sql(sql)}, then {@code HiveResult.hiveResultString} of its executed
   * plan inside {@code SQLExecution.withNewExecutionId}; returns the lines (one per row).
   */
  private static long shellRun(SparkSession spark, String sql, Runnable before) {
    if (before != null) {
      before.run();
    }
    org.apache.spark.sql.execution.QueryExecution qe = spark.sql(sql).queryExecution();
    scala.Function0<scala.collection.Seq<String>> print = () -> org.apache.spark.sql.execution.HiveResult.hiveResultString(qe.executedPlan());
    return org.apache.spark.sql.execution.SQLExecution.withNewExecutionId(qe, scala.Option.apply("cli"), print).size();
  }

  /** The leaf fields of a schema (structs flattened; an array counts as one). */
  private static int leafFields(StructType schema) {
    int n = 0;
    for (org.apache.spark.sql.types.StructField f : schema.fields()) {
      n += f.dataType() instanceof StructType st ? leafFields(st) : 1;
    }
    return n;
  }

  private static Answer answer(Dataset<Row> result) {
    List<Row> rows = result.collectAsList();
    long hash = 0;
    for (Row row : rows) {
      int i = Arrays.asList(row.schema().fieldNames()).indexOf("id");
      if (i >= 0 && !row.isNullAt(i)) {
        hash += row.get(i).toString().hashCode() * 0x9E3779B97F4A7C15L;
      }
    }
    return new Answer(rows.size(), hash);
  }

  /** FishStore's GitHub PSFs (paper Table 1), as {@code bench/compare.py} registers them. */
  private static List<ObjectNode> githubPsfs() {
    return List.of(
        psf(TABLE, "id", "projection").put("field", "id"),
        psf(TABLE, "actor_id", "projection").put("field", "actor.id"),
        psf(TABLE, "repo_id", "projection").put("field", "repo.id"),
        psf(TABLE, "type", "projection").put("field", "type"),
        psf(TABLE, "opened_issues", "predicate").put("expr", "type = 'IssuesEvent' AND payload.action = 'opened'"),
        psf(TABLE, "cpp_prs", "predicate").put("expr", "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'"));
  }

  /** Writes the events {@code copies} times, the copy number appended to {@code id} from the second copy on; returns the records. */
  private static long writeCopies(Path out, int copies) throws IOException {
    List<String> events = events();
    long n = 0;
    try (BufferedWriter w = Files.newBufferedWriter(out, StandardCharsets.UTF_8)) {
      for (int copy = 0; copy < copies; copy++) {
        for (String line : events) {
          if (copy > 0) {
            Matcher m = ID.matcher(line);
            if (!m.find()) {
              throw new IllegalStateException("event without a leading string id: " + line.substring(0, Math.min(80, line.length())));
            }
            line = String.format(Locale.ROOT, "{\"id\":\"%s%03d\"", m.group(1), copy) + line.substring(m.end());
          }
          w.write(line);
          w.write('\n');
          n++;
        }
      }
    }
    return n;
  }

  private interface BatchSink {
    void accept(List<String> batch);
  }

  private static void forEachBatch(Path file, int size, BatchSink sink) throws IOException {
    try (BufferedReader reader = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      List<String> batch = new ArrayList<>(size);
      String line;
      while ((line = reader.readLine()) != null) {
        batch.add(line);
        if (batch.size() == size) {
          sink.accept(batch);
          batch = new ArrayList<>(size);
        }
      }
      if (!batch.isEmpty()) {
        sink.accept(batch);
      }
    }
  }

  private static double median(double[] sorted) {
    int n = sorted.length;
    return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }

  private static double seconds(long start) {
    return (System.nanoTime() - start) / 1e9;
  }

  private static void deleteTree(Path dir) throws IOException {
    try (var paths = Files.walk(dir)) {
      paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }
}
