package dev.shoal.spark;

import java.nio.file.Files;
import java.nio.file.Path;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.embedded.EmbeddedEngines;

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
    Path dir = Files.createTempDirectory("shoal-spark-" + mode.name().toLowerCase(java.util.Locale.ROOT));
    if (mode == TargetMode.DAEMON) {
      return ShoalDaemon.start(dir.resolve("data")).deletingOnClose(dir);
    }
    if (mode == TargetMode.CLUSTER) {
      return ShoalCluster.start(dir, 3, "events", "id");
    }
    return new Embedded(dir.resolve("data"), dir);
  }

  /** An embedded data directory; the connector opens the engine on first use. */
  final class Embedded implements ShoalTarget {
    private final Path dataDir;
    private final Path ownedDir;

    /** Over {@code dataDir}; {@code ownedDir} (or null) is deleted by {@link #close()}. */
    Embedded(Path dataDir, Path ownedDir) {
      this.dataDir = dataDir;
      this.ownedDir = ownedDir;
    }

    @Override
    public TargetMode mode() {
      return TargetMode.EMBEDDED;
    }

    @Override
    public String endpoint() {
      return "embedded:" + dataDir;
    }

    public Path dataDir() {
      return dataDir;
    }

    /**
     * Lets the engine close now (flush, checkpoint, unlock) instead of after the keep-alive, then
     * deletes the temporary directory — not while a handle still holds the engine.
     */
    @Override
    public void close() {
      if (EmbeddedEngines.closeIdle(dataDir.toAbsolutePath().normalize())) {
        ShoalTarget.deleteTree(ownedDir);
      }
    }
  }

  /**
   * Deletes {@code root} and everything under it, quietly (a fixture's temporary directory
   * once its shoal stopped: the test runs leave nothing in {@code java.io.tmpdir}). Commons IO
   * comes with the engine (Spark and Flink both depend on it).
   */
  static void deleteTree(java.nio.file.Path root) {
    if (root != null) {
      org.apache.commons.io.FileUtils.deleteQuietly(root.toFile());
    }
  }

}
