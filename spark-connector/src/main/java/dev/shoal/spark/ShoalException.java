package dev.shoal.spark;

/**
 * An error of the shoal connector that a user can act on: the message names the table, the
 * endpoint and the option (or query part) to fix. When shoal itself refused a request, {@link
 * #code()} is its status code (the Flight/gRPC status name: {@code NOT_FOUND},
 * {@code INVALID_ARGUMENT}, ...; the same names in daemon and embedded mode).
 */
public class ShoalException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String code;

  public ShoalException(String message) {
    this(message, null, null);
  }

  public ShoalException(String message, Throwable cause) {
    this(message, null, cause);
  }

  /**
   * @param code the status code name shoal answered with, or null for errors of the connector
   */
  public ShoalException(String message, String code, Throwable cause) {
    super(message, cause);
    this.code = code;
  }

  /** The status code name shoal answered with ({@code NOT_FOUND}, ...), or null. */
  public String code() {
    return code;
  }

  /** Whether shoal answered with status {@code code}. */
  public boolean is(String statusCode) {
    return statusCode.equals(code);
  }
}
