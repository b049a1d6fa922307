package dev.shoal.flink.sink;

/**
 * What a record does to its key in a keyed shoal table (one created with a {@code primary_key}):
 * docs/protocol.md, "Keyed tables". A sink writes each record with one (the {@code op} column of
 * its {@code DoPut} batch); an append-only table takes only {@link #UPSERT}.
 */
public enum ShoalOperation {
  /** The record becomes its key's latest version (an insert of a new key). */
  UPSERT("upsert"),
  /** The record's key is deleted; the record needs only the key. */
  DELETE("delete"),
  /** RFC 7386 JSON Merge Patch onto the key's latest version (a partial update). */
  MERGE("merge");

  private final String wireName;

  ShoalOperation(String wireName) {
    this.wireName = wireName;
  }

  /** The value of the {@code op} column: {@code upsert}, {@code delete} or {@code merge}. */
  public String wireName() {
    return wireName;
  }
}
