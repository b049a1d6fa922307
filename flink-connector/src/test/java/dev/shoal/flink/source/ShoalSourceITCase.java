package dev.shoal.flink.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalTargetExtension;
import dev.shoal.flink.sink.ShoalSink;
import dev.shoal.flink.sink.ShoalSinkITCase;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link ShoalSource} in a Flink MiniCluster over the GitHub Archive events: a bounded snapshot
 * read in parallel splits, and a follower that reads a table while another job sinks into it and
 * goes through a planned failover, checked to emit every record exactly once (with and without a
 * PSF filter). Run against the real daemon ({@link ShoalSourceDaemonITCase}) and the engine in
 * this JVM ({@link ShoalSourceEmbeddedITCase}).
 */
abstract class ShoalSourceITCase {

  static final int PARALLELISM = 2;
  static final ObjectMapper JSON = new ObjectMapper();

  @RegisterExtension
  static final MiniClusterExtension FLINK = new MiniClusterExtension(() -> new MiniClusterResourceConfiguration.Builder()
      .setNumberTaskManagers(1)
      .setNumberSlotsPerTaskManager(2 * PARALLELISM) // a follower and a writer job side by side
      .build());

  @RegisterExtension
  static final ShoalTargetExtension SHOAL = new ShoalTargetExtension();

