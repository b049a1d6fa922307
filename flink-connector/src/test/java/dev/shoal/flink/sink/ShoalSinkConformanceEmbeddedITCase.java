package dev.shoal.flink.sink;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalMode;

/**
 * {@link ShoalSinkConformanceITCase} against the engine in the test JVM ({@code embedded:<dir>}):
 * the savepoint restarts and rescalings close and recreate every writer and committer while the
 * engine stays open.
 */
@ShoalMode(TargetMode.EMBEDDED)
class ShoalSinkConformanceEmbeddedITCase extends ShoalSinkConformanceITCase {}
