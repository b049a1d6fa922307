package dev.shoal.client;

import java.time.Duration;
import java.util.Map;
import java.util.function.Function;

/**
 * How a {@link ShoalClient} talks to its endpoint.
 *
 * @param token bearer token for a daemon ({@code authorization: Bearer <token>}); null or empty
 *     for none; ignored in embedded mode
 * @param callTimeout deadline of each Flight call; null: none (a plan still has 120 s);
 *     embedded calls have none
 * @param embeddedConfig the engine's configuration keys (the daemon's, values as text), applied
 *     when this JVM opens the engine; embedded mode only
 * @param embeddedKeepAliveMillis how long the engine stays open after the last client of this JVM
 *     released it, in milliseconds; embedded mode only
 * @param idleCloseMillis how long a pooled Flight connection without clients stays open for the
 *     next one, in milliseconds ({@link FlightConnections}); 0: it closes with its last client,
 *     and that close waits for its threads to end
 * @param errors turns every failure of a request into the exception the caller throws (a
 *     connector's advice); the identity by default
 */
public record ShoalClientOptions(
    String token,
    Duration callTimeout,
    Map<String, String> embeddedConfig,
    long embeddedKeepAliveMillis,
    long idleCloseMillis,
    Function<ShoalClientException, RuntimeException> errors) {

  /** Default keep-alive of an embedded engine after its last client, in milliseconds. */
  public static final long DEFAULT_EMBEDDED_KEEP_ALIVE_MS = 30_000;

  /** Default idle time of a pooled Flight connection, in milliseconds. */
  public static final long DEFAULT_IDLE_CLOSE_MS = 30_000;

  public ShoalClientOptions {
    embeddedConfig = embeddedConfig == null ? Map.of() : Map.copyOf(embeddedConfig);
    errors = errors == null ? e -> e : errors;
    if (embeddedKeepAliveMillis < 0 || idleCloseMillis < 0) {
      throw new IllegalArgumentException("shoal client: keep-alive and idle times must be >= 0 ms");
    }
  }

  /** The defaults with bearer {@code token} (null: none). */
  public static ShoalClientOptions withToken(String token) {
    return new ShoalClientOptions(token, null, Map.of(), DEFAULT_EMBEDDED_KEEP_ALIVE_MS, DEFAULT_IDLE_CLOSE_MS, null);
  }

  /** The caller's exception for {@code failure} (what {@link #errors} makes of it; a transport throws this). */
  public RuntimeException fail(ShoalClientException failure) {
    RuntimeException translated = errors.apply(failure);
    return translated == null ? failure : translated;
  }
}
