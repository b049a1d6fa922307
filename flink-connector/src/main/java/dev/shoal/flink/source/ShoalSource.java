package dev.shoal.flink.source;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.util.UserCodeClassLoader;

/**
 * A Flink source (FLIP-27) that reads a shoal table, or the subset a filter selects, by log
 * address: bounded (a snapshot of the table as it was complete when the job started) or
 * unbounded (then follows the tail). Records are read as they were put ({@code "output": "json"})
 * and turned into {@code T} by a {@link DeserializationSchema} ({@code SimpleStringSchema} for the
 * JSON text, Flink's JSON format for rows).
 *
 * <pre>{@code
 * ShoalSource<String> source = ShoalSource.<String>builder()
 *     .setEndpoint("grpc://localhost:7700").setTable("events")
 *     .setFilter("type = 'PushEvent'")           // a PSF subset is what is followed
 *     .setDeserializer(new SimpleStringSchema())
 *     .build();
 * env.fromSource(source, WatermarkStrategy.noWatermarks(), "shoal events");
 * }</pre>
 *
 * <p>The log is cut into {@link ShoalSplit}s by address ({@link ShoalSplitEnumerator}); each
 * split's position is in the checkpoint, so a restored job resumes exactly where it stood: with
 * Flink's exactly-once checkpoints every record is emitted once (docs/flink.md, "Reading").
 * Watermarks come from Flink's {@code WatermarkStrategy} (a timestamp assigner over the
 * records). Implements the follower of docs/protocol.md, "Following a table" (FishStore §8's
 * recurring queries over the recent log, made continuous).
 */
public final class ShoalSource<T>
    implements Source<T, ShoalSplit, ShoalEnumeratorState>, ResultTypeQueryable<T> {

  private static final long serialVersionUID = 1L;

  private final ShoalSourceSettings settings;
  private final DeserializationSchema<T> deserializer;

  /** The source's settings (tests read a split directly with them). */
  ShoalSourceSettings settings() {
    return settings;
  }

  ShoalSource(ShoalSourceSettings settings, DeserializationSchema<T> deserializer) {
    this.settings = settings;
    this.deserializer = deserializer;
  }

  /** A builder; endpoint, table and deserializer are required. */
  public static <T> ShoalSourceBuilder<T> builder() {
    return new ShoalSourceBuilder<>();
  }

  @Override
  public Boundedness getBoundedness() {
    return settings.bounded() ? Boundedness.BOUNDED : Boundedness.CONTINUOUS_UNBOUNDED;
  }

  @Override
  public SplitEnumerator<ShoalSplit, ShoalEnumeratorState> createEnumerator(SplitEnumeratorContext<ShoalSplit> context) {
    return new ShoalSplitEnumerator(context, settings, new ShoalEnumeratorState(false, java.util.List.of()));
  }

  @Override
  public SplitEnumerator<ShoalSplit, ShoalEnumeratorState> restoreEnumerator(
      SplitEnumeratorContext<ShoalSplit> context, ShoalEnumeratorState state) {
    return new ShoalSplitEnumerator(context, settings, state);
  }

  @Override
  public SimpleVersionedSerializer<ShoalSplit> getSplitSerializer() {
    return ShoalSplit.Serializer.INSTANCE;
  }

  @Override
  public SimpleVersionedSerializer<ShoalEnumeratorState> getEnumeratorCheckpointSerializer() {
    return ShoalEnumeratorState.Serializer.INSTANCE;
  }

  @Override
  public SourceReader<T, ShoalSplit> createReader(SourceReaderContext context) throws Exception {
    deserializer.open(deserializerContext(context.metricGroup().addGroup("deserializer"), context.getUserCodeClassLoader()));
    Counter skippedBytes = context.metricGroup().counter("shoalSkippedBytes");
    return new ShoalSourceReader<>(
        () -> new ShoalSplitReader(settings, skippedBytes), new ShoalRecordEmitter<>(deserializer), context);
  }

  /** What {@link DeserializationSchema#open} is given: a metric group and the user-code class loader. */
  public static DeserializationSchema.InitializationContext deserializerContext(MetricGroup metrics, UserCodeClassLoader loader) {
    return new DeserializationSchema.InitializationContext() {
      @Override
      public MetricGroup getMetricGroup() {
        return metrics;
      }

      @Override
      public UserCodeClassLoader getUserCodeClassLoader() {
        return loader;
      }
    };
  }

  @Override
  public TypeInformation<T> getProducedType() {
    return deserializer.getProducedType();
  }
}
