package dev.shoal.spark;

import dev.shoal.client.testing.TargetMode;
import org.junit.jupiter.api.extension.RegisterExtension;

/** {@link ShoalPushdownTest} against the engine inside the test JVM ({@code embedded:<tmpdir>}). */
class ShoalPushdownEmbeddedTest extends ShoalPushdownTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.EMBEDDED);
}
