package dev.shoal.flink.sink;

import java.util.function.Supplier;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalSinkException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs a writer's idempotent actions ({@code list_transactions}, {@code prepare_transaction},
 * {@code abort_transaction}) with the sink's {@link RetryPolicy}, retrying errors that are not
 * clearly permanent ({@link ShoalErrors#isRetryableAction}) and counting retries in {@code
 * shoalRetries}.
 */
final class ShoalActionRetries {
  private static final Logger LOG = LoggerFactory.getLogger(ShoalActionRetries.class);

  private final String where;
  private final RetryPolicy retryPolicy;
  private final ShoalWriterMetrics metrics;

  /** {@code where} names the table and endpoint in messages. */
  ShoalActionRetries(String where, RetryPolicy retryPolicy, ShoalWriterMetrics metrics) {
    this.where = where;
    this.retryPolicy = retryPolicy;
    this.metrics = metrics;
  }

  /**
   * Runs {@code action} (described by {@code what}) until it succeeds, fails permanently or runs
   * out of retries; the last two throw a {@link ShoalSinkException} naming the action and the
   * attempts ({@code list_transactions} on a missing table says to create it).
   */
  <T> T run(String what, Supplier<T> action) throws InterruptedException {
    for (int attempt = 1; ; attempt++) {
      try {
        return action.get();
      } catch (RuntimeException e) {
        if (ShoalErrors.NOT_FOUND.equals(ShoalErrors.code(e)) && what.equals("list_transactions")) {
          throw new ShoalSinkException(where + ": the table does not exist (create it with the create_table action "
              + "before the job starts): " + ShoalErrors.describe(e), e);
        }
        if (!ShoalErrors.isRetryableAction(e) || attempt > retryPolicy.maxRetries()) {
          throw new ShoalSinkException(
              where + ": " + what + " failed after " + attempt + " attempts: " + ShoalErrors.describe(e), e);
        }
        long backoff = retryPolicy.backoffMillis(attempt);
        metrics.retries.inc();
        LOG.warn("{}: {} failed (attempt {} of {}), retrying in {} ms: {}",
            where, what, attempt, retryPolicy.maxRetries() + 1, backoff, ShoalErrors.describe(e));
        Thread.sleep(backoff);
      }
    }
  }
}
