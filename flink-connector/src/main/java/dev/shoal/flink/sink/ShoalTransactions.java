package dev.shoal.flink.sink;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.flink.common.ShoalTableClient;
import java.nio.charset.StandardCharsets;
import java.util.OptionalLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.api.connector.sink2.InitContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How the exactly-once writer names its shoal transactions, and how it aborts the ones an earlier
 * run left behind (as Kafka's sink names and aborts its transactional ids).
 *
 * <p>A transaction holds one checkpoint interval of one subtask: {@code
 * <prefix>-<subtask>-<checkpoint>-<epoch>}, where the checkpoint is the one the interval ends
 * with and the epoch is larger than that of every transaction of the same subtask index that
 * existed when the writer started, so that no id is ever reused (the daemon never reopens an
 * aborted or committed id).
 */
final class ShoalTransactions {
  private static final Logger LOG = LoggerFactory.getLogger(ShoalTransactions.class);

  private ShoalTransactions() {}

  /**
   * The prefix when {@code sink.transactional-id-prefix} is not set: {@code flink-<job id>-<hash of
   * the sink's task name and table>} - stable across the failovers of one job, different for
   * another job or another sink of the job.
   */
  static String defaultPrefix(InitContext context, String table) {
    String sink = context.getTaskInfo().getTaskName() + "\u0000" + table;
    return "flink-" + context.getJobInfo().getJobId() + "-"
        + String.format("%08x", java.util.Arrays.hashCode(sink.getBytes(StandardCharsets.UTF_8)));
  }

  /** The id of subtask {@code subtask}'s transaction for the interval ending with {@code checkpointId}. */
  static String id(String prefix, int subtask, long checkpointId, long epoch) {
    return prefix + "-" + subtask + "-" + checkpointId + "-" + epoch;
  }

  /**
   * Aborts the transactions an earlier run of this sink left open or prepared whose records the
   * job will send again: those of the subtask indexes this subtask stands in for ({@code index %
   * parallelism == subtask}, so a smaller parallelism also cleans up the higher indexes) named
   * after a checkpoint past the restored one (all of them on a fresh start). Transactions named
   * after the restored checkpoint or before are committed, or are in the restored committables and
   * Flink commits them again. Returns the epoch for this writer's transactions: past every epoch of
   * this subtask index in the table.
   *
   * @throws ShoalSinkException when listing or aborting fails permanently (or the table is missing)
   */
  static long abortLingering(
      ShoalTableClient client,
      ShoalActionRetries actions,
      ShoalWriterMetrics metrics,
      String where,
      String prefix,
      int subtask,
      int parallelism,
      OptionalLong restored)
      throws InterruptedException {
    Pattern ids = Pattern.compile(Pattern.quote(prefix) + "-(\\d{1,9})-(\\d{1,18})-(\\d{1,18})");
    long maxEpoch = 0;
    int aborted = 0;
    for (JsonNode transaction : actions.run("list_transactions", client::listTransactions)) {
      String id = transaction.path("transaction").asText();
      Matcher m = ids.matcher(id);
      if (!m.matches()) {
        continue;
      }
      int index = Integer.parseInt(m.group(1));
      long checkpoint = Long.parseLong(m.group(2));
      if (index == subtask) {
        maxEpoch = Math.max(maxEpoch, Long.parseLong(m.group(3)));
      }
      String state = transaction.path("state").asText();
      boolean pending = state.equals("open") || state.equals("prepared");
      if (pending && index % parallelism == subtask && (restored.isEmpty() || checkpoint > restored.getAsLong())) {
        LOG.info("{}: aborting transaction {} ({}, {} records) left by an earlier run (restored checkpoint: {})",
            where, id, state, transaction.path("records").asLong(), restored.isPresent() ? restored.getAsLong() : "none");
        actions.run("abort_transaction " + id, () -> client.abortTransaction(id));
        metrics.transactionsAborted.inc();
        aborted++;
      }
    }
    LOG.info("{}: exactly-once writer {} starts with epoch {} ({} lingering transactions aborted)",
        where, subtask, maxEpoch + 1, aborted);
    return maxEpoch + 1;
  }
}
