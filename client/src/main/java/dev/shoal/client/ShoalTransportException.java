package dev.shoal.client;

/**
 * A failure that a transport below the client reports in shoal's status vocabulary: the status
 * code name as the transport said it, and its message. The embedded engine's errors are these
 * ({@code dev.shoal.embedded.ShoalEmbeddedException}, which its native code constructs), so that
 * {@link ShoalStatus} reads their code anywhere in a cause chain without this module depending on
 * the embedded one. A client wraps them in a {@link ShoalClientException} naming the request,
 * table and endpoint.
 */
public abstract class ShoalTransportException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /**
   * @param message the exception's message (the transport's own format)
   * @param cause the underlying exception, or null
   */
  protected ShoalTransportException(String message, Throwable cause) {
    super(message, cause);
  }

  /** The status code name as the transport said it ({@code NOT_FOUND}, {@code CLOSED}, ...); never null. */
  public abstract String code();

  /** The message without the transport's prefix. */
  public abstract String detail();
}
