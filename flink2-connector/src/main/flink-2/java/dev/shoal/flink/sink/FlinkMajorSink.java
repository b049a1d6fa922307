package dev.shoal.flink.sink;

import org.apache.flink.api.connector.sink2.Sink;

/**
 * What {@link ShoalSink} needs of the Sink V2 API of Flink 2.x only: nothing - 2.x has the {@code
 * WriterInitContext} methods alone, and {@link ShoalSink} implements them for both majors. This
 * file is compiled into shoal-flink2-connector; shoal-flink-connector (Flink 1.20) has its own,
 * which implements the {@code Sink.InitContext} method that 1.20 still declares and 2.0 removed.
 */
interface FlinkMajorSink<InputT> extends Sink<InputT> {}
