package dev.shoal.flink.sink;

import static dev.shoal.flink.sink.ShoalSinkITCase.counts;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalMode;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * {@link ShoalExactlyOnceITCase} against the real daemon process, plus daemon crashes: the daemon
 * is killed (SIGKILL) part-way through a job and started again on the same port and data directory.
 */
@ShoalMode(TargetMode.DAEMON)
class ShoalExactlyOnceDaemonITCase extends ShoalExactlyOnceITCase {

  /**
   * Passes records through, slowly (1 ms every {@code pace} records), opens {@link #HALFWAY} after
   * {@code signalAfter} records, and counts its subtasks' starts ({@link #OPENED}: a restart of the
   * job starts them again).
   */
  static final class Slow extends RichMapFunction<String, String> {
    static volatile CountDownLatch HALFWAY = new CountDownLatch(1);
    static final AtomicLong SEEN = new AtomicLong();
    static final AtomicInteger OPENED = new AtomicInteger();
    private final long signalAfter;
    private final int pace;

    Slow(long signalAfter) {
      this(signalAfter, 10);
    }

    Slow(long signalAfter, int pace) {
      this.signalAfter = signalAfter;
      this.pace = pace;
    }

    @Override
    public void open(OpenContext context) {
      OPENED.incrementAndGet();
    }

    @Override
    public String map(String value) throws Exception {
      long seen = SEEN.incrementAndGet();
      if (seen % pace == 0) {
        Thread.sleep(1);
      }
      if (seen == signalAfter) {
        HALFWAY.countDown();
      }
      return value;
    }
  }

  @ParameterizedTest
  @EnumSource(value = DeliveryGuarantee.class, names = {"EXACTLY_ONCE", "AT_LEAST_ONCE"})
  void daemonKilledAndRestartedDuringTheJob(DeliveryGuarantee guarantee) throws Exception {
    String table = "restart_" + guarantee.name().toLowerCase();
    SHOAL.createTable(table, "reject");
    Slow.HALFWAY = new CountDownLatch(1);
    Slow.SEEN.set(0);
    StreamExecutionEnvironment env = environment(10);
    env.enableCheckpointing(200);
    ShoalSinkITCase.events(env)
        .map(new Slow(4000)).name("slow")
        .sinkTo(sink(table, guarantee).build()).name("shoal-sink");
    CompletableFuture<JobExecutionResult> job = CompletableFuture.supplyAsync(() -> {
      try {
        return env.execute("github events -> shoal (" + guarantee + "), daemon restarted");
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
    assertTrue(Slow.HALFWAY.await(120, TimeUnit.SECONDS), "the job got part-way");
    SHOAL.daemon().kill();
    Thread.sleep(1000); // the sink meets connection refused meanwhile
    SHOAL.daemon().restart();
    job.get(180, TimeUnit.SECONDS);

    List<String> expected = ShoalDaemon.eventIds();
    List<String> written = SHOAL.column(table, "id");
    Set<String> missing = new HashSet<>(expected);
    missing.removeAll(new HashSet<>(written));
    System.out.printf("%s across a daemon restart: map saw %d records (input %d: %s), %d written (%d duplicates)%s%n",
        guarantee, Slow.SEEN.get(), expected.size(), Slow.SEEN.get() > expected.size() ? "failed over" : "no failover",
        written.size(), written.size() - expected.size(),
        guarantee == DeliveryGuarantee.EXACTLY_ONCE ? ", transactions " + states(transactions(table)) : "");
    assertEquals(Set.of(), missing, "no event id is missing");
    if (guarantee == DeliveryGuarantee.EXACTLY_ONCE) {
      assertEquals(counts(expected), counts(written), "every event id exactly once");
    }
  }
}
