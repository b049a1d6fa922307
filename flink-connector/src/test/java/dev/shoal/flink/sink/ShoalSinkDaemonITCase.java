package dev.shoal.flink.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalMode;
import dev.shoal.flink.TcpForwarder;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.metrics.Metric;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;

/**
 * {@link ShoalSinkITCase} against the real daemon, plus what only a network has: a daemon that is
 * unreachable for a while (connection refused) is ridden out with retries.
 */
@ShoalMode(TargetMode.DAEMON)
class ShoalSinkDaemonITCase extends ShoalSinkITCase {

  @Test
  void connectionRefusedIsRetriedUntilTheDaemonIsReachable() throws Exception {
    SHOAL.createTable("late", "reject");
    int port = ShoalDaemon.freePort(); // nothing listens here until the forwarder opens
    StreamExecutionEnvironment env = environment("none");
    env.setParallelism(1);
    List<String> ids = new ArrayList<>();
    List<String> records = new ArrayList<>();
    for (int i = 0; i < 100; i++) {
      ids.add("r" + i);
      records.add("{\"id\":\"r" + i + "\"}");
    }
    env.fromData(records).sinkTo(ShoalSink.<String>builder()
        .setEndpoint("127.0.0.1:" + port)
        .setTable("late")
        .setRetries(30, Duration.ofMillis(100), Duration.ofMillis(400))
        .build()).name("late-sink");
    try (TcpForwarder forwarder = new TcpForwarder(port, Integer.parseInt(SHOAL.endpoint().replaceAll(".*:", "")))) {
      JobClient job = env.executeAsync("daemon reachable late");
      // Meanwhile the sink meets "connection refused" (UNAVAILABLE) and retries: open the way once
      // three retries are counted (a fixed wait missed them when the job was slow to start).
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (sum(writerMetrics(job), ".shoalRetries") < 3) {
        assertTrue(System.nanoTime() < deadline, () -> "three retries within 60 s: " + writerMetrics(job));
        assertTrue(!job.getJobStatus().get().isTerminalState(), "the job waits for the daemon");
        Thread.sleep(50);
      }
      forwarder.open();
      job.getJobExecutionResult().get(60, TimeUnit.SECONDS);
    }
    assertEquals(counts(ids), counts(SHOAL.column("late", "id")));
  }

  private static Map<String, Metric> writerMetrics(JobClient job) {
    return new HashMap<>(METRICS.findMetrics(job.getJobID(), "late-sink"));
  }
}
