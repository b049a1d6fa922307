package dev.shoal.embedded.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import dev.shoal.client.testing.DaemonProcess;
import dev.shoal.embedded.EmbeddedEngines;

/**
 * A fresh data directory for embedded mode ({@code embedded:<tmpdir>/data}), the embedded half of
 * the JVM modules' test fixture (beside {@link DaemonProcess}): the code under test opens the
 * engine on it through the {@code endpoint} option; closing lets the engine close (no keep-alive
 * handle left) and deletes the directory.
 */
public final class EmbeddedDirectory implements AutoCloseable {
  /** The temporary directory to delete on {@link #close()}, or null (a directory the test owns). */
  private final Path ownedDir;
  private final Path dataDir;

  private EmbeddedDirectory(Path ownedDir, Path dataDir) {
    this.ownedDir = ownedDir;
    this.dataDir = dataDir;
  }

  /** The data directory {@code dataDir} that a test made itself: {@link #close()} deletes nothing. */
  public static EmbeddedDirectory of(Path dataDir) {
    return new EmbeddedDirectory(null, dataDir);
  }

  /** A new temporary directory named {@code prefix...}, holding the data directory {@code data}. */
  public static EmbeddedDirectory create(String prefix) throws IOException {
    Path dir = Files.createTempDirectory(prefix);
    return new EmbeddedDirectory(dir, dir.resolve("data"));
  }

  /** The data directory (absent until an engine opens it). */
  public Path dataDir() {
    return dataDir;
  }

  /** {@code embedded:<data directory>}. */
  public String endpoint() {
    return "embedded:" + dataDir;
  }

  /**
   * Closes the engine's keep-alive handle if nothing else holds the engine; whether it was free
   * (the engine closed, or was never opened).
   */
  public boolean release() {
    return EmbeddedEngines.closeIdle(dataDir.toAbsolutePath().normalize());
  }

  /**
   * Waits until every handle of the code under test released the engine (up to 60 s), then closes
   * it (see {@link #release()}).
   *
   * @throws AssertionError when something still holds the engine after 60 s
   */
  public void awaitReleased() throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (!release()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("the engine on " + dataDir + " is still held 60 s after the test's work ended");
      }
      Thread.sleep(20);
    }
  }

  /** Deletes the temporary directory if the engine could be closed ({@link #release()}); else leaves it. */
  @Override
  public void close() {
    if (release()) {
      deleteTree(ownedDir);
    }
  }

  /** Deletes {@code root} and everything below it, quietly (a fixture's temporary directory). */
  public static void deleteTree(Path root) {
    if (root == null || !Files.exists(root)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(root)) {
      paths.sorted(Comparator.reverseOrder()).forEach(path -> {
        try {
          Files.deleteIfExists(path);
        } catch (IOException ignored) {
          // quietly: what cannot be deleted stays in java.io.tmpdir
        }
      });
    } catch (IOException ignored) {
      // as above
    }
  }
}
