package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;

/**
 * Misuse of the API: each mistake is a {@link ShoalEmbeddedException} with the operation and the
 * code the daemon would give, and the JVM lives on (each test continuing after the mistake shows
 * it).
 */
class MisuseTest {
  @TempDir Path dir;
  private ShoalEmbedded shoal;

  @BeforeEach
  void open() {
    shoal = ShoalEmbedded.open(dir.resolve("store"));
    shoal.createTable("t");
  }

  @AfterEach
  void close() {
    shoal.close();
  }

  private static ShoalEmbeddedException fails(String operation, String code, Executable call) {
    ShoalEmbeddedException e = assertThrows(ShoalEmbeddedException.class, call);
    assertEquals(code, e.code(), e.getMessage());
    assertEquals(operation, e.operation(), e.getMessage());
    assertEquals(operation + ": " + code + ": " + e.detail(), e.getMessage());
    return e;
  }

  @Test
  void every_call_after_close_is_closed_and_close_is_idempotent() {
    ScanPlan plan = shoal.plan("t", null, null, null);
    shoal.close();
    assertTrue(shoal.isClosed());
    assertDoesNotThrow(shoal::close);
    fails("action create_table", "CLOSED", () -> shoal.createTable("u"));
    fails("action stats", "CLOSED", () -> shoal.stats("t"));
    fails("doPut", "CLOSED", () -> shoal.ingest("t", List.of("{}")));
    fails("getSchema", "CLOSED", () -> shoal.schema("t"));
    fails("getFlightInfo", "CLOSED", () -> shoal.plan("t", null, null, null));
    fails("doGet", "CLOSED", () -> shoal.read(plan.endpoints().get(0).ticket()));
    fails("listTables", "CLOSED", shoal::listTables);
  }

  @Test
  void the_native_layer_answers_a_closed_or_forged_handle_with_closed() {
    try (ShoalEmbedded other = ShoalEmbedded.open(dir.resolve("other"))) {
      long handle = other.handle();
      ShoalNative.close(handle);
      fails("action stats", "CLOSED", () -> ShoalNative.action(handle, "stats", "{\"table\":\"t\"}"));
      fails("listTables", "CLOSED", () -> ShoalNative.listTables(handle));
      fails("doPut", "CLOSED", () -> other.ingest("t", List.of("{}")));
      fails("listTables", "CLOSED", () -> ShoalNative.listTables(0));
      fails("listTables", "CLOSED", () -> ShoalNative.listTables(0x7eadbeefL));
      assertDoesNotThrow(() -> ShoalNative.close(handle));
      assertDoesNotThrow(() -> ShoalNative.close(0));
    } // and ShoalEmbedded.close() of a handle closed underneath is a no-op too
    assertEquals("t", shoal.listTables().get(0).name());
  }

  @Test
  void a_rust_panic_is_a_panic_exception_and_the_engine_lives_on() {
    ShoalEmbeddedException e = fails("selfTestPanic", "PANIC", () -> ShoalNative.selfTestPanic("on purpose"));
    assertTrue(e.getMessage().contains("on purpose"), e.getMessage());
    assertEquals(1, shoal.ingest("t", List.of("{\"a\":1}")).records());
  }

  @Test
  void an_invalid_json_record_rejects_the_whole_batch_under_reject() {
    ShoalEmbeddedException e =
        fails("doPut", "INVALID_ARGUMENT", () -> shoal.ingest("t", List.of("{\"a\":1}", "{\"a\":", "{\"a\":3}")));
    assertTrue(e.detail().contains("record 1"), e.getMessage());
    assertEquals(0, shoal.stats("t").path("records").asLong(), "nothing of the batch is written");
    assertEquals(2, shoal.ingest("t", List.of("{\"a\":1}", "{\"a\":2}")).records());
  }

  @Test
  void invalid_json_records_are_skipped_and_counted_under_skip() {
    shoal.createTable(Map.of("name", "lenient", "on_invalid_json", "skip"));
    PutResult put = shoal.ingest("lenient", List.of("{\"a\":1}", "not json", "{\"a\":2}", "[1,", "{\"a\":3}"));
    assertEquals(3, put.records(), put.raw().toString());
    assertEquals(2, put.skipped(), put.raw().toString());
    assertEquals(2, put.raw().path("skipped_examples").size(), put.raw().toString());
    assertEquals(1, put.raw().path("skipped_examples").path(0).path("row").asInt(), put.raw().toString());
    assertEquals(3, shoal.stats("lenient").path("records").asLong());
    assertEquals(2, shoal.stats("lenient").path("skipped_records").asLong());
  }

  @Test
  void a_bad_filter_or_column_is_invalid_argument() {
    shoal.ingest("t", List.of("{\"a\":1}"));
    fails("getFlightInfo", "INVALID_ARGUMENT", () -> shoal.plan("t", "a = ", null, null));
    fails("getFlightInfo", "INVALID_ARGUMENT", () -> shoal.plan("t", "a === 1 AND", null, null));
    fails("getFlightInfo", "INVALID_ARGUMENT", () -> shoal.plan("t", null, List.of("no.such.column"), null));
    assertEquals(1, shoal.scan("t", "a = 1", List.of("a"), null, root -> { }));
  }

