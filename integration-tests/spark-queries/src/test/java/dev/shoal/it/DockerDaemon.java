package dev.shoal.it;

import java.nio.file.Path;
import java.time.Duration;

import org.testcontainers.containers.GenericContainer;
import org.testcontainers.containers.wait.strategy.Wait;
import org.testcontainers.utility.DockerImageName;

/**
 * The daemon from {@code docker/Dockerfile} in a container (Testcontainers). The image is built
 * with the {@code docker} CLI rather than Testcontainers' {@code ImageFromDockerfile}: the
 * Dockerfile uses BuildKit cache mounts, which the classic builder API rejects.
 *
 * <p>Not exercised on the machines the tests were written on (no Docker engine there).
 */
final class DockerDaemon implements DaemonUnderTest {
  static final String IMAGE = "shoal-it:dev";
  static final int FLIGHT_PORT = 50051;

  private final GenericContainer<?> container;

  private DockerDaemon(GenericContainer<?> container) {
    this.container = container;
  }

  static DockerDaemon start(Path repo, Path dockerfile) throws Exception {
    System.out.println("[it] docker build -f " + dockerfile + " -t " + IMAGE + " " + repo);
    Process build = new ProcessBuilder("docker", "build", "-f", dockerfile.toString(), "-t", IMAGE, repo.toString())
        .inheritIO().start();
    if (build.waitFor() != 0) {
      throw new IllegalStateException("docker build of " + dockerfile + " failed (exit " + build.exitValue() + ")");
    }
    GenericContainer<?> container = new GenericContainer<>(DockerImageName.parse(IMAGE))
        .withExposedPorts(FLIGHT_PORT)
        .waitingFor(Wait.forLogMessage(".*shoal ready.*", 1))
        .withStartupTimeout(Duration.ofSeconds(60));
    container.start();
    return new DockerDaemon(container);
  }

  @Override
  public String endpoint() {
    return "grpc://" + container.getHost() + ":" + container.getMappedPort(FLIGHT_PORT);
  }

  @Override
  public String description() {
    return "container " + container.getContainerId().substring(0, 12) + " of image " + IMAGE + " (docker/Dockerfile)";
  }

  @Override
  public int stop() {
    if (!container.isRunning()) {
      return 0;
    }
    // docker stop: SIGTERM, then SIGKILL after the timeout; the exit code says which happened.
    container.getDockerClient().stopContainerCmd(container.getContainerId()).withTimeout(60).exec();
    Long exit = container.getDockerClient().inspectContainerCmd(container.getContainerId()).exec().getState().getExitCodeLong();
    container.stop();
    return exit == null ? -1 : exit.intValue();
  }
}
