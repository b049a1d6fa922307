package dev.shoal.flink;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;

/**
 * Decides which errors of the daemon are transient (retry with backoff) and turns permanent ones
 * into a {@link ShoalSinkException} that names the table, the endpoint and, for a rejected record,
 * the record.
 */
final class ShoalErrors {

  /** How much of a rejected record the error message quotes. */
  static final int QUOTED_RECORD_CHARS = 300;

  /** The daemon's reject message: {@code ... record 17 of the batch is not valid JSON: ...}. */
  private static final Pattern RECORD_INDEX = Pattern.compile("record (\\d+) of the batch");

  private ShoalErrors() {}

  /**
   * Transient: the daemon is unreachable or restarting (connection refused and resets are
   * {@code UNAVAILABLE} in gRPC), the call's deadline passed, or the daemon ran out of memory/disk
   * for now. Everything else (unknown table, invalid JSON, bad token, ...) is permanent.
   */
  static boolean isTransient(Throwable error) {
    FlightStatusCode code = code(error);
    if (code == null) {
      return false;
    }
    return switch (code) {
      case UNAVAILABLE, TIMED_OUT, RESOURCE_EXHAUSTED -> true;
      default -> false;
    };
  }

  /**
   * For the idempotent actions ({@code make_durable}, {@code list/begin/prepare/abort_transaction},
   * {@code commit_transaction} is retried on transient errors only): everything but a clearly
   * permanent answer is retried - e.g. an INTERNAL "not durable after 60 s" of make_durable.
   * The daemon's FAILED_PRECONDITION reaches Arrow Java as INVALID_ARGUMENT (Arrow has no such
   * code), so "transaction is committed/aborted" is permanent too.
   */
  static boolean isRetryableAction(Throwable error) {
    FlightStatusCode code = code(error);
    if (code == null) {
      return false;
    }
    return switch (code) {
      case NOT_FOUND, INVALID_ARGUMENT, UNAUTHENTICATED, UNAUTHORIZED, UNIMPLEMENTED, CANCELLED -> false;
      default -> true;
    };
  }

  static FlightStatusCode code(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof FlightRuntimeException f) {
        return f.status().code();
      }
    }
    return null;
  }

  /** The error's message plus its root cause's (gRPC says "io exception"; the cause says "Connection refused"). */
  static String describe(Throwable error) {
    Throwable root = error;
    while (root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    String message = String.valueOf(error.getMessage());
    return root == error || root.getMessage() == null || message.contains(root.getMessage())
        ? message
        : message + " (" + root.getMessage() + ")";
  }

  static RuntimeException unwrap(ExecutionException e) {
    Throwable cause = e.getCause() == null ? e : e.getCause();
    return cause instanceof RuntimeException r ? r : new RuntimeException(cause);
  }

  /** The permanent-failure exception for a DoPut of {@code records} into the client's table. */
  static ShoalSinkException putFailed(ShoalClient client, List<byte[]> records, Throwable error, int attempts) {
    FlightStatusCode code = code(error);
    String server = describe(error);
    String where = "shoal table \"" + client.table() + "\" at " + client.endpoint();
    if (code == FlightStatusCode.NOT_FOUND) {
      return new ShoalSinkException(
          where + ": the table does not exist (create it with the create_table action before the job starts): "
              + server,
          error);
    }
    if (code == FlightStatusCode.INVALID_ARGUMENT) {
      Matcher m = RECORD_INDEX.matcher(server == null ? "" : server);
      if (m.find()) {
        int index = Integer.parseInt(m.group(1));
        String record =
            index < records.size() ? quote(records.get(index)) : "(index outside the batch of " + records.size() + ")";
        return new ShoalSinkException(
            where + " rejected record " + index + " of a batch of " + records.size()
                + " (the table's on_invalid_json policy is 'reject', so nothing of this batch was written): "
                + server + "; the record: " + record,
            error);
      }
      return new ShoalSinkException(where + " rejected a batch of " + records.size() + " records: " + server, error);
    }
    if (isTransient(error)) {
      return new ShoalSinkException(
          where + ": DoPut of " + records.size() + " records still failing after " + attempts
              + " attempts (transient error " + code + "): " + server,
          error);
    }
    return new ShoalSinkException(
        where + ": DoPut of " + records.size() + " records failed (" + (code == null ? "client error" : code) + "): "
            + server,
        error);
  }

  static String quote(byte[] record) {
    String text = new String(record, StandardCharsets.UTF_8);
    return text.length() <= QUOTED_RECORD_CHARS
        ? text
        : text.substring(0, QUOTED_RECORD_CHARS) + "... (" + record.length + " bytes)";
  }
}
