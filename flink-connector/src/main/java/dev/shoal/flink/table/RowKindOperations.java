package dev.shoal.flink.table;

import dev.shoal.flink.sink.ShoalOperation;
import dev.shoal.flink.sink.ShoalOperationExtractor;
import org.apache.flink.table.data.RowData;

/**
 * The operation of each row of an upsert changelog (a Flink SQL table with a {@code PRIMARY KEY}
 * writing into a keyed shoal table): {@code INSERT} and {@code UPDATE_AFTER} upsert, {@code DELETE}
 * deletes, {@code UPDATE_BEFORE} is skipped (the key's next version replaces it), as the
 * Elasticsearch and Paimon upsert sinks do.
 */
final class RowKindOperations implements ShoalOperationExtractor<RowData> {
  private static final long serialVersionUID = 1L;

  @Override
  public ShoalOperation operation(RowData row) {
    return switch (row.getRowKind()) {
      case INSERT, UPDATE_AFTER -> ShoalOperation.UPSERT;
      case DELETE -> ShoalOperation.DELETE;
      case UPDATE_BEFORE -> null;
    };
  }
}
