package dev.shoal.spark;

import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link ShoalDifferentialTest} against a table sharded over three daemons ({@link
 * ShoalCluster}): Spark reads every shard's endpoints at their nodes' locations, and every answer
 * is still exactly {@code spark.read.json}'s (the scale-out issue's differential queries).
 */
class ShoalDifferentialClusterTest extends ShoalDifferentialTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(ShoalTarget.Mode.CLUSTER);
}
