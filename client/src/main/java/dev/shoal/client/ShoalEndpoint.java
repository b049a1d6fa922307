package dev.shoal.client;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Set;

/**
 * An {@code endpoint} value and the transport it selects:
 *
 * <ul>
 *   <li>{@code grpc://host:port}, {@code grpc+tls://host:port} or {@code host:port} (plain gRPC): a
 *       shoal daemon over Arrow Flight ({@link FlightShoalClient});
 *   <li>{@code embedded:/path/to/data} (also {@code embedded:///path/to/data}, or {@code
 *       embedded:relative/path}, resolved against the working directory of the JVM that opens it):
 *       the shoal engine inside that JVM through JNI ({@code dev.shoal.embedded.EmbeddedShoalClient},
 *       shoal-embedded's {@link ShoalTransport}).
 * </ul>
 *
 * <p>Malformed values are {@link IllegalArgumentException}s naming option {@code endpoint}; {@link
 * #validate} checks the syntax only (connectors call it at planning time, in the JVM that builds
 * the job, which for embedded mode need not be the one that opens the directory).
 */
public final class ShoalEndpoint {

  /** The schemes of a daemon endpoint (plain gRPC, or gRPC over TLS). */
  public static final Set<String> FLIGHT_SCHEMES = Set.of("grpc", "grpc+tcp", "grpc+tls");

  /** The scheme of an embedded endpoint. */
  public static final String EMBEDDED_SCHEME = "embedded";

  private static final String EMBEDDED_PREFIX = EMBEDDED_SCHEME + ":";

  private static final String EXPECTED =
      "expected grpc://host:port, grpc+tls://host:port, host:port or embedded:/path/to/data";

  private ShoalEndpoint() {}

  /** Whether {@code endpoint} selects embedded mode ({@code embedded:...}, scheme case-insensitive). */
  public static boolean isEmbedded(String endpoint) {
    return endpoint != null && endpoint.regionMatches(true, 0, EMBEDDED_PREFIX, 0, EMBEDDED_PREFIX.length());
  }

  /** {@link #isEmbedded(String)} of a URI. */
  public static boolean isEmbedded(URI endpoint) {
    return endpoint != null && EMBEDDED_SCHEME.equalsIgnoreCase(endpoint.getScheme());
  }

  /**
   * {@code endpoint} as an endpoint value: an embedded URI's path as written (decoded: {@link
   * URI#toString} would percent-encode, e.g., a space), any other URI as it is.
   */
  public static String text(URI endpoint) {
    return isEmbedded(endpoint) ? EMBEDDED_SCHEME + ":" + endpoint.getSchemeSpecificPart() : endpoint.toString();
  }

  /**
   * Checks the syntax of {@code endpoint} for its transport.
   *
   * @throws IllegalArgumentException naming option {@code endpoint}
   */
  public static void validate(String endpoint) {
    if (isEmbedded(endpoint)) {
      embeddedPath(endpoint);
    } else {
      flightUri(endpoint);
    }
  }

  /**
   * The data directory of an embedded endpoint, absolute (against this JVM's working directory)
   * and normalised: the key under which a JVM shares one engine per directory.
   *
   * @throws IllegalArgumentException when the endpoint names a host or no directory
   */
  public static Path embeddedPath(String endpoint) {
    String path = endpoint.substring(EMBEDDED_PREFIX.length());
    if (path.startsWith("//")) {
      if (!path.startsWith("///")) {
        throw new IllegalArgumentException("shoal: option 'endpoint' '" + endpoint + "' names a host; embedded "
            + "mode opens a data directory on the machine of the JVM that runs it: embedded:/path/to/data");
      }
      path = path.substring(2);
    }
    if (path.isBlank()) {
      throw new IllegalArgumentException(
          "shoal: option 'endpoint' '" + endpoint + "' names no data directory: embedded:/path/to/data");
    }
    try {
      return Paths.get(path).toAbsolutePath().normalize();
    } catch (InvalidPathException e) {
      throw new IllegalArgumentException(
          "shoal: option 'endpoint' '" + endpoint + "' has an invalid data directory: " + e.getMessage(), e);
    }
  }

  /**
   * A daemon endpoint as a URI with a Flight scheme and a host; {@code host:port} means plain gRPC
   * ({@code grpc://host:port}).
   *
   * @throws IllegalArgumentException naming option {@code endpoint}
   */
  public static URI flightUri(String endpoint) {
    String text = endpoint == null ? "" : endpoint.contains("://") ? endpoint : "grpc://" + endpoint;
    URI uri;
    try {
      uri = new URI(text);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("shoal: invalid option 'endpoint' '" + endpoint + "': " + EXPECTED, e);
    }
    if (uri.getScheme() == null || !FLIGHT_SCHEMES.contains(uri.getScheme()) || uri.getHost() == null) {
      throw new IllegalArgumentException("shoal: invalid option 'endpoint' '" + endpoint + "': " + EXPECTED);
    }
    return uri;
  }
}
