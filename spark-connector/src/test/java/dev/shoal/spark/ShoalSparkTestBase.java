package dev.shoal.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.SparkSession;

/** Shared fixtures: the GitHub Archive events, a local Spark session, and ingestion helpers. */
abstract class ShoalSparkTestBase {
  static List<String> events() throws IOException {
    Path data = Paths.get(System.getProperty("shoal.data", "../data/github/events.ndjson"));
    if (!Files.exists(data)) {
      throw new IllegalStateException("test data not found at " + data + ": run scripts/fetch-data.sh (or set -Dshoal.data)");
    }
    List<String> lines = new ArrayList<>();
    for (String line : Files.readAllLines(data, StandardCharsets.UTF_8)) {
      if (!line.isBlank()) {
        lines.add(line);
      }
    }
    return lines;
  }

  static Path eventsPath() {
    return Paths.get(System.getProperty("shoal.data", "../data/github/events.ndjson")).toAbsolutePath();
  }

  /**
   * A fresh session of the JVM's shared local Spark whose catalog {@code shoal} points at
   * {@code endpoint} (set on the session: a new session does not see another session's settings).
   */
  static SparkSession spark(String endpoint) {
    SparkSession session = SparkSession.builder()
        .master("local[2]")
        .appName("shoal-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        // Timestamp filters are pushed in a UTC session (ShoalV2Filters).
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.catalog.shoal", ShoalCatalog.class.getName())
        .getOrCreate()
        .newSession();
    session.conf().set("spark.sql.session.timeZone", "UTC");
    session.conf().set("spark.sql.catalog.shoal", ShoalCatalog.class.getName());
    session.conf().set("spark.sql.catalog.shoal.endpoint", endpoint);
    return session;
  }

  /** Sends records to a table through DoPut in batches of {@code batch}. */
  static void ingest(String endpoint, String table, List<String> records, int batch) {
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      client.createTableIfNotExists(table);
      try (ShoalClient.Put put = client.startPut(table)) {
        for (int i = 0; i < records.size(); i += batch) {
          put.send(records.subList(i, Math.min(records.size(), i + batch)));
        }
        put.finish();
      }
    }
  }

  static void registerPsf(String endpoint, ObjectNode body) {
    try (ShoalClient client = ShoalClient.open(java.net.URI.create(endpoint), null)) {
      client.action("register_psf", body, body.path("table").asText());
    }
  }

  /**
   * A PSF as FishStore has it: forward only ({@code "backfill": false}), so that the tests'
   * tables, half ingested before their PSFs, plan index scans and full scans side by side.
   */
  static ObjectNode psf(String table, String name, String kind) {
    return ShoalClient.JSON.createObjectNode().put("table", table).put("name", name).put("kind", kind).put("backfill", false);
  }
}
