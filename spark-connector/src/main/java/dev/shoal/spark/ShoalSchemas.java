package dev.shoal.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Maps the daemon's Arrow schema (GetSchema) to Spark's: JSON objects as structs, arrays as
 * arrays, Int64 as bigint, Float64 as double, Utf8 as string, Boolean as boolean. Fields are
 * sorted by name at every level, as Spark's own JSON reader does, so {@code SELECT *} over shoal
 * and over {@code spark.read.json} of the same records have the same shape. A Utf8 field that
 * holds JSON text (the daemon saw mixed JSON types there) keeps the field metadata
 * {@code shoal.json_text = true}; filters on it are not pushed down.
 */
public final class ShoalSchemas {
  /** Field metadata key of columns that hold JSON text (mixed JSON types). */
  public static final String JSON_TEXT = "shoal.json_text";

  private ShoalSchemas() {}

  /** The Spark schema of an Arrow schema from the daemon. */
  public static StructType toSpark(Schema schema) {
    return toSparkStruct(schema.getFields());
  }

  private static StructType toSparkStruct(List<Field> fields) {
    List<StructField> out = new ArrayList<>();
    for (Field f : fields) {
      out.add(toSparkField(f));
    }
    out.sort(Comparator.comparing(StructField::name));
    return new StructType(out.toArray(new StructField[0]));
  }

  private static StructField toSparkField(Field field) {
    Metadata metadata = Metadata.empty();
    Map<String, String> md = field.getMetadata();
    if (md != null && "true".equals(md.get(JSON_TEXT))) {
      metadata = new MetadataBuilder().putBoolean(JSON_TEXT, true).build();
    }
    return new StructField(field.getName(), toSparkType(field), true, metadata);
  }

  private static DataType toSparkType(Field field) {
    ArrowType type = field.getType();
    switch (type.getTypeID()) {
      case Int:
        return DataTypes.LongType;
      case FloatingPoint:
        return DataTypes.DoubleType;
      case Utf8:
      case LargeUtf8:
      case Null:
        return DataTypes.StringType;
      case Bool:
        return DataTypes.BooleanType;
      case Struct:
        return toSparkStruct(field.getChildren());
      case List:
      case LargeList:
        return new ArrayType(toSparkType(field.getChildren().get(0)), true);
      default:
        throw new ShoalException("shoal: column '" + field.getName() + "' has Arrow type " + type
            + ", which the Spark connector does not map");
    }
  }

  /** True when a field holds JSON text of mixed JSON types. */
  public static boolean isJsonText(StructField field) {
    return field.metadata().contains(JSON_TEXT) && field.metadata().getBoolean(JSON_TEXT);
  }

  /**
   * The field at a dotted path ({@code ["actor", "login"]}) through structs, or null when the
   * path does not name a field.
   */
  public static StructField fieldAt(StructType schema, String[] path) {
    StructType current = schema;
    StructField found = null;
    for (int i = 0; i < path.length; i++) {
      if (current == null) {
        return null;
      }
      found = null;
      for (StructField f : current.fields()) {
        if (f.name().equals(path[i])) {
          found = f;
          break;
        }
      }
      if (found == null) {
        return null;
      }
      current = found.dataType() instanceof StructType ? (StructType) found.dataType() : null;
    }
    return found;
  }

  /**
   * Union of the shards' schemas: fields by name; structs are merged field by field; other type
   * conflicts become JSON-text strings (no filter is pushed on them).
   */
  public static StructType union(List<StructType> schemas) {
    if (schemas.size() == 1) {
      return schemas.get(0);
    }
    Map<String, StructField> merged = new LinkedHashMap<>();
    for (StructType s : schemas) {
      for (StructField f : s.fields()) {
        StructField prior = merged.get(f.name());
        merged.put(f.name(), prior == null ? f : mergeField(prior, f));
      }
    }
    List<StructField> out = new ArrayList<>(merged.values());
    out.sort(Comparator.comparing(StructField::name));
    return new StructType(out.toArray(new StructField[0]));
  }

  private static StructField mergeField(StructField a, StructField b) {
    if (a.dataType().equals(b.dataType()) && isJsonText(a) == isJsonText(b)) {
      return a;
    }
    if (a.dataType() instanceof StructType && b.dataType() instanceof StructType) {
      return new StructField(a.name(), union(List.of((StructType) a.dataType(), (StructType) b.dataType())), true, Metadata.empty());
    }
    return new StructField(a.name(), DataTypes.StringType, true, new MetadataBuilder().putBoolean(JSON_TEXT, true).build());
  }

  /**
   * Quotes a path segment for shoal's filter language: always, as a SQL delimited identifier
   * ({@code "type"}, {@code "say ""hi"""}). The daemon's SQL parser knows several hundred keywords
   * ({@code trim}, {@code struct}, {@code some}, {@code with}, ...) that a bare segment must not
   * spell, and its list grows with the parser; a quoted segment is always a name.
   */
  public static String quoteSegment(String segment) {
    return "\"" + segment.replace("\"", "\"\"") + "\"";
  }

  /** A dotted path in shoal's syntax ({@code payload."a.b"}). */
  public static String path(String[] segments) {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < segments.length; i++) {
      if (i > 0) {
        sb.append('.');
      }
      sb.append(quoteSegment(segments[i]));
    }
    return sb.toString();
  }
}
