package dev.shoal.demo.flink;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.flink.sink.ShoalSink;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * The Flink half of the demo (README, {@code ./demo.sh}): streams the GitHub Archive events into a
 * shoal table through {@link ShoalSink} (at-least-once, checkpoints every second) in a local
 * MiniCluster, and registers FishStore's GitHub PSFs ({@link DemoPsfs}) with the
 * {@code register_psf} action once a given share of the events is in the table, i.e. while the
 * stream runs. Prints progress every second and ends with lines starting {@code summary:}.
 *
 * <pre>
 * java --add-opens=java.base/java.nio=ALL-UNNAMED -cp ... dev.shoal.demo.flink.GithubEventsJob \
 *   --endpoint grpc://127.0.0.1:50051 --data data/github/events.ndjson \
 *   [--table events] [--rate 2000] [--register-psfs-at 0.4] [--parallelism 2] [--checkpoint-ms 1000]
 * </pre>
 *
 * Exit code 0 when the job finished and every PSF was registered (the {@code summary: psfs:} line
 * says whether that was while the stream ran); 1 when the job failed.
 */
public final class GithubEventsJob {
  private GithubEventsJob() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> options = parse(args);
    String endpoint = required(options, "endpoint");
    Path data = Paths.get(required(options, "data")).toAbsolutePath();
    String table = options.getOrDefault("table", "events");
    double rate = Double.parseDouble(options.getOrDefault("rate", "2000"));
    double registerAt = Double.parseDouble(options.getOrDefault("register-psfs-at", "0.4"));
    int parallelism = Integer.parseInt(options.getOrDefault("parallelism", "2"));
    long checkpointMs = Long.parseLong(options.getOrDefault("checkpoint-ms", "1000"));

