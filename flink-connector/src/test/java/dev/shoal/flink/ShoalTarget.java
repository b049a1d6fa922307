package dev.shoal.flink;

import java.util.List;
import dev.shoal.client.testing.TargetMode;

/**
 * Where a test's shoal runs: a daemon process reached over Flight ({@code grpc://127.0.0.1:PORT},
 * {@link ShoalDaemon}), or the engine inside the test JVM ({@code embedded:<tmpdir>}, {@link
 * EmbeddedShoal}). The sink tests are written once against this interface and run in both modes
 * (an abstract test class, one subclass per mode annotated with {@link ShoalMode}; see {@link
 * ShoalTargetExtension}): the jobs reach shoal only through the {@code endpoint} option, and the
 * tests look at the result through the helpers below - over Flight for a daemon, through {@code
 * ShoalEmbedded} in the same JVM for embedded mode.
 */
public interface ShoalTarget {

  TargetMode mode();

  /** The value of option {@code endpoint}. */
  String endpoint();

  /** Starts the daemon, or opens the engine on a fresh temporary data directory. */
  void start() throws Exception;

  /** Stops the daemon, or closes the engine (once the sink released it). */
  void stop() throws Exception;

  /** {@code create_table} with the given {@code on_invalid_json} policy ("reject" or "skip"). */
  void createTable(String name, String onInvalidJson);

  /** Any action; its JSON answer as text. */
  String action(String type, String body);

  /**
   * Every value of {@code column} in {@code table} (a plan and all of its endpoints), as strings
   * (JSON text for nested values).
   */
  List<String> column(String table, String column) throws Exception;

  /**
   * Deletes {@code root} and everything under it, quietly (a fixture's temporary directory
   * once its shoal stopped: the test runs leave nothing in {@code java.io.tmpdir}).
   */
  static void deleteTree(java.nio.file.Path root) {
    dev.shoal.embedded.testing.EmbeddedDirectory.deleteTree(root);
  }

}
