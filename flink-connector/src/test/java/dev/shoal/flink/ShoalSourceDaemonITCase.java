package dev.shoal.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
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
@ShoalMode(ShoalTarget.Mode.DAEMON)
class ShoalSourceDaemonITCase extends ShoalSourceITCase {

  private static ShoalSourceSettings settings(String table, boolean failOnDataLoss) {
    return new ShoalSourceSettings(SHOAL.endpoint(), table, ShoalClientOptions.of(null, Duration.ofSeconds(30)), null,
        ShoalSourceSettings.Startup.EARLIEST, 0, false, Duration.ofMillis(10), 64 << 20, failOnDataLoss);
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
    JsonNode truncated = ShoalClient.JSON.readTree(
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

  /** The daemon's stats, for the tests above. */
  private static final class JsonUtil {
    static long stat(String table, String key) throws Exception {
      return ShoalClient.JSON.readTree(SHOAL.action("stats", "{\"table\": \"" + table + "\"}")).path(key).asLong();
    }
  }
}
