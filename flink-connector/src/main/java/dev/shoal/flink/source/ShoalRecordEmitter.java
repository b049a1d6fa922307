package dev.shoal.flink.source;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.connector.base.source.reader.RecordEmitter;
import org.apache.flink.util.Collector;

/**
 * Turns a record's JSON bytes into {@code T} with the source's {@link DeserializationSchema} and
 * moves its split's position past it; a progress mark only moves the position.
 */
final class ShoalRecordEmitter<T> implements RecordEmitter<ShoalSourceRecord, T, ShoalSourceReader.Position> {

  private final DeserializationSchema<T> deserializer;
  private final OutputCollector<T> collector = new OutputCollector<>();

  ShoalRecordEmitter(DeserializationSchema<T> deserializer) {
    this.deserializer = deserializer;
  }

  @Override
  public void emitRecord(ShoalSourceRecord element, SourceOutput<T> output, ShoalSourceReader.Position position)
      throws Exception {
    if (element.json() != null) {
      collector.output = output;
      try {
        deserializer.deserialize(element.json(), collector);
      } catch (java.io.IOException e) {
        throw new java.io.IOException("shoal source: cannot deserialize the record at log address " + element.address()
            + " of " + position.split + ": " + e.getMessage(), e);
      }
    }
    position.next = Math.max(position.next, element.next());
  }

  private static final class OutputCollector<T> implements Collector<T> {
    SourceOutput<T> output;

    @Override
    public void collect(T record) {
      output.collect(record);
    }

    @Override
    public void close() {}
  }
}
