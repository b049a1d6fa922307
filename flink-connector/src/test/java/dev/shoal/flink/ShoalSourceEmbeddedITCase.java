package dev.shoal.flink;

/** {@link ShoalSourceITCase} against the engine in the test JVM ({@code embedded:<dir>}). */
@ShoalMode(ShoalTarget.Mode.EMBEDDED)
class ShoalSourceEmbeddedITCase extends ShoalSourceITCase {}
