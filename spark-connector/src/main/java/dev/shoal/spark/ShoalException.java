package dev.shoal.spark;

/**
 * An error of the shoal connector that a user can act on: the message names the table, the
 * endpoint and the option (or query part) to fix.
 */
public class ShoalException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public ShoalException(String message) {
    super(message);
  }

  public ShoalException(String message, Throwable cause) {
    super(message, cause);
  }
}
