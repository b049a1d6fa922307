package dev.shoal.flink.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalTargetExtension;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.Metric;
import org.apache.flink.runtime.testutils.InMemoryReporter;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The DataStream sink in a Flink MiniCluster: the GitHub Archive events (9,996, bounded FileSource
 * over the NDJSON file) go through {@link ShoalSink}; a query (a plan and all of its endpoints,
 * column {@code id}) then finds them. Run against the real daemon ({@link ShoalSinkDaemonITCase},
 * read back over Flight) and against the engine in this JVM ({@link ShoalSinkEmbeddedITCase},
 * {@code embedded:<dir>}, read back through {@code ShoalEmbedded}); each subclass adds the tests of
 * its mode alone.
 */
public abstract class ShoalSinkITCase {

  static final int PARALLELISM = 2;
  static final long FAIL_AFTER = 6000;

  /**
   * Keeps every metric of every job of the running test class, for the metrics assertions. A new one
   * for each class's MiniCluster: a reporter ends (and forgets its metrics) with its cluster, and the
   * per-mode subclasses share {@link #FLINK}, which starts a cluster per class.
   */
  static volatile InMemoryReporter METRICS;

  @RegisterExtension
  static final MiniClusterExtension FLINK = new MiniClusterExtension(() -> {
    METRICS = InMemoryReporter.createWithRetainedMetrics();
    return new MiniClusterResourceConfiguration.Builder()
        .setConfiguration(METRICS.addToConfiguration(new Configuration()))
        .setNumberTaskManagers(1)
        .setNumberSlotsPerTaskManager(PARALLELISM)
        .build();
  });

  /** The daemon or the embedded directory, by the concrete class's {@link ShoalMode}. */
  @RegisterExtension
  static final ShoalTargetExtension SHOAL = new ShoalTargetExtension();

