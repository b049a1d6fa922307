package dev.shoal.client;

import org.apache.arrow.vector.VectorSchemaRoot;

/**
 * The record batches of one endpoint ({@code DoGet}): a Flight stream from a daemon, or the
 * engine's C stream in embedded mode. The batches are the transport's own buffers (no copy); each
 * is valid until the next {@link #next()} or {@link #close()}.
 */
public interface ShoalBatchStream extends AutoCloseable {
  /** Loads the next batch into {@link #root()}; false at the end. Errors are {@link ShoalClientException}s (or what the client options make of them). */
  boolean next();

  /** The current batch. */
  VectorSchemaRoot root();

  /**
   * Closes the stream. A stream not read to its end is cancelled first (the scan stops early);
   * an error while closing is reported only for a stream that was read to its end.
   */
  @Override
  void close();
}
