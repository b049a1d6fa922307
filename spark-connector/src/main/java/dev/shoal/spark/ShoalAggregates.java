package dev.shoal.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Aggregate pushdown: Spark's {@code COUNT(*)}, {@code COUNT(col)}, {@code MIN(col)},
 * {@code MAX(col)} and {@code SUM(col)} of a number column (and so {@code AVG}, which Spark
 * splits into SUM and COUNT), with or without {@code GROUP BY} of scalar columns, as the daemon's
 * {@code "aggregates"} and {@code "group_by"} command keys with {@code "partial": true}: each
 * endpoint answers one row of <em>partial</em> aggregates per group over its log range, read in
 * parallel; Spark merges them per group: sums the counts and sums, takes the min of mins and max
 * of maxes (partial pushdown).
 */
public final class ShoalAggregates implements Serializable {
  private static final long serialVersionUID = 1L;

  private final List<String> groupBy;
  private final List<String[]> functions;
  private final StructType schema;

  private ShoalAggregates(List<String> groupBy, List<String[]> functions, StructType schema) {
    this.groupBy = groupBy;
    this.functions = functions;
    this.schema = schema;
  }

  /**
   * The daemon form of {@code aggregation}, or null when some part of it cannot be pushed
   * (grouping, DISTINCT, an expression, a struct/array/JSON-text column, another function).
   */
  public static ShoalAggregates of(Aggregation aggregation, StructType tableSchema) {
    List<String> groupBy = new ArrayList<>();
    List<String[]> functions = new ArrayList<>();
    List<StructField> fields = new ArrayList<>();
    // GROUP BY columns: scalar columns, first in the scan's output (the daemon's "group_by").
    for (Expression key : aggregation.groupByExpressions()) {
      StructField field = scalarColumn(key, tableSchema);
      if (field == null) {
        return null;
      }
      String path = ShoalSchemas.path(((NamedReference) key).fieldNames());
      groupBy.add(path);
      fields.add(new StructField(path, field.dataType(), true, org.apache.spark.sql.types.Metadata.empty()));
    }
    for (AggregateFunc func : aggregation.aggregateExpressions()) {
      if (func instanceof CountStar) {
        functions.add(new String[] {"count", null});
        fields.add(new StructField("count(*)", DataTypes.LongType, false, org.apache.spark.sql.types.Metadata.empty()));
        continue;
      }
      String name;
      Expression column;
      if (func instanceof Count && !((Count) func).isDistinct()) {
        name = "count";
        column = ((Count) func).column();
      } else if (func instanceof Min) {
        name = "min";
        column = ((Min) func).column();
      } else if (func instanceof Max) {
        name = "max";
        column = ((Max) func).column();
      } else if (func instanceof org.apache.spark.sql.connector.expressions.aggregate.Sum
          && !((org.apache.spark.sql.connector.expressions.aggregate.Sum) func).isDistinct()) {
        name = "sum";
        column = ((org.apache.spark.sql.connector.expressions.aggregate.Sum) func).column();
      } else {
        return null;
      }
      StructField field = scalarColumn(column, tableSchema);
      if (field == null) {
        return null;
      }
      String[] names = ((NamedReference) column).fieldNames();
      if (name.equals("sum") && !(field.dataType() instanceof LongType || field.dataType() instanceof DoubleType)) {
        return null;
      }
      String path = ShoalSchemas.path(names);
      functions.add(new String[] {name, path});
      DataType type = name.equals("count") ? DataTypes.LongType : field.dataType();
      fields.add(new StructField(name + "(" + path + ")", type, !name.equals("count"), org.apache.spark.sql.types.Metadata.empty()));
    }
    return new ShoalAggregates(groupBy, functions, new StructType(fields.toArray(new StructField[0])));
  }

  /**
   * The table's field that {@code expression} names when it is a column of numbers, strings or
   * booleans (not JSON text, not a struct or array), else null: what the daemon can group by and
   * aggregate.
   */
  private static StructField scalarColumn(Expression expression, StructType tableSchema) {
    if (!(expression instanceof NamedReference)) {
      return null;
    }
    StructField field = ShoalSchemas.fieldAt(tableSchema, ((NamedReference) expression).fieldNames());
    return field == null || ShoalSchemas.isJsonText(field) || !isLeaf(field.dataType()) ? null : field;
  }

  private static boolean isLeaf(DataType type) {
    return type instanceof LongType || type instanceof DoubleType || type instanceof StringType || type instanceof BooleanType;
  }

  /** The scan's output: one column per aggregate, in Spark's order. */
  public StructType schema() {
    return schema;
  }

  /** Adds {@code "aggregates": [...]} to a query command. */
  public void addTo(ObjectNode command) {
    command.put("partial", true); // Spark merges the endpoints' partial rows
    if (!groupBy.isEmpty()) {
      ArrayNode keys = command.putArray("group_by");
      groupBy.forEach(keys::add);
    }
    ArrayNode list = command.putArray("aggregates");
    for (String[] f : functions) {
      ObjectNode node = list.addObject().put("function", f[0]);
      if (f[1] != null) {
        node.put("column", f[1]);
      }
    }
  }

  @Override
  public String toString() {
    List<String> names = new ArrayList<>();
    StructField[] fields = schema.fields();
    for (int i = groupBy.size(); i < fields.length; i++) {
      names.add(fields[i].name());
    }
    return groupBy.isEmpty() ? names.toString() : names + " group_by=" + groupBy;
  }
}