  static StreamExecutionEnvironment environment(String restartStrategy) {
    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, restartStrategy);
    if (restartStrategy.equals("fixed-delay")) {
      conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 3);
      conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(200));
    }
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(PARALLELISM);
    return env;
  }

  public static DataStream<String> events(StreamExecutionEnvironment env) {
    FileSource<String> source = FileSource
        .forRecordStreamFormat(new TextLineInputFormat(), new Path(ShoalDaemon.events().toAbsolutePath().toUri()))
        .build();
    return env.fromSource(source, WatermarkStrategy.noWatermarks(), "github-events");
  }

  static ShoalSinkBuilder<String> sink(String table, DeliveryGuarantee guarantee) {
    return ShoalSink.<String>builder()
        .setEndpoint(SHOAL.endpoint())
        .setTable(table)
        .setDeliveryGuarantee(guarantee)
        .setMaxBatchSize(500)
        .setMaxTimeInBuffer(Duration.ofMillis(200));
  }

  static Map<String, Integer> counts(List<String> values) {
    Map<String, Integer> counts = new HashMap<>();
    for (String value : values) {
      counts.merge(value, 1, Integer::sum);
    }
    return counts;
  }

  @ParameterizedTest
  @EnumSource(value = DeliveryGuarantee.class, names = {"NONE", "AT_LEAST_ONCE"})
  void everyEventIsWrittenExactlyOnceWhenNothingFails(DeliveryGuarantee guarantee) throws Exception {
    String table = "events_" + guarantee.name().toLowerCase();
    SHOAL.createTable(table, "reject");
    StreamExecutionEnvironment env = environment("none");
    env.enableCheckpointing(500);
    events(env).sinkTo(sink(table, guarantee).build()).name("shoal-sink");

    long started = System.nanoTime();
    JobExecutionResult result = env.execute("github events -> shoal (" + guarantee + ")");
    double seconds = (System.nanoTime() - started) / 1e9;

    List<String> expected = ShoalDaemon.eventIds();
    List<String> written = SHOAL.column(table, "id");
    System.out.printf("%s: %d events in %.2f s (%.0f records/s, job submission included)%n",
        guarantee, expected.size(), seconds, expected.size() / seconds);
    assertEquals(counts(expected), counts(written), "every event id exactly once");

    long bytes = 0;
    for (String line : java.nio.file.Files.readAllLines(ShoalDaemon.events())) {
      bytes += line.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
    }
    Map<String, Metric> writerMetrics = new HashMap<>();
    // The writer operator's own group only: on Flink 2.x the chained task "Source: github-events ->
    // shoal-sink: Writer" reports a numRecordsOut of its own as well.
    METRICS.findMetrics(result.getJobID(), "shoal-sink").forEach((name, metric) -> {
      if (name.contains(".shoal-sink: Writer.")) {
        writerMetrics.put(name, metric);
      }
    });
    assertEquals(expected.size(), sum(writerMetrics, ".numRecordsOut"), () -> "numRecordsOut in " + writerMetrics.keySet());
    assertEquals(bytes, sum(writerMetrics, ".numBytesOut"), "numBytesOut = the JSON bytes sent");
    long batches = sum(writerMetrics, ".shoalBatchesOut");
    assertTrue(batches >= expected.size() / 500, "at least one batch per 500 records, got " + batches);
    assertEquals(0, sum(writerMetrics, ".shoalRetries"), "no retries when nothing fails");
    long latencies = writerMetrics.entrySet().stream()
        .filter(e -> e.getKey().endsWith(".shoalAckLatencyMs"))
        .mapToLong(e -> ((Histogram) e.getValue()).getCount())
        .sum();
    assertEquals(batches, latencies, "one acknowledgement latency per batch");

    if (guarantee == DeliveryGuarantee.AT_LEAST_ONCE) {
      assertEveryLogDurable(table);
    }
  }

  /**
   * The end-of-input flush of an at-least-once writer waited for make_durable: every record is
   * durable (the durable address reached the log's tail; each shard's, for a sharded table).
   */
  static void assertEveryLogDurable(String table) throws Exception {
    ObjectMapper json = new ObjectMapper();
    JsonNode stats = json.readTree(SHOAL.action("stats", "{\"table\":\"" + table + "\"}"));
    if (stats.has("shards")) {
      for (JsonNode shard : stats.get("shards")) {
        assertTrue(shard.get("durable_address").asLong() >= shard.get("tail_address").asLong(), "a shard's log: " + shard);
      }
      return;
    }
    JsonNode status = json.readTree(SHOAL.action("writer_status", "{\"table\":\"" + table + "\",\"writer\":\"-\"}"));
    assertTrue(status.get("durable_address").asLong() >= stats.get("tail_address").asLong(), status + " " + stats);
  }

  static long sum(Map<String, Metric> metrics, String suffix) {
    return metrics.entrySet().stream()
        .filter(e -> e.getKey().endsWith(suffix))
        .mapToLong(e -> ((Counter) e.getValue()).getCount())
        .sum();
  }

  /**
   * Fails the job once, at the first record after {@code failAfter} records in total (over all
   * subtasks) once a checkpoint that covers some of them has completed, then passes everything. The
   * wait for such a checkpoint makes the failover a resume from a checkpoint on any machine: failing
   * at a record count alone restarted the job from scratch whenever its first checkpoint came late.
   * Chained with the source, a subtask's records at its snapshot are the records the restored source
   * does not read again.
   */
  static final class FailOnce implements MapFunction<String, String>, CheckpointedFunction, CheckpointListener {
    static final AtomicBoolean FAILED = new AtomicBoolean();
    /** Records the map passed, over all subtasks and attempts. */
    static final AtomicLong SEEN = new AtomicLong();
    /** {@link #SEEN} when the planned failure was thrown. */
    static final AtomicLong FAILED_AT = new AtomicLong();
    /** Records covered by the newest completed checkpoint of the first attempt. */
    static final AtomicLong CHECKPOINTED = new AtomicLong();
    /** The records each checkpoint covers, summed over the subtasks' snapshots, by checkpoint id. */
    static final Map<Long, AtomicLong> COVERED = new java.util.concurrent.ConcurrentHashMap<>();
    private final long failAfter;
    /** This subtask's records in this attempt. */
    private transient long passed;

    FailOnce(long failAfter) {
      this.failAfter = failAfter;
    }

    static void reset() {
      FAILED.set(false);
      SEEN.set(0);
      FAILED_AT.set(0);
      CHECKPOINTED.set(0);
      COVERED.clear();
    }

    @Override
    public String map(String value) throws Exception {
      long seen = SEEN.incrementAndGet();
      passed++;
      boolean due = seen >= failAfter && !FAILED.get();
      if (seen % 20 == 0 || (due && CHECKPOINTED.get() == 0)) {
        Thread.sleep(1); // spread the input over several checkpoints (~200 ms apart)
      }
      if (due && CHECKPOINTED.get() > 0 && FAILED.compareAndSet(false, true)) {
        FAILED_AT.set(seen);
        throw new IllegalStateException("planned failure after " + seen + " records, "
            + CHECKPOINTED.get() + " of them checkpointed");
      }
      return value;
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) {
      COVERED.computeIfAbsent(context.getCheckpointId(), id -> new AtomicLong()).addAndGet(passed);
    }

    @Override
    public void initializeState(FunctionInitializationContext context) {
      // Nothing to restore: the counts are static, for the test to read, and span the attempts.
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
      if (!FAILED.get()) {
        CHECKPOINTED.accumulateAndGet(COVERED.getOrDefault(checkpointId, new AtomicLong()).get(), Math::max);
      }
    }

    /** A restart from scratch would make the map see the records before the failure plus the whole input again. */
    static void assertResumedFromACheckpoint(int input) {
      assertTrue(SEEN.get() < FAILED_AT.get() + input, "the job resumed from a checkpoint (map saw " + SEEN.get()
          + " records, " + FAILED_AT.get() + " before the failure, " + CHECKPOINTED.get() + " checkpointed)");
    }
  }

  @Test
  void atLeastOnceLosesNoEventWhenTheJobFailsAndRecoversFromItsCheckpoint() throws Exception {
    String table = "events_failover";
    SHOAL.createTable(table, "reject");
    FailOnce.reset();
    StreamExecutionEnvironment env = environment("fixed-delay");
    env.enableCheckpointing(200);
    events(env).map(new FailOnce(FAIL_AFTER)).name("fail-once").sinkTo(sink(table, DeliveryGuarantee.AT_LEAST_ONCE).build());

    env.execute("github events -> shoal, failing once");

    assertTrue(FailOnce.FAILED.get(), "the planned failure happened");
    List<String> expected = ShoalDaemon.eventIds();
    List<String> written = SHOAL.column(table, "id");
    Set<String> missing = new HashSet<>(expected);
    missing.removeAll(new HashSet<>(written));
    System.out.printf("failover: %d records seen by the map (input %d), %d written (%d duplicates)%n",
        FailOnce.SEEN.get(), expected.size(), written.size(), written.size() - expected.size());
    assertEquals(Set.of(), missing, "no event id is missing after recovery");
    FailOnce.assertResumedFromACheckpoint(expected.size());
  }

  @Test
  void unknownTableFailsTheJobNamingTheTable() {
    StreamExecutionEnvironment env = environment("none");
    env.fromData("{\"a\":1}", "{\"a\":2}").sinkTo(sink("no_such_table", DeliveryGuarantee.AT_LEAST_ONCE).build());

    Exception e = assertThrows(Exception.class, () -> env.execute("unknown table"));

    // Failure causes come back from the MiniCluster as SerializedThrowable: match the message.
    Optional<Throwable> cause = ExceptionUtils.findThrowableWithMessage(e, "shoal table \"no_such_table\"");
    assertTrue(cause.isPresent(), () -> "an error naming the table in " + ExceptionUtils.stringifyException(e));
    assertTrue(cause.get().getMessage().contains("the table does not exist"), cause.get().getMessage());
  }

  @Test
  void invalidJsonFailsTheJobNamingTheRecord() {
    String table = "events_reject";
    SHOAL.createTable(table, "reject");
    StreamExecutionEnvironment env = environment("none");
    env.setParallelism(1);
    List<String> records = new ArrayList<>();
    for (int i = 0; i < 10; i++) {
      records.add(i == 7 ? "{\"id\": \"broken\", oops" : "{\"id\":\"" + i + "\"}");
    }
    // One batch of the 10 whatever the scheduling: only the end of input flushes it.
    env.fromData(records).sinkTo(sink(table, DeliveryGuarantee.AT_LEAST_ONCE).setMaxTimeInBuffer(Duration.ofMinutes(10)).build());

    Exception e = assertThrows(Exception.class, () -> env.execute("invalid json"));

    Optional<Throwable> cause = ExceptionUtils.findThrowableWithMessage(e, "rejected record 7 of a batch of 10");
    assertTrue(cause.isPresent(), () -> "an error naming the record in " + ExceptionUtils.stringifyException(e));
    String message = cause.get().getMessage();
    assertTrue(message.contains("rejected record 7 of a batch of 10"), message);
    assertTrue(message.contains("{\"id\": \"broken\", oops"), message);
  }
}
