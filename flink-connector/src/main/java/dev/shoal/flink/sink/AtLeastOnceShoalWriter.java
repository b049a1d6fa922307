package dev.shoal.flink.sink;

import java.util.Collection;
import java.util.Map;
import java.util.SortedMap;
import java.util.concurrent.TimeUnit;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalSinkException;
import dev.shoal.flink.common.ShoalTableClient;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.connector.base.sink.writer.BufferedRequestState;
import org.apache.flink.connector.base.sink.writer.ElementConverter;
import org.apache.flink.connector.base.sink.writer.config.AsyncSinkWriterConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@code at-least-once} writer: a checkpoint sends the whole buffer (so the checkpoint state
 * holds no records), waits for every acknowledgement, then calls {@code DoAction make_durable}
 * with the highest acknowledged {@code end_address}: everything acknowledged is then durable. If
 * the daemon may have lost acknowledged records that were not durable yet (an {@code UNAVAILABLE}
 * error while some were outstanding, or a log tail below them: a daemon crash rolls its log back
 * to the durable point), the checkpoint fails instead, so the job replays from the previous one.
 */
final class AtLeastOnceShoalWriter<InputT> extends ShoalWriter<InputT> {
  private static final Logger LOG = LoggerFactory.getLogger(AtLeastOnceShoalWriter.class);

  /**
   * Why acknowledged records may have been lost (an UNAVAILABLE error while some were not known
   * durable); null if nothing suggests so. Makes the next durability wait fail.
   */
  private volatile String possibleLoss;

  AtLeastOnceShoalWriter(
      ElementConverter<InputT, byte[]> elementConverter,
      WriterInitContext context,
      AsyncSinkWriterConfiguration configuration,
      Collection<BufferedRequestState<byte[]>> states,
      ShoalTableClient client,
      RetryPolicy retryPolicy) {
    super(elementConverter, context, configuration, states, client, retryPolicy);
  }

  @Override
  protected void onSendFailure(RuntimeException e) {
    noteUnavailable(e);
  }

  /**
   * An {@code UNAVAILABLE} error (connection refused or reset: the daemon may be restarting) while
   * acknowledged records are not known durable means they may be gone - a daemon that crashes
   * loses what was not durable yet.
   */
  private void noteUnavailable(RuntimeException e) {
    if (!ShoalErrors.UNAVAILABLE.equals(ShoalErrors.code(e)) || possibleLoss != null) {
      return;
    }
    SortedMap<String, Long> pending = notYetDurable();
    if (!pending.isEmpty()) {
      String table = pending.firstKey();
      possibleLoss = "a call failed with UNAVAILABLE (" + ShoalErrors.describe(e) + ") while records acknowledged up "
          + "to log address " + pending.get(table) + " of table \"" + table + "\" were durable only up to "
          + durableAddress(table);
      LOG.warn("{}: {}; the next checkpoint fails so that the job replays them", where, possibleLoss);
    }
  }

  /**
   * Called by Flink before each checkpoint barrier ({@code endOfInput = false}) and at the end of a
   * bounded input ({@code true}): both send the whole buffer, wait for every acknowledgement, then
   * wait for durability.
   */
  @Override
  public void flush(boolean endOfInput) throws InterruptedException {
    super.flush(true);
    waitUntilDurable();
  }

  /**
   * Asks the daemon to make each log this writer wrote to (the table's, or each shard's of a
   * sharded table) durable up to the highest {@code end_address} it saw acknowledged there ({@code
   * make_durable}), retrying errors that are not clearly permanent. Fails (ShoalSinkException, the
   * checkpoint fails and the job replays from the previous one) when the acknowledged records may
   * have been lost in a daemon crash: an UNAVAILABLE error since they were acknowledged, or a log
   * tail below them.
   */
  private void waitUntilDurable() throws InterruptedException {
    checkNoPossibleLoss();
    long started = System.nanoTime();
    for (Map.Entry<String, Long> log : notYetDurable().entrySet()) {
      waitUntilDurable(log.getKey(), log.getValue());
    }
    metrics.lastDurabilityWaitMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
  }

  /** Makes {@code table}'s log durable up to {@code target} (see {@link #waitUntilDurable()}). */
  private void waitUntilDurable(String table, long target) throws InterruptedException {
    String log = table.equals(client.table()) ? "" : " of shard table \"" + table + "\"";
    for (int attempt = 1; ; attempt++) {
      RuntimeException failure;
      try {
        long tail = client.stats(table).path("tail_address").asLong(-1);
        if (tail >= 0 && tail < target) {
          throw new ShoalSinkException(where + ": the log" + log + " ends at " + tail + ", below the records this "
              + "writer saw acknowledged (up to " + target + "): the daemon lost records that were not durable yet "
              + "(a restart?). Failing the checkpoint so that the job replays them from the previous one.");
        }
        long durable = client.makeDurable(table, target);
        noteDurable(table, durable);
        if (durable >= target) {
          return;
        }
        failure = null;
      } catch (ShoalSinkException e) {
        throw e;
      } catch (RuntimeException e) {
        noteUnavailable(e);
        checkNoPossibleLoss();
        if (!ShoalErrors.isRetryableAction(e)) {
          throw new ShoalSinkException(
              where + ": make_durable" + log + " failed while waiting for durability: " + ShoalErrors.describe(e), e);
        }
        failure = e;
      }
      if (attempt > retryPolicy.maxRetries()) {
        throw new ShoalSinkException(
            where + ": acknowledged records up to log address " + target + log + " are still not durable after "
                + attempt + " make_durable actions (durable until " + durableAddress(table) + ")"
                + (failure == null ? "" : "; last error: " + ShoalErrors.describe(failure)),
            failure);
      }
      metrics.retries.inc();
      long backoff = retryPolicy.backoffMillis(attempt);
      LOG.warn("{}: make_durable did not make log address {}{} durable (attempt {} of {}), retrying in {} ms{}",
          where, target, log, attempt, retryPolicy.maxRetries() + 1, backoff,
          failure == null ? "" : ": " + ShoalErrors.describe(failure));
      Thread.sleep(backoff);
    }
  }

  private void checkNoPossibleLoss() {
    String reason = possibleLoss;
    if (reason != null) {
      throw new ShoalSinkException(where + ": the daemon may have lost acknowledged records that were not durable yet: "
          + reason + ". Failing the checkpoint so that the job replays them from the previous one (tables created "
          + "with \"durability\": \"group_commit\" or \"fsync\" acknowledge only durable records and avoid this).");
    }
  }
}
