package dev.shoal.flink;

/** {@link ShoalSinkConformanceITCase} against the real daemon. */
@ShoalMode(ShoalTarget.Mode.DAEMON)
class ShoalSinkConformanceDaemonITCase extends ShoalSinkConformanceITCase {}
