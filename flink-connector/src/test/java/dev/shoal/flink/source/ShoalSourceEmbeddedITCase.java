package dev.shoal.flink.source;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalMode;

/** {@link ShoalSourceITCase} against the engine in the test JVM ({@code embedded:<dir>}). */
@ShoalMode(TargetMode.EMBEDDED)
class ShoalSourceEmbeddedITCase extends ShoalSourceITCase {}
