package dev.shoal.flink.sink;

import static dev.shoal.flink.sink.ShoalSinkITCase.counts;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalTargetExtension;
import dev.shoal.flink.common.ShoalSinkException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Exactly-once (shoal transactions, Flink's two-phase commit) in a Flink MiniCluster, against the
 * real daemon process ({@link ShoalExactlyOnceDaemonITCase}, which adds daemon restarts) and the
 * engine in this JVM ({@link ShoalExactlyOnceEmbeddedITCase}). Each class owns its shoal.
 */
abstract class ShoalExactlyOnceITCase {

  static final ObjectMapper JSON = new ObjectMapper();
  @RegisterExtension
  static final MiniClusterExtension FLINK = new MiniClusterExtension(
      new MiniClusterResourceConfiguration.Builder()
          .setNumberTaskManagers(1)
          .setNumberSlotsPerTaskManager(ShoalSinkITCase.PARALLELISM)
          .build());

  /** The daemon or the embedded directory, by the concrete class's {@link ShoalMode}. */
  @RegisterExtension
  static final ShoalTargetExtension SHOAL = new ShoalTargetExtension();

  static StreamExecutionEnvironment environment(int restartAttempts) {
    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, restartAttempts);
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(300));
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(ShoalSinkITCase.PARALLELISM);
    return env;
  }

  static ShoalSinkBuilder<String> sink(String table, DeliveryGuarantee guarantee) {
    return ShoalSink.<String>builder()
        .setEndpoint(SHOAL.endpoint())
        .setTable(table)
        .setDeliveryGuarantee(guarantee)
        .setMaxBatchSize(500)
        .setMaxTimeInBuffer(Duration.ofMillis(100))
        .setRetries(40, Duration.ofMillis(100), Duration.ofMillis(500));
  }

  static List<JsonNode> transactions(String table) throws Exception {
    List<JsonNode> all = new ArrayList<>();
    JSON.readTree(SHOAL.action("list_transactions", "{\"table\":\"" + table + "\"}")).forEach(all::add);
    return all;
  }

  static Map<String, Integer> states(List<JsonNode> transactions) {
    Map<String, Integer> states = new HashMap<>();
    transactions.forEach(t -> states.merge(t.get("state").asText(), 1, Integer::sum));
    return states;
  }

  static long records(List<JsonNode> transactions, String state) {
    return transactions.stream()
        .filter(t -> t.get("state").asText().equals(state))
        .mapToLong(t -> t.get("records").asLong())
        .sum();
  }

  static long visibleRecords(String table) throws Exception {
    return JSON.readTree(SHOAL.action("stats", "{\"table\":\"" + table + "\"}")).get("records").asLong();
  }

  @Test
  void exactlyOnceWritesEveryEventOnceAcrossAFailover() throws Exception {
    String table = "eo_failover";
    SHOAL.createTable(table, "reject");
    ShoalSinkITCase.FailOnce.reset();
    StreamExecutionEnvironment env = environment(3);
    env.enableCheckpointing(200);
    ShoalSinkITCase.events(env)
        .map(new ShoalSinkITCase.FailOnce(ShoalSinkITCase.FAIL_AFTER)).name("fail-once")
        .sinkTo(sink(table, DeliveryGuarantee.EXACTLY_ONCE).build()).name("shoal-sink");

    // Meanwhile a reader samples what is visible: never more than the committed transactions plus
    // those being committed (prepared), never less than what was committed before the sample.
    List<String> violations = java.util.Collections.synchronizedList(new ArrayList<>());
    AtomicLong samples = new AtomicLong();
    AtomicLong midCommit = new AtomicLong();
    java.util.concurrent.atomic.AtomicBoolean done = new java.util.concurrent.atomic.AtomicBoolean();
    Thread reader = new Thread(() -> {
      while (!done.get()) {
        try {
          List<JsonNode> before = transactions(table);
          long visible = visibleRecords(table);
          List<JsonNode> after = transactions(table);
          long committedBefore = records(before, "committed");
          long committedAfter = records(after, "committed");
          long committing = records(after, "prepared");
          if (visible < committedBefore || visible > committedAfter + committing) {
            violations.add("visible " + visible + ", committed before " + committedBefore + ", after " + committedAfter
                + ", prepared " + committing);
          }
          if (visible > committedAfter) {
            midCommit.incrementAndGet();
          }
          samples.incrementAndGet();
          Thread.sleep(20);
        } catch (Exception e) {
          violations.add(e.toString());
          return;
        }
      }
    }, "visibility-sampler");
    reader.start();
    try {
      env.execute("github events -> shoal exactly-once, failing once");
    } finally {
      done.set(true);
      reader.join();
    }
    System.out.printf("visibility: %d samples, %d during a commit (part of a transaction visible), violations %s%n",
        samples.get(), midCommit.get(), violations);
    assertEquals(List.of(), violations, "queries never see staged (open or aborted) records");
    assertTrue(samples.get() > 10, "the reader sampled during the job: " + samples.get());

    assertTrue(ShoalSinkITCase.FailOnce.FAILED.get(), "the planned failure happened");
    List<String> expected = ShoalDaemon.eventIds();
    List<String> written = SHOAL.column(table, "id");
    List<JsonNode> transactions = transactions(table);
    System.out.printf("exactly-once failover: map saw %d records (input %d), %d written; transactions %s%n",
        ShoalSinkITCase.FailOnce.SEEN.get(), expected.size(), written.size(), states(transactions));
    assertEquals(counts(expected), counts(written), "every event id exactly once");
    ShoalSinkITCase.FailOnce.assertResumedFromACheckpoint(expected.size());
    // Every transaction ended: committed, or aborted (what the failed attempt had staged since its
    // last checkpoint - nothing, when the failure came before the interval's first batch was sent).
    Map<String, Integer> states = states(transactions);
    assertTrue(Set.of("committed", "aborted").containsAll(states.keySet()), states.toString());
    long committed = transactions.stream()
        .filter(t -> t.get("state").asText().equals("committed"))
        .mapToLong(t -> t.get("records").asLong())
        .sum();
    assertEquals(expected.size(), committed, "the committed transactions hold every event once");
    // One transaction per checkpoint interval (and subtask), not one for the job: at least the
    // intervals before and after the failover. (How many more depends on the job's speed: the
    // embedded engine finishes in about three checkpoint intervals.)
    assertTrue(states.get("committed") >= 2, "one transaction per checkpoint interval and subtask: " + states);
  }

  /**
   * An upsert changelog (upserts and deletes of 37 keys, keys that come back after a delete) through
   * the exactly-once sink of a keyed table, with a planned failover: the table ends in exactly the
   * changelog's final state (the failed attempt's staged operations are aborted, the replay from
   * the checkpoint applies each operation once, in order per key).
   */
  @Test
  void anUpsertChangelogEndsInItsFinalStateAcrossAFailover() throws Exception {
    String table = "eo_upserts";
    int count = (int) (ShoalSinkITCase.FAIL_AFTER * 2);
    SHOAL.action("create_table", "{\"name\": \"" + table + "\", \"primary_key\": \"k\"}");
    ShoalSinkITCase.FailOnce.reset();
    StreamExecutionEnvironment env = environment(3);
    env.enableCheckpointing(200);
    env.fromSource(new DataGeneratorSource<>(new Changelog(), count, Types.STRING), WatermarkStrategy.noWatermarks(), "changelog")
        .setParallelism(1)
        .map(new ShoalSinkITCase.FailOnce(ShoalSinkITCase.FAIL_AFTER)).setParallelism(1).name("fail-once")
        .keyBy(Changelog::key)
        .sinkTo(sink(table, DeliveryGuarantee.EXACTLY_ONCE).setOperationExtractor(Changelog::operation).build())
        .name("shoal-upsert-sink");
    env.execute("changelog -> keyed shoal table, exactly-once, failing once");

    assertTrue(ShoalSinkITCase.FailOnce.FAILED.get(), "the planned failure happened");
    Map<String, String> expected = new java.util.TreeMap<>();
    for (long i = 0; i < count; i++) {
      String record = Changelog.record(i);
      if (Changelog.operation(record) == ShoalOperation.DELETE) {
        expected.remove(Changelog.key(record));
      } else {
        expected.put(Changelog.key(record), Long.toString(i));
      }
    }
    List<String> keys = SHOAL.column(table, "k");
    List<String> values = SHOAL.column(table, "v");
    Map<String, String> actual = new java.util.TreeMap<>();
    for (int i = 0; i < keys.size(); i++) {
      assertEquals(null, actual.put(keys.get(i), values.get(i)), "one row per key");
    }
    assertEquals(expected, actual, "the table ends in the changelog's final state");
    Map<String, Integer> states = states(transactions(table));
    assertTrue(Set.of("committed", "aborted").containsAll(states.keySet()), states.toString());
  }

  /** Record i of a changelog over 37 keys: every fifth (i % 5 == 3) deletes its key, the others upsert it. */
  static final class Changelog implements GeneratorFunction<Long, String> {
    static String record(long i) {
      return "{\"k\":\"k" + (i % 37) + "\",\"v\":" + i + ",\"op\":\"" + (i % 5 == 3 ? "delete" : "upsert") + "\"}";
    }

    static String key(String record) {
      int start = record.indexOf("\"k\":\"") + 5;
      return record.substring(start, record.indexOf('"', start));
    }

    static ShoalOperation operation(String record) {
      return record.contains("\"op\":\"delete\"") ? ShoalOperation.DELETE : ShoalOperation.UPSERT;
    }

    @Override
    public String map(Long index) {
      return record(index);
    }
  }

  /**
   * Generates {@code count} records {"id": "v<i>"}, then blocks until the job is cancelled (which
   * interrupts it). A Source V2 generator, so that the test runs unchanged on Flink 1.20 and 2.x
   * (2.0 moved the old SourceFunction to a legacy package).
   */
  static final class EmitThenWait implements GeneratorFunction<Long, String> {
    private final int count;

    EmitThenWait(int count) {
      this.count = count;
    }

    @Override
    public String map(Long index) throws InterruptedException {
      if (index < count) {
        return "{\"id\":\"v" + index + "\"}";
      }
      Thread.sleep(Long.MAX_VALUE);
      throw new IllegalStateException("woke up without being cancelled");
    }
  }

  @Test
  void stagedRecordsStayInvisibleAndAnAbortedAttemptLeavesNothingBehind() throws Exception {
    String table = "eo_invisible";
    SHOAL.createTable(table, "reject");
    // Attempt 1: 500 records staged, no checkpoint ever completes, then cancelled. Checkpointing is
    // off rather than set to a long interval: Flink 2.x triggers a checkpoint at once whenever its
    // checkpoint scheduler restarts (as it does while the job's tasks are being deployed), whatever
    // the interval, and that checkpoint could commit the first records.
    StreamExecutionEnvironment first = environment(0);
    first.fromSource(new DataGeneratorSource<>(new EmitThenWait(500), Long.MAX_VALUE, Types.STRING),
            WatermarkStrategy.noWatermarks(), "emit then wait").setParallelism(1)
        .sinkTo(sink(table, DeliveryGuarantee.EXACTLY_ONCE).setTransactionalIdPrefix("invisible").build());
    JobClient job = first.executeAsync("staged, never committed");
    long staged = 0;
    for (long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60); staged < 500; ) {
      assertTrue(System.nanoTime() < deadline, "the records were staged in time: " + transactions(table));
      staged = transactions(table).stream().mapToLong(t -> t.get("records").asLong()).sum();
      Thread.sleep(50);
    }
    List<JsonNode> staging = transactions(table);
    assertEquals(Map.of("open", 2), states(staging), () -> "one open transaction per subtask: " + staging);
    assertEquals(0, visibleRecords(table), "staged records are invisible to queries");
    job.cancel().get(60, TimeUnit.SECONDS);
    assertEquals(0, visibleRecords(table), "nothing of the cancelled attempt is visible");

    // Attempt 2 (a fresh start with the same prefix, parallelism 1): aborts what attempt 1 left
    // open (subtasks 0 and 1 of the old parallelism) and writes its own records.
    StreamExecutionEnvironment second = environment(0);
    second.setParallelism(1);
    second.enableCheckpointing(200);
    second.fromData("{\"id\":\"w1\"}", "{\"id\":\"w2\"}", "{\"id\":\"w3\"}")
        .sinkTo(sink(table, DeliveryGuarantee.EXACTLY_ONCE).setTransactionalIdPrefix("invisible").build());
    second.execute("second attempt");

    assertEquals(counts(List.of("w1", "w2", "w3")), counts(SHOAL.column(table, "id")),
        "only the second attempt's records are visible");
    List<JsonNode> after = transactions(table);
    Map<String, Integer> states = states(after);
    assertEquals(2, states.get("aborted"), "the first attempt's transactions were aborted: " + states);
    // The second attempt commits at its final checkpoint, and at any 200 ms checkpoint that lands
    // while it runs (on a loaded machine): one or more transactions, holding its 3 records.
    assertEquals(3, records(after, "committed"), "the committed transactions hold the second attempt's records: " + after);
  }

  @Test
  void committingAnAbortedTransactionFailsLoudly() throws Exception {
    String table = "eo_aborted";
    SHOAL.createTable(table, "reject");
    SHOAL.action("begin_transaction", "{\"table\":\"" + table + "\",\"transaction\":\"gone-0-1-1\"}");
    SHOAL.action("abort_transaction", "{\"table\":\"" + table + "\",\"transaction\":\"gone-0-1-1\"}");
    SHOAL.action("begin_transaction", "{\"table\":\"" + table + "\",\"transaction\":\"kept-0-1-1\"}");
    ShoalCommittable aborted = new ShoalCommittable(SHOAL.endpoint(), table, "gone-0-1-1", 7);
    ShoalCommittable kept = new ShoalCommittable(SHOAL.endpoint(), table, "kept-0-1-1", 0);
    try (ShoalCommitter committer =
        new ShoalCommitter(null, Duration.ofSeconds(10), new RetryPolicy(2, Duration.ofMillis(10), Duration.ofMillis(10)))) {
      committer.commit(List.of(request(kept)));
      committer.commit(List.of(request(kept))); // idempotent
      ShoalSinkException e = org.junit.jupiter.api.Assertions.assertThrows(
          ShoalSinkException.class, () -> committer.commit(List.of(request(aborted))));
      assertTrue(e.getMessage().contains("gone-0-1-1") && e.getMessage().contains("was aborted")
          && e.getMessage().contains("7 records are NOT in the table"), e.getMessage());
    }
    assertEquals(Map.of("aborted", 1, "committed", 1), states(transactions(table)));
  }

  static org.apache.flink.api.connector.sink2.Committer.CommitRequest<ShoalCommittable> request(ShoalCommittable c) {
    return new org.apache.flink.api.connector.sink2.Committer.CommitRequest<>() {
      @Override public ShoalCommittable getCommittable() { return c; }
      @Override public int getNumberOfRetries() { return 0; }
      @Override public void signalFailedWithKnownReason(Throwable t) { throw new AssertionError(t); }
      @Override public void signalFailedWithUnknownReason(Throwable t) { throw new AssertionError(t); }
      @Override public void retryLater() { throw new AssertionError("retryLater"); }
      @Override public void updateAndRetryLater(ShoalCommittable committable) { throw new AssertionError("update"); }
      @Override public void signalAlreadyCommitted() {}
    };
  }
}
