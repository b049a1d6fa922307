package dev.shoal.flink.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalMode;
import java.util.List;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;

/**
 * {@link ShoalSinkITCase} against a table sharded over three daemons ({@link ShoalCluster}, sink
 * endpoint node 0), plus what routing by key does: each writer sends every record to the node
 * holding its shard (no node forwards any), or, with {@code sink.route-by-key} off, everything
 * through node 0, which forwards; either way every event once, spread evenly, and the at-least-once
 * writer's checkpoint waits for every shard's log to be durable.
 */
@ShoalMode(TargetMode.CLUSTER)
class ShoalSinkClusterITCase extends ShoalSinkITCase {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void eachRecordGoesStraightToTheNodeHoldingItsShard() throws Exception {
    long forwarded = writeAtLeastOnce("routed_by_key", true);
    assertEquals(0, forwarded, "no node forwarded a record: the writers routed them");
  }

  @Test
  void withRoutingOffTheEndpointNodeForwardsTheOtherShardsRecords() throws Exception {
    long forwarded = writeAtLeastOnce("routed_by_node", false);
    int events = ShoalDaemon.eventIds().size();
    // Node 0 holds one shard of three: it forwards about two thirds.
    assertTrue(forwarded > events / 2 && forwarded < events, "node 0 forwarded " + forwarded + " of " + events);
  }

  /**
   * Writes the events at least once into a new table (durability none, so only make_durable makes
   * the logs durable) and checks them; answers how many records the nodes forwarded meanwhile.
   */
  private long writeAtLeastOnce(String table, boolean routeByKey) throws Exception {
    SHOAL.action("create_table", "{\"name\":\"" + table + "\",\"shard_key\":\"id\",\"durability\":\"none\","
        + "\"on_invalid_json\":\"reject\"}");
    long before = forwardedRecords();
    StreamExecutionEnvironment env = environment("none");
    env.enableCheckpointing(500);
    events(env).sinkTo(sink(table, DeliveryGuarantee.AT_LEAST_ONCE).setRouteByKey(routeByKey).build()).name("shoal-sink");
    env.execute("github events -> sharded shoal (route by key: " + routeByKey + ")");
    long forwarded = forwardedRecords() - before;

    List<String> expected = ShoalDaemon.eventIds();
    assertEquals(counts(expected), counts(SHOAL.column(table, "id")), "every event id exactly once");
    JsonNode stats = JSON.readTree(SHOAL.action("stats", "{\"table\":\"" + table + "\"}"));
    double even = expected.size() / 3.0;
    for (JsonNode shard : stats.get("shards")) {
      long records = shard.get("records").asLong();
      assertTrue(Math.abs(records - even) <= even * 0.1, "within 10 % of even: " + stats);
    }
    assertEveryLogDurable(table);
    System.out.printf("route by key %s: %d events, %d forwarded by nodes%n", routeByKey, expected.size(), forwarded);
    return forwarded;
  }

  /** Records forwarded by all nodes since they started (the {@code cluster} action's counter). */
  private static long forwardedRecords() throws Exception {
    long forwarded = 0;
    for (int i = 0; i < 3; i++) {
      forwarded += JSON.readTree(SHOAL.cluster().node(i).action("cluster", "{}")).get("forwarded_records").asLong();
    }
    return forwarded;
  }
}
