package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.types.pojo.Field;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The GitHub Archive events through embedded shoal: ingested in batches (half through the list
 * API, half as exported Arrow batches), a projection PSF on {@code actor.id} registered half-way,
 * then plans and scans checked against a Jackson oracle over the same file.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class GithubEventsRoundTripTest {
  private static final String TABLE = "events";
  private static final int BATCH = 500;

  private Path dir;
  private ShoalEmbedded shoal;
  private List<String> lines;
  private List<JsonNode> events;
  private final List<PutResult> puts = new ArrayList<>();
  private JsonNode psf;
  private ScanPlan planBeforeRegistration;
  /** Actor ids: one only in the first half of the file, one in both halves, one only in the second. */
  private long actorFirstHalf;
  private long actorBothHalves;
  private long actorSecondHalf;

  @BeforeAll
  void ingestTheEventsWithAPsfRegisteredHalfWay() throws Exception {
    lines = TestData.eventLines();
    events = lines.stream().map(TestData::parse).collect(Collectors.toList());
    pickActors();

    dir = Files.createTempDirectory("shoal-embedded-github");
    shoal = ShoalEmbedded.open(dir);
    shoal.createTable(TABLE);
    int half = lines.size() / 2 / BATCH * BATCH;
    for (int from = 0; from < lines.size(); from += BATCH) {
      if (from == half) {
        planBeforeRegistration = shoal.plan(TABLE, "actor.id = " + actorBothHalves, List.of("id"), null);
        // Forward only (FishStore's PSF): index scans above its boundary, full scans below.
        psf = shoal.registerPsf(TABLE, "actor_id", Map.of("kind", "projection", "field", "actor.id", "backfill", false));
      }
      List<String> batch = lines.subList(from, Math.min(lines.size(), from + BATCH));
      puts.add((from / BATCH) % 2 == 0 ? shoal.ingest(TABLE, batch) : ingestAsArrow(batch));
    }
  }

  @AfterAll
  void close() {
    if (shoal != null) {
      shoal.close();
    }
    if (dir != null) {
      try (java.util.stream.Stream<Path> paths = Files.walk(dir)) {
        paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      } catch (java.io.IOException e) {
        System.err.println("could not delete " + dir + ": " + e);
      }
    }
  }

  private PutResult ingestAsArrow(List<String> batch) {
    try (VarCharVector json = new VarCharVector("json", shoal.allocator());
        VectorSchemaRoot root = VectorSchemaRoot.of(json)) {
      json.allocateNew(batch.size());
      for (int row = 0; row < batch.size(); row++) {
        json.setSafe(row, batch.get(row).getBytes(StandardCharsets.UTF_8));
      }
      root.setRowCount(batch.size());
      return shoal.ingest(TABLE, root, null);
    }
  }

  private void pickActors() {
    int half = lines.size() / 2 / BATCH * BATCH;
    Map<Long, int[]> counts = new HashMap<>();
    for (int i = 0; i < events.size(); i++) {
      JsonNode id = events.get(i).path("actor").path("id");
      if (id.canConvertToLong()) {
        counts.computeIfAbsent(id.asLong(), k -> new int[2])[i < half ? 0 : 1]++;
      }
    }
    Comparator<Map.Entry<Long, int[]>> byTotal = Comparator.comparingInt(e -> e.getValue()[0] + e.getValue()[1]);
    actorBothHalves = counts.entrySet().stream()
        .filter(e -> e.getValue()[0] > 0 && e.getValue()[1] > 0).max(byTotal).orElseThrow().getKey();
    actorFirstHalf = counts.entrySet().stream().filter(e -> e.getValue()[1] == 0).max(byTotal).orElseThrow().getKey();
    actorSecondHalf = counts.entrySet().stream().filter(e -> e.getValue()[0] == 0).max(byTotal).orElseThrow().getKey();
  }

  /** The ids of the events the oracle selects, sorted. */
  private List<String> oracle(Predicate<JsonNode> filter) {
    return events.stream().filter(filter).map(e -> e.path("id").asText()).sorted().collect(Collectors.toList());
  }

  /** The ids the store returns for a filter, sorted. */
  private List<String> ids(String filter) {
    List<String> ids = new ArrayList<>();
    shoal.scan(TABLE, filter, List.of("id"), null, root -> ids.addAll(TestData.column(root, "id")));
    ids.sort(null);
    return ids;
  }

  private static boolean actorIs(JsonNode event, long actor) {
    JsonNode id = event.path("actor").path("id");
    return id.canConvertToLong() && id.asLong() == actor;
  }

  @Test
  void every_batch_is_acknowledged_with_increasing_log_addresses() {
    long records = 0;
    long previousEnd = 0;
    for (PutResult put : puts) {
      assertEquals(0, put.skipped(), put.raw().toString());
      assertTrue(put.firstAddress() >= previousEnd, put.raw().toString());
      assertTrue(put.lastAddress() >= put.firstAddress(), put.raw().toString());
      assertTrue(put.endAddress() > put.lastAddress(), put.raw().toString());
      previousEnd = put.endAddress();
      records += put.records();
    }
    assertEquals(lines.size(), records);
  }

  @Test
  void plan_before_the_psf_is_registered_uses_full_scans_only() {
    JsonNode plan = planBeforeRegistration.plan();
    assertTrue(plan.path("index_scans").isEmpty(), plan.toString());
    assertFalse(plan.path("full_scans").isEmpty(), plan.toString());
  }

  @Test
  void plan_after_registration_uses_the_psf_chains_and_full_scans_below_its_safe_boundary() {
    long safeRegister = psf.path("safe_register_address").asLong();
    assertTrue(safeRegister > 0, psf.toString());
    ScanPlan plan = shoal.plan(TABLE, "actor.id = " + actorBothHalves, List.of("id"), null);
    JsonNode indexScans = plan.plan().path("index_scans");
    assertFalse(indexScans.isEmpty(), plan.metadata().toString());
    for (JsonNode scan : indexScans) {
      assertEquals("actor_id", scan.path("psfs").path(0).asText(), scan.toString());
      assertTrue(scan.path("from").asLong() >= safeRegister, scan.toString());
    }
    JsonNode fullScans = plan.plan().path("full_scans");
    assertFalse(fullScans.isEmpty(), plan.metadata().toString());
    for (JsonNode scan : fullScans) {
      assertTrue(scan.path("to").asLong() <= safeRegister, scan.toString());
    }
    assertTrue(plan.metadata().path("exact").asBoolean(), plan.metadata().toString());
    assertFalse(plan.endpoints().isEmpty());
  }

  @Test
  void actor_lookups_equal_the_jackson_oracle_before_across_and_after_the_registration() {
    for (long actor : new long[] {actorFirstHalf, actorBothHalves, actorSecondHalf}) {
      List<String> expected = oracle(e -> actorIs(e, actor));
      assertFalse(expected.isEmpty());
      assertEquals(expected, ids("actor.id = " + actor), "actor.id = " + actor);
    }
  }

  @Test
  void filters_without_a_psf_equal_the_jackson_oracle() {
    assertEquals(
        oracle(e -> e.path("type").asText().equals("IssuesEvent")
            && e.path("payload").path("action").asText().equals("opened")),
        ids("type = 'IssuesEvent' AND payload.action = 'opened'"));
    assertEquals(
        oracle(e -> e.path("payload").path("size").isIntegralNumber()
            && e.path("payload").path("size").asLong() >= 10),
        ids("payload.size >= 10"));
    assertEquals(
        oracle(e -> actorIs(e, actorBothHalves) || e.path("type").asText().equals("ForkEvent")),
        ids("actor.id = " + actorBothHalves + " OR type = 'ForkEvent'"));
  }

  @Test
  void a_full_scan_returns_every_event_once() {
    assertEquals(oracle(e -> true), ids(null));
  }

  @Test
  void projected_nested_columns_carry_the_records_values() {
    Map<String, JsonNode> byId = events.stream().collect(Collectors.toMap(e -> e.path("id").asText(), e -> e, (a, b) -> a));
    long rows = shoal.scan(TABLE, "actor.id = " + actorBothHalves, List.of("id", "actor.login", "repo.id"), null, root -> {
      List<String> ids = TestData.column(root, "id");
      List<String> logins = TestData.column(root, "actor.login");
      List<String> repos = TestData.column(root, "repo.id");
      for (int row = 0; row < root.getRowCount(); row++) {
        JsonNode event = byId.get(ids.get(row));
        assertEquals(event.path("actor").path("login").asText(), logins.get(row));
        assertEquals(event.path("repo").path("id").asText(), repos.get(row));
      }
    });
    assertEquals(oracle(e -> actorIs(e, actorBothHalves)).size(), rows);
  }

  @Test
  void reading_each_endpoint_separately_gives_the_same_rows_as_scan() throws Exception {
    ScanPlan plan = shoal.plan(TABLE, "type = 'PushEvent'", List.of("id"), null);
    List<String> ids = new ArrayList<>();
    for (ScanPlan.Endpoint endpoint : plan.endpoints()) {
      try (ArrowReader reader = shoal.read(endpoint.ticket())) {
        assertEquals(plan.schema(), reader.getVectorSchemaRoot().getSchema());
        while (reader.loadNextBatch()) {
          ids.addAll(TestData.column(reader.getVectorSchemaRoot(), "id"));
        }
      }
    }
    ids.sort(null);
    assertEquals(oracle(e -> e.path("type").asText().equals("PushEvent")), ids);
  }

  @Test
  void a_limit_stops_the_scan_after_that_many_rows() {
    String id = events.get(events.size() - 1).path("id").asText();
    List<String> found = new ArrayList<>();
    assertEquals(1, shoal.scan(TABLE, "id = '" + id + "'", List.of("id", "type"), 1L,
        root -> found.addAll(TestData.column(root, "id"))));
    assertEquals(List.of(id), found);
    assertEquals(7, shoal.scan(TABLE, "type = 'PushEvent'", List.of("id"), 7L, root -> { }));
  }

  @Test
  void aggregates_run_in_the_engine() throws Exception {
    ObjectNode command = ShoalEmbedded.command(TABLE, "type = 'PushEvent'", null, null);
    command.putArray("aggregates").addObject().put("function", "count");
    ScanPlan plan = shoal.plan(command);
    assertEquals(1, plan.endpoints().size(), "aggregates are final by default: one endpoint, one row");
    long count = 0;
    for (ScanPlan.Endpoint endpoint : plan.endpoints()) {
      try (ArrowReader reader = shoal.read(endpoint.ticket())) {
        while (reader.loadNextBatch()) {
          for (String value : TestData.column(reader.getVectorSchemaRoot(), "count(*)")) {
            count += Long.parseLong(value);
          }
        }
      }
    }
    assertEquals(oracle(e -> e.path("type").asText().equals("PushEvent")).size(), count);
  }

  @Test
  void schema_and_listings_describe_the_table() {
    List<String> fields = shoal.schema(TABLE).getFields().stream().map(Field::getName).collect(Collectors.toList());
    assertTrue(fields.containsAll(List.of("id", "type", "actor", "repo", "payload", "created_at")), fields.toString());
    Field actor = shoal.schema(TABLE).findField("actor");
    assertTrue(actor.getChildren().stream().anyMatch(f -> f.getName().equals("login")), actor.toString());

    TableInfo table = shoal.listTables().stream().filter(t -> t.name().equals(TABLE)).findFirst().orElseThrow();
    assertEquals(lines.size(), table.records());
    long payloadBytes = lines.stream().mapToLong(l -> l.getBytes(StandardCharsets.UTF_8).length).sum();
    assertEquals(payloadBytes, table.bytes());
    assertEquals(lines.size(), shoal.stats(TABLE).path("records").asLong());

    JsonNode psfs = shoal.listPsfs(TABLE);
    assertEquals(1, psfs.size(), psfs.toString());
    assertEquals("actor_id", psfs.path(0).path("name").asText());
  }
}
