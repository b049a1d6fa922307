package dev.shoal.spark;

import dev.shoal.client.testing.TargetMode;
import org.junit.jupiter.api.extension.RegisterExtension;

/** {@link ShoalDifferentialTest} against the engine inside the test JVM ({@code embedded:<tmpdir>}). */
class ShoalDifferentialEmbeddedTest extends ShoalDifferentialTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.EMBEDDED);
}
