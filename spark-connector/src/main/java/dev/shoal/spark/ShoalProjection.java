package dev.shoal.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;

/**
 * Column pruning: which dotted paths to ask the daemon for ({@code columns} of the query
 * command), and how to rebuild Spark's (possibly pruned, nested) read schema from the flat
 * columns the daemon returns.
 *
 * <p>A field that Spark reads whole is requested by its path and wrapped as it comes. A struct
 * Spark pruned ({@code actor struct<login>}) is requested field by field ({@code actor.login})
 * and rebuilt. Arrays are requested whole (the daemon has no paths through arrays) and their
 * element structs are matched to Spark's by name. When Spark needs no column at all
 * ({@code count(*)} that was not pushed), the cheapest top-level leaf is requested only for its
 * row count.
 */
public final class ShoalProjection implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Rebuild instruction of one Spark field. */
  private static final class Node implements Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final DataType type;
    /** Index of the daemon column, or -1 for a rebuilt struct. */
    final int column;
    final Node[] children;

    Node(String name, DataType type, int column, Node[] children) {
      this.name = name;
      this.type = type;
      this.column = column;
      this.children = children;
    }
  }

  private final StructType readSchema;
  private final Node[] nodes;
  private final List<String> paths;
  private final boolean countOnly;

  private ShoalProjection(StructType readSchema, Node[] nodes, List<String> paths, boolean countOnly) {
    this.readSchema = readSchema;
    this.nodes = nodes;
    this.paths = paths;
    this.countOnly = countOnly;
  }

  /** The projection of {@code readSchema} (Spark's pruned schema) out of the table's {@code fullSchema}. */
  public static ShoalProjection of(StructType readSchema, StructType fullSchema) {
    List<String> paths = new ArrayList<>();
    if (readSchema.fields().length == 0) {
      String column = cheapestColumn(fullSchema);
      List<String> only = column == null ? Collections.emptyList() : Collections.singletonList(column);
      return new ShoalProjection(readSchema, new Node[0], only, true);
    }
    Node[] nodes = plan(readSchema, fullSchema, new String[0], paths);
    return new ShoalProjection(readSchema, nodes, Collections.unmodifiableList(paths), false);
  }

  /** The projection of a result whose columns are Spark's fields in order (aggregates). */
  public static ShoalProjection positional(StructType schema) {
    Node[] nodes = new Node[schema.fields().length];
    List<String> paths = new ArrayList<>();
    for (int i = 0; i < nodes.length; i++) {
      nodes[i] = new Node(schema.fields()[i].name(), schema.fields()[i].dataType(), i, null);
      paths.add(schema.fields()[i].name());
    }
    return new ShoalProjection(schema, nodes, Collections.unmodifiableList(paths), false);
  }

  private static Node[] plan(StructType read, StructType full, String[] prefix, List<String> paths) {
    Node[] nodes = new Node[read.fields().length];
    for (int i = 0; i < nodes.length; i++) {
      StructField field = read.fields()[i];
      String[] path = Arrays.copyOf(prefix, prefix.length + 1);
      path[prefix.length] = field.name();
      StructField fullField = full == null ? null : fieldNamed(full, field.name());
      if (field.dataType() instanceof StructType && fullField != null && fullField.dataType() instanceof StructType
          && !sameShape(field.dataType(), fullField.dataType())) {
        Node[] children = plan((StructType) field.dataType(), (StructType) fullField.dataType(), path, paths);
        nodes[i] = new Node(field.name(), field.dataType(), -1, children);
      } else {
        nodes[i] = new Node(field.name(), field.dataType(), paths.size(), null);
        paths.add(ShoalSchemas.path(path));
      }
    }
    return nodes;
  }

  private static StructField fieldNamed(StructType struct, String name) {
    for (StructField f : struct.fields()) {
      if (f.name().equals(name)) {
        return f;
      }
    }
    return null;
  }

  /** Same types ignoring nullability and metadata. */
  private static boolean sameShape(DataType a, DataType b) {
    if (a instanceof StructType && b instanceof StructType) {
      StructField[] fa = ((StructType) a).fields();
      StructField[] fb = ((StructType) b).fields();
      if (fa.length != fb.length) {
        return false;
      }
      for (int i = 0; i < fa.length; i++) {
        if (!fa[i].name().equals(fb[i].name()) || !sameShape(fa[i].dataType(), fb[i].dataType())) {
          return false;
        }
      }
      return true;
    }
    if (a instanceof ArrayType && b instanceof ArrayType) {
      return sameShape(((ArrayType) a).elementType(), ((ArrayType) b).elementType());
    }
    return a.equals(b);
  }

  /** A top-level leaf (preferring booleans, then numbers) to count rows with; null when the table has no column. */
  private static String cheapestColumn(StructType full) {
    String best = null;
    int bestRank = Integer.MAX_VALUE;
    for (StructField f : full.fields()) {
      String t = f.dataType().typeName();
      int rank = t.equals("boolean") ? 0 : t.equals("long") || t.equals("double") ? 1 : t.equals("string") ? 2 : 3;
      if (rank < bestRank) {
        best = f.name();
        bestRank = rank;
      }
    }
    return best == null ? null : ShoalSchemas.quoteSegment(best);
  }

  /** The {@code columns} of the query command. */
  public List<String> paths() {
    return paths;
  }

  public StructType readSchema() {
    return readSchema;
  }

  /** True when Spark needs only the number of rows. */
  public boolean countOnly() {
    return countOnly;
  }

  /** Spark's columns over the Arrow vectors of {@code root} (columns in {@link #paths()} order). */
  public ColumnVector[] columns(VectorSchemaRoot root, String table) {
    List<FieldVector> vectors = root.getFieldVectors();
    if (!countOnly && vectors.size() != paths.size()) {
      throw new ShoalException("shoal table '" + table + "': asked the daemon for columns " + paths + " but got "
          + root.getSchema().getFields().size() + " columns");
    }
    ColumnVector[] out = new ColumnVector[nodes.length];
    for (int i = 0; i < nodes.length; i++) {
      out[i] = build(nodes[i], vectors, root.getRowCount(), table, nodes[i].name);
    }
    return out;
  }

  private static ColumnVector build(Node node, List<FieldVector> vectors, int rows, String table, String column) {
    if (node.column >= 0) {
      return ShoalColumnVectors.wrap(vectors.get(node.column), node.type, column, table);
    }
    ColumnVector[] children = new ColumnVector[node.children.length];
    for (int i = 0; i < children.length; i++) {
      children[i] = build(node.children[i], vectors, rows, table, column + "." + node.children[i].name);
    }
    return new ShoalColumnVectors.StructColumnVector((StructType) node.type, children, null, rows);
  }
}
