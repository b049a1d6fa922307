package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link ShoalDifferentialTest} against a table sharded over three daemons ({@link
 * ShoalCluster}): Spark reads every shard's endpoints at their nodes' locations, and every answer
 * is still exactly {@code spark.read.json}'s (the scale-out issue's differential queries).
 */
class ShoalDifferentialClusterTest extends ShoalDifferentialTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(ShoalTarget.Mode.CLUSTER);

  /**
   * A scan's input partitions are the endpoints of every shard, each read at the location of the
   * node holding it (the connector's {@code endpoint} names node 0 only) with that node's host as
   * Spark's preferred location.
   */
  @Test
  void every_shard_is_read_at_its_nodes_location() throws Exception {
    Set<String> nodes = new TreeSet<>();
    try (ShoalClient client = ShoalClient.open(URI.create(target.endpoint()), null)) {
      for (JsonNode table : client.action("cluster", ShoalClient.JSON.createObjectNode(), "events").get("tables")) {
        table.get("shard_map").forEach(shard -> nodes.add(shard.get("location").asText()));
      }
    }
    assertEquals(3, nodes.size(), "the table is sharded over three nodes: " + nodes);
    SparkPlan plan = spark.sql("SELECT id FROM shoal.events").queryExecution().sparkPlan();
    Set<String> read = new TreeSet<>();
    scala.collection.Seq<SparkPlan> leaves = plan.collectLeaves();
    for (int i = 0; i < leaves.length(); i++) {
      if (leaves.apply(i) instanceof BatchScanExec scan) {
        scala.collection.Seq<InputPartition> partitions = scan.inputPartitions();
        for (int j = 0; j < partitions.length(); j++) {
          ShoalInputPartition partition = (ShoalInputPartition) partitions.apply(j);
          read.add(partition.location().toString());
          assertArrayEquals(new String[] {"127.0.0.1"}, partition.preferredLocations());
        }
      }
    }
    assertEquals(nodes, read, "every shard read at its node");
  }
}
