package dev.shoal.flink.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;

/**
 * {@link ShoalSourceITCase} against a table sharded over three daemons ({@link ShoalCluster}, the
 * source's endpoint node 0): the enumerator cuts each shard's log at the node holding it, readers
 * read the shards' splits there, and the followers of the three tails (more than the two readers)
 * emit every record once, through a failover too.
 */
@ShoalMode(TargetMode.CLUSTER)
class ShoalSourceClusterITCase extends ShoalSourceITCase {

  /**
   * Each shard's rows in its own log-address order (the inherited test reads one unsharded log
   * from address 0; a sharded table's addresses are per shard).
   */
  @Override
  @Test
  void aFetchEmitsAnIndexScansRowsInAddressOrder() throws Exception {
    String table = "src_order";
    SHOAL.createTable(table, "reject");
    SHOAL.action("register_psf", "{\"table\": \"" + table + "\", \"name\": \"type\", \"kind\": \"projection\", \"field\": \"type\"}");
    sinkEvents(table);
    ShoalSourceSettings settings = source(table).setFilter("type = 'PushEvent'").setSplitBytes(64L << 20).build().settings();
    int rows = 0;
    try (ShoalSplitReader reader = new ShoalSplitReader(settings, new org.apache.flink.metrics.SimpleCounter())) {
      for (int shard = 0; shard < 3; shard++) {
        String location = SHOAL.cluster().node(shard).endpoint();
        reader.handleSplitsChanges(new org.apache.flink.connector.base.source.reader.splitreader.SplitsAddition<>(
            List.of(new ShoalSplit("order-" + shard, 0, 1L << 40, table + ".shard-" + shard, location))));
        List<Long> addresses = new ArrayList<>();
        org.apache.flink.connector.base.source.reader.RecordsWithSplitIds<ShoalSourceRecord> fetched = reader.fetch();
        while (fetched.nextSplit() != null) {
          for (ShoalSourceRecord record; (record = fetched.nextRecordFromSplit()) != null; ) {
            if (record.json() != null) {
              addresses.add(record.address());
            }
          }
        }
        List<Long> sorted = new ArrayList<>(addresses);
        sorted.sort(null);
        assertEquals(sorted, addresses, "shard " + shard + ": rows in ascending log-address order");
        rows += addresses.size();
      }
    }
    assertEquals(ids("PushEvent").size(), rows);
  }

  /** A table sharded without a shard key (records spread by batch) is read shard by shard too. */
  @Test
  void aTableSpreadByBatchIsReadShardByShard() throws Exception {
    SHOAL.action("create_table", "{\"name\": \"src_spread\", \"shards\": 3, \"on_invalid_json\": \"reject\"}");
    sinkEvents("src_spread");
    List<String> read = new ArrayList<>();
    try (org.apache.flink.util.CloseableIterator<String> records = environment().fromSource(
        source("src_spread").setBounded(true).setSplitBytes(1 << 20).build(), WatermarkStrategy.noWatermarks(), "shoal spread")
        .executeAndCollect()) {
      records.forEachRemaining(r -> read.add(id(r)));
    }
    assertEquals(counts(ids(null)), counts(read));
  }

  @Test
  void startingAtAnAddressIsRefusedOnAShardedTable() throws Exception {
    SHOAL.createTable("src_address", "reject");
    org.apache.flink.configuration.Configuration conf = new org.apache.flink.configuration.Configuration();
    conf.set(org.apache.flink.configuration.RestartStrategyOptions.RESTART_STRATEGY, "none");
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.fromSource(source("src_address").setBounded(true).startFromAddress(64).build(), WatermarkStrategy.noWatermarks(), "shoal at an address")
        .sinkTo(new org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink<>());
    Exception error = org.junit.jupiter.api.Assertions.assertThrows(Exception.class, () -> env.execute("a sharded table from an address"));
    Throwable cause = error;
    while (cause.getCause() != null && !String.valueOf(cause.getMessage()).contains("per shard")) {
      cause = cause.getCause();
    }
    assertTrue(String.valueOf(cause.getMessage()).contains("log addresses are per shard"), String.valueOf(error));
  }
}
