package dev.shoal.flink.sink;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalMode;

/** {@link ShoalSinkConformanceITCase} against the real daemon. */
@ShoalMode(TargetMode.DAEMON)
class ShoalSinkConformanceDaemonITCase extends ShoalSinkConformanceITCase {}
