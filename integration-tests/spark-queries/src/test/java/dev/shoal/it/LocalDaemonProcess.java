package dev.shoal.it;

import java.nio.file.Path;
import java.util.List;

import dev.shoal.client.testing.DaemonProcess;

/**
 * The daemon binary ({@code -Dshoal.bin}) as a child process through shoal-client's {@link
 * DaemonProcess}: {@code shoal serve --listen 127.0.0.1:0 --data-dir DIR}, which binds a free port
 * itself. Its output goes to {@code DIR.log} next to DIR.
 */
final class LocalDaemonProcess implements DaemonUnderTest {
  private final DaemonProcess process;

  private LocalDaemonProcess(DaemonProcess process) {
    this.process = process;
  }

  static LocalDaemonProcess start(Path dataDir) throws Exception {
    return new LocalDaemonProcess(DaemonProcess.start(dataDir));
  }

  @Override
  public String endpoint() {
    return process.endpoint();
  }

  @Override
  public String description() {
    return "local process " + DaemonProcess.binary() + " (pid " + process.pid() + ")";
  }

  @Override
  public int stop() throws Exception {
    return process.stop();
  }

  /** The daemon's output so far (stdout and stderr, in the file next to its data directory). */
  List<String> log() {
    return process.output();
  }
}
