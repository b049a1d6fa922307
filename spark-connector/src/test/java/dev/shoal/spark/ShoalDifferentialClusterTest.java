package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.testing.TargetMode;
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
 * is still exactly {@code spark.read.json}'s.
 */
class ShoalDifferentialClusterTest extends ShoalDifferentialTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.CLUSTER);

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

  /**
   * Structured Streaming over the sharded table: the stream follows each shard's own log at its
   * node (the offset's keys are the shards' tables), reads every record once in micro-batches
   * bounded by {@code maxRecordsPerTrigger}, and a restart from the checkpoint reads only what
   * landed since.
   */
  @Test
  void a_stream_follows_every_shard_and_reads_each_record_once(@org.junit.jupiter.api.io.TempDir java.nio.file.Path checkpoints)
      throws Exception {
    String table = "streamed_sharded";
    try (ShoalClient client = ShoalClient.open(URI.create(target.endpoint()), null)) {
      client.action("create_table", ShoalClient.JSON.createObjectNode().put("name", table).put("shard_key", "id"), table);
    }
    Dataset<Row> first = spark.sql("SELECT id, type FROM oracle");
    first.write().format("shoal").option("endpoint", target.endpoint()).option("table", table).mode("append").save();
    java.util.List<String> seen = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    java.util.List<String> endOffsets = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    String checkpoint = checkpoints.resolve("stream").toString();
    Runnable run = () -> {
      try {
        org.apache.spark.sql.streaming.StreamingQuery query = spark.readStream().format("shoal").option("endpoint", target.endpoint())
            .option("table", table).option("maxRecordsPerTrigger", "3000").load()
            .select("id").writeStream()
            .foreachBatch((org.apache.spark.api.java.function.VoidFunction2<Dataset<Row>, Long>) (batch, id) ->
                batch.collectAsList().forEach(r -> seen.add(r.getString(0))))
            .option("checkpointLocation", checkpoint)
            .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow())
            .start();
        query.awaitTermination();
        for (org.apache.spark.sql.streaming.StreamingQueryProgress progress : query.recentProgress()) {
          endOffsets.add(progress.sources()[0].endOffset());
        }
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    run.run();
    java.util.List<String> expected = new java.util.ArrayList<>(first.select("id").as(org.apache.spark.sql.Encoders.STRING()).collectAsList());
    assertEquals(new TreeSet<>(expected), new TreeSet<>(seen));
    assertEquals(expected.size(), seen.size(), "each record once");
    assertTrue(endOffsets.size() >= 3, "maxRecordsPerTrigger=3000 over ~10,000 records: " + endOffsets);
    JsonNode offset = ShoalClient.JSON.readTree(endOffsets.get(endOffsets.size() - 1));
    assertEquals(Set.of(table + ".shard-0", table + ".shard-1", table + ".shard-2"),
        new TreeSet<>(java.util.stream.StreamSupport.stream(java.util.Spliterators.spliteratorUnknownSize(offset.fieldNames(), 0), false).toList()));

    Dataset<Row> more = spark.sql("SELECT concat('more-', id) AS id, type FROM oracle LIMIT 500");
    more.write().format("shoal").option("endpoint", target.endpoint()).option("table", table).mode("append").save();
    run.run();
    expected.addAll(more.select("id").as(org.apache.spark.sql.Encoders.STRING()).collectAsList());
    assertEquals(new TreeSet<>(expected), new TreeSet<>(seen));
    assertEquals(expected.size(), seen.size(), "each record once, after the restart from the checkpoint");
  }

  /**
   * A table spread over three shards by batch (no shard key), whose shards inferred different
   * types for one column (integers on one, floats on another, strings on a third): the stream
   * follows all three and reads exactly what a batch read of the table answers, in the table's
   * merged schema.
   */
  @Test
  void a_stream_of_a_table_spread_by_batch_reads_what_a_batch_read_answers(@org.junit.jupiter.api.io.TempDir java.nio.file.Path checkpoints)
      throws Exception {
    String table = "streamed_spread";
    try (ShoalClient client = ShoalClient.open(URI.create(target.endpoint()), null)) {
      client.action("create_table", ShoalClient.JSON.createObjectNode().put("name", table).put("shards", 3), table);
    }
    for (String value : List.of("1", "1.5", "'x'")) {
      spark.sql("SELECT concat('" + value.replace("'", "") + "-', id) AS id, " + value + " AS v FROM oracle LIMIT 200").coalesce(1)
          .write().format("shoal").option("endpoint", target.endpoint()).option("table", table).mode("append").save();
    }
    java.util.List<String> streamed = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    spark.readStream().format("shoal").option("endpoint", target.endpoint()).option("table", table).load()
        .select("id", "v").writeStream()
        .foreachBatch((org.apache.spark.api.java.function.VoidFunction2<Dataset<Row>, Long>) (batch, id) ->
            batch.collectAsList().forEach(r -> streamed.add(r.toString())))
        .option("checkpointLocation", checkpoints.resolve("spread").toString())
        .trigger(org.apache.spark.sql.streaming.Trigger.AvailableNow())
        .start().awaitTermination();
    java.util.List<String> batch = new java.util.ArrayList<>();
    spark.read().format("shoal").option("endpoint", target.endpoint()).option("table", table).load().select("id", "v")
        .collectAsList().forEach(r -> batch.add(r.toString()));
    assertEquals(600, batch.size());
    java.util.Collections.sort(batch);
    java.util.Collections.sort(streamed);
    assertEquals(batch, streamed);
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
