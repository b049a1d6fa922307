package dev.shoal.flink.sink;

import static dev.shoal.flink.sink.ShoalSinkITCase.counts;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalMode;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;

/**
 * {@link ShoalExactlyOnceITCase} against a table sharded over three daemons ({@link ShoalCluster}),
 * the sink writing through node 0 — its transactions span the shards a checkpoint touched — plus a
 * node killed (SIGKILL) part-way through an exactly-once job and started again on its port and
 * data directory: every event ends up in the table exactly once.
 */
@ShoalMode(TargetMode.CLUSTER)
class ShoalExactlyOnceClusterITCase extends ShoalExactlyOnceITCase {

  @Test
  void aNodeKilledAndRestartedDuringAnExactlyOnceJob() throws Exception {
    String table = "cluster_restart";
    SHOAL.createTable(table, "reject");
    CompletableFuture<JobExecutionResult> job = slowExactlyOnceJob(table, "node 2 restarted", 10);
    assertTrue(ShoalExactlyOnceDaemonITCase.Slow.HALFWAY.await(120, TimeUnit.SECONDS), "the job got part-way");
    SHOAL.cluster().node(2).kill();
    Thread.sleep(1000); // batches and commits touching shard 2 fail meanwhile
    SHOAL.cluster().node(2).restart();
    job.get(240, TimeUnit.SECONDS);

    List<String> expected = ShoalDaemon.eventIds();
    List<String> written = SHOAL.column(table, "id");
    Set<String> missing = new HashSet<>(expected);
    missing.removeAll(new HashSet<>(written));
    List<JsonNode> transactions = transactions(table);
    System.out.printf("exactly once across a node restart: %d written (%d duplicates), transactions %s%n",
        written.size(), written.size() - expected.size(), states(transactions));
    assertEquals(Set.of(), missing, "no event id is missing");
    assertEquals(counts(expected), counts(written), "every event id exactly once");
    JsonNode stats = ShoalExactlyOnceITCase.JSON.readTree(SHOAL.action("stats", "{\"table\":\"" + table + "\"}"));
    for (JsonNode shard : stats.get("shards")) {
      assertTrue(shard.get("records").asLong() > 0, "every shard holds records: " + stats);
    }
  }

  /**
   * The nodes keep their tables in a remote store (durability {@code remote}): part-way through
   * an exactly-once job a shard moves to another node ({@code move_shard}) - the sink follows it
   * without a restart of the job - then that node is killed and replaced on an EMPTY data
   * directory (its shards come from the store): every event ends up in the table exactly once.
   */
  @Test
  void aShardMovedAndItsNodeReplacedOnAnEmptyDirectoryDuringAnExactlyOnceJob() throws Exception {
    String table = "cluster_moved";
    SHOAL.action("create_table", "{\"name\":\"" + table + "\",\"on_invalid_json\":\"reject\",\"shard_key\":\"id\",\"durability\":\"remote\"}");
    // Slower than the other jobs: batches go on for a while after the move.
    CompletableFuture<JobExecutionResult> job = slowExactlyOnceJob(table, "a shard moved, its node replaced", 2);
    assertTrue(ShoalExactlyOnceDaemonITCase.Slow.HALFWAY.await(120, TimeUnit.SECONDS), "the job got part-way");
    int started = ShoalExactlyOnceDaemonITCase.Slow.OPENED.get();
    JsonNode moved = ShoalExactlyOnceITCase.JSON.readTree(
        SHOAL.action("move_shard", "{\"table\":\"" + table + "\",\"shard\":1,\"to\":2}"));
    assertTrue(moved.get("moved").asBoolean(), "the shard moved: " + moved);
    // Batches for shard 1 are refused by node 1 and sent again to node 2; with an old shard map
    // the job would fail (restart) on node 1's FAILED_PRECONDITION before 2,000 more records.
    long seenAtMove = ShoalExactlyOnceDaemonITCase.Slow.SEEN.get();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (ShoalExactlyOnceDaemonITCase.Slow.SEEN.get() < seenAtMove + 2000 && !job.isDone()) {
      assertTrue(System.nanoTime() < deadline, "the job goes on after the move (records seen: " + seenAtMove + " at the move, "
          + ShoalExactlyOnceDaemonITCase.Slow.SEEN.get() + " now)");
      Thread.sleep(20);
    }
    assertEquals(started, ShoalExactlyOnceDaemonITCase.Slow.OPENED.get(), "the job did not restart: the sink followed the shard");
    SHOAL.cluster().node(2).kill();
    Thread.sleep(1000); // batches and commits touching shards 1 and 2 fail meanwhile
    SHOAL.cluster().node(2).replace(SHOAL.cluster().freshDataDir("node2-replacement"));
    job.get(240, TimeUnit.SECONDS);

    List<String> expected = ShoalDaemon.eventIds();
    List<String> written = SHOAL.column(table, "id");
    Set<String> missing = new HashSet<>(expected);
    missing.removeAll(new HashSet<>(written));
    System.out.printf("exactly once across a shard move and a node replaced: %d written (%d duplicates), transactions %s%n",
        written.size(), written.size() - expected.size(), states(transactions(table)));
    assertEquals(Set.of(), missing, "no event id is missing");
    assertEquals(counts(expected), counts(written), "every event id exactly once");
    JsonNode cluster = ShoalExactlyOnceITCase.JSON.readTree(SHOAL.action("cluster", "{}"));
    for (JsonNode sharded : cluster.get("tables")) {
      if (sharded.get("name").asText().equals(table)) {
        assertEquals(2, sharded.get("shard_map").get(1).get("node").asInt(), "shard 1 stays on node 2: " + sharded);
      }
    }
  }

  /**
   * The events into {@code table}, exactly once, slowed (1 ms every {@code pace} records) so that a
   * test can act part-way ({@code Slow.HALFWAY}).
   */
  private CompletableFuture<JobExecutionResult> slowExactlyOnceJob(String table, String what, int pace) {
    ShoalExactlyOnceDaemonITCase.Slow.HALFWAY = new CountDownLatch(1);
    ShoalExactlyOnceDaemonITCase.Slow.SEEN.set(0);
    StreamExecutionEnvironment env = environment(20);
    env.enableCheckpointing(200);
    ShoalSinkITCase.events(env)
        .map(new ShoalExactlyOnceDaemonITCase.Slow(4000, pace)).name("slow")
        .sinkTo(sink(table, DeliveryGuarantee.EXACTLY_ONCE).build()).name("shoal-sink");
    return CompletableFuture.supplyAsync(() -> {
      try {
        return env.execute("github events -> sharded shoal (exactly once), " + what);
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
  }
}
