package dev.shoal.flink.sink;

import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.connector.base.sink.writer.ElementConverter;

/**
 * Turns each element into one JSON document (UTF-8 bytes) with a {@link SerializationSchema}: the
 * request entry of the sink. The schema must produce exactly one JSON document per element (Flink's
 * {@code json} format does, and so does {@code SimpleStringSchema} over JSON strings).
 */
final class SerializationSchemaElementConverter<InputT> implements ElementConverter<InputT, byte[]> {
  private static final long serialVersionUID = 1L;

  private final SerializationSchema<InputT> schema;
  private boolean opened;

  SerializationSchemaElementConverter(SerializationSchema<InputT> schema) {
    this.schema = schema;
  }

  /**
   * Opens the schema once; {@link ShoalWriter} calls it (not {@code ElementConverter.open}, whose
   * parameter type differs between Flink 1.20 and 2.x).
   */
  void openSchema(SerializationSchema.InitializationContext context) {
    if (opened) {
      return;
    }
    try {
      schema.open(context);
    } catch (Exception e) {
      throw new IllegalStateException("could not open the serialization schema of the shoal sink", e);
    }
    opened = true;
  }

  @Override
  public byte[] apply(InputT element, SinkWriter.Context context) {
    return schema.serialize(element);
  }
}
