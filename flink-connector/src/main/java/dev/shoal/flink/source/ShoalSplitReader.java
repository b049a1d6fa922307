package dev.shoal.flink.source;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalTableClient;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.ArrayList;
import org.apache.arrow.vector.UInt8Vector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.flink.connector.base.source.reader.RecordsBySplits;
import org.apache.flink.connector.base.source.reader.RecordsWithSplitIds;
import org.apache.flink.connector.base.source.reader.splitreader.SplitReader;
import org.apache.flink.connector.base.source.reader.splitreader.SplitsAddition;
import org.apache.flink.connector.base.source.reader.splitreader.SplitsChange;
import org.apache.flink.metrics.Counter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads a reader's {@link ShoalSplit}s, one request at a time, round robin: each {@link #fetch}
 * asks for {@code [next, next + splitBytes)} of one split (a query with {@code "output": "json"},
 * {@code "with_address": true} and the source's filter) and returns its records followed by a
 * progress mark, the address up to which the split is now read: the answer's {@code
 * complete_until} (docs/protocol.md, "Following a table"), so a restored split resumes exactly
 * there and records in flight at the tail are never skipped. A split that follows the tail and
 * has nothing new waits {@code pollInterval} (woken early by {@link #wakeUp}).
 */
final class ShoalSplitReader implements SplitReader<ShoalSourceRecord, ShoalSplit> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalSplitReader.class);

  /** Attempts of one request when its errors are transient. */
  static final int MAX_ATTEMPTS = 10;

  private final ShoalSourceSettings settings;
  /** The client of the source's endpoint and, by location, of the nodes holding shards read. */
  private final ShoalTableClient client;
  private final java.util.Map<String, ShoalTableClient> shardClients = new java.util.HashMap<>();
  private final Counter skippedBytes;
  private final Deque<ShoalSplit> splits = new ArrayDeque<>();
  private final Object idle = new Object();
  private boolean woken;
  /** Tails polled in a row that were caught up with nothing new (several: one per shard followed). */
  private int idleTails;

  ShoalSplitReader(ShoalSourceSettings settings, Counter skippedBytes) {
    this.settings = settings;
    this.client = ShoalTableClient.open(settings.endpoint(), settings.table(), settings.client());
    this.skippedBytes = skippedBytes;
  }

  @Override
  public RecordsWithSplitIds<ShoalSourceRecord> fetch() throws java.io.IOException {
    RecordsBySplits.Builder<ShoalSourceRecord> out = new RecordsBySplits.Builder<>();
    ShoalSplit split = splits.poll();
    if (split == null) {
      return out.build();
    }
    long from = split.from();
    long to = split.to() - from <= settings.splitBytes() ? split.to() : from + settings.splitBytes();
    List<ShoalSourceRecord> records = new ArrayList<>();
    JsonNode plan;
    try {
      plan = queryWithRetries(split, from, to, records);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      splits.addFirst(split);
      throw new java.io.InterruptedIOException("shoal source: interrupted reading " + split);
    }
    // In address order: a checkpoint taken between two rows saves one past the last row emitted
    // (ShoalRecordEmitter), so every lower row of the answer must be out already. An index scan
    // answers newest first (down its chains), so without this a failover after such a checkpoint
    // would skip the answer's older rows.
    records.sort(java.util.Comparator.comparingLong(ShoalSourceRecord::address));
    for (ShoalSourceRecord record : records) {
      out.add(split.id(), record);
    }
    long complete = plan.path("complete_until").asLong(from);
    long next = Math.max(from, Math.min(to, complete));
    JsonNode truncated = plan.path("truncated");
    if (truncated.isObject()) {
      long gapFrom = truncated.path("from").asLong(from);
      long gapTo = truncated.path("to").asLong(from);
      skippedBytes.inc(Math.max(0, gapTo - gapFrom));
      LOG.warn("shoal source: {} of table \"{}\" was behind retention: log [{}, {}) is gone, resuming at {}",
          split, settings.table(), gapFrom, gapTo, gapTo);
      next = Math.max(next, Math.min(gapTo, split.to()));
    }
    out.add(split.id(), ShoalSourceRecord.progress(next));
    ShoalSplit rest = split.resumeAt(next);
    if (!rest.unbounded() && next >= rest.to()) {
      out.addFinishedSplit(split.id());
    } else {
      splits.addLast(rest);
    }
    // Caught up (the answer was not cut at `to`) with nothing new: wait before asking again —
    // once every tail this reader follows (one per shard of a sharded table) was polled so.
    boolean caughtUp = complete < to;
    idleTails = records.isEmpty() && caughtUp && rest.unbounded() ? idleTails + 1 : 0;
    if (idleTails >= splits.size() && splits.stream().allMatch(ShoalSplit::unbounded)) {
      idleTails = 0;
      waitForPoll();
    }
    return out.build();
  }

  /**
   * One request for {@code [from, to)} of {@code split}; its records go to {@code records} only
   * when the whole answer arrived. Transient errors (the daemon unreachable or restarting, the
   * connection lost mid-answer, a deadline, RESOURCE_EXHAUSTED) are retried {@link #MAX_ATTEMPTS} times in all, waiting from the
   * poll interval doubling up to 10 s; then, and on any other error, the read fails (and Flink's
   * restart strategy takes over, from the last checkpoint).
   */
  private JsonNode queryWithRetries(ShoalSplit split, long from, long to, List<ShoalSourceRecord> records)
      throws java.io.IOException, InterruptedException {
    long backoff = Math.max(1, settings.pollInterval().toMillis());
    for (int attempt = 1; ; attempt++) {
      records.clear();
      try {
        return clientOf(split).query(settings.command(split.table(settings.table()), from, to), root -> {
          VarCharVector json = (VarCharVector) root.getVector("json");
          UInt8Vector address = (UInt8Vector) root.getVector("_address");
          for (int i = 0; i < root.getRowCount(); i++) {
            records.add(ShoalSourceRecord.record(json.get(i), address.get(i)));
          }
        });
      } catch (RuntimeException e) {
        if (attempt >= MAX_ATTEMPTS || !ShoalErrors.isTransientRead(e)) {
          throw new java.io.IOException("shoal source: reading " + split + " of table \"" + settings.table() + "\" at "
              + split.endpoint(settings.endpoint()) + " failed" + (attempt > 1 ? " (attempt " + attempt + ")" : "") + ": " + e.getMessage(), e);
        }
        LOG.warn("shoal source: reading {} of table \"{}\" failed (attempt {} of {}), retrying in {} ms: {}",
            split, settings.table(), attempt, MAX_ATTEMPTS, backoff, e.getMessage());
        Thread.sleep(backoff);
        backoff = Math.min(backoff * 2, 10_000);
      }
    }
  }

  /** The client that reads {@code split}: the endpoint's, or one per node holding a shard. */
  private ShoalTableClient clientOf(ShoalSplit split) {
    if (split.location() == null) {
      return client;
    }
    return shardClients.computeIfAbsent(split.location(),
        location -> ShoalTableClient.open(location, split.shardTable(), settings.client()));
  }

  /** A caught-up follower's pause: {@code pollInterval}, or less when {@link #wakeUp} is called. */
  private void waitForPoll() throws java.io.InterruptedIOException {
    long deadline = System.nanoTime() + settings.pollInterval().toNanos();
    synchronized (idle) {
      while (!woken) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          break;
        }
        try {
          idle.wait(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new java.io.InterruptedIOException("shoal source: interrupted while polling");
        }
      }
      woken = false;
    }
  }

  @Override
  public void handleSplitsChanges(SplitsChange<ShoalSplit> change) {
    if (!(change instanceof SplitsAddition)) {
      throw new UnsupportedOperationException("shoal source: unsupported split change " + change.getClass().getName());
    }
    // Bounded splits first: the backlog is read before the tail is polled again.
    for (ShoalSplit split : change.splits()) {
      if (split.unbounded()) {
        splits.addLast(split);
      } else {
        splits.addFirst(split);
      }
    }
  }

  @Override
  public void wakeUp() {
    synchronized (idle) {
      woken = true;
      idle.notifyAll();
    }
  }

  @Override
  public void close() throws Exception {
    for (ShoalTableClient shard : shardClients.values()) {
      shard.close();
    }
    client.close();
  }
}
