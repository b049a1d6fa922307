package dev.shoal.flink.source;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalTableClient;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Not part of the normal run: the end-to-end latency of {@link ShoalSource} (its target:
 * from the DoPut acknowledgement to the record leaving the source, at most the poll interval + 50
 * ms at 10,000 records/s), and the log bytes a follower of a 2 %-selective PSF reads against one
 * without a filter (target: at least 10× fewer). A writer thread puts 100 records every 10 ms
 * for {@code shoal.flink.latency.seconds}; two followers (parallelism 1, poll interval 100 ms)
 * run meanwhile, one over the whole table and one over {@code kind = 'rare'} (every 50th record,
 * a projection PSF on kind); the bytes come from the daemon's {@code
 * shoal_scan_record_bytes_total} (full scans vs index scans).
 *
 * <pre>{@code
 * mvn -pl flink-connector -am verify -Dtest=ShoalSourceLatencyITCase -Dshoal.flink.latency.seconds=20 \
 *   -Dshoal.bin=$PWD/target/release/shoal -Dshoal.cargo.skip=true -Dsurefire.failIfNoSpecifiedTests=false
 * }</pre>
 */
@EnabledIfSystemProperty(named = "shoal.flink.latency.seconds", matches = "\\d+")
class ShoalSourceLatencyITCase {

  static final int METRICS_PORT = ShoalDaemon.freePort();

  @RegisterExtension
  static final MiniClusterExtension FLINK = new MiniClusterExtension(
      new MiniClusterResourceConfiguration.Builder().setNumberTaskManagers(1).setNumberSlotsPerTaskManager(2).build());

  @RegisterExtension
  static final ShoalDaemon SHOAL = new ShoalDaemon(null, List.of("--metrics-listen", "127.0.0.1:" + METRICS_PORT));

  /** When the writer saw each record's batch acknowledged (System.nanoTime), by record id. */
  static final Map<Long, Long> ACKED = new ConcurrentHashMap<>();
  /** Milliseconds from acknowledgement to emission, per follower ("all" / "rare"). */
  static final Map<String, ConcurrentLinkedQueue<Double>> LATENCY = new ConcurrentHashMap<>();

  static final class Measure implements MapFunction<String, String> {
    private final String follower;

    Measure(String follower) {
      this.follower = follower;
    }

    @Override
    public String map(String json) {
      long now = System.nanoTime();
      int at = json.indexOf("\"id\":") + 5;
      long id = Long.parseLong(json.substring(at, json.indexOf(',', at)));
      Long acked = ACKED.get(id);
      // Emitted before the writer saw its acknowledgement: latency 0 (the record was complete first).
      double ms = acked == null ? 0 : Math.max(0, (now - acked) / 1e6);
      LATENCY.computeIfAbsent(follower, f -> new ConcurrentLinkedQueue<>()).add(ms);
      return json;
    }
  }

  private static JobClient follow(String name, String filter) throws Exception {
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(1);
    env.fromSource(ShoalSource.<String>builder().setEndpoint(SHOAL.endpoint()).setTable("latency")
            .setDeserializer(new SimpleStringSchema()).setFilter(filter).startFromLatest()
            .setPollInterval(Duration.ofMillis(100)).build(), WatermarkStrategy.noWatermarks(), "follow " + name)
        .map(new Measure(name))
        .sinkTo(new org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink<>());
    return env.executeAsync("follow " + name);
  }

