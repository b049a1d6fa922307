package dev.shoal.client;

/**
 * A transport that {@link ShoalClient#open(String, ShoalClientOptions)} finds on the class path
 * ({@link java.util.ServiceLoader}, {@code META-INF/services/dev.shoal.client.ShoalTransport}) for
 * the endpoints of its scheme. The Flight transport ({@code grpc://}, {@code grpc+tls://}, {@code
 * host:port}) is the client's own; the embedded engine's ({@code embedded:/path/to/data}) is
 * {@code dev.shoal.embedded.EmbeddedTransport} in shoal-embedded, which depends on this module:
 * without that jar an embedded endpoint cannot be opened.
 */
public interface ShoalTransport {
  /** The endpoint scheme this transport serves (compared case-insensitively), e.g. {@code embedded}. */
  String scheme();

  /**
   * A client of {@code endpoint} (of this transport's scheme).
   *
   * @throws IllegalArgumentException on a malformed endpoint (naming option {@code endpoint})
   * @throws RuntimeException what {@code options.errors} makes of a failure to open it (request
   *     {@link ShoalClientException#OPEN})
   */
  ShoalClient open(String endpoint, ShoalClientOptions options);
}
