package dev.shoal.it;

import java.nio.file.Files;
import java.nio.file.Path;

import org.testcontainers.DockerClientFactory;

/**
 * The shoal daemon the end-to-end test runs against: the image built from {@code docker/Dockerfile}
 * in a container when a Docker engine is available (Testcontainers), else the binary
 * ({@code -Dshoal.bin}, {@code target/debug/shoal}) as a local process. The choice and its reason
 * are printed. {@code -Dshoal.it.daemon=process|docker} forces one (docker then fails without an
 * engine instead of falling back).
 */
interface DaemonUnderTest extends AutoCloseable {

  /** {@code grpc://host:port} as seen from this machine. */
  String endpoint();

  /** What runs the daemon, for the test's output. */
  String description();

  /** Stops the daemon with SIGTERM and waits; the exit code (0 = clean shutdown). */
  int stop() throws Exception;

  @Override
  default void close() throws Exception {
    stop();
  }

  static DaemonUnderTest start(Path repo, Path dataDir) throws Exception {
    String forced = System.getProperty("shoal.it.daemon", "auto");
    Path dockerfile = repo.resolve("docker/Dockerfile");
    boolean docker;
    String why;
    if (forced.equals("process")) {
      docker = false;
      why = "forced by -Dshoal.it.daemon=process";
    } else {
      long t0 = System.nanoTime();
      boolean engine = DockerClientFactory.instance().isDockerAvailable();
      long ms = (System.nanoTime() - t0) / 1_000_000;
      if (forced.equals("docker") && !engine) {
        throw new IllegalStateException("-Dshoal.it.daemon=docker, but no Docker engine is reachable");
      }
      if (engine && !Files.exists(dockerfile)) {
        docker = false;
        why = "a Docker engine is available but " + dockerfile + " does not exist";
      } else {
        docker = engine;
        why = engine ? "a Docker engine is available (checked in " + ms + " ms)"
            : "no Docker engine (DockerClientFactory.isDockerAvailable() = false, checked in " + ms + " ms)";
      }
    }
    DaemonUnderTest daemon = docker ? DockerDaemon.start(repo, dockerfile) : LocalDaemonProcess.start(dataDir);
    System.out.println("[it] daemon under test: " + daemon.description() + " at " + daemon.endpoint() + " - " + why);
    return daemon;
  }
}
