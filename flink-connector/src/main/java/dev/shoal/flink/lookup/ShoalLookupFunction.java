package dev.shoal.flink.lookup;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.flink.common.ShoalTableClient;
import dev.shoal.flink.source.ShoalSource;
import dev.shoal.flink.source.ShoalSourceSettings;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import org.apache.arrow.vector.UInt8Vector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.functions.FunctionContext;
import org.apache.flink.table.functions.LookupFunction;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.util.SimpleUserCodeClassLoader;

/**
 * The lookup join of a shoal table ({@code JOIN t FOR SYSTEM_TIME AS OF p.proc_time ON p.k =
 * t.k}): for each key, the <em>latest</em> record with that key (the one at the highest log
 * address), or none. One query per key, {@code k = <value> [AND ...]} with {@code "output":
 * "json"}: the planner answers it from a projection PSF on the key when one is registered (an
 * index scan of that key's chain, FishStore §5), otherwise by a full scan (slow on a large table:
 * register the PSF). A null key matches nothing, as in SQL.
 */
public final class ShoalLookupFunction extends LookupFunction {

  private static final long serialVersionUID = 1L;

  private final ShoalSourceSettings settings;
  private final List<String> keyPaths;
  private final List<LogicalType> keyTypes;
  private final DeserializationSchema<RowData> deserializer;
  private transient ShoalTableClient client;
  private transient List<RowData.FieldGetter> getters;

  public ShoalLookupFunction(
      ShoalSourceSettings settings, List<String> keyPaths, List<LogicalType> keyTypes, DeserializationSchema<RowData> deserializer) {
    this.settings = settings;
    this.keyPaths = List.copyOf(keyPaths);
    this.keyTypes = List.copyOf(keyTypes);
    this.deserializer = deserializer;
    for (int i = 0; i < keyTypes.size(); i++) {
      if (!literalType(keyTypes.get(i))) {
        throw new IllegalArgumentException("shoal lookup on table \"" + settings.table() + "\": key " + keyPaths.get(i)
            + " has type " + keyTypes.get(i).asSummaryString()
            + "; a lookup key must be a character string, an exact or approximate number, or a boolean");
      }
    }
  }

  /** Types whose values have a literal in the filter language. */
  static boolean literalType(LogicalType type) {
    return switch (type.getTypeRoot()) {
      case CHAR, VARCHAR, BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT, DOUBLE, DECIMAL -> true;
      default -> false;
    };
  }

  @Override
  public void open(FunctionContext context) throws Exception {
    client = ShoalTableClient.open(settings.endpoint(), settings.table(), settings.client());
    getters = new ArrayList<>();
    for (int i = 0; i < keyTypes.size(); i++) {
      getters.add(RowData.createFieldGetter(keyTypes.get(i), i));
    }
    deserializer.open(ShoalSource.deserializerContext(
        context.getMetricGroup().addGroup("deserializer"), SimpleUserCodeClassLoader.create(context.getUserCodeClassLoader())));
  }

  @Override
  public Collection<RowData> lookup(RowData key) throws java.io.IOException {
    StringBuilder filter = new StringBuilder();
    for (int i = 0; i < getters.size(); i++) {
      Object value = getters.get(i).getFieldOrNull(key);
      if (value == null) {
        return List.of();
      }
      if (i > 0) {
        filter.append(" AND ");
      }
      filter.append(keyPaths.get(i)).append(" = ").append(literal(value));
    }
    if (settings.filter() != null && !settings.filter().isBlank()) {
      filter.append(" AND (").append(settings.filter()).append(')');
    }
    byte[][] latest = {null};
    long[] at = {-1};
    try {
      client.query(ShoalTableClient.JSON.createObjectNode()
          .put("table", settings.table())
          .put("filter", filter.toString())
          .put("output", "json")
          .put("with_address", true), root -> {
            VarCharVector json = (VarCharVector) root.getVector("json");
            UInt8Vector address = (UInt8Vector) root.getVector("_address");
            for (int i = 0; i < root.getRowCount(); i++) {
              if (address.get(i) > at[0]) {
                at[0] = address.get(i);
                latest[0] = json.get(i);
              }
            }
          });
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("shoal lookup interrupted");
    } catch (RuntimeException e) {
      throw new java.io.IOException("shoal lookup of " + filter + " in table \"" + settings.table() + "\" at "
          + settings.endpoint() + " failed: " + e.getMessage(), e);
    }
    if (latest[0] == null) {
      return List.of();
    }
    RowData row = deserializer.deserialize(latest[0]);
    return row == null ? List.of() : List.of(row);
  }

  /** A key value as a literal of the filter language. */
  static String literal(Object value) {
    if (value instanceof StringData || value instanceof String) {
      return "'" + value.toString().replace("'", "''") + "'";
    }
    if (value instanceof Boolean b) {
      return b ? "TRUE" : "FALSE";
    }
    if (value instanceof DecimalData d) {
      return d.toBigDecimal().toPlainString();
    }
    if (value instanceof Double d && (d.isNaN() || d.isInfinite()) || value instanceof Float f && (f.isNaN() || f.isInfinite())) {
      throw new IllegalArgumentException("shoal lookup: key value " + value + " has no JSON literal");
    }
    return value.toString();
  }

  @Override
  public void close() throws Exception {
    if (client != null) {
      client.close();
    }
  }
}
