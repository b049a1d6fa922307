package dev.shoal.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Collects what Spark pushes down — filters ({@link ShoalV2Filters} decides which), the
 * required (possibly nested) columns, a limit, and aggregates — and builds the {@link ShoalScan}.
 */
public final class ShoalScanBuilder implements ScanBuilder, SupportsPushDownV2Filters, SupportsPushDownRequiredColumns,
    SupportsPushDownLimit, SupportsPushDownAggregates {
  private static final Logger LOG = LoggerFactory.getLogger(ShoalScanBuilder.class);
  /** Shards known to lack (false) or have (true) aggregate support, by endpoint. */
  private static final ConcurrentHashMap<String, Boolean> AGGREGATE_SUPPORT = new ConcurrentHashMap<>();

  private final ShoalOptions options;
  private final StructType tableSchema;
  private StructType readSchema;
  private final List<Predicate> pushed = new ArrayList<>();
  private final List<String> pushedText = new ArrayList<>();
  private long limit = -1;
  private ShoalAggregates aggregates;
  private final CaseInsensitiveStringMap scanOptions;

  /**
   * @param tableSchema the daemon's schema (decides which filters are exact)
   * @param readSchema the table's schema as Spark sees it (the daemon's, or the user's)
   */
  ShoalScanBuilder(ShoalOptions options, StructType tableSchema, StructType readSchema, CaseInsensitiveStringMap scanOptions) {
    this.options = options;
    this.scanOptions = scanOptions;
    this.tableSchema = tableSchema;
    this.readSchema = readSchema;
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    List<Predicate> rest = new ArrayList<>();
    for (Predicate p : predicates) {
      String text = ShoalV2Filters.translate(p, tableSchema);
      if (text == null) {
        rest.add(p);
      } else {
        pushed.add(p);
        pushedText.add(text);
      }
    }
    return rest.toArray(new Predicate[0]);
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushed.toArray(new Predicate[0]);
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    this.readSchema = requiredSchema;
  }

  @Override
  public boolean pushLimit(int n) {
    this.limit = n;
    return true;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return false;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    if (!options.aggregatePushdown()) {
      return false;
    }
    ShoalAggregates candidate = ShoalAggregates.of(aggregation, tableSchema);
    if (candidate == null || !daemonAnswers(candidate)) {
      return false;
    }
    this.aggregates = candidate;
    return true;
  }

  /**
   * Capability check: daemons without aggregate support reject the unknown command key
   * {@code aggregates} with INVALID_ARGUMENT. The first shard is asked with the real command
   * (so unsupported column types are caught too); the answer per shard is cached when it is
   * about the key itself.
   */
  private boolean daemonAnswers(ShoalAggregates candidate) {
    String shard = options.endpoints().get(0).toString();
    if (Boolean.FALSE.equals(AGGREGATE_SUPPORT.get(shard))) {
      return false;
    }
    ObjectNode command = ShoalScan.command(options, filter(), null, -1, candidate);
    try (ShoalClient client = options.connect(options.endpoints().get(0))) {
      client.getFlightInfo(options.table(), command);
      AGGREGATE_SUPPORT.put(shard, true);
      return true;
    } catch (ShoalException e) {
      String message = String.valueOf(e.getMessage());
      if (e.is(ShoalErrors.INVALID_ARGUMENT) && message.contains("unknown field") && message.contains("aggregates")) {
        AGGREGATE_SUPPORT.put(shard, false);
        LOG.info("shoal daemon at {} does not support aggregate pushdown; Spark aggregates the rows", shard);
      } else {
        LOG.info("shoal: aggregates {} not pushed to {}: {}", candidate, shard, message);
      }
      return false;
    }
  }

  /**
   * The pushed filters as one shoal filter ({@code a AND b}), or null. Spark adds
   * {@code col IS NOT NULL} next to every comparison on {@code col}; a comparison is never true
   * on NULL, so those conjuncts are implied and left out (the daemon's plan stays readable).
   */
  private String filter() {
    List<String> terms = new ArrayList<>();
    for (int i = 0; i < pushed.size(); i++) {
      if (!impliedNotNull(pushed.get(i))) {
        terms.add(pushedText.get(i));
      }
    }
    if (terms.isEmpty()) {
      return null;
    }
    return String.join(" AND ", terms);
  }

  private boolean impliedNotNull(Predicate p) {
    if (!p.name().equals("IS_NOT_NULL") || !(p.children()[0] instanceof org.apache.spark.sql.connector.expressions.NamedReference)) {
      return false;
    }
    String column = ((org.apache.spark.sql.connector.expressions.NamedReference) p.children()[0]).describe();
    for (Predicate other : pushed) {
      switch (other.name()) {
        case "=": case "<": case "<=": case ">": case ">=": case "IN": case "STARTS_WITH": case "ENDS_WITH": case "CONTAINS":
          for (org.apache.spark.sql.connector.expressions.Expression child : other.children()) {
            if (child instanceof org.apache.spark.sql.connector.expressions.NamedReference
                && ((org.apache.spark.sql.connector.expressions.NamedReference) child).describe().equals(column)) {
              return true;
            }
          }
          break;
        default:
          break;
      }
    }
    return false;
  }

  @Override
  public Scan build() {
    return new ShoalScan(options, tableSchema, aggregates != null ? aggregates.schema() : readSchema,
        pushed.toArray(new Predicate[0]), filter(), aggregates != null ? -1 : limit, aggregates, scanOptions);
  }
}
