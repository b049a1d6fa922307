package dev.shoal.embedded;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.AsyncPutListener;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowReader;

/**
 * Embedded (JNI) against the daemon over loopback Flight, the same work both ways: ingest the
 * GitHub events file {@code rounds} times in batches of {@code batch} records, then a full scan of
 * three columns, then point lookups of single events by {@code id} (a projection PSF on {@code
 * id}, registered before ingestion on both sides). Run by {@code bench/embedded_bench.sh}.
 *
 * <p>Arguments: {@code --bin PATH} (the daemon), {@code --data FILE}, {@code --rounds N} (5),
 * {@code --batch N} (1000), {@code --lookups N} (200). Prints a table.
 */
public final class EmbeddedBench {
  private static final String TABLE = "events";
  private static final List<String> SCAN_COLUMNS = List.of("id", "type", "actor.login");

  private EmbeddedBench() {}

  /** Timing of one side. */
  private record Figures(double ingestSeconds, long ingestBytes, double scanSeconds, long scanRows,
      long scanArrowBytes, double lookupMillis, long lookupRowsFound) {}

  public static void main(String[] args) throws Exception {
    Map<String, String> options = new java.util.HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
    }
    Path bin = Path.of(options.getOrDefault("bin", "target/debug/shoal"));
    Path data = Path.of(options.getOrDefault("data", "data/github/events.ndjson"));
    int rounds = Integer.parseInt(options.getOrDefault("rounds", "5"));
    int batch = Integer.parseInt(options.getOrDefault("batch", "1000"));
    int lookups = Integer.parseInt(options.getOrDefault("lookups", "200"));

    List<byte[]> records = new ArrayList<>();
    for (String line : Files.readAllLines(data, StandardCharsets.UTF_8)) {
      if (!line.isBlank()) {
        records.add(line.getBytes(StandardCharsets.UTF_8));
      }
    }
    long fileBytes = records.stream().mapToLong(r -> r.length).sum();
    List<String> ids = new ArrayList<>();
    Random random = new Random(42);
    for (int i = 0; i < lookups; i++) {
      ids.add(TestData.parse(new String(records.get(random.nextInt(records.size())), StandardCharsets.UTF_8))
          .path("id").asText());
    }
    System.out.printf("data: %s (%,d records, %.1f MB) x %d rounds, batches of %,d records; %d point lookups%n",
        data, records.size(), fileBytes / 1e6, rounds, batch, lookups);
    System.out.printf("native library: %s%ndaemon: %s%n", System.getProperty(NativeLoader.LIBRARY_PROPERTY, "(jar resource)"), bin);

    Figures embedded = embedded(records, rounds, batch, ids);
    Figures daemon = daemon(bin, records, rounds, batch, ids);

