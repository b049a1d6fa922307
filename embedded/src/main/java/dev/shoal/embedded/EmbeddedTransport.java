package dev.shoal.embedded;

import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalClientOptions;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.client.ShoalTransport;

/**
 * The transport of {@code embedded:/path/to/data} endpoints for shoal's Java client: {@link
 * ShoalClient#open} finds it on the class path through this jar's {@code
 * META-INF/services/dev.shoal.client.ShoalTransport} and opens an {@link EmbeddedShoalClient}.
 */
public final class EmbeddedTransport implements ShoalTransport {
  @Override
  public String scheme() {
    return ShoalEndpoint.EMBEDDED_SCHEME;
  }

  @Override
  public ShoalClient open(String endpoint, ShoalClientOptions options) {
    return EmbeddedShoalClient.open(endpoint, options);
  }
}