  @Test
  void an_unknown_table_is_not_found_everywhere() {
    fails("action stats", "NOT_FOUND", () -> shoal.stats("nope"));
    fails("action drop_table", "NOT_FOUND", () -> shoal.dropTable("nope"));
    fails("action register_psf", "NOT_FOUND",
        () -> shoal.registerPsf("nope", "p", Map.of("kind", "projection", "field", "a")));
    fails("doPut", "NOT_FOUND", () -> shoal.ingest("nope", List.of("{}")));
    fails("getSchema", "NOT_FOUND", () -> shoal.schema("nope"));
    fails("getFlightInfo", "NOT_FOUND", () -> shoal.plan("nope", null, null, null));
  }

  @Test
  void names_taken_and_unknown_psfs_have_the_daemons_codes() {
    fails("action create_table", "ALREADY_EXISTS", () -> shoal.createTable("t"));
    assertEquals(false, shoal.createTable(Map.of("name", "t", "if_not_exists", true)).path("created").asBoolean());
    fails("action create_table", "INVALID_ARGUMENT", () -> shoal.createTable(".hidden"));
    fails("action create_table", "INVALID_ARGUMENT", () -> shoal.createTable(Map.of("nme", "x")));
    shoal.registerPsf("t", "p", Map.of("kind", "projection", "field", "a"));
    fails("action register_psf", "ALREADY_EXISTS", () -> shoal.registerPsf("t", "p", Map.of("kind", "projection", "field", "a")));
    fails("action register_psf", "INVALID_ARGUMENT", () -> shoal.registerPsf("t", "q", Map.of("kind", "predicate", "expr", "a =")));
    fails("action deregister_psf", "NOT_FOUND", () -> shoal.deregisterPsf("t", "nope"));
    ShoalEmbeddedException unknown = assertThrows(ShoalEmbeddedException.class, () -> shoal.action("no_such_action", null));
    assertEquals("action no_such_action", unknown.operation());
  }

  @Test
  void a_batch_without_a_json_column_is_invalid_argument_and_leaks_nothing() {
    try (IntVector numbers = new IntVector("numbers", shoal.allocator());
        VectorSchemaRoot root = VectorSchemaRoot.of(numbers)) {
      numbers.allocateNew(2);
      numbers.set(0, 1);
      numbers.set(1, 2);
      root.setRowCount(2);
      fails("doPut", "INVALID_ARGUMENT", () -> shoal.ingest("t", root, null));
    }
    // the exported batch was released by the engine: nothing is left allocated
    assertEquals(0, shoal.allocator().getAllocatedMemory());
    fails("doPut", "INVALID_ARGUMENT",
        () -> shoal.ingest("t", List.of("{}"), TestData.parse("{\"serial\": \"x\"}")));
  }

  @Test
  void a_closed_stream_is_closed_not_a_crash() throws Exception {
    List<String> records = new ArrayList<>();
    for (int i = 0; i < 20_000; i++) {
      records.add("{\"i\":" + i + ",\"pad\":\"" + "x".repeat(50) + "\"}");
    }
    shoal.ingest("t", records);
    ScanPlan plan = shoal.plan("t", null, List.of("i"), null);
    ArrowReader reader = shoal.read(plan.endpoints().get(0).ticket());
    assertTrue(reader.loadNextBatch());
    reader.close(); // early: the native scan stops
    assertDoesNotThrow(() -> reader.close());
    fails("read", "CLOSED", reader::loadNextBatch);
    fails("read", "CLOSED", reader::getVectorSchemaRoot);
    fails("doGet", "INVALID_ARGUMENT", () -> shoal.read("not a ticket".getBytes(StandardCharsets.UTF_8)));
    // a reader left open is closed with the store
    ArrowReader open = shoal.read(plan.endpoints().get(0).ticket());
    assertTrue(open.loadNextBatch());
    shoal.close();
    fails("read", "CLOSED", open::loadNextBatch);
  }

  @Test
  void bad_options_are_invalid_argument() {
    fails("open", "INVALID_ARGUMENT", () -> ShoalEmbedded.open(dir.resolve("x"), Map.of("no_such_option", 1)));
    fails("open", "INVALID_ARGUMENT", () -> ShoalEmbedded.open(dir.resolve("x"), Map.of("memory_budget_bytes", "lots")));
  }

  @Test
  void a_directory_held_by_a_daemon_cannot_be_opened() throws Exception {
    Path binary = TestData.daemonBinary();
    Assumptions.assumeTrue(binary != null, "the shoal daemon is not built (cargo build -p shoal-server)");
    Path held = dir.resolve("held");
    Process daemon = new ProcessBuilder(binary.toString(), "serve", "--listen", "127.0.0.1:0",
        "--data-dir", held.toString()).redirectErrorStream(true).start();
    try {
      BufferedReader output = new BufferedReader(new InputStreamReader(daemon.getInputStream(), StandardCharsets.UTF_8));
      String line;
      while ((line = output.readLine()) != null && !line.contains("shoal ready")) {
        // wait until it serves (and so holds the directory)
      }
      assertTrue(line != null, "the daemon did not start");
      ShoalEmbeddedException e = assertThrows(ShoalEmbeddedException.class, () -> ShoalEmbedded.open(held));
      assertEquals("open", e.operation());
      assertEquals("FAILED_PRECONDITION", e.code(), e.getMessage());
    } finally {
      daemon.destroy();
      daemon.waitFor(60, TimeUnit.SECONDS);
    }
    try (ShoalEmbedded after = ShoalEmbedded.open(held)) {
      JsonNode tables = TestData.JSON.valueToTree(after.listTables());
      assertEquals(0, tables.size(), "the daemon's directory opens once the daemon is gone");
    }
  }
}
