package dev.shoal.flink;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.connector.sink2.Committer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Commits the prepared transactions of a completed checkpoint ({@code commit_transaction}). The
 * action is idempotent in the daemon (also after a crash in the middle of a commit), so Flink may
 * hand the same committable again after a recovery and transient errors are simply retried with
 * backoff. A transaction the daemon says was <em>aborted</em> cannot be committed any more: its
 * records are lost for this job, so the commit fails the job loudly ({@link ShoalSinkException})
 * instead of carrying on.
 */
final class ShoalCommitter implements Committer<ShoalCommittable> {

  private static final Logger LOG = LoggerFactory.getLogger(ShoalCommitter.class);

  private final String token;
  private final Duration requestTimeout;
  private final RetryPolicy retryPolicy;
  private final Map<String, ShoalClient> clients = new HashMap<>();

  ShoalCommitter(String token, Duration requestTimeout, RetryPolicy retryPolicy) {
    this.token = token;
    this.requestTimeout = requestTimeout;
    this.retryPolicy = retryPolicy;
  }

  @Override
  public void commit(Collection<CommitRequest<ShoalCommittable>> requests) throws InterruptedException {
    for (CommitRequest<ShoalCommittable> request : requests) {
      commit(request.getCommittable());
    }
  }

  private void commit(ShoalCommittable committable) throws InterruptedException {
    ShoalClient client = clients.computeIfAbsent(
        committable.endpoint() + "\u0000" + committable.table(),
        key -> new ShoalClient(committable.endpoint(), committable.table(), token, requestTimeout));
    String where = "shoal table \"" + committable.table() + "\" at " + committable.endpoint();
    for (int attempt = 1; ; attempt++) {
      try {
        JsonNode answer = client.commitTransaction(committable.transaction());
        LOG.debug("{}: committed transaction {} ({} records)", where, committable.transaction(), answer.path("records"));
        return;
      } catch (RuntimeException e) {
        // The daemon's FAILED_PRECONDITION ("transaction ... was aborted; it cannot commit") reaches
        // Arrow Java as INVALID_ARGUMENT (it has no FAILED_PRECONDITION code): match the message.
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

  @Override
  public void close() throws Exception {
    for (ShoalClient client : clients.values()) {
      client.close();
    }
    clients.clear();
  }
}
