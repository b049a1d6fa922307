package dev.shoal.flink.sink;

import java.io.Serializable;
import java.time.Duration;

/**
 * Exponential backoff for transient errors: attempt {@code n} (1-based) of a retry waits {@code
 * min(initialBackoff * 2^(n-1), maxBackoff)}; after {@code maxRetries} retries the error is
 * permanent.
 */
public record RetryPolicy(int maxRetries, Duration initialBackoff, Duration maxBackoff) implements Serializable {

  public RetryPolicy {
    if (maxRetries < 0) {
      throw new IllegalArgumentException("maxRetries must be >= 0, was " + maxRetries);
    }
    if (initialBackoff.isNegative() || maxBackoff.compareTo(initialBackoff) < 0) {
      throw new IllegalArgumentException(
          "backoff must satisfy 0 <= initial (" + initialBackoff + ") <= max (" + maxBackoff + ")");
    }
  }

  /** Milliseconds to wait before retry number {@code retry} (1-based). */
  public long backoffMillis(int retry) {
    long initial = initialBackoff.toMillis();
    int shift = Math.min(Math.max(retry - 1, 0), 30);
    long delay = initial << shift;
    if (delay < initial) {
      delay = Long.MAX_VALUE;
    }
    return Math.min(delay, maxBackoff.toMillis());
  }
}
