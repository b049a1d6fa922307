package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Closing and reopening a directory; several handles on one directory; durability policies. */
class RecoveryTest {
  @TempDir Path dir;

  private static List<String> ids(ShoalEmbedded shoal, String filter) {
    List<String> ids = new ArrayList<>();
    shoal.scan("events", filter, List.of("id"), null, root -> ids.addAll(TestData.column(root, "id")));
    ids.sort(null);
    return ids;
  }

  @Test
  void reopening_a_closed_directory_recovers_records_psfs_and_plans() {
    List<String> lines = TestData.eventLines().subList(0, 3000);
    long actor = TestData.parse(lines.get(2999)).path("actor").path("id").asLong();
    String filter = "actor.id = " + actor;
    List<String> before;
    JsonNode statsBefore;
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      shoal.createTable("events");
      shoal.ingest("events", lines.subList(0, 1500));
      shoal.registerPsf("events", "actor_id", Map.of("kind", "projection", "field", "actor.id"));
      shoal.ingest("events", lines.subList(1500, 3000));
      before = ids(shoal, filter);
      statsBefore = shoal.stats("events");
    }
    assertFalse(before.isEmpty());
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      assertEquals(List.of("events"), shoal.listTables().stream().map(TableInfo::name).toList());
      JsonNode stats = shoal.stats("events");
      assertEquals(3000, stats.path("records").asLong());
      // the log resumes at or after the old tail (recovery may start a fresh page)
      assertTrue(stats.path("tail_address").asLong() >= statsBefore.path("tail_address").asLong(), stats.toString());
      assertEquals("actor_id", shoal.listPsfs("events").path(0).path("name").asText());
      assertFalse(shoal.plan("events", filter, List.of("id"), null).plan().path("index_scans").isEmpty());
      assertEquals(before, ids(shoal, filter));
      assertEquals(3000, shoal.scan("events", null, List.of("id"), null, root -> { }));
      // and it keeps taking records after the previous tail
      PutResult put = shoal.ingest("events", lines.subList(0, 10));
      assertTrue(put.firstAddress() >= statsBefore.path("tail_address").asLong(), put.raw().toString());
      assertEquals(3010, shoal.stats("events").path("records").asLong());
    }
  }

  @Test
  void two_handles_on_one_directory_share_one_engine_until_the_last_closes() {
    ShoalEmbedded first = ShoalEmbedded.open(dir);
    ShoalEmbedded second = ShoalEmbedded.open(dir);
    try {
      first.createTable("shared");
      second.ingest("shared", List.of("{\"a\":1}", "{\"a\":2}"));
      assertEquals(2, first.stats("shared").path("records").asLong());
      first.close();
      assertEquals(2, second.scan("shared", null, List.of("a"), null, root -> { }));
      ShoalEmbeddedException e = assertThrows(ShoalEmbeddedException.class, () -> first.stats("shared"));
      assertEquals(ShoalEmbeddedException.CLOSED, e.code());
    } finally {
      first.close();
      second.close();
    }
    try (ShoalEmbedded again = ShoalEmbedded.open(dir)) {
      assertEquals(2, again.stats("shared").path("records").asLong());
    }
  }

  @Test
  void an_fsync_table_acknowledges_batches_only_once_durable() {
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      shoal.createTable(Map.of("name", "events", "durability", "fsync"));
      PutResult put = shoal.ingest("events", TestData.eventLines().subList(0, 100));
      assertEquals(100, put.records());
      assertTrue(put.durableAddress() >= put.endAddress(), put.raw().toString());
    }
  }

  @Test
  void in_memory_options_apply() {
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir, Map.of("in_memory", true, "batch_rows", 7))) {
      shoal.createTable("t");
      List<String> records = new ArrayList<>();
      for (int i = 0; i < 20; i++) {
        records.add("{\"i\":" + i + "}");
      }
      shoal.ingest("t", records);
      List<Integer> batchSizes = new ArrayList<>();
      shoal.scan("t", null, List.of("i"), null, root -> batchSizes.add(root.getRowCount()));
      assertEquals(20, batchSizes.stream().mapToInt(Integer::intValue).sum());
      assertTrue(batchSizes.stream().allMatch(n -> n <= 7), batchSizes.toString());
      ShoalEmbeddedException e = assertThrows(ShoalEmbeddedException.class,
          () -> shoal.action("make_durable", TestData.parse("{\"table\":\"t\"}")));
      assertEquals("FAILED_PRECONDITION", e.code(), e.getMessage());
    }
  }

  @Test
  void a_writer_serial_makes_a_resent_batch_a_duplicate() {
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      shoal.createTable("t");
      JsonNode tag = TestData.parse("{\"writer\":\"job-1/subtask-0\",\"serial\":1}");
      assertEquals(2, shoal.ingest("t", List.of("{\"a\":1}", "{\"a\":2}"), tag).records());
      PutResult again = shoal.ingest("t", List.of("{\"a\":1}", "{\"a\":2}"), tag);
      assertTrue(again.raw().path("duplicate").asBoolean(), again.raw().toString());
      assertEquals(2, shoal.stats("t").path("records").asLong());
    }
  }
}
