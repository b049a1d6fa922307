package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
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

  /**
   * A DataFrame appended to a table sharded by key lands with each record at its shard's node (no
   * node forwards one; {@code write.route-by-key} off, node 0 forwards the others' share), and
   * reads back as written.
   */
  @Test
  void a_write_sends_each_record_to_its_shards_node() throws Exception {
    Dataset<Row> source = spark.sql("SELECT id, type, actor.login AS login FROM oracle");
    long expected = source.count();
    for (boolean routeByKey : new boolean[] {true, false}) {
      String table = "copy_" + routeByKey;
      try (ShoalClient client = ShoalClient.open(URI.create(target.endpoint()), null)) {
        client.action("create_table", ShoalClient.JSON.createObjectNode().put("name", table).put("shard_key", "id"), table);
      }
      long before = forwardedRecords();
      source.write().format("shoal").option("endpoint", target.endpoint()).option("table", table)
          .option(ShoalOptions.WRITE_BATCH_ROWS, "500").option(ShoalOptions.WRITE_ROUTE_BY_KEY, String.valueOf(routeByKey))
          .mode("append").save();
      long forwarded = forwardedRecords() - before;
      List<Row> written = spark.read().format("shoal").option("endpoint", target.endpoint()).option("table", table).load()
          .select("id", "type", "login").except(source).collectAsList();
      assertEquals(List.of(), written, "nothing read back that was not written");
      assertEquals(expected, spark.read().format("shoal").option("endpoint", target.endpoint()).option("table", table)
          .load().count());
      if (routeByKey) {
        assertEquals(0, forwarded, "no node forwarded a record");
      } else {
        assertTrue(forwarded > expected / 2 && forwarded < expected, "node 0 forwarded " + forwarded + " of " + expected);
      }
    }
  }

  /** Records the nodes forwarded since they started (the {@code cluster} action of each). */
  private long forwardedRecords() throws Exception {
    Set<String> nodes = new TreeSet<>();
    try (ShoalClient client = ShoalClient.open(URI.create(target.endpoint()), null)) {
      client.action("cluster", ShoalClient.JSON.createObjectNode(), "").get("nodes")
          .forEach(node -> nodes.add(node.get("location").asText()));
    }
    long forwarded = 0;
    for (String node : nodes) {
      try (ShoalClient client = ShoalClient.open(URI.create(node), null)) {
        forwarded += client.action("cluster", ShoalClient.JSON.createObjectNode(), "").get("forwarded_records").asLong();
      }
    }
    return forwarded;
  }
}
