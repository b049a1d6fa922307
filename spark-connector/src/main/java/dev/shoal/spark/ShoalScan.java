package dev.shoal.spark;

import java.net.URI;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalFlightPlan;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A planned read of a shoal table: asks every shard for a plan ({@code GetFlightInfo}) once, and
 * turns every endpoint into one input partition. {@link #description()} (what {@code EXPLAIN}
 * prints) shows the pushed filter, columns, limit, aggregates and, per shard, which PSFs and log
 * ranges the daemon answers with index scans and which with full scans.
 */
public final class ShoalScan implements Scan, Batch {
  private final ShoalOptions options;
  private final StructType tableSchema;
  private final StructType readSchema;
  private final Predicate[] pushedPredicates;
  private final String filter;
  private final long limit;
  private final ShoalAggregates aggregates;
  private final ShoalProjection projection;
  /** The read's own options (a streaming read's {@code startingOffsets}, {@code filter}, ...). */
  private final CaseInsensitiveStringMap scanOptions;
  private List<ShoalFlightPlan> plans;

  ShoalScan(ShoalOptions options, StructType tableSchema, StructType readSchema, Predicate[] pushedPredicates,
      String filter, long limit, ShoalAggregates aggregates, CaseInsensitiveStringMap scanOptions) {
    this.options = options;
    this.scanOptions = scanOptions;
    this.tableSchema = tableSchema;
    this.readSchema = readSchema;
    this.pushedPredicates = pushedPredicates;
    this.filter = filter;
    this.limit = limit;
    this.aggregates = aggregates;
    this.projection = aggregates != null ? null : ShoalProjection.of(readSchema, tableSchema);
  }

  /** The {@code GetFlightInfo} command. */
  static ObjectNode command(ShoalOptions options, String filter, List<String> columns, long limit, ShoalAggregates aggregates) {
    ObjectNode command = ShoalClient.JSON.createObjectNode().put("table", options.table());
    if (filter != null) {
      command.put("filter", filter);
    }
    if (aggregates != null) {
      aggregates.addTo(command);
    } else {
      ArrayNode list = command.putArray("columns");
      for (String c : columns) {
        list.add(c);
      }
      if (limit >= 0) {
        command.put("limit", limit);
      }
    }
    if (options.maxEndpoints() != null) {
      command.put("max_endpoints", options.maxEndpoints());
    }
    return command;
  }

  private synchronized List<ShoalFlightPlan> plans() {
    if (plans == null && projection != null && projection.countOnly() && projection.paths().isEmpty()) {
      // The table has no column at all: no record was ingested, nothing to read.
      plans = new ArrayList<>();
    }
    if (plans == null) {
      ObjectNode command = command(options, filter, projection == null ? null : projection.paths(), limit, aggregates);
      List<ShoalFlightPlan> out = new ArrayList<>();
      for (URI shard : options.endpoints()) {
        try (ShoalClient client = options.connect(shard)) {
          ShoalFlightPlan plan = client.getFlightInfo(options.table(), command);
          if (filter != null && !plan.exact()) {
            // Spark was told the pushed filters need no re-evaluation; a daemon that cannot
            // promise that cannot serve this scan.
            throw new ShoalException("shoal table '" + options.table() + "' at " + shard + ": the daemon did not evaluate the filter '"
                + filter + "' exactly (plan: " + plan.metadata() + "); this connector needs protocol version 1 semantics");
          }
          out.add(plan);
        }
      }
      plans = out;
    }
    return plans;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    StringBuilder sb = new StringBuilder("ShoalScan table=").append(options.table());
    sb.append(" endpoint=").append(options.endpointText());
    sb.append(" pushedFilters=").append(Arrays.stream(pushedPredicates).map(Predicate::toString).collect(Collectors.toList()));
    sb.append(" filter=").append(filter == null ? "none" : "[" + filter + "]");
    if (aggregates != null) {
      sb.append(" aggregates=").append(aggregates);
    } else {
      sb.append(" columns=").append(projection.paths());
    }
    if (limit >= 0) {
      sb.append(" limit=").append(limit);
    }
    try {
      for (ShoalFlightPlan plan : plans()) {
        sb.append(" | shard ").append(plan.shard()).append(": ").append(summary(plan.metadata().path("plan")));
        sb.append(", endpoints=").append(plan.endpoints().size());
      }
    } catch (ShoalException e) {
      sb.append(" | plan unavailable: ").append(e.getMessage());
    }
    return sb.toString();
  }

  /**
   * "index scans [psf type on [a, b)]; full scans [[c, d)]" of a plan JSON, then
   * "; columnar scans [[e, f)] (n row groups, m skipped by their statistics)" when the
   * columnar tier serves part of it.
   */
  static String summary(JsonNode plan) {
    List<String> index = new ArrayList<>();
    for (JsonNode scan : plan.path("index_scans")) {
      List<String> psfs = new ArrayList<>();
      scan.path("psfs").forEach(p -> psfs.add(p.asText()));
      index.add("PSFs " + psfs + " on [" + scan.path("from").asText() + ", " + scan.path("to").asText() + ")");
    }
    List<String> full = new ArrayList<>();
    for (JsonNode scan : plan.path("full_scans")) {
      full.add("[" + scan.path("from").asText() + ", " + scan.path("to").asText() + ")");
    }
    List<String> columnar = new ArrayList<>();
    for (JsonNode scan : plan.path("columnar_scans")) {
      columnar.add("[" + scan.path("from").asText() + ", " + scan.path("to").asText() + ")");
    }
    JsonNode groups = plan.path("columnar_row_groups");
    String pruned = groups.isMissingNode()
        ? ""
        : " (" + groups.path("total").asText() + " row groups, " + groups.path("skipped").asText() + " skipped by their statistics)";
    return "index scans " + index + "; full scans " + full + (columnar.isEmpty() ? "" : "; columnar scans " + columnar + pruned);
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<InputPartition> partitions = new ArrayList<>();
    for (ShoalFlightPlan plan : plans()) {
      for (ShoalFlightPlan.Endpoint endpoint : plan.endpoints()) {
        partitions.add(ShoalInputPartition.of(plan, endpoint));
      }
    }
    return partitions.toArray(new InputPartition[0]);
  }

  /** A streaming read (Spark pushes nothing into it: every column, the {@code filter} option). */
  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    ShoalProjection reading = projection != null ? projection : ShoalProjection.positional(readSchema);
    ObjectNode command = command(options, filter, reading.paths(), -1, null);
    return new ShoalMicroBatchStream(options, scanOptions, command, new ShoalPartitionReaderFactory(options, reading, -1));
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    ShoalProjection reading = projection != null ? projection : ShoalProjection.positional(readSchema);
    return new ShoalPartitionReaderFactory(options, reading, limit);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return ShoalMetrics.all();
  }
}
