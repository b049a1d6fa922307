package dev.shoal.spark;

import java.io.IOException;
import java.io.StringWriter;
import java.util.Base64;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Spark rows as JSON records, the way Spark's JSON writer writes them: null fields are left
 * out, structs are objects, arrays arrays, maps objects (keys as strings), dates and timestamps
 * ISO-8601 strings (UTC), binary base64, decimals exact numbers.
 */
final class ShoalJsonRows {
  private static final JsonFactory FACTORY = new JsonFactory();

  private ShoalJsonRows() {}

  static String toJson(InternalRow row, StructType schema) {
    StringWriter out = new StringWriter();
    try (JsonGenerator gen = FACTORY.createGenerator(out)) {
      writeStruct(gen, row, schema);
    } catch (IOException e) {
      throw new ShoalException("shoal: cannot write a row as JSON: " + e, e);
    }
    return out.toString();
  }

  private static void writeStruct(JsonGenerator gen, InternalRow row, StructType schema) throws IOException {
    gen.writeStartObject();
    StructField[] fields = schema.fields();
    for (int i = 0; i < fields.length; i++) {
      if (row.isNullAt(i)) {
        continue;
      }
      gen.writeFieldName(fields[i].name());
      writeValue(gen, row, i, fields[i].dataType());
    }
    gen.writeEndObject();
  }

  private static void writeValue(JsonGenerator gen, SpecializedGetters data, int i, DataType type) throws IOException {
    if (data.isNullAt(i)) {
      gen.writeNull();
    } else if (type instanceof StringType) {
      gen.writeString(data.getUTF8String(i).toString());
    } else if (type instanceof LongType) {
      gen.writeNumber(data.getLong(i));
    } else if (type instanceof IntegerType) {
      gen.writeNumber(data.getInt(i));
    } else if (type instanceof ShortType) {
      gen.writeNumber(data.getShort(i));
    } else if (type instanceof ByteType) {
      gen.writeNumber(data.getByte(i));
    } else if (type instanceof DoubleType) {
      double d = data.getDouble(i);
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        gen.writeString(Double.toString(d));
      } else {
        gen.writeNumber(d);
      }
    } else if (type instanceof FloatType) {
      float f = data.getFloat(i);
      if (Float.isNaN(f) || Float.isInfinite(f)) {
        gen.writeString(Float.toString(f));
      } else {
        gen.writeNumber(f);
      }
    } else if (type instanceof BooleanType) {
      gen.writeBoolean(data.getBoolean(i));
    } else if (type instanceof DecimalType) {
      DecimalType d = (DecimalType) type;
      gen.writeNumber(data.getDecimal(i, d.precision(), d.scale()).toJavaBigDecimal());
    } else if (type instanceof DateType) {
      gen.writeString(DateTimeUtils.toJavaDate(data.getInt(i)).toLocalDate().toString());
    } else if (type instanceof TimestampType) {
      gen.writeString(DateTimeUtils.microsToInstant(data.getLong(i)).toString());
    } else if (type instanceof BinaryType) {
      gen.writeString(Base64.getEncoder().encodeToString(data.getBinary(i)));
    } else if (type instanceof StructType) {
      StructType struct = (StructType) type;
      writeStruct(gen, data.getStruct(i, struct.size()), struct);
    } else if (type instanceof ArrayType) {
      ArrayData array = data.getArray(i);
      DataType element = ((ArrayType) type).elementType();
      gen.writeStartArray();
      for (int j = 0; j < array.numElements(); j++) {
        writeValue(gen, array, j, element);
      }
      gen.writeEndArray();
    } else if (type instanceof MapType) {
      MapData map = data.getMap(i);
      MapType mapType = (MapType) type;
      gen.writeStartObject();
      ArrayData keys = map.keyArray();
      ArrayData values = map.valueArray();
      for (int j = 0; j < map.numElements(); j++) {
        gen.writeFieldName(String.valueOf(keys.get(j, mapType.keyType())));
        writeValue(gen, values, j, mapType.valueType());
      }
      gen.writeEndObject();
    } else {
      throw new ShoalException("shoal: writing a column of type " + type.simpleString() + " as JSON is not supported");
    }
  }
}
