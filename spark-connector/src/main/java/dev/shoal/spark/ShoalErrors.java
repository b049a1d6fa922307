package dev.shoal.spark;

import java.net.URI;

import dev.shoal.client.ShoalClientException;
import dev.shoal.client.ShoalEndpoint;


/**
 * Turns shoal's status codes (the shared client's {@link ShoalClientException}s) into {@link
 * ShoalException}s that name the table and the option to fix. Both transports answer with the same codes (the daemon as Flight statuses, the embedded
 * engine as {@code ShoalEmbeddedException} codes); only the advice for an endpoint that cannot be
 * reached differs.
 */
final class ShoalErrors {
  static final String UNAVAILABLE = "UNAVAILABLE";
  static final String NOT_FOUND = "NOT_FOUND";
  static final String UNAUTHENTICATED = "UNAUTHENTICATED";
  static final String INVALID_ARGUMENT = "INVALID_ARGUMENT";
  static final String FAILED_PRECONDITION = "FAILED_PRECONDITION";

  private ShoalErrors() {}

  /**
   * The {@link ShoalException} for a failed request of the shared client (the option to fix,
   * by status code and transport).
   */
  static ShoalException translate(ShoalClientException e) {
    URI endpoint;
    try {
      endpoint = ShoalOptions.endpointUri(e.endpoint());
    } catch (IllegalArgumentException bad) {
      endpoint = null;
    }
    if (e.code() == null) {
      return new ShoalException(e.getMessage(), e);
    }
    return translate(e.code(), e.detail(), endpoint, e.table(), e.request(), e);
  }

  /**
   * @param code the status code name ({@code FlightStatusCode} names equal gRPC's, which the
   *     embedded engine uses too)
   * @param detail shoal's message
   * @param endpoint the {@code endpoint} option's location the request went to
   * @param table the table, or null
   * @param request the request, e.g. {@code GetSchema}, {@code action create_table}
   */
  static ShoalException translate(String code, String detail, URI endpoint, String table, String request, Throwable cause) {
    boolean embedded = endpoint != null && ShoalEndpoint.isEmbedded(endpoint);
    String where = "shoal " + request + (table != null ? " on table '" + table + "'" : "") + " at " + endpoint;
    switch (code) {
      case UNAVAILABLE:
        if (embedded) {
          return new ShoalException(where + " failed: the embedded engine is unavailable (" + detail + "). Option 'endpoint' "
              + endpoint + " runs shoal inside this JVM, which needs the native library of the shoal-embedded jar"
              + " (linux-x86_64) or -Dshoal.jni.library=/path/to/libshoal_jni.so; or use grpc://host:port of a running"
              + " `shoal serve`.", code, cause);
        }
        return new ShoalException(where + " failed: the daemon is unreachable (" + detail
            + "). Check option 'endpoint' (grpc://host:port of a running `shoal serve`).", code, cause);
      case FAILED_PRECONDITION:
        if (embedded && request.equals(ShoalClientException.OPEN)) {
          return new ShoalException(where + " failed: " + detail + ". Option 'endpoint' " + endpoint + " opens the data"
              + " directory inside this JVM, which needs the directory for itself: a directory held by a running daemon"
              + " (or another JVM) cannot be opened (its LOCK file) - read it through the daemon's grpc://host:port"
              + " endpoint, or stop the daemon first; otherwise point option 'endpoint' at a directory this JVM can"
              + " create and write.", code, cause);
        }
        return new ShoalException(where + " failed (" + code + "): " + detail, code, cause);
      case NOT_FOUND:
        return new ShoalException(where + " failed: " + detail + ". Check option 'table' (SHOW TABLES IN <catalog>"
            + " lists the " + (embedded ? "data directory's" : "daemon's") + " tables) or create the table first.", code, cause);
      case UNAUTHENTICATED:
        return new ShoalException(where + " failed: " + detail
            + ". Set option 'token' to the daemon's --auth-token.", code, cause);
      case INVALID_ARGUMENT:
        if (detail != null && detail.contains("unknown column")) {
          return new ShoalException(where + " failed: " + detail + ". The column is in no record of table '" + table
              + "': remove it from the query or from the schema given with .schema(...).", code, cause);
        }
        if (embedded && request.equals(ShoalClientException.OPEN)) {
          return new ShoalException(where + " failed: " + detail + ". Check the options "
              + ShoalOptions.EMBEDDED_CONFIG_PREFIX + "* (the daemon's configuration keys, docs/configuration.md).",
              code, cause);
        }
        return new ShoalException(where + " failed: " + detail, code, cause);
      default:
        return new ShoalException(where + " failed (" + code + "): " + detail, code, cause);
    }
  }
}
