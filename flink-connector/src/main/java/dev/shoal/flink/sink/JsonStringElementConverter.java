package dev.shoal.flink.sink;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.connector.base.sink.writer.ElementConverter;

/** The converter of a sink without a serialization schema: each element is a String holding one JSON document. */
final class JsonStringElementConverter<InputT> implements ElementConverter<InputT, byte[]> {
  private static final long serialVersionUID = 1L;

  @Override
  public byte[] apply(InputT element, SinkWriter.Context context) {
    if (element instanceof String s) {
      return s.getBytes(StandardCharsets.UTF_8);
    }
    throw new IllegalArgumentException(
        "shoal sink without a serialization schema takes String elements (one JSON document each), got "
            + (element == null ? "null" : element.getClass().getName())
            + "; call ShoalSinkBuilder.setSerializationSchema(...)");
  }
}
