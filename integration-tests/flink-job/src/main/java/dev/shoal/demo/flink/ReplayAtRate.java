package dev.shoal.demo.flink;

import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.configuration.Configuration;

/**
 * Passes records through at no more than {@code eventsPerSecond} (per subtask; the job runs it
 * with parallelism 1), so that a file replays like a stream and the PSFs can be registered while
 * it runs. {@code eventsPerSecond <= 0} means no limit. The clock starts at the first record, not at
 * {@code open}: a slow job start (split assignment, sink deployment) would otherwise be made up by
 * a burst at full speed, and the stream could end before the PSFs are registered.
 */
final class ReplayAtRate extends RichMapFunction<String, String> {
  private final double eventsPerSecond;
  private transient long startNanos;
  private transient long emitted;

  ReplayAtRate(double eventsPerSecond) {
    this.eventsPerSecond = eventsPerSecond;
  }

  @Override
  public void open(Configuration parameters) {
    emitted = 0;
  }

  @Override
  public String map(String record) throws InterruptedException {
    if (emitted == 0) {
      startNanos = System.nanoTime();
    }
    if (eventsPerSecond > 0) {
      long due = startNanos + (long) (emitted / eventsPerSecond * 1e9);
      long wait = due - System.nanoTime();
      if (wait > 0) {
        Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
      }
    }
    emitted++;
    return record;
  }
}
