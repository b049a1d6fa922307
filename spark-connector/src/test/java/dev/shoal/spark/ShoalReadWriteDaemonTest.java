package dev.shoal.spark;

import dev.shoal.client.testing.TargetMode;
import org.junit.jupiter.api.extension.RegisterExtension;

/** {@link ShoalReadWriteTest} against the daemon process ({@code grpc://127.0.0.1:PORT}). */
class ShoalReadWriteDaemonTest extends ShoalReadWriteTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.DAEMON);
}
