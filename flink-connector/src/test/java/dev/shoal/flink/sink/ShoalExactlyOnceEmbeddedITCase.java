package dev.shoal.flink.sink;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalMode;

/**
 * {@link ShoalExactlyOnceITCase} against the engine in the test JVM ({@code embedded:<dir>}): the
 * writers stage and the committer commits in the engine the test reads through its own {@code
 * ShoalEmbedded} handle; a failover closes and recreates them while the engine stays open
 * ({@code embedded.keep-alive}).
 */
@ShoalMode(TargetMode.EMBEDDED)
class ShoalExactlyOnceEmbeddedITCase extends ShoalExactlyOnceITCase {}
