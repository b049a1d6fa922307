package dev.shoal.flink.source;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.ShardRouting;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalTableClient;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Cuts the table's log into {@link ShoalSplit}s once, when the job first starts, and hands them to
 * readers as they ask. The backlog {@code [start, complete_until)} (complete_until from the table's
 * {@code stats} at that moment) becomes splits of {@code splitBytes} of log each, read in parallel;
 * an unbounded source adds one split {@code [complete_until, tail…)} that follows the table,
 * handed out after the backlog so that whoever finishes the backlog last takes it. A restored
 * enumerator does not cut again: its pending splits are in its state, the others in the readers'.
 *
 * <p>A table sharded over several daemons (the {@code cluster} action names it) is cut shard by
 * shard: each shard's log, at the node holding it, into backlog splits and one split following its
 * tail. Readers take every split of the backlog as they ask; the tails, which never finish, are
 * then spread over all the readers once every reader is registered (a reader reads its splits in
 * turn), so that every shard is followed whatever the parallelism.
 */
final class ShoalSplitEnumerator implements SplitEnumerator<ShoalSplit, ShoalEnumeratorState> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalSplitEnumerator.class);

  private final SplitEnumeratorContext<ShoalSplit> context;
  private final ShoalSourceSettings settings;
  private final Deque<ShoalSplit> pending;
  private final Set<Integer> waiting = new LinkedHashSet<>();
  private boolean discovered;

  ShoalSplitEnumerator(SplitEnumeratorContext<ShoalSplit> context, ShoalSourceSettings settings, ShoalEnumeratorState state) {
    this.context = context;
    this.settings = settings;
    this.pending = new ArrayDeque<>(state.pending());
    this.discovered = state.discovered();
  }

  @Override
  public void start() {
    if (!discovered) {
      context.callAsync(this::discover, (splits, error) -> {
        if (error != null) {
          throw new IllegalStateException("shoal source: cannot cut table \"" + settings.table() + "\" at "
              + settings.endpoint() + " into splits: " + error.getMessage(), error);
        }
        pending.addAll(splits);
        discovered = true;
        assignWaiting();
      });
    }
  }

  /** The initial splits, from the table's {@code stats} (each shard's, of a sharded table). */
  private List<ShoalSplit> discover() throws Exception {
    try (ShoalTableClient client = ShoalTableClient.open(settings.endpoint(), settings.table(), settings.client())) {
      List<ShardRouting.Shard> shards = shardsOf(client);
      if (shards == null) {
        return cut(client.stats(), null);
      }
      if (settings.startup() == ShoalSourceSettings.Startup.ADDRESS) {
        throw new IllegalArgumentException("startup mode address on table \"" + settings.table() + "\", sharded over "
            + shards.size() + " shards: log addresses are per shard (read a shard's own table, "
            + shards.get(0).table() + ", from an address)");
      }
      List<ShoalSplit> splits = new ArrayList<>();
      for (ShardRouting.Shard shard : shards) {
        try (ShoalTableClient node = ShoalTableClient.open(shard.location(), shard.table(), settings.client())) {
          splits.addAll(cut(node.stats(shard.table()), shard));
        }
      }
      // The backlogs first, every shard's; then the tails.
      splits.sort(java.util.Comparator.comparing(ShoalSplit::unbounded));
      return splits;
    }
  }

  /**
   * The shards of the source's table (with a shard key or spread by batch), or null when it is not
   * sharded (or the daemon knows no clusters).
   */
  private List<ShardRouting.Shard> shardsOf(ShoalTableClient client) {
    try {
      return ShardRouting.shardsOf(client.action("cluster", ShoalTableClient.JSON.createObjectNode()), settings.table());
    } catch (RuntimeException e) {
      String code = ShoalErrors.code(e);
      if (ShoalErrors.INVALID_ARGUMENT.equals(code) || "UNIMPLEMENTED".equals(code)) {
        return null; // an embedded engine, or a daemon older than clusters
      }
      throw e;
    }
  }

  /** The splits of one log with these {@code stats}: the source's table, or {@code shard}'s. */
  private List<ShoalSplit> cut(JsonNode stats, ShardRouting.Shard shard) {
    long begin = stats.path("begin_address").asLong(0);
    long complete = stats.path("complete_until").asLong(-1);
    if (complete < 0) {
      throw new IllegalStateException("the daemon's stats have no complete_until (a daemon older than this connector?): " + stats);
    }
    long start = switch (settings.startup()) {
      case EARLIEST -> begin;
      case LATEST -> complete;
      case ADDRESS -> settings.startAddress();
    };
    String prefix = shard == null ? "" : "shard-" + shard.number() + "-";
    String table = shard == null ? null : shard.table();
    String location = shard == null ? null : shard.location();
    List<ShoalSplit> splits = new ArrayList<>();
    for (long from = start; from < complete; ) {
      long to = complete - from <= settings.splitBytes() ? complete : from + settings.splitBytes();
      splits.add(new ShoalSplit(prefix + "backlog-" + from, from, to, table, location));
      from = to;
    }
    if (!settings.bounded()) {
      long from = Math.max(start, complete);
      splits.add(new ShoalSplit(prefix + "tail-" + from, from, ShoalSplit.UNBOUNDED, table, location));
    }
    LOG.info("shoal source on table \"{}\"{}: log [{}, {}) in {} split(s){}", settings.table(),
        shard == null ? "" : " (shard " + shard.number() + ", " + table + " at " + location + ")", start, complete,
        splits.size(), settings.bounded() ? "" : ", the last one following the tail");
    return splits;
  }

  @Override
  public void handleSplitRequest(int subtask, String requesterHostname) {
    waiting.add(subtask);
    assignWaiting();
  }

  private void assignWaiting() {
    if (!discovered) {
      return;
    }
    spreadTails();
    for (var it = waiting.iterator(); it.hasNext(); ) {
      int subtask = it.next();
      if (!context.registeredReaders().containsKey(subtask)) {
        it.remove(); // failed meanwhile: it asks again when it is back
        continue;
      }
      ShoalSplit split = pending.poll();
      if (split != null) {
        context.assignSplit(split, subtask);
        it.remove();
      } else if (settings.bounded()) {
        context.signalNoMoreSplits(subtask);
        it.remove();
      } else {
        return; // unbounded: a reader without a split waits for one given back by a failed reader
      }
    }
  }

  /**
   * Once only tails are pending and there are more of them than readers waiting for a split (a
   * sharded table: one tail per shard), each waiting reader gets one and the rest go round robin
   * to every registered reader: a tail never finishes, so a reader holding one never asks again.
   */
  private void spreadTails() {
    if (pending.size() < 2 || !pending.stream().allMatch(ShoalSplit::unbounded)) {
      return; // (one tail goes to the next reader that asks, the one that finished the backlog last)
    }
    if (context.registeredReaders().size() < context.currentParallelism()) {
      return; // until every reader is there (at start, or back after a failover): addReader
    }
    List<Integer> readers = new ArrayList<>(waiting);
    readers.removeIf(subtask -> !context.registeredReaders().containsKey(subtask));
    if (pending.size() <= readers.size()) {
      return; // one each, by the loop below
    }
    context.registeredReaders().keySet().stream().sorted().filter(r -> !readers.contains(r)).forEach(readers::add);
    if (readers.isEmpty()) {
      return;
    }
    for (int i = 0; !pending.isEmpty(); i++) {
      int subtask = readers.get(i % readers.size());
      context.assignSplit(pending.poll(), subtask);
      waiting.remove(subtask);
    }
  }

  @Override
  public void addSplitsBack(List<ShoalSplit> splits, int subtask) {
    // Splits of a reader that failed after the last checkpoint, as of that checkpoint.
    splits.forEach(pending::addFirst);
    assignWaiting();
  }

  @Override
  public void addReader(int subtask) {
    // Readers ask for splits themselves (ShoalSourceReader.start); tails held until every
    // reader is registered are spread now.
    assignWaiting();
  }

  @Override
  public ShoalEnumeratorState snapshotState(long checkpointId) {
    return new ShoalEnumeratorState(discovered, new ArrayList<>(pending));
  }

  @Override
  public void close() {}
}