    long total;
    try (var lines = Files.lines(data)) {
      total = lines.filter(line -> !line.isBlank()).count();
    }
    int code;
    try (ShoalAdmin admin = new ShoalAdmin(endpoint)) {
      admin.createTableIfNotExists(table);
      say("table '%s' ready at %s; streaming %,d events from %s", table, endpoint, total, data.getFileName());
      say("Flink MiniCluster: parallelism %d, ShoalSink at-least-once, checkpoint every %d ms, replay at %s",
          parallelism, checkpointMs, rate > 0 ? String.format(Locale.ROOT, "%,.0f events/s", rate) : "full speed");
      code = run(admin, endpoint, data, table, total, rate, registerAt, parallelism, checkpointMs);
    }
    System.out.flush();
    System.exit(code); // the MiniCluster leaves non-daemon threads behind
  }

  private static int run(ShoalAdmin admin, String endpoint, Path data, String table, long total, double rate,
      double registerAt, int parallelism, long checkpointMs) throws Exception {
    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
    env.enableCheckpointing(checkpointMs);

    FileSource<String> source = FileSource
        .forRecordStreamFormat(new TextLineInputFormat(), new org.apache.flink.core.fs.Path(data.toUri()))
        .build();
    env.fromSource(source, WatermarkStrategy.noWatermarks(), "github-events (NDJSON file)").setParallelism(1)
        .filter(line -> !line.isBlank()).setParallelism(1).name("skip blank lines")
        .map(new ReplayAtRate(rate)).setParallelism(1).name("replay at rate")
        .rebalance()
        .sinkTo(ShoalSink.<String>builder()
            .setEndpoint(endpoint)
            .setTable(table)
            .setDeliveryGuarantee(DeliveryGuarantee.AT_LEAST_ONCE)
            .setMaxBatchSize(500)
            .setMaxTimeInBuffer(Duration.ofMillis(200))
            .build())
        .name("shoal sink").setParallelism(parallelism);

    long started = System.nanoTime();
    JobClient job = env.executeAsync("GitHub events -> shoal table " + table);
    CompletableFuture<JobExecutionResult> result = job.getJobExecutionResult();

    long threshold = (long) Math.ceil(total * registerAt);
    Map<String, Long> registered = new LinkedHashMap<>();
    boolean registeredWhileRunning = false;
    long lastPrint = started;
    long lastRecords = 0;
    while (true) {
      try {
        result.get(250, TimeUnit.MILLISECONDS);
        break;
      } catch (TimeoutException stillRunning) {
        // poll the table below
      } catch (java.util.concurrent.ExecutionException failed) {
        say("the Flink job failed: %s", rootCause(failed));
        return 1;
      }
      JsonNode stats = admin.stats(table);
      long records = stats.path("records").asLong();
      if (registered.isEmpty() && records >= threshold) {
        registered = register(admin, table, records, total);
        registeredWhileRunning = true;
      }
      long now = System.nanoTime();
      if (now - lastPrint >= 1_000_000_000L) {
        double seconds = (now - started) / 1e9;
        double recent = (records - lastRecords) / ((now - lastPrint) / 1e9);
        lastPrint = now;
        lastRecords = records;
        say("%6.1f s  %,6d / %,d events in shoal (%,6.0f events/s)%s", seconds, records, total, recent,
            registered.isEmpty() ? (records == 0 ? "  [job starting]" : "") : "  [PSFs active]");
      }
    }
    double seconds = (System.nanoTime() - started) / 1e9;
    JsonNode stats = admin.stats(table);
    long records = stats.path("records").asLong();
    say("%6.1f s  %,6d / %,d events in shoal: job finished", seconds, records, total);
    if (registered.isEmpty()) {
      // The stream ended before the threshold was polled (a very fast machine or --rate 0).
      say("warning: the stream ended before %,d events were in: PSFs registered after it", threshold);
      registered = register(admin, table, records, total);
    }
    // The records before the PSFs' registration are indexed in the background (their backfill).
    long coveredFrom = admin.waitForBackfills(table, java.time.Duration.ofMinutes(5));
    say("PSFs backfilled: they cover the whole table, from log address %,d", coveredFrom);
    long tail = stats.path("tail_address").asLong();
    System.out.printf(Locale.ROOT, "summary: flink: %,d events into table '%s' in %.1f s (start-up included; parallelism %d, "
        + "at-least-once)%n", total, table, seconds, parallelism);
    System.out.printf(Locale.ROOT, "summary: flink: the table holds %,d records; log tail at address %,d%n", records, tail);
    long low = registered.values().stream().mapToLong(Long::longValue).min().orElse(0);
    long high = registered.values().stream().mapToLong(Long::longValue).max().orElse(0);
    System.out.printf(Locale.ROOT, "summary: psfs: %d registered %s the stream ran, indexed from log address %s "
        + "(and backfilled from %,d): %s%n",
        registered.size(), registeredWhileRunning ? "while" : "AFTER",
        low == high ? String.format(Locale.ROOT, "%,d", low) : String.format(Locale.ROOT, "%,d-%,d", low, high),
        coveredFrom, String.join(", ", registered.keySet()));
    return 0;
  }

  /** Registers {@link DemoPsfs#all()}; their names and safe register addresses. */
  private static Map<String, Long> register(ShoalAdmin admin, String table, long records, long total) {
    say("%,d / %,d events in: registering the PSFs (register_psf)", records, total);
    Map<String, Long> names = new LinkedHashMap<>();
    for (ObjectNode psf : DemoPsfs.all()) {
      JsonNode answer = admin.registerPsf(table, psf);
      long safe = answer.path("safe_register_address").asLong();
      say("  PSF %-17s indexed from log address %,d: %s", answer.path("name").asText(), safe, DemoPsfs.describe(psf));
      names.put(answer.path("name").asText(), safe);
    }
    return names;
  }

  private static String rootCause(Throwable t) {
    Throwable cause = t;
    while (cause.getCause() != null && cause.getCause() != cause) {
      cause = cause.getCause();
    }
    return cause.toString();
  }

  private static void say(String format, Object... args) {
    System.out.println("[flink] " + String.format(Locale.ROOT, format, args));
    System.out.flush();
  }

  private static Map<String, String> parse(String[] args) {
    Map<String, String> options = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      if (!args[i].startsWith("--") || i + 1 >= args.length) {
        throw new IllegalArgumentException("usage: GithubEventsJob --endpoint URI --data FILE [--table T] [--rate N] "
            + "[--register-psfs-at FRACTION] [--parallelism N] [--checkpoint-ms MS]; bad argument: " + args[i]);
      }
      options.put(args[i].substring(2), args[++i]);
    }
    return options;
  }

  private static String required(Map<String, String> options, String key) {
    String value = options.get(key);
    if (value == null) {
      throw new IllegalArgumentException("missing --" + key);
    }
    return value;
  }
}
