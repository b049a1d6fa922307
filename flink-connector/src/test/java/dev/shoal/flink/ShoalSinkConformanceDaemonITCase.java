package dev.shoal.flink;

import dev.shoal.client.testing.TargetMode;

/** {@link ShoalSinkConformanceITCase} against the real daemon. */
@ShoalMode(TargetMode.DAEMON)
class ShoalSinkConformanceDaemonITCase extends ShoalSinkConformanceITCase {}
