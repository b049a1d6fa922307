package dev.shoal.spark;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.expressions.Cast;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.GeneralScalarExpression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Translates Spark's V2 predicates into shoal's filter language (SQL expression syntax over
 * dotted JSON paths) — and nothing else.
 *
 * <p>A predicate is translated only when shoal's answer equals Spark's for every record:
 * <ul>
 *   <li>columns must be leaves of type bigint, double, string or boolean in the table's schema
 *       (top-level or nested through structs); struct and array columns, and strings that hold
 *       JSON text of mixed JSON types ({@code shoal.json_text}), stay in Spark — shoal compares by
 *       JSON type, Spark compares the text;</li>
 *   <li>literals must have the column's type family (numbers for numeric columns, strings for
 *       string columns, booleans for boolean columns), not be null, NaN or infinite;</li>
 *   <li>operators: {@code = <> < <= > >= IN IS_NULL IS_NOT_NULL STARTS_WITH ENDS_WITH CONTAINS AND OR
 *       NOT} ({@code STARTS_WITH}, {@code ENDS_WITH} and {@code CONTAINS} — Spark's {@code LIKE
 *       'x%'}, {@code LIKE '%x'}, {@code LIKE '%x%'} and {@code startsWith}/{@code endsWith}/{@code
 *       contains} — become shoal's {@code LIKE} with the literal's {@code % _ \} escaped).
 *       {@code AND}, {@code OR} and {@code NOT} are translated only when all their children are.
 *       Both sides use SQL's three-valued logic, and a missing field is NULL in both.</li>
 *   <li>functions: {@code LOWER(col)}, {@code UPPER(col)}, {@code SUBSTRING(col, pos, len)} of a string column compared with a
 *       string, {@code LENGTH}/{@code CHAR_LENGTH(col)} with a number (characters, as shoal counts
 *       them), where Spark hands them to the source as V2 expressions.</li>
 *   <li>timestamps: a string column compared with a timestamp ({@code created_at >= TIMESTAMP
 *       '2021-07-21 10:00:00'}, which Spark analyses as {@code CAST(created_at AS TIMESTAMP) >= …}),
 *       or in {@code IN}, becomes shoal's {@code created_at >= TIMESTAMP '2021-07-21T10:00:00Z'}:
 *       both read RFC 3339 strings as instants. Pushed only while {@code spark.sql.session.timeZone}
 *       is UTC (a string without an offset is then UTC for both), and only where Spark hands the
 *       cast to the source (Spark 4; Spark 3.5 with {@code spark.sql.ansi.enabled}). Spark also
 *       reads partial spellings ({@code '2021-07'}) that shoal's RFC 3339 reading does not.</li>
 * </ul>
 * {@link #translate} returns null for a predicate that must stay in Spark.
 */
public final class ShoalV2Filters {
  private ShoalV2Filters() {}

  /** The filter text of {@code predicate}, or null when it cannot be pushed exactly. */
  public static String translate(Predicate predicate, StructType schema) {
    String name = predicate.name();
    Expression[] children = predicate.children();
    switch (name) {
      case "ALWAYS_TRUE":
        return "TRUE";
      case "ALWAYS_FALSE":
        return "FALSE";
      case "AND":
      case "OR": {
        String left = translateChild(children[0], schema);
        String right = translateChild(children[1], schema);
        if (left == null || right == null) {
          return null;
        }
        return "(" + left + " " + name + " " + right + ")";
      }
      case "NOT": {
        String inner = translateChild(children[0], schema);
        return inner == null ? null : "NOT (" + inner + ")";
      }
      case "IS_NULL":
      case "IS_NOT_NULL": {
        String column = column(children[0], schema);
        return column == null ? null : column + (name.equals("IS_NULL") ? " IS NULL" : " IS NOT NULL");
      }
      case "=":
      case "<>":
      case "<":
      case "<=":
      case ">":
      case ">=":
        return comparison(name, children, schema);
      case "IN":
        return in(children, schema);
      case "STARTS_WITH":
        return like(children, schema, "", "%");
      case "ENDS_WITH":
        return like(children, schema, "%", "");
      case "CONTAINS":
        return like(children, schema, "%", "%");
      default:
        return null;
    }
  }

  private static String translateChild(Expression child, StructType schema) {
    return child instanceof Predicate ? translate((Predicate) child, schema) : null;
  }

  private static String comparison(String op, Expression[] children, StructType schema) {
    if (children.length != 2) {
      return null;
    }
    String flipped = flip(op);
    Expression left = children[0];
    Expression right = children[1];
    if (left instanceof Literal && (right instanceof NamedReference || right instanceof Cast || right instanceof GeneralScalarExpression)) {
      Expression swap = left;
      left = right;
      right = swap;
      op = flipped;
    }
    if (left instanceof GeneralScalarExpression) {
      GeneralScalarExpression call = (GeneralScalarExpression) left;
      String applied = function(call, schema);
      boolean length = call.name().endsWith("LENGTH");
      String literal = applied != null && right instanceof Literal
          ? literal((Literal<?>) right, length ? org.apache.spark.sql.types.DataTypes.LongType : org.apache.spark.sql.types.DataTypes.StringType) : null;
      return literal == null ? null : applied + " " + op + " " + literal;
    }
    if (left instanceof Cast) {
      String column = timestampColumn((Cast) left, schema);
      String literal = right instanceof Literal ? timestampLiteral((Literal<?>) right) : null;
      return column == null || literal == null ? null : column + " " + op + " " + literal;
    }
    StructField field = leaf(left, schema);
    if (field == null || !(right instanceof Literal)) {
      return null;
    }
    String literal = literal((Literal<?>) right, field.dataType());
    if (literal == null) {
      return null;
    }
    return path(left) + " " + op + " " + literal;
  }

  private static String flip(String op) {
    switch (op) {
      case "<":
        return ">";
      case "<=":
        return ">=";
      case ">":
        return "<";
      case ">=":
        return "<=";
      default:
        return op;
    }
  }

  private static String in(Expression[] children, StructType schema) {
    if (children.length < 2) {
      return null;
    }
    String timestamps = children[0] instanceof Cast ? timestampColumn((Cast) children[0], schema) : null;
    StructField field = timestamps == null ? leaf(children[0], schema) : null;
    if (field == null && timestamps == null) {
      return null;
    }
    List<String> values = new ArrayList<>();
    for (int i = 1; i < children.length; i++) {
      if (!(children[i] instanceof Literal)) {
        return null;
      }
      Literal<?> value = (Literal<?>) children[i];
      String literal = timestamps != null ? timestampLiteral(value) : literal(value, field.dataType());
      if (literal == null) {
        return null;
      }
      values.add(literal);
    }
    return (timestamps != null ? timestamps : path(children[0])) + " IN (" + String.join(", ", values) + ")";
  }

  /** {@code column LIKE 'before' + literal (escaped) + 'after'} for a string column and literal. */
  private static String like(Expression[] children, StructType schema, String before, String after) {
    if (children.length != 2) {
      return null;
    }
    StructField field = leaf(children[0], schema);
    if (field == null || !(field.dataType() instanceof StringType) || !(children[1] instanceof Literal)) {
      return null;
    }
    Object value = ((Literal<?>) children[1]).value();
    if (!(value instanceof UTF8String)) {
      return null;
    }
    String text = value.toString();
    StringBuilder escaped = new StringBuilder(before);
    boolean needsEscape = false;
    for (char c : text.toCharArray()) {
      if (c == '%' || c == '_' || c == '\\') {
        escaped.append('\\');
        needsEscape = true;
      }
      escaped.append(c);
    }
    String pattern = quoteString(escaped + after);
    return path(children[0]) + " LIKE " + pattern + (needsEscape ? " ESCAPE '\\'" : "");
  }

  /** The schema field of a column reference when filters on it can be pushed, else null. */
  private static StructField leaf(Expression expression, StructType schema) {
    if (!(expression instanceof NamedReference)) {
      return null;
    }
    StructField field = ShoalSchemas.fieldAt(schema, ((NamedReference) expression).fieldNames());
    if (field == null || ShoalSchemas.isJsonText(field)) {
      return null;
    }
    DataType type = field.dataType();
    if (type instanceof LongType || type instanceof DoubleType || type instanceof StringType || type instanceof BooleanType) {
      return field;
    }
    return null;
  }

  private static String column(Expression expression, StructType schema) {
    return leaf(expression, schema) == null ? null : path(expression);
  }

  private static String path(Expression expression) {
    return ShoalSchemas.path(((NamedReference) expression).fieldNames());
  }

  /** The literal in shoal's syntax when it has the column's type family, else null. */
  static String literal(Literal<?> literal, DataType columnType) {
    Object value = literal.value();
    if (value == null) {
      return null;
    }
    if (columnType instanceof StringType) {
      return value instanceof UTF8String ? quoteString(value.toString()) : null;
    }
    if (columnType instanceof BooleanType) {
      return value instanceof Boolean ? ((Boolean) value ? "TRUE" : "FALSE") : null;
    }
    if (value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte) {
      return Long.toString(((Number) value).longValue());
    }
    if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        return null;
      }
      String plain = BigDecimal.valueOf(d).toPlainString();
      return plain.contains(".") ? plain : plain + ".0";
    }
    return null;
  }

  /**
   * {@code lower(path)} for {@code LOWER(column)} of a string column (also UPPER, LENGTH), {@code
   * substr(path, pos, len)} for {@code SUBSTRING(column, pos, len)} with integer literals (shoal's
   * substr follows Spark's substring: 1-based, 0 as 1, negative from the end); else null.
   */
  private static String function(GeneralScalarExpression call, StructType schema) {
    if (call.name().equals("SUBSTRING")) {
      Expression[] args = call.children();
      if (args.length < 2 || args.length > 3) {
        return null;
      }
      StructField field = leaf(args[0], schema);
      StringBuilder text = new StringBuilder("substr(").append(path(args[0]));
      for (int i = 1; i < args.length; i++) {
        if (!(args[i] instanceof Literal) || !(((Literal<?>) args[i]).value() instanceof Integer)) {
          return null;
        }
        text.append(", ").append(((Literal<?>) args[i]).value());
      }
      return field != null && field.dataType() instanceof StringType ? text.append(")").toString() : null;
    }
    String name;
    switch (call.name()) {
      case "LOWER":
        name = "lower";
        break;
      case "UPPER":
        name = "upper";
        break;
      case "LENGTH":
      case "CHAR_LENGTH":
      case "CHARACTER_LENGTH":
        name = "length";
        break;
      default:
        return null;
    }
    if (call.children().length != 1) {
      return null;
    }
    StructField field = leaf(call.children()[0], schema);
    return field != null && field.dataType() instanceof StringType ? name + "(" + path(call.children()[0]) + ")" : null;
  }

  /**
   * The path of {@code CAST(column AS TIMESTAMP)} over a string column, when the session's time
   * zone is UTC; else null.
   */
  private static String timestampColumn(Cast cast, StructType schema) {
    if (!(cast.dataType() instanceof TimestampType) || !sessionIsUtc()) {
      return null;
    }
    StructField field = leaf(cast.expression(), schema);
    return field != null && field.dataType() instanceof StringType ? path(cast.expression()) : null;
  }

  /** {@code TIMESTAMP '2021-07-21T10:00:00Z'} for a timestamp literal (microseconds, UTC); else null. */
  static String timestampLiteral(Literal<?> literal) {
    if (!(literal.dataType() instanceof TimestampType) || !(literal.value() instanceof Long)) {
      return null;
    }
    Instant instant = Instant.EPOCH.plus((Long) literal.value(), ChronoUnit.MICROS);
    return "TIMESTAMP '" + DateTimeFormatter.ISO_INSTANT.format(instant) + "'";
  }

  private static boolean sessionIsUtc() {
    String zone = org.apache.spark.sql.internal.SQLConf.get().sessionLocalTimeZone();
    try {
      return ZoneId.of(zone).normalized().equals(ZoneOffset.UTC);
    } catch (RuntimeException e) {
      return false;
    }
  }

  private static String quoteString(String s) {
    return "'" + s.replace("'", "''") + "'";
  }
}
