package dev.shoal.flink.sink;

import java.io.Serializable;

/**
 * Says what each element does to its key in a keyed shoal table ({@link
 * ShoalSinkBuilder#setOperationExtractor}): the Flink SQL sink of a table with a {@code PRIMARY KEY}
 * maps {@code INSERT}/{@code UPDATE_AFTER} to {@link ShoalOperation#UPSERT}, {@code DELETE} to
 * {@link ShoalOperation#DELETE} and skips {@code UPDATE_BEFORE}, as the Elasticsearch and Paimon
 * upsert sinks do.
 */
@FunctionalInterface
public interface ShoalOperationExtractor<InputT> extends Serializable {

  /** The element's operation; null skips the element (it is not written). */
  ShoalOperation operation(InputT element);
}