  private static Map<String, Double> recordBytes() throws Exception {
    String body = HttpClient.newHttpClient().send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + METRICS_PORT + "/metrics")).build(),
        HttpResponse.BodyHandlers.ofString()).body();
    Map<String, Double> bytes = new java.util.TreeMap<>();
    Matcher m = Pattern.compile("shoal_scan_record_bytes_total\\{([^}]*)\\} (\\S+)").matcher(body);
    while (m.find()) {
      if (m.group(1).contains("table=\"latency\"")) {
        String kind = m.group(1).replaceAll(".*kind=\"(\\w+)\".*", "$1");
        bytes.merge(kind, Double.parseDouble(m.group(2)), Double::sum);
      }
    }
    return bytes;
  }

  private static String distribution(List<Double> values) {
    double[] v = values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    if (v.length == 0) {
      return "no records";
    }
    return String.format("n=%d p50=%.1f p90=%.1f p99=%.1f max=%.1f mean=%.1f ms", v.length, v[v.length / 2],
        v[(int) (v.length * 0.9)], v[(int) (v.length * 0.99)], v[v.length - 1], Arrays.stream(v).average().orElse(0));
  }

  @Test
  void latencyFromAcknowledgementToEmissionAndBytesReadByASelectiveFollower() throws Exception {
    int seconds = Integer.getInteger("shoal.flink.latency.seconds");
    SHOAL.createTable("latency", "reject");
    SHOAL.action("register_psf", "{\"table\": \"latency\", \"name\": \"kind\", \"kind\": \"projection\", \"field\": \"kind\"}");
    JobClient all = follow("all", null);
    JobClient rare = follow("rare", "kind = 'rare'");
    Thread.sleep(3000); // both followers running and caught up (startFromLatest on an empty table)
    String pad = "x".repeat(300);
    long written = 0;
    try (ShoalTableClient client = ShoalTableClient.open(SHOAL.endpoint(), "latency", ShoalClientOptions.of(null, Duration.ofSeconds(30)))) {
      long start = System.nanoTime();
      for (int tick = 0; tick < seconds * 100; tick++) {
        long due = start + tick * 10_000_000L;
        long wait = due - System.nanoTime();
        if (wait > 0) {
          TimeUnit.NANOSECONDS.sleep(wait);
        }
        List<byte[]> batch = new ArrayList<>(100);
        long bytes = 0;
        List<Long> ids = new ArrayList<>(100);
        for (int i = 0; i < 100; i++, written++) {
          byte[] record = ("{\"id\":" + written + ",\"kind\":\"" + (written % 50 == 0 ? "rare" : "common")
              + "\",\"pad\":\"" + pad + "\"}").getBytes(StandardCharsets.UTF_8);
          batch.add(record);
          bytes += record.length;
          ids.add(written);
        }
        client.put(batch, bytes);
        long acked = System.nanoTime();
        ids.forEach(id -> ACKED.put(id, acked));
      }
      double rate = written / ((System.nanoTime() - start) / 1e9);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while ((size("all") < written || size("rare") < written / 50) && System.nanoTime() < deadline) {
        Thread.sleep(100);
      }
      all.cancel().get(30, TimeUnit.SECONDS);
      rare.cancel().get(30, TimeUnit.SECONDS);
      Map<String, Double> bytes = recordBytes();
      System.out.printf("shoal source latency bench: %d records in %d s (%.0f records/s), poll interval 100 ms%n",
          written, seconds, rate);
      System.out.println("  follower of the whole table:     " + distribution(new ArrayList<>(LATENCY.get("all"))));
      System.out.println("  follower of kind = 'rare' (2 %): " + distribution(new ArrayList<>(LATENCY.get("rare"))));
      System.out.printf("  log bytes read: full scans (whole-table follower) %.0f, index scans (PSF follower) %.0f: %.1fx fewer%n",
          bytes.getOrDefault("full", 0.0), bytes.getOrDefault("index", 0.0),
          bytes.getOrDefault("full", 0.0) / Math.max(1, bytes.getOrDefault("index", 0.0)));
      assertEquals(written, size("all"), "the whole-table follower emitted every record");
      assertEquals(written / 50, size("rare"), "the PSF follower emitted every rare record");
    }
  }

  private static long size(String follower) {
    ConcurrentLinkedQueue<Double> q = LATENCY.get(follower);
    return q == null ? 0 : q.size();
  }
}
