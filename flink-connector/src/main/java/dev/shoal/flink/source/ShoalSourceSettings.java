package dev.shoal.flink.source;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalTableClient;
import java.io.Serializable;
import java.time.Duration;

/**
 * What a {@link ShoalSource} reads and how (built by {@link ShoalSourceBuilder}; every field is an
 * option of the SQL table too, {@link dev.shoal.flink.table.ShoalConnectorOptions}).
 *
 * @param endpoint the daemon ({@code grpc://host:port}) or {@code embedded:/path}
 * @param table the table to read
 * @param client token, request deadline, embedded settings
 * @param filter a filter in shoal's filter language (docs/protocol.md, "Filters"), or null: only
 *     matching records are read, through the PSFs that cover it
 * @param startup where reading starts
 * @param startAddress the log address to start at with {@link Startup#ADDRESS}
 * @param bounded true: a snapshot up to where the table was complete when the job started; false:
 *     then follow the tail
 * @param pollInterval how long a reader that is caught up waits before asking again
 * @param splitBytes bytes of log per split of the backlog, and per request of a reader
 * @param failOnDataLoss a reader whose position was dropped by retention or {@code truncate}
 *     fails ({@code OUT_OF_RANGE}); false: it resumes at the table's begin address, counting the
 *     bytes it skipped in metric {@code shoalSkippedBytes}
 * @param durableOnly read only records that are durable ({@code "durable_only": true}): nothing a
 *     reader emitted can be lost by a daemon crash (then the reader waits for the table's group
 *     commit or page flushes)
 */
public record ShoalSourceSettings(
    String endpoint,
    String table,
    ShoalClientOptions client,
    String filter,
    Startup startup,
    long startAddress,
    boolean bounded,
    Duration pollInterval,
    long splitBytes,
    boolean failOnDataLoss,
    boolean durableOnly)
    implements Serializable {

  /** Where a {@link ShoalSource} starts reading. */
  public enum Startup {
    /** At the table's begin address: every record the table holds. */
    EARLIEST,
    /** Where the table is complete when the job starts: only records that land later. */
    LATEST,
    /** At a given log address (e.g. a {@code _address} + 1 from an earlier read). */
    ADDRESS
  }

  /** The query of {@code [from, to)}: whole records as put ({@code "output": "json"}) with their addresses. */
  ObjectNode command(long from, long to) {
    return command(table, from, to);
  }

  /** {@link #command(long, long)} of {@code table} (a shard's table of a sharded source table). */
  ObjectNode command(String table, long from, long to) {
    ObjectNode command = ShoalTableClient.JSON.createObjectNode()
        .put("table", table)
        .put("output", "json")
        .put("with_address", true)
        .put("from_address", from)
        .put("if_truncated", failOnDataLoss ? "error" : "skip");
    if (durableOnly) {
      command.put("durable_only", true);
    }
    if (to != ShoalSplit.UNBOUNDED) {
      command.put("to_address", to);
    }
    if (filter != null && !filter.isBlank()) {
      command.put("filter", filter);
    }
    return command;
  }
}
