package dev.shoal.flink;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.embedded.ShoalEmbedded;
import dev.shoal.embedded.testing.EmbeddedDirectory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.vector.FieldVector;

/**
 * Embedded mode for a test class: a fresh data directory, endpoint {@code embedded:<dir>}, and a
 * {@link ShoalEmbedded} handle of the test's own on it. The handle joins the engine the sink's
 * writers and committers open in this JVM (one engine per directory), so the tests create tables
 * and read what the jobs wrote through it, as a user of embedded mode in the same JVM would.
 */
public final class EmbeddedShoal implements ShoalTarget {

  private static final ObjectMapper JSON = new ObjectMapper();

  private Path dataDir;
  /** The temporary directory {@link #start()} made (shoal-client's fixture), deleted by {@link #stop()}. */
  private EmbeddedDirectory directory;
  private ShoalEmbedded store;

  @Override
  public TargetMode mode() {
    return TargetMode.EMBEDDED;
  }

  @Override
  public void start() throws Exception {
    directory = EmbeddedDirectory.create("shoal-flink-embedded");
    dataDir = directory.dataDir();
    store = ShoalEmbedded.open(dataDir);
  }

  /** Closes the test's handle and, once the sink released the directory, the engine. */
  @Override
  public void stop() throws Exception {
    if (store != null) {
      store.close();
      store = null;
      directory.awaitReleased();
    }
    if (directory != null) {
      directory.close();
      directory = null;
    }
  }

  /**
   * Waits (up to 60 s) until the sink's writers and committers in this JVM have released {@code
   * dataDir}, then closes the keep-alive handle: the engine closes unless another handle holds it.
   * (With a keep-alive of 0 there is no keeper and nothing to wait for: the engine closed with the
   * last writer or committer, which Flink closes before it reports the job finished.)
   */
  public static void awaitReleasedBySink(Path dataDir) throws InterruptedException {
    EmbeddedDirectory.of(dataDir).awaitReleased();
  }

  public Path dataDir() {
    return dataDir;
  }

  /** The test's handle on the engine. */
  public ShoalEmbedded store() {
    return store;
  }

  @Override
  public String endpoint() {
    return "embedded:" + dataDir;
  }

  @Override
  public void createTable(String name, String onInvalidJson) {
    store.createTable(JSON.createObjectNode().put("name", name).put("on_invalid_json", onInvalidJson));
  }

  @Override
  public String action(String type, String body) {
    try {
      return store.action(type, JSON.readTree(body)).toString();
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException("not JSON: " + body, e);
    }
  }

  @Override
  public List<String> column(String table, String column) {
    return column(store, table, column);
  }

  /** Every value of {@code column} in {@code table} through {@code store}, as {@link ShoalDaemon#column}. */
  public static List<String> column(ShoalEmbedded store, String table, String column) {
    List<String> values = new ArrayList<>();
    store.scan(table, null, List.of(column), null, root -> {
      FieldVector vector = root.getVector(column);
      for (int i = 0; i < root.getRowCount(); i++) {
        Object value = vector.getObject(i);
        values.add(value == null ? null : value.toString());
      }
    });
    return values;
  }
}
