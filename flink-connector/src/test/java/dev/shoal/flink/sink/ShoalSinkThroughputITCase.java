package dev.shoal.flink.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalTargetExtension;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Not part of the normal run: records/s of the sink in a MiniCluster (parallelism 2), the GitHub
 * events replayed from memory. {@code mvn -pl flink-connector verify -Dtest=ShoalSinkThroughputITCase
 * -Dshoal.flink.throughput.records=200000} (checkpoint interval: {@code
 * -Dshoal.flink.throughput.checkpoint-ms=1000}, 0 for none; {@code
 * -Dshoal.flink.throughput.mode=embedded} for the engine in this JVM instead of the daemon).
 */
@EnabledIfSystemProperty(named = "shoal.flink.throughput.records", matches = "\\d+")
class ShoalSinkThroughputITCase {

  @RegisterExtension
  static final MiniClusterExtension FLINK = new MiniClusterExtension(
      new MiniClusterResourceConfiguration.Builder().setNumberTaskManagers(1).setNumberSlotsPerTaskManager(2).build());

  @RegisterExtension
  static final ShoalTargetExtension SHOAL = new ShoalTargetExtension(null,
      TargetMode.valueOf(System.getProperty("shoal.flink.throughput.mode", "daemon").toUpperCase(java.util.Locale.ROOT)));

  /** The n-th event of the file, cycling; the lines are loaded once per JVM. */
  static final class NthEvent implements MapFunction<Long, String> {
    private static List<String> lines;

    static synchronized List<String> lines() throws Exception {
      if (lines == null) {
        lines = Files.readAllLines(ShoalDaemon.events(), StandardCharsets.UTF_8);
      }
      return lines;
    }

    @Override
    public String map(Long n) throws Exception {
      List<String> all = lines();
      return all.get((int) (n % all.size()));
    }
  }

  @ParameterizedTest
  @EnumSource(value = DeliveryGuarantee.class, names = {"NONE", "AT_LEAST_ONCE", "EXACTLY_ONCE"})
  void throughput(DeliveryGuarantee guarantee) throws Exception {
    long records = Long.parseLong(System.getProperty("shoal.flink.throughput.records"));
    String table = "throughput_" + guarantee.name().toLowerCase();
    SHOAL.createTable(table, "reject");
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(2);
    long checkpointMs = Long.getLong("shoal.flink.throughput.checkpoint-ms", 1000);
    if (checkpointMs > 0) {
      env.enableCheckpointing(checkpointMs);
    }
    NthEvent.lines();
    env.fromSequence(0, records - 1).map(new NthEvent())
        .sinkTo(ShoalSink.<String>builder().setEndpoint(SHOAL.endpoint()).setTable(table)
            .setDeliveryGuarantee(guarantee).build());
    long started = System.nanoTime();
    env.execute("throughput " + guarantee);
    double seconds = (System.nanoTime() - started) / 1e9;
    String stats = SHOAL.action("stats", "{\"table\":\"" + table + "\"}");
    int transactions = new com.fasterxml.jackson.databind.ObjectMapper()
        .readTree(SHOAL.action("list_transactions", "{\"table\":\"" + table + "\"}")).size();
    System.out.printf("THROUGHPUT %s %s (checkpoints every %d ms): %d records in %.2f s = %.0f records/s; "
            + "%d transactions; stats %s%n",
        SHOAL.mode(), guarantee, checkpointMs, records, seconds, records / seconds, transactions, stats);
    assertEquals(records, new com.fasterxml.jackson.databind.ObjectMapper().readTree(stats).get("records").asLong());
  }
}
