package dev.shoal.flink.sink;

import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;

/**
 * What {@link ShoalSink} needs of the Sink V2 API of Flink 1.20 only. This file is compiled into
 * shoal-flink-connector (Flink 1.20); shoal-flink2-connector has its own (Flink 2.x).
 *
 * <p>In 1.20, {@code Sink.createWriter(Sink.InitContext)} is still abstract (deprecated; Flink 2.0
 * removed it with {@code Sink.InitContext}), so a sink compiled against 1.20 implements it and
 * cannot load on 2.x. Flink 1.20's runtime creates and restores writers through the {@code
 * WriterInitContext} methods, which {@link ShoalSink} implements for both majors; this one is not
 * called by it and fails, as 1.20's own {@code StatefulSink.restoreWriter(Sink.InitContext, ...)}
 * does.
 */
interface FlinkMajorSink<InputT> extends Sink<InputT> {

  @Override
  @Deprecated
  default SinkWriter<InputT> createWriter(Sink.InitContext context) {
    throw new UnsupportedOperationException(
        "the shoal sink creates its writers through createWriter(WriterInitContext), which Flink 1.20's runtime "
            + "calls; Sink.InitContext is deprecated in Flink 1.20 and gone in 2.x");
  }
}
