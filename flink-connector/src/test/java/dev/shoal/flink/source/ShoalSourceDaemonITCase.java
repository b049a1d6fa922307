package dev.shoal.flink.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalMode;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalTableClient;
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import org.apache.flink.connector.base.source.reader.RecordsWithSplitIds;
import org.apache.flink.connector.base.source.reader.splitreader.SplitsAddition;
import org.apache.flink.metrics.SimpleCounter;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;

/**
 * {@link ShoalSourceITCase} against the real daemon, plus retention that truncates the log below a
 * reader's position: by default the read fails naming the lost range (the daemon's OUT_OF_RANGE); with {@code
 * scan.fail-on-data-loss = false} it resumes at the begin address and counts the skipped bytes.
 */
@ShoalMode(TargetMode.DAEMON)
class ShoalSourceDaemonITCase extends ShoalSourceITCase {

  private static ShoalSourceSettings settings(String table, boolean failOnDataLoss) {
    return new ShoalSourceSettings(SHOAL.endpoint(), table, ShoalClientOptions.of(null, Duration.ofSeconds(30)), null,
        ShoalSourceSettings.Startup.EARLIEST, 0, false, Duration.ofMillis(10), 64 << 20, failOnDataLoss, false);
  }

  /** Reads a split from {@code from} until it has caught up with the tail; the number of records. */
  private static long readToTail(ShoalSplitReader reader, long from) throws Exception {
    reader.handleSplitsChanges(new SplitsAddition<>(List.of(new ShoalSplit("r", from, ShoalSplit.UNBOUNDED))));
    long records = 0;
    long tail = JsonUtil.stat("src_retention", "complete_until");
    long next = from;
    while (next < tail) {
      RecordsWithSplitIds<ShoalSourceRecord> batch = reader.fetch();
      while (batch.nextSplit() != null) {
        for (ShoalSourceRecord r; (r = batch.nextRecordFromSplit()) != null; ) {
          records += r.json() == null ? 0 : 1;
          next = Math.max(next, r.next());
        }
      }
    }
    return records;
  }

  @Test
  void aReaderBehindRetentionFailsNamingTheLostRangeOrResumesAtTheBeginAddress() throws Exception {
    SHOAL.createTable("src_retention", "reject");
    sinkEvents("src_retention");
    long tail = JsonUtil.stat("src_retention", "complete_until");
    SHOAL.action("make_durable", "{\"table\": \"src_retention\", \"address\": " + tail + "}");
    JsonNode truncated = ShoalTableClient.JSON.readTree(
        SHOAL.action("truncate", "{\"table\": \"src_retention\", \"keep_bytes\": " + (4 << 20) + "}"));
    long begin = truncated.path("begin_address").asLong();
    assertTrue(begin > 64, () -> "retention dropped the head of the log: " + truncated);

    try (ShoalSplitReader reader = new ShoalSplitReader(settings("src_retention", true), new SimpleCounter())) {
      reader.handleSplitsChanges(new SplitsAddition<>(List.of(new ShoalSplit("r", 64, ShoalSplit.UNBOUNDED))));
      IOException e = assertThrows(IOException.class, reader::fetch);
      // The daemon's OUT_OF_RANGE (Arrow Java has no such code: the message is what names it).
      assertTrue(e.getMessage().contains("the records in [64, " + begin + ") were dropped"), ExceptionUtils.stringifyException(e));
    }
    long all;
    try (ShoalSplitReader reader = new ShoalSplitReader(settings("src_retention", true), new SimpleCounter())) {
      all = readToTail(reader, begin);
    }
    SimpleCounter skipped = new SimpleCounter();
    try (ShoalSplitReader reader = new ShoalSplitReader(settings("src_retention", false), skipped)) {
      assertEquals(all, readToTail(reader, 64), "resumed at the begin address: every record that is left, once");
    }
    assertEquals(begin - 64, skipped.getCount(), "the skipped bytes are counted");
    assertTrue(all > 0 && all < ids(null).size(), "some records are gone, some are left: " + all);
  }

  static final java.util.Set<String> RIDDEN = java.util.concurrent.ConcurrentHashMap.newKeySet();
  static final java.util.concurrent.atomic.AtomicLong EMITTED = new java.util.concurrent.atomic.AtomicLong();

  /**
   * A follower of durable records only rides out a daemon crash (SIGKILL, restart on the same
   * port): its requests meet UNAVAILABLE and are retried with back-off, the job never fails over,
   * and every record acknowledged (group commit: acknowledged = durable) arrives exactly once.
   */
  @Test
  void aDurableOnlyFollowerRidesOutADaemonCrashWithoutAFailover() throws Exception {
    SHOAL.action("create_table", "{\"name\": \"src_restart\", \"durability\": \"group_commit\"}");
    RIDDEN.clear();
    EMITTED.set(0);
    org.apache.flink.configuration.Configuration conf = new org.apache.flink.configuration.Configuration();
    conf.set(org.apache.flink.configuration.RestartStrategyOptions.RESTART_STRATEGY, "none");
    org.apache.flink.streaming.api.environment.StreamExecutionEnvironment env =
        org.apache.flink.streaming.api.environment.StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(1);
    env.fromSource(source("src_restart").setDurableOnly(true).build(),
            org.apache.flink.api.common.eventtime.WatermarkStrategy.noWatermarks(), "durable follower")
        .map(json -> {
          EMITTED.incrementAndGet();
          RIDDEN.add(id(json));
          return json;
        })
        .sinkTo(new org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink<>());
    org.apache.flink.core.execution.JobClient job = env.executeAsync("durable follower");
    List<String> lines = java.nio.file.Files.readAllLines(ShoalDaemon.events());
    try {
      put("src_restart", lines.subList(0, 5000));
      await(5000, job);
      SHOAL.daemon().restart();
      put("src_restart", lines.subList(5000, lines.size()));
      await(lines.size(), job);
    } finally {
      job.cancel().get(30, java.util.concurrent.TimeUnit.SECONDS);
    }
    assertEquals(lines.size(), EMITTED.get(), "every record once");
    assertEquals(new java.util.HashSet<>(ids(null)), RIDDEN);
  }

  private static void put(String table, List<String> lines) throws Exception {
    try (ShoalTableClient client = ShoalTableClient.open(SHOAL.endpoint(), table, ShoalClientOptions.of(null, Duration.ofSeconds(30)))) {
      for (int i = 0; i < lines.size(); i += 500) {
        List<byte[]> batch = new java.util.ArrayList<>();
        long bytes = 0;
        for (String line : lines.subList(i, Math.min(lines.size(), i + 500))) {
          byte[] b = line.getBytes(java.nio.charset.StandardCharsets.UTF_8);
          batch.add(b);
          bytes += b.length;
        }
        client.put(batch, bytes);
      }
    }
  }

  private static void await(int records, org.apache.flink.core.execution.JobClient job) throws Exception {
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(90);
    while (RIDDEN.size() < records) {
      assertTrue(System.nanoTime() < deadline, () -> RIDDEN.size() + " of " + records + " records within 90 s");
      assertTrue(!job.getJobStatus().get().isTerminalState(), "the follower runs (no failover)");
      Thread.sleep(50);
    }
  }

  /** The daemon's stats, for the tests above. */
  private static final class JsonUtil {
    static long stat(String table, String key) throws Exception {
      return ShoalTableClient.JSON.readTree(SHOAL.action("stats", "{\"table\": \"" + table + "\"}")).path(key).asLong();
    }
  }
}
