package dev.shoal.flink.packaging;

import java.util.ArrayList;
import java.util.List;
import dev.shoal.flink.sink.ShoalSink;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;

/**
 * Two small jobs that {@link ShadedConnectorJarIT} runs in a JVM whose class path holds only Flink
 * and the shaded connector jar - as in a Flink cluster with the jar in lib/. It names nothing but
 * Flink and the connector's public API (ShoalSink, flink-connector-base's DeliveryGuarantee);
 * anything else the connector needs must come from the shaded jar.
 *
 * <p>{@code main(streamTable, sqlTable, records, endpoint...)}: both jobs for each endpoint, a
 * daemon's {@code grpc://...} or an {@code embedded:/path} directory (the engine then runs in this
 * JVM, its native library extracted from the shaded jar).
 */
public final class ShadedJarJob {
  private ShadedJarJob() {}

  public static void main(String[] args) throws Exception {
    for (int i = 3; i < args.length; i++) {
      run(args[i], args[0], args[1], Integer.parseInt(args[2]));
      System.out.println("shaded jar jobs finished: " + args[i]);
    }
  }

  /**
   * A DataStream job writing {@code records} documents {"id": "s<i>"} into {@code streamTable}
   * under exactly-once (writer, committer and their Flight calls), then Flink SQL inserting three
   * rows {"id": "sql-<i>"} into {@code sqlTable} through the {@code 'connector' = 'shoal'} factory
   * and the {@code json} format.
   */
  public static void run(String endpoint, String streamTable, String sqlTable, int records) throws Exception {
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(2);
    env.enableCheckpointing(100);
    List<String> documents = new ArrayList<>(records);
    for (int i = 0; i < records; i++) {
      documents.add("{\"id\":\"s" + i + "\"}");
    }
    env.fromData(documents)
        .sinkTo(ShoalSink.<String>builder()
            .setEndpoint(endpoint)
            .setTable(streamTable)
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix("shaded-jar")
            .build());
    env.execute("shaded jar: DataStream, exactly-once");

    TableEnvironment tables = TableEnvironment.create(EnvironmentSettings.inStreamingMode());
    tables.getConfig().set("parallelism.default", "1");
    tables.executeSql("CREATE TABLE shoal_events (id STRING) WITH ('connector' = 'shoal', 'endpoint' = '"
        + endpoint + "', 'table' = '" + sqlTable + "', 'format' = 'json')");
    tables.executeSql("INSERT INTO shoal_events VALUES ('sql-1'), ('sql-2'), ('sql-3')").await();
  }
}
