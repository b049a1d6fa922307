package dev.shoal.spark;

import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.NullVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark {@link ColumnVector}s over the Arrow vectors of a {@code DoGet} stream, without copying:
 * leaves are Spark's own {@link ArrowColumnVector}; structs and lists get the thin vectors below,
 * which match children to Spark's fields <em>by name</em> (the daemon's field order need not be
 * Spark's) and rebuild pruned structs ({@code actor struct<login>}) from the daemon's flat
 * path columns ({@code actor.login}).
 */
final class ShoalColumnVectors {
  private ShoalColumnVectors() {}

  /**
   * A Spark vector of type {@code type} over the Arrow vector {@code vector}.
   *
   * @throws ShoalException when the Arrow type does not fit the Spark type (a schema given with
   *     {@code .schema(...)} that disagrees with the table)
   */
  static ColumnVector wrap(ValueVector vector, DataType type, String column, String table) {
    if (vector instanceof NullVector) {
      return new NullColumnVector(type);
    }
    if (type instanceof StructType) {
      if (!(vector instanceof StructVector)) {
        throw mismatch(vector, type, column, table);
      }
      StructVector struct = (StructVector) vector;
      StructField[] fields = ((StructType) type).fields();
      ColumnVector[] children = new ColumnVector[fields.length];
      for (int i = 0; i < fields.length; i++) {
        ValueVector child = struct.getChild(fields[i].name());
        children[i] = child == null
            ? new NullColumnVector(fields[i].dataType())
            : wrap(child, fields[i].dataType(), column + "." + fields[i].name(), table);
      }
      return new StructColumnVector((StructType) type, children, struct);
    }
    if (type instanceof ArrayType) {
      if (!(vector instanceof ListVector)) {
        throw mismatch(vector, type, column, table);
      }
      ListVector list = (ListVector) vector;
      ColumnVector elements = wrap(list.getDataVector(), ((ArrayType) type).elementType(), column + "[]", table);
      return new ListColumnVector(type, list, elements);
    }
    boolean fits = (type instanceof LongType && vector instanceof BigIntVector)
        || (type instanceof DoubleType && vector instanceof Float8Vector)
        || (type instanceof StringType && vector instanceof VarCharVector)
        || (type instanceof BooleanType && vector instanceof BitVector);
    if (!fits) {
      throw mismatch(vector, type, column, table);
    }
    return new ArrowColumnVector(vector);
  }

  private static ShoalException mismatch(ValueVector vector, DataType type, String column, String table) {
    return new ShoalException("shoal table '" + table + "': column '" + column + "' is "
        + vector.getField().getType() + " in the daemon but the Spark schema declares it " + type.simpleString()
        + ". Fix the schema given with .schema(...) (or omit it to use the daemon's schema: bigint for"
        + " Int64, double for Float64, string for Utf8, boolean, struct and array).");
  }

  /** Base of the vectors below: no primitive accessors. */
  private abstract static class ContainerVector extends ColumnVector {
    ContainerVector(DataType type) {
      super(type);
    }

    @Override
    public boolean hasNull() {
      return numNulls() > 0;
    }

    @Override
    public boolean getBoolean(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte getByte(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public short getShort(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public int getInt(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public long getLong(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public float getFloat(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public double getDouble(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
      throw new UnsupportedOperationException();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
      throw new UnsupportedOperationException();
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte[] getBinary(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      throw new UnsupportedOperationException();
    }
  }

  /**
   * A struct over child vectors. With an Arrow struct vector, its validity says which rows are
   * null; a struct rebuilt from flat path columns (no Arrow struct) is null where every child is
   * null — the daemon sends {@code actor.login}, not whether {@code actor} itself was present.
   * Spark only prunes a struct when the query reads nothing but its fields, and a field of a null
   * struct and a null field of a present struct read the same (NULL), so results equal Spark's.
   */
  static final class StructColumnVector extends ContainerVector {
    private final ColumnVector[] children;
    private final StructVector arrow;
    private final int rows;

    StructColumnVector(StructType type, ColumnVector[] children, StructVector arrow) {
      this(type, children, arrow, -1);
    }

    StructColumnVector(StructType type, ColumnVector[] children, StructVector arrow, int rows) {
      super(type);
      this.children = children;
      this.arrow = arrow;
      this.rows = rows;
    }

    @Override
    public boolean isNullAt(int rowId) {
      if (arrow != null) {
        return arrow.isNull(rowId);
      }
      for (ColumnVector child : children) {
        if (!child.isNullAt(rowId)) {
          return false;
        }
      }
      return children.length > 0;
    }

    @Override
    public int numNulls() {
      if (arrow != null) {
        return arrow.getNullCount();
      }
      int nulls = 0;
      for (int i = 0; i < rows; i++) {
        if (isNullAt(i)) {
          nulls++;
        }
      }
      return nulls;
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      return children[ordinal];
    }

    @Override
    public void close() {
      for (ColumnVector child : children) {
        child.close();
      }
    }
  }

  /** An array over an Arrow list's offsets and an element vector. */
  static final class ListColumnVector extends ContainerVector {
    private final ListVector list;
    private final ColumnVector elements;

    ListColumnVector(DataType type, ListVector list, ColumnVector elements) {
      super(type);
      this.list = list;
      this.elements = elements;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return list.isNull(rowId);
    }

    @Override
    public int numNulls() {
      return list.getNullCount();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      int start = list.getOffsetBuffer().getInt((long) rowId * ListVector.OFFSET_WIDTH);
      int end = list.getOffsetBuffer().getInt((long) (rowId + 1) * ListVector.OFFSET_WIDTH);
      return new ColumnarArray(elements, start, end - start);
    }

    @Override
    public void close() {
      elements.close();
    }
  }

  /** A column that is NULL in every row (a field the daemon's vector does not have). */
  static final class NullColumnVector extends ContainerVector {
    NullColumnVector(DataType type) {
      super(type);
    }

    @Override
    public boolean hasNull() {
      return true;
    }

    @Override
    public int numNulls() {
      return Integer.MAX_VALUE;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return true;
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      return new NullColumnVector(((StructType) type).fields()[ordinal].dataType());
    }

    @Override
    public void close() {}
  }
}
