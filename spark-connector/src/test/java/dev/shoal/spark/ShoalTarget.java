package dev.shoal.spark;

import java.nio.file.Files;
import java.nio.file.Path;

import dev.shoal.embedded.testing.EmbeddedDirectory;
import dev.shoal.client.testing.TargetMode;

/**
 * Where a test's shoal runs: a daemon process reached over Flight ({@code grpc://127.0.0.1:PORT}),
 * or the engine inside the test JVM ({@code embedded:<tmpdir>}). The test classes run once per
 * mode (an abstract class with one subclass per mode); everything they do goes through the
 * {@code endpoint} option, so both modes run the same code.
 */
interface ShoalTarget extends AutoCloseable {
  TargetMode mode();

  /** The value of option {@code endpoint}. */
  String endpoint();

  @Override
  void close() throws Exception;

  /** A fresh shoal of {@code mode} over a new temporary data directory (deleted by {@code close}). */
  static ShoalTarget start(TargetMode mode) throws Exception {
    String prefix = "shoal-spark-" + mode.name().toLowerCase(java.util.Locale.ROOT);
    if (mode == TargetMode.EMBEDDED) {
      return new Embedded(EmbeddedDirectory.create(prefix));
    }
    Path dir = Files.createTempDirectory(prefix);
    if (mode == TargetMode.DAEMON) {
      return ShoalDaemon.start(dir.resolve("data")).deletingOnClose(dir);
    }
    return ShoalCluster.start(dir, 3, "events", "id");
  }

  /** An embedded data directory (shoal-client's fixture); the connector opens the engine on first use. */
  final class Embedded implements ShoalTarget {
    private final EmbeddedDirectory directory;

    Embedded(EmbeddedDirectory directory) {
      this.directory = directory;
    }

    @Override
    public TargetMode mode() {
      return TargetMode.EMBEDDED;
    }

    @Override
    public String endpoint() {
      return directory.endpoint();
    }

    public Path dataDir() {
      return directory.dataDir();
    }

    /**
     * Lets the engine close now (flush, checkpoint, unlock) instead of after the keep-alive, then
     * deletes the temporary directory — not while a handle still holds the engine.
     */
    @Override
    public void close() {
      directory.close();
    }
  }

  /**
   * Deletes {@code root} and everything under it, quietly (a fixture's temporary directory
   * once its shoal stopped: the test runs leave nothing in {@code java.io.tmpdir}).
   */
  static void deleteTree(java.nio.file.Path root) {
    dev.shoal.embedded.testing.EmbeddedDirectory.deleteTree(root);
  }

}
