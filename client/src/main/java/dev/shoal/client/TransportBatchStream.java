package dev.shoal.client;

import org.apache.arrow.vector.VectorSchemaRoot;

/**
 * What both transports' {@link ShoalBatchStream}s share: whether the stream was read to its end,
 * and the rule that an error while closing counts only for a stream read to its end (closing one
 * early cancels it, which the transport may report as an error). A transport supplies how to load
 * the next batch, the current root, how to close, and its failure for an exception. Public for
 * the transports outside this package ({@link ShoalTransport}).
 */
public abstract class TransportBatchStream implements ShoalBatchStream {
  private boolean finished;

  /** Loads the next batch; false at the end. */
  protected abstract boolean load() throws Exception;

  /** The current batch. */
  protected abstract VectorSchemaRoot current() throws Exception;

  /** Closes the transport's stream; {@code finished}: it was read to its end (else cancel it first). */
  protected abstract void closeStream(boolean finished) throws Exception;

  /** The exception to throw for {@code e}. */
  protected abstract RuntimeException failure(Exception e);

  @Override
  public final boolean next() {
    try {
      boolean more = load();
      finished = !more;
      return more;
    } catch (Exception e) {
      throw failure(e);
    }
  }

  @Override
  public final VectorSchemaRoot root() {
    try {
      return current();
    } catch (Exception e) {
      throw failure(e);
    }
  }

  @Override
  public final void close() {
    try {
      closeStream(finished);
    } catch (Exception e) {
      if (finished) {
        throw failure(e);
      }
    }
  }
}