    System.out.println();
    System.out.printf("%-46s %16s %16s %10s%n", "workload", "embedded (JNI)", "daemon (Flight)", "JNI/Flight");
    row("ingest, MB/s of JSON", embedded.ingestBytes / 1e6 / embedded.ingestSeconds,
        daemon.ingestBytes / 1e6 / daemon.ingestSeconds, true);
    row("ingest, records/s (thousands)", records.size() * (double) rounds / embedded.ingestSeconds / 1e3,
        records.size() * (double) rounds / daemon.ingestSeconds / 1e3, true);
    row("full scan (" + String.join(",", SCAN_COLUMNS) + "), MB/s of Arrow",
        embedded.scanArrowBytes / 1e6 / embedded.scanSeconds, daemon.scanArrowBytes / 1e6 / daemon.scanSeconds, true);
    row("full scan, rows/s (thousands)", embedded.scanRows / embedded.scanSeconds / 1e3,
        daemon.scanRows / daemon.scanSeconds / 1e3, true);
    row("full scan, MB/s of JSON scanned", fileBytes * (double) rounds / 1e6 / embedded.scanSeconds,
        fileBytes * (double) rounds / 1e6 / daemon.scanSeconds, true);
    row("point lookup by id (PSF), ms per query", embedded.lookupMillis, daemon.lookupMillis, false);
    System.out.printf("(rows: full scan %,d / %,d; lookups found %,d / %,d rows)%n",
        embedded.scanRows, daemon.scanRows, embedded.lookupRowsFound, daemon.lookupRowsFound);
  }

  private static void row(String name, double embedded, double daemon, boolean higherIsBetter) {
    double ratio = higherIsBetter ? embedded / daemon : daemon / embedded;
    System.out.printf("%-46s %16.2f %16.2f %9.2fx%n", name, embedded, daemon, ratio);
  }

  private static void fill(VarCharVector json, VectorSchemaRoot root, List<byte[]> records) {
    json.reset();
    json.allocateNew(records.stream().mapToLong(r -> r.length).sum(), records.size());
    for (int i = 0; i < records.size(); i++) {
      json.setSafe(i, records.get(i));
    }
    root.setRowCount(records.size());
  }

  private static long bufferBytes(VectorSchemaRoot root) {
    long bytes = 0;
    for (FieldVector vector : root.getFieldVectors()) {
      bytes += vector.getBufferSize();
    }
    return bytes;
  }

  private static Figures embedded(List<byte[]> records, int rounds, int batch, List<String> ids) throws Exception {
    Path dir = Files.createTempDirectory("shoal-bench-embedded");
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      shoal.createTable(TABLE);
      shoal.registerPsf(TABLE, "id", Map.of("kind", "projection", "field", "id"));
      long bytes = 0;
      long start = System.nanoTime();
      try (VarCharVector json = new VarCharVector("json", shoal.allocator());
          VectorSchemaRoot root = VectorSchemaRoot.of(json)) {
        for (int round = 0; round < rounds; round++) {
          for (int from = 0; from < records.size(); from += batch) {
            List<byte[]> slice = records.subList(from, Math.min(records.size(), from + batch));
            fill(json, root, slice);
            shoal.ingest(TABLE, root, null);
            bytes += slice.stream().mapToLong(r -> r.length).sum();
          }
        }
      }
      double ingest = seconds(start);
      System.out.printf("embedded: ingested %.1f MB in %.2f s%n", bytes / 1e6, ingest);

      long[] scanned = new long[2];
      start = System.nanoTime();
      shoal.scan(TABLE, null, SCAN_COLUMNS, null, root -> {
        scanned[0] += root.getRowCount();
        scanned[1] += bufferBytes(root);
      });
      double scan = seconds(start);

      long found = 0;
      start = System.nanoTime();
      for (String id : ids) {
        ScanPlan plan = shoal.plan(TABLE, "id = '" + id + "'", SCAN_COLUMNS, null);
        for (ScanPlan.Endpoint endpoint : plan.endpoints()) {
          try (ArrowReader reader = shoal.read(endpoint.ticket())) {
            while (reader.loadNextBatch()) {
              found += reader.getVectorSchemaRoot().getRowCount();
            }
          }
        }
      }
      double lookup = seconds(start) * 1e3 / ids.size();
      return new Figures(ingest, bytes, scan, scanned[0], scanned[1], lookup, found);
    } finally {
      delete(dir);
    }
  }

  private static Figures daemon(Path bin, List<byte[]> records, int rounds, int batch, List<String> ids) throws Exception {
    Path dir = Files.createTempDirectory("shoal-bench-daemon");
    int port;
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    Process process = new ProcessBuilder(bin.toString(), "serve", "--listen", "127.0.0.1:" + port,
        "--data-dir", dir.resolve("data").toString()).redirectErrorStream(true).start();
    CountDownLatch ready = new CountDownLatch(1);
    Thread pump = new Thread(() -> {
      try (BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = out.readLine()) != null) {
          if (line.contains("shoal ready")) {
            ready.countDown();
          }
        }
      } catch (IOException ignored) {
        // the daemon ended
      }
    });
    pump.setDaemon(true);
    pump.start();
    try (BufferAllocator allocator = new RootAllocator();
        FlightClient client = FlightClient.builder(allocator, Location.forGrpcInsecure("127.0.0.1", port)).build()) {
      if (!ready.await(60, TimeUnit.SECONDS)) {
        throw new IllegalStateException("the daemon did not start");
      }
      action(client, "create_table", "{\"name\":\"" + TABLE + "\"}");
      action(client, "register_psf", "{\"table\":\"" + TABLE + "\",\"name\":\"id\",\"kind\":\"projection\",\"field\":\"id\"}");

      long bytes = 0;
      long start = System.nanoTime();
      try (VarCharVector json = new VarCharVector("json", allocator);
          VectorSchemaRoot root = VectorSchemaRoot.of(json)) {
        AsyncPutListener listener = new AsyncPutListener();
        FlightClient.ClientStreamListener stream = client.startPut(FlightDescriptor.path(TABLE), root, listener);
        for (int round = 0; round < rounds; round++) {
          for (int from = 0; from < records.size(); from += batch) {
            List<byte[]> slice = records.subList(from, Math.min(records.size(), from + batch));
            fill(json, root, slice);
            stream.putNext();
            bytes += slice.stream().mapToLong(r -> r.length).sum();
          }
        }
        stream.completed();
        stream.getResult(); // every batch acknowledged
      }
      double ingest = seconds(start);
      System.out.printf("daemon:   ingested %.1f MB in %.2f s%n", bytes / 1e6, ingest);

      long[] scanned = new long[2];
      start = System.nanoTime();
      query(client, ShoalEmbedded.command(TABLE, null, SCAN_COLUMNS, null).toString(), root -> {
        scanned[0] += root.getRowCount();
        scanned[1] += bufferBytes(root);
      });
      double scan = seconds(start);

      long[] found = new long[1];
      start = System.nanoTime();
      for (String id : ids) {
        query(client, ShoalEmbedded.command(TABLE, "id = '" + id + "'", SCAN_COLUMNS, null).toString(),
            root -> found[0] += root.getRowCount());
      }
      double lookup = seconds(start) * 1e3 / ids.size();
      return new Figures(ingest, bytes, scan, scanned[0], scanned[1], lookup, found[0]);
    } finally {
      process.destroy();
      process.waitFor(60, TimeUnit.SECONDS);
      delete(dir);
    }
  }

  private static void query(FlightClient client, String command, java.util.function.Consumer<VectorSchemaRoot> consumer)
      throws Exception {
    FlightInfo info = client.getInfo(FlightDescriptor.command(command.getBytes(StandardCharsets.UTF_8)));
    for (FlightEndpoint endpoint : info.getEndpoints()) {
      try (FlightStream stream = client.getStream(endpoint.getTicket())) {
        while (stream.next()) {
          consumer.accept(stream.getRoot());
        }
      }
    }
  }

  private static JsonNode action(FlightClient client, String type, String body) {
    var results = client.doAction(new Action(type, body.getBytes(StandardCharsets.UTF_8)));
    JsonNode last = null;
    while (results.hasNext()) {
      Result result = results.next();
      last = TestData.parse(new String(result.getBody(), StandardCharsets.UTF_8));
    }
    return last;
  }

  private static double seconds(long startNanos) {
    return (System.nanoTime() - startNanos) / 1e9;
  }

  private static void delete(Path dir) throws IOException {
    try (Stream<Path> paths = Files.walk(dir)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }
}
