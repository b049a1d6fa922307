package dev.shoal.flink.sink;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalSinkException;
import dev.shoal.flink.common.ShoalTableClient;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.connector.sink2.Committer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Commits the prepared transactions of a completed checkpoint ({@code commit_transaction}), at the
 * committable's endpoint (a daemon, or the embedded engine of this JVM). The action is idempotent
 * in shoal (also after a crash in the middle of a commit), so Flink may
 * hand the same committable again after a recovery and transient errors are simply retried with
 * backoff. A transaction the daemon says was <em>aborted</em> cannot be committed any more: its
 * records are lost for this job, so the commit fails the job loudly ({@link ShoalSinkException})
 * instead of carrying on.
 */
final class ShoalCommitter implements Committer<ShoalCommittable> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalCommitter.class);

  private final ShoalClientOptions clientOptions;
  private final RetryPolicy retryPolicy;
  /**
   * One client per endpoint and table of the committables seen, open until the committer closes
   * (for an embedded endpoint: a handle that keeps the engine open while the job runs).
   */
  private final Map<String, ShoalTableClient> clients = new HashMap<>();

  ShoalCommitter(ShoalClientOptions clientOptions, RetryPolicy retryPolicy) {
    this.clientOptions = clientOptions;
    this.retryPolicy = retryPolicy;
  }

  /** A committer with a daemon's token and deadline (the embedded settings at their defaults). */
  ShoalCommitter(String token, Duration requestTimeout, RetryPolicy retryPolicy) {
    this(ShoalClientOptions.of(token, requestTimeout), retryPolicy);
  }

  @Override
  public void commit(Collection<CommitRequest<ShoalCommittable>> requests) throws InterruptedException {
    for (CommitRequest<ShoalCommittable> request : requests) {
      commit(request.getCommittable());
    }
  }

  private void commit(ShoalCommittable committable) throws InterruptedException {
    ShoalTableClient client = clients.computeIfAbsent(
        committable.endpoint() + "\u0000" + committable.table(),
        key -> ShoalTableClient.open(committable.endpoint(), committable.table(), clientOptions));
    String where = "shoal table \"" + committable.table() + "\" at " + committable.endpoint();
    for (int attempt = 1; ; attempt++) {
      try {
        JsonNode answer = client.commitTransaction(committable.transaction());
        LOG.debug("{}: committed transaction {} ({} records)", where, committable.transaction(), answer.path("records"));
        return;
      } catch (RuntimeException e) {
        // FAILED_PRECONDITION ("transaction ... was aborted; it cannot commit") reaches Arrow Java as
        // INVALID_ARGUMENT (it has no FAILED_PRECONDITION code); embedded, it is FAILED_PRECONDITION:
        // match the message.
        if (!ShoalErrors.isTransient(e) && String.valueOf(e.getMessage()).contains("was aborted")) {
          throw aborted(where, committable, e);
        }
        if (!ShoalErrors.isTransient(e) || attempt > retryPolicy.maxRetries()) {
          throw new ShoalSinkException(
              where + ": commit_transaction of " + committable.transaction() + " (" + committable.records()
                  + " records) failed after " + attempt + " attempts: " + ShoalErrors.describe(e),
              e);
        }
        long backoff = retryPolicy.backoffMillis(attempt);
        LOG.warn("{}: commit_transaction of {} failed with a transient error (attempt {} of {}), retrying in {} ms: {}",
            where, committable.transaction(), attempt, retryPolicy.maxRetries() + 1, backoff, ShoalErrors.describe(e));
        Thread.sleep(backoff);
      }
    }
  }

  private static ShoalSinkException aborted(String where, ShoalCommittable committable, RuntimeException e) {
    return new ShoalSinkException(
        where + ": transaction " + committable.transaction() + " of a completed checkpoint was aborted and cannot be "
            + "committed: its " + committable.records() + " records are NOT in the table (exactly-once is broken for "
            + "them; was the transaction aborted by another job using the same 'sink.transactional-id-prefix'?): "
            + ShoalErrors.describe(e),
        e);
  }

  /** Closes every client, also when one fails (an embedded client left open would keep the engine). */
  @Override
  public void close() throws Exception {
    Exception failure = null;
    for (ShoalTableClient client : clients.values()) {
      try {
        client.close();
      } catch (Exception e) {
        if (failure == null) {
          failure = e;
        } else {
          failure.addSuppressed(e);
        }
      }
    }
    clients.clear();
    if (failure != null) {
      throw failure;
    }
  }
}
