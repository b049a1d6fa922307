package dev.shoal.flink.sink;

import java.net.URL;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalTarget;
import dev.shoal.flink.ShoalTargetExtension;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.testframe.TestResource;
import org.apache.flink.connector.testframe.environment.MiniClusterTestEnvironment;
import org.apache.flink.connector.testframe.external.ExternalContextFactory;
import org.apache.flink.connector.testframe.external.ExternalSystemDataReader;
import org.apache.flink.connector.testframe.external.sink.DataStreamSinkV2ExternalContext;
import org.apache.flink.connector.testframe.external.sink.TestingSinkSettings;
import org.apache.flink.connector.testframe.junit.annotations.TestContext;
import org.apache.flink.connector.testframe.junit.annotations.TestEnv;
import org.apache.flink.connector.testframe.junit.annotations.TestExternalSystem;
import org.apache.flink.connector.testframe.junit.annotations.TestSemantics;
import org.apache.flink.connector.testframe.testsuites.SinkTestSuiteBase;
import org.apache.flink.core.execution.CheckpointingMode;

/**
 * Flink's connector conformance suite for sinks ({@code SinkTestSuiteBase}: basic sink, restart
 * from a savepoint with the same, a higher and a lower parallelism, {@code numRecordsOut}) run
 * against the real daemon ({@link ShoalSinkConformanceDaemonITCase}) and the engine in this JVM
 * ({@link ShoalSinkConformanceEmbeddedITCase}), at-least-once and exactly-once (under exactly-once
 * the suite checks that the table holds exactly the records of the completed checkpoints).
 */
abstract class ShoalSinkConformanceITCase extends SinkTestSuiteBase<String> {

  @TestEnv
  MiniClusterTestEnvironment flink = new MiniClusterTestEnvironment();

  @TestExternalSystem
  TargetResource shoal = new TargetResource(ShoalTargetExtension.modeOf(getClass()));

  @TestSemantics
  CheckpointingMode[] semantics =
      new CheckpointingMode[] {CheckpointingMode.AT_LEAST_ONCE, CheckpointingMode.EXACTLY_ONCE};

  @TestContext
  ExternalContextFactory<ShoalContext> contexts = testName -> new ShoalContext(shoal.target);

  /** The daemon or the embedded directory (by the concrete class's {@link ShoalMode}) as the suite's external system. */
  static final class TargetResource implements TestResource {
    final ShoalTarget target;

    TargetResource(TargetMode mode) {
      this.target = ShoalTargetExtension.create(mode, null);
    }

    @Override
    public void startUp() throws Exception {
      target.start();
    }

    @Override
    public void tearDown() throws Exception {
      target.stop();
    }
  }

  /** One fresh table per test case; records are {@code {"id":"..."}} documents. */
  static final class ShoalContext implements DataStreamSinkV2ExternalContext<String> {
    private static int tables;
    private final ShoalTarget shoal;
    private final String table;

    ShoalContext(ShoalTarget shoal) {
      this.shoal = shoal;
      synchronized (ShoalContext.class) {
        this.table = "conformance_" + (++tables);
      }
      shoal.createTable(table, "reject");
    }

    @Override
    public Sink<String> createSink(TestingSinkSettings settings) {
      boolean exactlyOnce =
          settings.getCheckpointingMode() == org.apache.flink.streaming.api.CheckpointingMode.EXACTLY_ONCE;
      return ShoalSink.<String>builder()
          .setEndpoint(shoal.endpoint())
          .setTable(table)
          .setDeliveryGuarantee(exactlyOnce ? DeliveryGuarantee.EXACTLY_ONCE : DeliveryGuarantee.AT_LEAST_ONCE)
          .setMaxBatchSize(50)
          .setMaxTimeInBuffer(Duration.ofMillis(100))
          .build();
    }

    /** Reads the table in log order and returns the rows past those already returned. */
    @Override
    public ExternalSystemDataReader<String> createSinkDataReader(TestingSinkSettings settings) {
      return new ExternalSystemDataReader<>() {
        private int returned;

        @Override
        public List<String> poll(Duration timeout) {
          try {
            List<String> ids = shoal.column(table, "id");
            List<String> fresh = new ArrayList<>();
            for (String id : ids.subList(Math.min(returned, ids.size()), ids.size())) {
              fresh.add(record(id));
            }
            returned = ids.size();
            if (fresh.isEmpty()) {
              Thread.sleep(Math.min(timeout.toMillis(), 200));
            }
            return fresh;
          } catch (Exception e) {
            // The table is empty until the first batch arrives ("unknown column"): nothing yet.
            return Collections.emptyList();
          }
        }

        @Override
        public void close() {}
      };
    }

    static String record(String id) {
      return "{\"id\":\"" + id + "\"}";
    }

    @Override
    public List<String> generateTestData(TestingSinkSettings settings, long seed) {
      Random random = new Random(seed);
      int count = 100 + random.nextInt(200);
      List<String> records = new ArrayList<>(count);
      for (int i = 0; i < count; i++) {
        records.add(record(seed + "-" + i + "-" + Long.toHexString(random.nextLong())));
      }
      return records;
    }

    @Override
    public TypeInformation<String> getProducedType() {
      return Types.STRING;
    }

    @Override
    public List<URL> getConnectorJarPaths() {
      return Collections.emptyList();
    }

    @Override
    public void close() {}

    @Override
    public String toString() {
      return "shoal table " + table;
    }
  }
}
