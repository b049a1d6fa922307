package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.junit.jupiter.api.Assumptions;

/** Test data and small helpers shared by the tests. */
final class TestData {
  static final ObjectMapper JSON = new ObjectMapper();

  private TestData() {}

  /**
   * The GitHub Archive events (system property {@code shoal.data}, default
   * ../data/github/events.ndjson). Missing: the test fails under SHOAL_REQUIRE_DATA=1, else it is
   * skipped.
   */
  static Path eventsFile() {
    Path path = Path.of(System.getProperty("shoal.data", "../data/github/events.ndjson"));
    if (!Files.isReadable(path)) {
      String message =
          "GitHub Archive events not found at " + path.toAbsolutePath() + ": run scripts/fetch-data.sh";
      if ("1".equals(System.getenv("SHOAL_REQUIRE_DATA"))) {
        fail(message + " (SHOAL_REQUIRE_DATA=1)");
      }
      Assumptions.abort(message);
    }
    return path;
  }

  /** The events, one JSON text per line (blank lines dropped). */
  static List<String> eventLines() {
    try {
      List<String> lines = new ArrayList<>();
      for (String line : Files.readAllLines(eventsFile(), StandardCharsets.UTF_8)) {
        if (!line.isBlank()) {
          lines.add(line);
        }
      }
      return lines;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static JsonNode parse(String json) {
    try {
      return JSON.readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The values of one column of a batch, as strings (null for null). */
  static List<String> column(VectorSchemaRoot root, String name) {
    FieldVector vector = root.getVector(name);
    if (vector == null) {
      fail("no column " + name + " in " + root.getSchema());
    }
    List<String> values = new ArrayList<>(root.getRowCount());
    for (int row = 0; row < root.getRowCount(); row++) {
      Object value = vector.getObject(row);
      values.add(value == null ? null : value.toString());
    }
    return values;
  }

  /** The daemon binary (system property shoal.bin), or null when it is not built. */
  static Path daemonBinary() {
    Path path = Path.of(System.getProperty("shoal.bin", "../target/debug/shoal"));
    return Files.isExecutable(path) ? path : null;
  }
}
