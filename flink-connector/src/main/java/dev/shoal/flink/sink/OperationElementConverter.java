package dev.shoal.flink.sink;

import dev.shoal.flink.common.OperationEntries;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.connector.base.sink.writer.ElementConverter;

/**
 * A converter that also writes each element's {@link ShoalOperation} ({@link OperationEntries}), as
 * its {@link ShoalOperationExtractor} says; an element it says to skip is not written ({@link
 * ShoalWriter#write}).
 */
final class OperationElementConverter<InputT> implements ElementConverter<InputT, byte[]> {
  private static final long serialVersionUID = 1L;

  private final ElementConverter<InputT, byte[]> documents;
  private final ShoalOperationExtractor<InputT> operations;

  OperationElementConverter(ElementConverter<InputT, byte[]> documents, ShoalOperationExtractor<InputT> operations) {
    this.documents = documents;
    this.operations = operations;
  }

  /** The converter of the elements' JSON documents. */
  ElementConverter<InputT, byte[]> documents() {
    return documents;
  }

  /** Whether the element is skipped (its operation is null). */
  boolean skips(InputT element) {
    return operations.operation(element) == null;
  }

  @Override
  public byte[] apply(InputT element, SinkWriter.Context context) {
    ShoalOperation operation = operations.operation(element);
    return OperationEntries.encode(operation == null ? ShoalOperation.UPSERT : operation, documents.apply(element, context));
  }
}
