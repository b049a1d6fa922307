package dev.shoal.flink.source;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.source.reader.RecordEmitter;
import org.apache.flink.connector.base.source.reader.SingleThreadMultiplexSourceReaderBase;
import org.apache.flink.connector.base.source.reader.splitreader.SplitReader;

/**
 * A {@link ShoalSource} reader: one fetcher thread runs a {@link ShoalSplitReader} over every split
 * this reader holds; the task thread turns records into {@code T} ({@link ShoalRecordEmitter}) and
 * keeps each split's position for checkpoints.
 *
 * <p>A reader asks the enumerator for a split whenever it holds no bounded one: at start, after
 * finishing a split, and after receiving the split that follows the tail (so a reader that follows
 * the tail still takes backlog splits given back by a failed reader).
 */
final class ShoalSourceReader<T> extends SingleThreadMultiplexSourceReaderBase<ShoalSourceRecord, T, ShoalSplit, ShoalSourceReader.Position> {

  /** A split's mutable position: where reading resumes (the task thread's copy). */
  static final class Position {
    final ShoalSplit split;
    long next;

    Position(ShoalSplit split) {
      this.split = split;
      this.next = split.from();
    }
  }

  private final Set<String> bounded = new HashSet<>();
  private boolean started;

  ShoalSourceReader(
      Supplier<SplitReader<ShoalSourceRecord, ShoalSplit>> splitReader,
      RecordEmitter<ShoalSourceRecord, T, Position> emitter,
      SourceReaderContext context) {
    super(splitReader, emitter, new Configuration(), context);
  }

  @Override
  public void start() {
    started = true;
    askIfNoBoundedSplit();
  }

  @Override
  public void addSplits(List<ShoalSplit> splits) {
    for (ShoalSplit split : splits) {
      if (!split.unbounded()) {
        bounded.add(split.id());
      }
    }
    super.addSplits(splits);
    askIfNoBoundedSplit();
  }

  @Override
  protected void onSplitFinished(Map<String, Position> finished) {
    bounded.removeAll(finished.keySet());
    askIfNoBoundedSplit();
  }

  private void askIfNoBoundedSplit() {
    if (started && bounded.isEmpty()) {
      context.sendSplitRequest();
    }
  }

  @Override
  protected Position initializedState(ShoalSplit split) {
    return new Position(split);
  }

  @Override
  protected ShoalSplit toSplitType(String splitId, Position position) {
    return position.split.resumeAt(position.next);
  }
}
