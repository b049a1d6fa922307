package dev.shoal.embedded;

import java.io.IOException;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.dictionary.Dictionary;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The reader {@link ShoalEmbedded#read(byte[])} returns: Arrow's C stream reader (the batches are
 * the engine's buffers, not copies) behind a guard, so that a closed stream answers with a {@link
 * ShoalEmbeddedException} (code {@code CLOSED}) instead of touching freed memory, and errors of the
 * native scan arrive as {@link ShoalEmbeddedException} with the engine's code.
 *
 * <p>{@link #bytesRead()} counts the buffer bytes of the batches loaded so far.
 *
 * <p>Loading and closing are mutually exclusive (a close from another thread, e.g. {@link
 * ShoalEmbedded#close()}, waits for a load in progress), so the C stream is never released under a
 * running {@code get_next}.
 */
final class ShoalStreamReader extends ArrowReader {
  private static final String OPERATION = "read";
  private static final Pattern CODE =
      Pattern.compile(
          "\\b(CANCELLED|UNKNOWN|INVALID_ARGUMENT|DEADLINE_EXCEEDED|NOT_FOUND|ALREADY_EXISTS"
              + "|PERMISSION_DENIED|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE"
              + "|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS|UNAUTHENTICATED|CLOSED|PANIC)\\b");

  private final ArrowReader stream;
  private final Runnable onClose;
  private volatile boolean closed;
  private long bytesRead;

  ShoalStreamReader(BufferAllocator allocator, ArrowReader stream, Runnable onClose) {
    super(allocator);
    this.stream = stream;
    this.onClose = onClose;
  }

  @Override
  public synchronized VectorSchemaRoot getVectorSchemaRoot() {
    ensureOpen();
    try {
      return stream.getVectorSchemaRoot();
    } catch (IOException | RuntimeException e) {
      throw translate(e);
    }
  }

  @Override
  public synchronized boolean loadNextBatch() {
    ensureOpen();
    try {
      boolean loaded = stream.loadNextBatch();
      if (loaded) {
        for (FieldVector vector : stream.getVectorSchemaRoot().getFieldVectors()) {
          bytesRead += vector.getBufferSize();
        }
      }
      return loaded;
    } catch (IOException | RuntimeException e) {
      throw translate(e);
    }
  }

  @Override
  public long bytesRead() {
    return bytesRead;
  }

  @Override
  public Map<Long, Dictionary> getDictionaryVectors() {
    ensureOpen();
    try {
      return stream.getDictionaryVectors();
    } catch (IOException e) {
      throw translate(e);
    }
  }

  @Override
  public Dictionary lookup(long id) {
    ensureOpen();
    return stream.lookup(id);
  }

  @Override
  public Set<Long> getDictionaryIds() {
    ensureOpen();
    return stream.getDictionaryIds();
  }

  /** Closes the stream (stopping the native scan if it is still running); idempotent. */
  @Override
  public void close() {
    close(true);
  }

  @Override
  public synchronized void close(boolean closeReadSource) {
    if (closed) {
      return;
    }
    closed = true;
    try {
      stream.close(closeReadSource);
    } catch (IOException e) {
      throw translate(e);
    } finally {
      onClose.run();
    }
  }

  @Override
  protected void closeReadSource() {
    // close(boolean) closes the wrapped stream, read source included.
  }

  @Override
  protected Schema readSchema() {
    return getVectorSchemaRoot().getSchema();
  }

  private void ensureOpen() {
    if (closed) {
      throw new ShoalEmbeddedException(OPERATION, ShoalEmbeddedException.CLOSED, "the stream is closed");
    }
  }

  private static ShoalEmbeddedException translate(Exception e) {
    if (e instanceof ShoalEmbeddedException shoal) {
      return shoal;
    }
    String message = e.getMessage() == null ? e.toString() : e.getMessage();
    Matcher code = CODE.matcher(message);
    return new ShoalEmbeddedException(OPERATION, code.find() ? code.group(1) : "INTERNAL", message, e);
  }
}
