package dev.shoal.flink;

import java.net.URI;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.apache.arrow.flight.Location;

/**
 * The {@code endpoint} option and the transport it selects:
 *
 * <ul>
 *   <li>{@code grpc://host:port}, {@code grpc+tls://host:port} or {@code host:port} (plain gRPC): a
 *       shoal daemon over Arrow Flight ({@link FlightShoalClient});
 *   <li>{@code embedded:/path/to/data} (also {@code embedded:///path/to/data}, or {@code
 *       embedded:relative/path}, resolved against the working directory of the JVM that runs the
 *       writers): the shoal engine inside that JVM through JNI ({@link EmbeddedShoalClient}).
 * </ul>
 *
 * <p>Malformed values are {@link IllegalArgumentException}s naming option {@code endpoint}; {@link
 * #validate} checks the syntax only (the builder and the table factory call it at planning time, in
 * the JVM that builds the job, which for embedded mode need not be the one that opens the
 * directory).
 */
final class ShoalEndpoint {

  /** The schemes of a daemon endpoint (plain gRPC, or gRPC over TLS). */
  static final java.util.Set<String> FLIGHT_SCHEMES = java.util.Set.of("grpc", "grpc+tcp", "grpc+tls");

  /** The scheme of an embedded endpoint. */
  static final String EMBEDDED_SCHEME = "embedded";

  private static final String EMBEDDED_PREFIX = EMBEDDED_SCHEME + ":";

  private ShoalEndpoint() {}

  /** Whether {@code endpoint} selects embedded mode ({@code embedded:...}, scheme case-insensitive). */
  static boolean isEmbedded(String endpoint) {
    return endpoint != null && endpoint.regionMatches(true, 0, EMBEDDED_PREFIX, 0, EMBEDDED_PREFIX.length());
  }

  /**
   * Checks the syntax of {@code endpoint} for its transport.
   *
   * @throws IllegalArgumentException naming option {@code endpoint}
   */
  static void validate(String endpoint) {
    if (isEmbedded(endpoint)) {
      embeddedPath(endpoint);
    } else {
      flightLocation(endpoint);
    }
  }

  /**
   * The data directory of an embedded endpoint, absolute (against this JVM's working directory)
   * and normalised: the key under which this JVM shares one engine per directory.
   *
   * @throws IllegalArgumentException when the endpoint names a host or no directory
   */
  static Path embeddedPath(String endpoint) {
    String path = endpoint.substring(EMBEDDED_PREFIX.length());
    if (path.startsWith("//")) {
      if (!path.startsWith("///")) {
        throw new IllegalArgumentException("shoal sink: option 'endpoint' '" + endpoint + "' names a host; embedded "
            + "mode opens a data directory on the machine of the JVM that runs the writers: embedded:/path/to/data");
      }
      path = path.substring(2);
    }
    if (path.isBlank()) {
      throw new IllegalArgumentException(
          "shoal sink: option 'endpoint' '" + endpoint + "' names no data directory: embedded:/path/to/data");
    }
    try {
      return Paths.get(path).toAbsolutePath().normalize();
    } catch (InvalidPathException e) {
      throw new IllegalArgumentException(
          "shoal sink: option 'endpoint' '" + endpoint + "' has an invalid data directory: " + e.getMessage(), e);
    }
  }

  /** A daemon endpoint as an Arrow Flight location; {@code host:port} means plain gRPC. */
  static Location flightLocation(String endpoint) {
    String uri = endpoint.contains("://") ? endpoint : "grpc://" + endpoint;
    Location location;
    try {
      location = new Location(new URI(uri));
    } catch (Exception e) {
      throw new IllegalArgumentException(
          "shoal: invalid option 'endpoint' '" + endpoint + "': expected grpc://host:port, grpc+tls://host:port, "
              + "host:port or embedded:/path/to/data",
          e);
    }
    String scheme = location.getUri().getScheme();
    if (!FLIGHT_SCHEMES.contains(scheme) || location.getUri().getHost() == null) {
      throw new IllegalArgumentException(
          "shoal: invalid option 'endpoint' '" + endpoint + "': expected grpc://host:port, grpc+tls://host:port, "
              + "host:port or embedded:/path/to/data");
    }
    return location;
  }

}
