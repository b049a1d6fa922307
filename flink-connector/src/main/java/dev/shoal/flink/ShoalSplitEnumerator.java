package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
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

  /** The initial splits, from the table's {@code stats}. */
  private List<ShoalSplit> discover() throws Exception {
    JsonNode stats;
    try (ShoalClient client = ShoalClient.open(settings.endpoint(), settings.table(), settings.client())) {
      stats = client.stats();
    }
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
    List<ShoalSplit> splits = new ArrayList<>();
    for (long from = start; from < complete; ) {
      long to = complete - from <= settings.splitBytes() ? complete : from + settings.splitBytes();
      splits.add(new ShoalSplit("backlog-" + from, from, to));
      from = to;
    }
    if (!settings.bounded()) {
      long from = Math.max(start, complete);
      splits.add(new ShoalSplit("tail-" + from, from, ShoalSplit.UNBOUNDED));
    }
    LOG.info("shoal source on table \"{}\": log [{}, {}) in {} split(s){}", settings.table(), start, complete,
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

  @Override
  public void addSplitsBack(List<ShoalSplit> splits, int subtask) {
    // Splits of a reader that failed after the last checkpoint, as of that checkpoint.
    splits.forEach(pending::addFirst);
    assignWaiting();
  }

  @Override
  public void addReader(int subtask) {
    // Readers ask for splits themselves (ShoalSourceReader.start).
  }

  @Override
  public ShoalEnumeratorState snapshotState(long checkpointId) {
    return new ShoalEnumeratorState(discovered, new ArrayList<>(pending));
  }

  @Override
  public void close() {}
}
