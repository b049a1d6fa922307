package dev.shoal.flink;

import dev.shoal.client.testing.TargetMode;

/** {@link ShoalSourceITCase} against the engine in the test JVM ({@code embedded:<dir>}). */
@ShoalMode(TargetMode.EMBEDDED)
class ShoalSourceEmbeddedITCase extends ShoalSourceITCase {}
