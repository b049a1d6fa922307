package dev.shoal.flink.common;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import dev.shoal.client.RoutedPut;
import dev.shoal.client.ShoalClientException;
import dev.shoal.client.ShoalStatus;
import dev.shoal.client.ShoalTransportException;
import dev.shoal.flink.table.ShoalConnectorOptions;

/**
 * Decides which errors of shoal are transient (retry with backoff) and turns permanent ones into a
 * {@link ShoalSinkException} that names the table, the endpoint and, for a rejected record, the
 * record.
 *
 * <p>Both transports answer with a status code: the daemon with a Flight status (Arrow Java's
 * {@code FlightStatusCode} names: {@code TIMED_OUT}, {@code UNAUTHORIZED}, and the daemon's {@code
 * FAILED_PRECONDITION} arrives as {@code INVALID_ARGUMENT}), the embedded engine with gRPC's names
 * in a {@code ShoalEmbeddedException} ({@code DEADLINE_EXCEEDED}, {@code PERMISSION_DENIED}, {@code
 * FAILED_PRECONDITION}, and its own {@code CLOSED} and {@code PANIC}). {@link #code} gives that
 * name; the decisions below accept both spellings.
 */
public final class ShoalErrors {

  public static final String UNAVAILABLE = "UNAVAILABLE";
  public static final String NOT_FOUND = "NOT_FOUND";
  public static final String INVALID_ARGUMENT = "INVALID_ARGUMENT";
  public static final String FAILED_PRECONDITION = "FAILED_PRECONDITION";

  /** How much of a rejected record the error message quotes. */
  public static final int QUOTED_RECORD_CHARS = 300;

  /** The daemon's reject message: {@code ... record 17 of the batch is not valid JSON: ...}. */
  private static final Pattern RECORD_INDEX = Pattern.compile("record (\\d+) of the batch");

  private ShoalErrors() {}

  /** For reads (the source's queries, which are idempotent): {@link ShoalStatus#isTransientRead}. */
  public static boolean isTransientRead(Throwable error) {
    return ShoalStatus.isTransientRead(error);
  }

  /** For writes: {@link ShoalStatus#isTransient()} of the error's status. */
  public static boolean isTransient(Throwable error) {
    return ShoalStatus.isTransient(error);
  }

  /**
   * For the idempotent actions ({@code make_durable}, {@code list/begin/prepare/abort_transaction};
   * {@code commit_transaction} is retried on transient errors only): {@link
   * ShoalStatus#isRetryableAction()}.
   */
  public static boolean isRetryableAction(Throwable error) {
    return ShoalStatus.of(error).isRetryableAction();
  }

  /**
   * The status code name of the first shoal answer in {@code error}'s cause chain ({@link
   * ShoalStatus#codeOf}); null for anything else (a client-side error).
   */
  public static String code(Throwable error) {
    return ShoalStatus.codeOf(error);
  }