  static StreamExecutionEnvironment environment() {
    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 3);
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(200));
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(PARALLELISM);
    return env;
  }

  /** The events file's records, and the ids of those matching {@code type} (null: all). */
  static List<String> ids(String type) throws Exception {
    List<String> ids = new ArrayList<>();
    for (String line : Files.readAllLines(ShoalDaemon.events(), StandardCharsets.UTF_8)) {
      if (!line.isBlank()) {
        JsonNode event = JSON.readTree(line);
        if (type == null || type.equals(event.path("type").asText())) {
          ids.add(event.path("id").asText());
        }
      }
    }
    return ids;
  }

  static Map<String, Integer> counts(List<String> values) {
    Map<String, Integer> counts = new HashMap<>();
    values.forEach(v -> counts.merge(v, 1, Integer::sum));
    return counts;
  }

  static String id(String json) {
    try {
      return JSON.readTree(json).path("id").asText();
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  /** Writes the events file into {@code table} with a Flink job (the sink, at-least-once). */
  static void sinkEvents(String table) throws Exception {
    StreamExecutionEnvironment env = environment();
    ShoalSinkITCase.events(env).sinkTo(ShoalSink.<String>builder().setEndpoint(SHOAL.endpoint()).setTable(table)
        .setMaxBatchSize(500).setMaxTimeInBuffer(Duration.ofMillis(100)).build());
    env.execute("events -> " + table);
  }

  static ShoalSourceBuilder<String> source(String table) {
    return ShoalSource.<String>builder()
        .setEndpoint(SHOAL.endpoint())
        .setTable(table)
        .setDeserializer(new SimpleStringSchema())
        .setPollInterval(Duration.ofMillis(50))
        .setEmbeddedKeepAlive(Duration.ofSeconds(5));
  }

  @Test
  void aBoundedSourceReadsTheSnapshotInParallelSplitsOnceEach() throws Exception {
    SHOAL.createTable("src_bounded", "reject");
    sinkEvents("src_bounded");
    StreamExecutionEnvironment env = environment();
    List<String> read = new ArrayList<>();
    // 256 KiB splits: the ~20 MiB of log is read as dozens of splits by both readers.
    try (CloseableIterator<String> records = env.fromSource(
        source("src_bounded").setBounded(true).setSplitBytes(256 << 10).build(),
        WatermarkStrategy.noWatermarks(), "shoal bounded").executeAndCollect()) {
      records.forEachRemaining(r -> read.add(id(r)));
    }
    assertEquals(counts(ids(null)), counts(read));

    // A filter: only its records (re-checked by the server); the same with a PSF on type.
    SHOAL.action("register_psf", "{\"table\": \"src_bounded\", \"name\": \"type\", \"kind\": \"projection\", \"field\": \"type\"}");
    List<String> issues = new ArrayList<>();
    try (CloseableIterator<String> records = env.fromSource(
        source("src_bounded").setBounded(true).setFilter("type = 'IssuesEvent'").build(),
        WatermarkStrategy.noWatermarks(), "shoal bounded filtered").executeAndCollect()) {
      records.forEachRemaining(r -> issues.add(id(r)));
    }
    assertEquals(counts(ids("IssuesEvent")), counts(issues));
  }

  // ---- the follower: exactly once through a failover ----

  /** Ids the checking operator ever saw (over every attempt), and the duplicates it found. */
  static final Set<String> SEEN = ConcurrentHashMap.newKeySet();
  static final List<String> DUPLICATES = java.util.Collections.synchronizedList(new ArrayList<>());
  static final AtomicBoolean FAILED = new AtomicBoolean();
  static final AtomicBoolean CHECKPOINTED = new AtomicBoolean();

  /** Fails the job once, after a checkpoint completed and some records went through. */
  static final class FailOnce implements MapFunction<String, String>, CheckpointListener {
    private int records;

    @Override
    public String map(String value) {
      if (++records > 200 && CHECKPOINTED.get() && FAILED.compareAndSet(false, true)) {
        throw new IllegalStateException("planned failover of the reader");
      }
      return value;
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
      CHECKPOINTED.set(true);
    }
  }

  /**
   * Per id, whether it was emitted before, in keyed state that is restored with the source's
   * positions: a record emitted twice in the job's consistent history is a duplicate.
   */
  static final class CheckOnce extends KeyedProcessFunction<String, String, String> {
    private transient ValueState<Boolean> seen;

    @Override
    public void open(org.apache.flink.api.common.functions.OpenContext context) {
      seen = getRuntimeContext().getState(new ValueStateDescriptor<>("seen", Boolean.class));
    }

    @Override
    public void processElement(String id, Context ctx, Collector<String> out) throws Exception {
      if (seen.value() != null) {
        DUPLICATES.add(id);
      }
      seen.update(true);
      SEEN.add(id);
    }
  }

  /**
   * A fetch hands its rows to the emitter in log-address order, also for an index scan, whose
   * answer comes newest first (down the PSF's chain): the position a checkpoint saves between two
   * rows is one past the last row emitted, so every older row of the answer must be out already,
   * or a failover after that checkpoint skips them.
   */
  @org.junit.jupiter.api.Test
  void aFetchEmitsAnIndexScansRowsInAddressOrder() throws Exception {
    String table = "src_order";
    SHOAL.createTable(table, "reject");
    SHOAL.action("register_psf", "{\"table\": \"" + table + "\", \"name\": \"type\", \"kind\": \"projection\", \"field\": \"type\"}");
    sinkEvents(table);
    ShoalSourceSettings settings = source(table).setFilter("type = 'PushEvent'").setSplitBytes(64L << 20).build().settings();
    List<Long> addresses = new java.util.ArrayList<>();
    try (ShoalSplitReader reader = new ShoalSplitReader(settings, new org.apache.flink.metrics.SimpleCounter())) {
      reader.handleSplitsChanges(new org.apache.flink.connector.base.source.reader.splitreader.SplitsAddition<>(
          List.of(new ShoalSplit("order", 0, ShoalSplit.UNBOUNDED))));
      org.apache.flink.connector.base.source.reader.RecordsWithSplitIds<ShoalSourceRecord> fetched = reader.fetch();
      while (fetched.nextSplit() != null) {
        for (ShoalSourceRecord record; (record = fetched.nextRecordFromSplit()) != null; ) {
          if (record.json() != null) {
            addresses.add(record.address());
          }
        }
      }
    }
    assertEquals(ids("PushEvent").size(), addresses.size());
    List<Long> sorted = new java.util.ArrayList<>(addresses);
    sorted.sort(null);
    assertEquals(sorted, addresses, "rows in ascending log-address order");
  }

  @ParameterizedTest(name = "filter: {0}")
  @ValueSource(strings = {"", "type = 'PushEvent'"})
  void aFollowerEmitsEveryRecordOnceWhileAnotherJobWritesAndThroughAFailover(String filter) throws Exception {
    String table = filter.isEmpty() ? "src_follow" : "src_follow_psf";
    SHOAL.createTable(table, "reject");
    if (!filter.isEmpty()) {
      SHOAL.action("register_psf", "{\"table\": \"" + table + "\", \"name\": \"type\", \"kind\": \"projection\", \"field\": \"type\"}");
    }
    SEEN.clear();
    DUPLICATES.clear();
    FAILED.set(false);
    CHECKPOINTED.set(false);
    List<String> expected = ids(filter.isEmpty() ? null : "PushEvent");

    StreamExecutionEnvironment followerEnv = environment();
    followerEnv.enableCheckpointing(100);
    followerEnv.fromSource(source(table).setFilter(filter.isEmpty() ? null : filter).setSplitBytes(1 << 20).build(),
            WatermarkStrategy.noWatermarks(), "shoal follower")
        .map(new FailOnce())
        .map(ShoalSourceITCase::id)
        .keyBy(id -> id)
        .process(new CheckOnce());
    JobClient follower = followerEnv.executeAsync("follow " + table);
    try {
      sinkEvents(table); // the writer job, while the follower runs
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
      while (SEEN.size() < expected.size() && System.nanoTime() < deadline) {
        assertTrue(!follower.getJobStatus().get().isTerminalState(), "the follower runs");
        Thread.sleep(50);
      }
    } finally {
      follower.cancel().get(30, TimeUnit.SECONDS);
    }
    assertTrue(FAILED.get(), "the reader went through its planned failover");
    assertEquals(List.of(), DUPLICATES, "no record emitted twice in the job's consistent history");
    assertEquals(new java.util.TreeSet<>(expected), new java.util.TreeSet<>(SEEN));
  }
}
