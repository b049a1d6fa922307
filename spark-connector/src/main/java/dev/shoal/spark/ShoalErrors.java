package dev.shoal.spark;

import java.net.URI;

import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;

/** Turns Flight status codes into {@link ShoalException}s that name the table and the option to fix. */
final class ShoalErrors {
  private ShoalErrors() {}

  static ShoalException translate(FlightRuntimeException e, URI endpoint, String table, String request) {
    FlightStatusCode code = e.status().code();
    String detail = e.getMessage();
    String where = "shoal " + request + (table != null ? " on table '" + table + "'" : "") + " at " + endpoint;
    switch (code) {
      case UNAVAILABLE:
        return new ShoalException(where + " failed: the daemon is unreachable (" + detail
            + "). Check option 'endpoint' (grpc://host:port of a running `shoal serve`).", e);
      case NOT_FOUND:
        return new ShoalException(where + " failed: " + detail + ". Check option 'table' (SHOW TABLES IN <catalog>"
            + " lists the daemon's tables) or create the table first.", e);
      case UNAUTHENTICATED:
        return new ShoalException(where + " failed: " + detail
            + ". Set option 'token' to the daemon's --auth-token.", e);
      case INVALID_ARGUMENT:
        if (detail != null && detail.contains("unknown column")) {
          return new ShoalException(where + " failed: " + detail + ". The column is in no record of table '" + table
              + "': remove it from the query or from the schema given with .schema(...).", e);
        }
        return new ShoalException(where + " failed: " + detail, e);
      default:
        return new ShoalException(where + " failed (" + code + "): " + detail, e);
    }
  }
}