  /**
   * The error's message (shoal's own, without the client's request prefix) plus its root cause's
   * (gRPC says "io exception"; the cause says "Connection refused").
   */
  public static String describe(Throwable error) {
    String message = String.valueOf(error.getMessage());
    Throwable below = error;
    for (Throwable t = error; t != null; t = t.getCause() == t ? null : t.getCause()) {
      if (t instanceof ShoalClientException client && client.detail() != null) {
        // shoal's own message; the transport's exception right below it says the same again
        message = client.detail();
        below = client.getCause() == null ? client : client.getCause();
        break;
      }
    }
    Throwable root = below;
    while (root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    return root == below || root.getMessage() == null || message.contains(root.getMessage())
        ? message
        : message + " (" + root.getMessage() + ")";
  }

  public static RuntimeException unwrap(ExecutionException e) {
    Throwable cause = e.getCause() == null ? e : e.getCause();
    return cause instanceof RuntimeException r ? r : new RuntimeException(cause);
  }

  /** The permanent-failure exception for a DoPut of {@code records} into the client's table. */
  public static ShoalSinkException putFailed(ShoalTableClient client, List<byte[]> records, Throwable error, int attempts) {
    String code = code(error);
    String server = describe(error);
    String where = "shoal table \"" + client.table() + "\" at " + client.endpoint();
    if (NOT_FOUND.equals(code)) {
      return new ShoalSinkException(
          where + ": the table does not exist (create it with the create_table action before the job starts): "
              + server,
          error);
    }
    if (INVALID_ARGUMENT.equals(code)) {
      Matcher m = RECORD_INDEX.matcher(server == null ? "" : server);
      if (m.find()) {
        int index = Integer.parseInt(m.group(1));
        boolean part = false;
        for (Throwable t = error; t != null; t = t.getCause()) {
          if (t instanceof RoutedPut.PartFailed failed) {
            index = failed.batchRow(index); // counted in a shard's part of the batch
            part = true;
            break;
          }
        }
        String record =
            index < records.size() ? quote(records.get(index)) : "(index outside the batch of " + records.size() + ")";
        return new ShoalSinkException(
            where + " rejected record " + index + " of a batch of " + records.size()
                + (part
                    ? " (the table's on_invalid_json policy is 'reject', so nothing of that shard's part of the batch"
                        + " was written; the other shards' parts may have been): "
                    : " (the table's on_invalid_json policy is 'reject', so nothing of this batch was written): ")
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

  /**
   * The permanent-failure exception for an embedded engine that could not be opened on {@code
   * dataDir}: what the code means for option {@code endpoint} (another process holds the
   * directory; the native library is missing; bad {@code embedded.config.*} keys).
   */
  public static ShoalSinkException embeddedOpenFailed(String endpoint, String table, Path dataDir, ShoalTransportException e) {
    String where = "shoal table \"" + table + "\" at " + endpoint + ": opening the embedded engine on " + dataDir
        + " failed (" + e.code() + "): " + e.detail() + ". ";
    return switch (e.code()) {
      case FAILED_PRECONDITION -> new ShoalSinkException(where + "With option 'endpoint' = embedded:..., shoal runs "
          + "inside this JVM on that data directory and needs the directory for itself: a directory held by a running "
          + "daemon or another JVM (its LOCK file) cannot be opened. Write to the daemon's grpc://host:port endpoint "
          + "instead, or stop it first. Embedded mode also needs every writer and committer of the job in one JVM (a "
          + "MiniCluster / local execution, or a single TaskManager): with several TaskManagers on the machine, the "
          + "second one finds the directory locked.", e);
      case UNAVAILABLE -> new ShoalSinkException(where + "With option 'endpoint' = embedded:..., shoal runs inside this "
          + "JVM, which needs the native library of the shoal-embedded jar (linux-x86_64) or "
          + "-Dshoal.jni.library=/path/to/libshoal_jni.so; or use grpc://host:port of a running `shoal serve`.", e);
      case INVALID_ARGUMENT -> new ShoalSinkException(where + "Check the options '"
          + ShoalConnectorOptions.EMBEDDED_CONFIG_PREFIX + "*' (the daemon's configuration keys, "
          + "docs/configuration.md); an engine this JVM has open already is joined with the same keys or none.", e);
      default -> new ShoalSinkException(where + "Check option 'endpoint' (embedded:/path/to/data: a directory this "
          + "JVM can create and write).", e);
    };
  }

  public static String quote(byte[] record) {
    // A request entry with an operation (OperationEntries): the JSON after its operation byte.
    int offset = OperationEntries.jsonOffset(record);
    String text = new String(record, offset, record.length - offset, StandardCharsets.UTF_8);
    return text.length() <= QUOTED_RECORD_CHARS
        ? text
        : text.substring(0, QUOTED_RECORD_CHARS) + "... (" + record.length + " bytes)";
  }
}
