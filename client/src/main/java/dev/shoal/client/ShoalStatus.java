package dev.shoal.client;

import java.util.Locale;
import org.apache.arrow.flight.FlightRuntimeException;

/**
 * The status of a failed shoal request, the same vocabulary for both transports: gRPC's status
 * codes (which the daemon answers with and the embedded engine reports under the same names),
 * plus the embedded engine's own {@link #CLOSED} and {@link #PANIC}, and {@link #CLIENT} for an
 * error of the client side (no answer from shoal). Arrow Java's Flight spellings are read as
 * gRPC's ({@code TIMED_OUT} is {@link #DEADLINE_EXCEEDED}, {@code UNAUTHORIZED} is {@link
 * #PERMISSION_DENIED}); the daemon's {@code FAILED_PRECONDITION} reaches Arrow Java as {@code
 * INVALID_ARGUMENT} (Arrow has no such code).
 *
 * <p>The classification is what every caller retries on: {@link #isTransient()} for writes,
 * {@link #isRetryableAction()} for idempotent actions, {@link #isTransientRead(Throwable)} for
 * queries.
 */
public enum ShoalStatus {
  CANCELLED,
  UNKNOWN,
  INVALID_ARGUMENT,
  DEADLINE_EXCEEDED,
  NOT_FOUND,
  ALREADY_EXISTS,
  PERMISSION_DENIED,
  RESOURCE_EXHAUSTED,
  FAILED_PRECONDITION,
  ABORTED,
  OUT_OF_RANGE,
  UNIMPLEMENTED,
  INTERNAL,
  UNAVAILABLE,
  DATA_LOSS,
  UNAUTHENTICATED,
  /** The embedded engine's handle was closed. */
  CLOSED,
  /** The embedded engine panicked (a bug of shoal's; the engine stays usable). */
  PANIC,
  /** An error of the client side: shoal did not answer with a status. */
  CLIENT;

  /**
   * The status of a code name from either transport ({@code FlightStatusCode} or gRPC names, the
   * embedded engine's names); {@link #UNKNOWN} for a name not known here, {@link #CLIENT} for null.
   */
  public static ShoalStatus named(String code) {
    if (code == null) {
      return CLIENT;
    }
    switch (code.toUpperCase(Locale.ROOT)) {
      case "TIMED_OUT":
        return DEADLINE_EXCEEDED;
      case "UNAUTHORIZED":
        return PERMISSION_DENIED;
      default:
        try {
          return valueOf(code.toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
          return UNKNOWN;
        }
    }
  }

  /**
   * The code name of the first shoal answer in {@code error}'s cause chain, as the transport said
   * it (a {@link ShoalClientException}'s, a Flight status's or a {@link ShoalTransportException}'s,
   * e.g. the embedded engine's); null for an error of the client side.
   */
  public static String codeOf(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof ShoalClientException) {
        String code = ((ShoalClientException) t).code();
        if (code != null) {
          return code;
        }
      } else if (t instanceof FlightRuntimeException) {
        return ((FlightRuntimeException) t).status().code().name();
      } else if (t instanceof ShoalTransportException) {
        return ((ShoalTransportException) t).code();
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return null;
  }

  /** The status of {@code error} ({@link #codeOf}); {@link #CLIENT} when shoal did not answer. */
  public static ShoalStatus of(Throwable error) {
    return named(codeOf(error));
  }

  /**
   * Transient: the daemon is unreachable or restarting (connection refused and resets are {@code
   * UNAVAILABLE} in gRPC), the call's deadline passed, or the daemon ran out of memory or disk for
   * now. Everything else (unknown table, invalid JSON, bad token, ...) is permanent.
   */
  public boolean isTransient() {
    return this == UNAVAILABLE || this == DEADLINE_EXCEEDED || this == RESOURCE_EXHAUSTED;
  }

  /**
   * For idempotent actions ({@code make_durable}, the transaction actions): everything but a
   * clearly permanent answer is retried (e.g. an INTERNAL "not durable after 60 s"); a closed
   * handle or a panic of the embedded engine, and client-side errors, are not worth retrying.
   */
  public boolean isRetryableAction() {
    switch (this) {
      case NOT_FOUND:
      case INVALID_ARGUMENT:
      case FAILED_PRECONDITION:
      case UNAUTHENTICATED:
      case PERMISSION_DENIED:
      case UNIMPLEMENTED:
      case CANCELLED:
      case CLOSED:
      case PANIC:
      case CLIENT:
        return false;
      default:
        return true;
    }
  }

  /** {@link #isTransient()} of {@code error}'s status. */
  public static boolean isTransient(Throwable error) {
    return of(error).isTransient();
  }

  /**
   * For reads (queries are idempotent): {@link #isTransient()}, or the connection lost under a
   * call, which gRPC may report as UNKNOWN or INTERNAL ("channel closed", a {@link
   * java.nio.channels.ClosedChannelException} below) when the daemon dies mid-stream rather than
   * before the call (UNAVAILABLE).
   */
  public static boolean isTransientRead(Throwable error) {
    ShoalStatus status = of(error);
    if (status.isTransient()) {
      return true;
    }
    if (status != UNKNOWN && status != INTERNAL) {
      return false;
    }
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof java.nio.channels.ClosedChannelException) {
        return true;
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return false;
  }
}
