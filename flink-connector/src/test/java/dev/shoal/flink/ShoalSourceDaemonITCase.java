package dev.shoal.flink;

/** {@link ShoalSourceITCase} against the real daemon. */
@ShoalMode(ShoalTarget.Mode.DAEMON)
class ShoalSourceDaemonITCase extends ShoalSourceITCase {}
