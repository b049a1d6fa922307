package dev.shoal.flink.common;

import java.util.List;
import dev.shoal.flink.sink.ShoalOperation;

/**
 * The sink's request entries with an operation: a record's JSON bytes, prefixed by one byte for
 * {@link ShoalOperation#DELETE} (1) or {@link ShoalOperation#MERGE} (2); an upsert has no prefix (so
 * the entries of sinks without operations, and the buffered entries of their checkpoints, are the
 * plain JSON documents they always were). A JSON document never starts with byte 1 or 2.
 */
public final class OperationEntries {

  private static final byte DELETE = 1;
  private static final byte MERGE = 2;

  private OperationEntries() {}

  /** The entry of {@code json} written with {@code operation}. */
  public static byte[] encode(ShoalOperation operation, byte[] json) {
    if (operation == ShoalOperation.UPSERT) {
      return json;
    }
    byte[] entry = new byte[json.length + 1];
    entry[0] = operation == ShoalOperation.DELETE ? DELETE : MERGE;
    System.arraycopy(json, 0, entry, 1, json.length);
    return entry;
  }

  /** The entry's operation. */
  public static ShoalOperation operation(byte[] entry) {
    if (entry.length > 0 && entry[0] == DELETE) {
      return ShoalOperation.DELETE;
    }
    if (entry.length > 0 && entry[0] == MERGE) {
      return ShoalOperation.MERGE;
    }
    return ShoalOperation.UPSERT;
  }

  /** Where the entry's JSON document starts (after its operation byte, if any). */
  public static int jsonOffset(byte[] entry) {
    return jsonOffset(operation(entry));
  }

  /** Where the JSON document of an entry with {@code operation} starts. */
  public static int jsonOffset(ShoalOperation operation) {
    return operation == ShoalOperation.UPSERT ? 0 : 1;
  }

  /** Whether any entry of the batch has an operation other than upsert (the batch needs an {@code op} column). */
  public static boolean anyOperation(List<byte[]> entries) {
    for (byte[] entry : entries) {
      if (operation(entry) != ShoalOperation.UPSERT) {
        return true;
      }
    }
    return false;
  }
}
