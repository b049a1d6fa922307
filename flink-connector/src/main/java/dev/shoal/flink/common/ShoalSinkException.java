package dev.shoal.flink.common;

/**
 * A permanent failure of the shoal sink: the message names the table and the endpoint, and for a
 * record the daemon rejected, the record's index in its batch and its text. Retrying does not help;
 * the job fails.
 */
public class ShoalSinkException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public ShoalSinkException(String message, Throwable cause) {
    super(message, cause);
  }

  public ShoalSinkException(String message) {
    super(message);
  }
}
