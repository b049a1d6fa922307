package dev.shoal.flink.table;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.Optional;
import org.apache.flink.table.expressions.CallExpression;
import org.apache.flink.table.expressions.FieldReferenceExpression;
import org.apache.flink.table.expressions.NestedFieldReferenceExpression;
import org.apache.flink.table.expressions.ResolvedExpression;
import org.apache.flink.table.expressions.ValueLiteralExpression;
import org.apache.flink.table.functions.BuiltInFunctionDefinitions;
import org.apache.flink.table.functions.FunctionDefinition;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.LogicalTypeFamily;

/**
 * Flink SQL filters as shoal's filter language (docs/protocol.md, "Filters"), for {@code
 * SupportsFilterPushDown}: comparisons ({@code = <> < <= > >=}) of a column or nested field
 * ({@code actor.login}) with a literal of the same type family (character string, number,
 * boolean), {@code IS [NOT] NULL}, {@code LIKE} of a string column with a pattern literal that
 * holds no backslash and has no {@code ESCAPE} ({@code %} and {@code _} mean the same in both),
 * and {@code AND}/{@code OR}/{@code NOT} of those; {@code LOWER}, {@code UPPER}, {@code SUBSTRING} (a
 * positive start) and {@code CHAR_LENGTH} of a string column compared with a literal become shoal's
 * {@code lower}, {@code upper}, {@code substr}, {@code length}; {@code ARRAY_CONTAINS(column,
 * literal)} outside a NOT becomes shoal's {@code array_contains}. A {@code TIMESTAMP} or {@code TIMESTAMP_LTZ}
 * column (the JSON format reads its RFC 3339 / SQL strings) compared with a timestamp literal
 * becomes shoal's {@code TIMESTAMP '…Z'} comparison, which reads the strings as instants: an LTZ
 * column's literal is the instant Flink reads it as (a {@code TIMESTAMP '…'} literal in the session's
 * {@code table.local-time-zone}); a {@code TIMESTAMP} column's literal and its strings without an
 * offset are both read in UTC, so their order is Flink's. Anything else
 * (functions, casts, comparisons across types) is not translated and stays with Flink. Column
 * paths are quoted segment by segment.
 */
final class ShoalFilters {

  private ShoalFilters() {}

  /** {@link #toShoal(ResolvedExpression, ZoneId)} in a UTC session. */
  static Optional<String> toShoal(ResolvedExpression expression) {
    return toShoal(expression, ZoneOffset.UTC);
  }

  /**
   * The filter text of {@code expression}, or empty when it has no exact translation; {@code
   * sessionZone} is the session's {@code table.local-time-zone}.
   */
  static Optional<String> toShoal(ResolvedExpression expression, ZoneId sessionZone) {
    return toShoal(expression, sessionZone, true);
  }

  /**
   * {@code positive}: whether {@code expression} stands under an even number of NOTs. The
   * translation may only select a superset of Flink's rows (Flink evaluates every filter again);
   * {@code ARRAY_CONTAINS} differs on an array holding a null and not the element (Flink: FALSE,
   * shoal: unknown), which only a NOT turns into a loss, so it is translated in positive places.
   */
  private static Optional<String> toShoal(ResolvedExpression expression, ZoneId sessionZone, boolean positive) {
    if (!(expression instanceof CallExpression call)) {
      return Optional.empty();
    }
    FunctionDefinition function = call.getFunctionDefinition();
    List<ResolvedExpression> args = call.getResolvedChildren();
    if (function == BuiltInFunctionDefinitions.AND || function == BuiltInFunctionDefinitions.OR) {
      StringBuilder out = new StringBuilder("(");
      for (int i = 0; i < args.size(); i++) {
        Optional<String> part = toShoal(args.get(i), sessionZone, positive);
        if (part.isEmpty()) {
          return Optional.empty();
        }
        out.append(i == 0 ? "" : function == BuiltInFunctionDefinitions.AND ? " AND " : " OR ").append(part.get());
      }
      return Optional.of(out.append(')').toString());
    }
    if (function == BuiltInFunctionDefinitions.NOT && args.size() == 1) {
      return toShoal(args.get(0), sessionZone, !positive).map(inner -> "(NOT " + inner + ")");
    }
    if (function == BuiltInFunctionDefinitions.ARRAY_CONTAINS && args.size() == 2 && positive
        && args.get(1) instanceof ValueLiteralExpression needle
        && args.get(0).getOutputDataType().getLogicalType() instanceof org.apache.flink.table.types.logical.ArrayType array) {
      return path(args.get(0)).flatMap(p -> literal(needle, array.getElementType(), sessionZone).map(v -> "array_contains(" + p + ", " + v + ")"));
    }
    if ((function == BuiltInFunctionDefinitions.IS_NULL || function == BuiltInFunctionDefinitions.IS_NOT_NULL) && args.size() == 1) {
      return path(args.get(0)).map(p -> "(" + p + (function == BuiltInFunctionDefinitions.IS_NULL ? " IS NULL)" : " IS NOT NULL)"));
    }
    if (function == BuiltInFunctionDefinitions.LIKE) {
      return like(args);
    }
    String operator = operator(function);
    if (operator == null || args.size() != 2) {
      return Optional.empty();
    }
    Optional<String> applied = function(args.get(0));
    if (applied.isPresent() && args.get(1) instanceof ValueLiteralExpression literal) {
      return literal(literal, args.get(0).getOutputDataType().getLogicalType(), sessionZone)
          .map(v -> "(" + applied.get() + " " + operator + " " + v + ")");
    }
    Optional<String> appliedRight = function(args.get(1));
    if (appliedRight.isPresent() && args.get(0) instanceof ValueLiteralExpression literal) {
      return literal(literal, args.get(1).getOutputDataType().getLogicalType(), sessionZone)
          .map(v -> "(" + appliedRight.get() + " " + mirrored(operator) + " " + v + ")");
    }
    Optional<String> left = path(args.get(0));
    if (left.isPresent() && args.get(1) instanceof ValueLiteralExpression literal) {
      return literal(literal, args.get(0).getOutputDataType().getLogicalType(), sessionZone).map(v -> "(" + left.get() + " " + operator + " " + v + ")");
    }
    Optional<String> right = path(args.get(1));
    if (right.isPresent() && args.get(0) instanceof ValueLiteralExpression literal) {
      return literal(literal, args.get(1).getOutputDataType().getLogicalType(), sessionZone)
          .map(v -> "(" + right.get() + " " + mirrored(operator) + " " + v + ")");
    }
    return Optional.empty();
  }

  /** {@code column LIKE 'pattern'}: a string column, a pattern without backslash, no ESCAPE. */
  private static Optional<String> like(List<ResolvedExpression> args) {
    if (args.size() != 2 || !(args.get(1) instanceof ValueLiteralExpression pattern) || pattern.isNull()
        || !args.get(0).getOutputDataType().getLogicalType().is(LogicalTypeFamily.CHARACTER_STRING)) {
      return Optional.empty();
    }
    Optional<String> column = path(args.get(0));
    Optional<String> text = pattern.getValueAs(String.class);
    if (column.isEmpty() || text.isEmpty() || text.get().contains("\\")) {
      return Optional.empty();
    }
    return Optional.of("(" + column.get() + " LIKE '" + text.get().replace("'", "''") + "')");
  }

  private static String operator(FunctionDefinition f) {
    if (f == BuiltInFunctionDefinitions.EQUALS) {
      return "=";
    } else if (f == BuiltInFunctionDefinitions.NOT_EQUALS) {
      return "<>";
    } else if (f == BuiltInFunctionDefinitions.LESS_THAN) {
      return "<";
    } else if (f == BuiltInFunctionDefinitions.LESS_THAN_OR_EQUAL) {
      return "<=";
    } else if (f == BuiltInFunctionDefinitions.GREATER_THAN) {
      return ">";
    } else if (f == BuiltInFunctionDefinitions.GREATER_THAN_OR_EQUAL) {
      return ">=";
    }
    return null;
  }

  private static String mirrored(String operator) {
    return switch (operator) {
      case "<" -> ">";
      case "<=" -> ">=";
      case ">" -> "<";
      case ">=" -> "<=";
      default -> operator;
    };
  }

  /**
   * {@code lower("a")} for Flink's LOWER/UPPER/CHAR_LENGTH of a string column or field, {@code
   * substr("a", 2, 3)} for SUBSTRING/SUBSTR with a positive start and a length that is not negative
   * (where Flink's substring and shoal's agree: Flink answers NULL for a negative length), else
   * empty.
   */
  private static Optional<String> function(ResolvedExpression expression) {
    if (expression instanceof CallExpression call
        && (call.getFunctionDefinition() == BuiltInFunctionDefinitions.SUBSTRING
            || call.getFunctionDefinition() == BuiltInFunctionDefinitions.SUBSTR)) {
      return substring(call);
    }
    if (!(expression instanceof CallExpression call) || call.getResolvedChildren().size() != 1) {
      return Optional.empty();
    }
    FunctionDefinition f = call.getFunctionDefinition();
    String name = f == BuiltInFunctionDefinitions.LOWER ? "lower"
        : f == BuiltInFunctionDefinitions.UPPER ? "upper"
        : f == BuiltInFunctionDefinitions.CHAR_LENGTH ? "length" : null;
    ResolvedExpression arg = call.getResolvedChildren().get(0);
    if (name == null || !arg.getOutputDataType().getLogicalType().is(LogicalTypeFamily.CHARACTER_STRING)) {
      return Optional.empty();
    }
    return path(arg).map(p -> name + "(" + p + ")");
  }

  private static Optional<String> substring(CallExpression call) {
    List<ResolvedExpression> args = call.getResolvedChildren();
    if (args.size() < 2 || args.size() > 3
        || !args.get(0).getOutputDataType().getLogicalType().is(LogicalTypeFamily.CHARACTER_STRING)) {
      return Optional.empty();
    }
    StringBuilder positions = new StringBuilder();
    for (int i = 1; i < args.size(); i++) {
      if (!(args.get(i) instanceof ValueLiteralExpression literal)) {
        return Optional.empty();
      }
      Optional<Integer> n = literal.getValueAs(Integer.class);
      if (n.isEmpty() || n.get() < (i == 1 ? 1 : 0)) {
        return Optional.empty();
      }
      positions.append(", ").append(n.get());
    }
    return path(args.get(0)).map(p -> "substr(" + p + positions + ")");
  }

  /**
   * A column ({@code "a"}) or a field of a ROW column ({@code "a"."b"}: Flink's GET, or the nested
   * field reference its planner hands to a source when a filter names {@code a.b}).
   */
  static Optional<String> path(ResolvedExpression expression) {
    if (expression instanceof FieldReferenceExpression field) {
      return Optional.of(quote(field.getName()));
    }
    if (expression instanceof NestedFieldReferenceExpression nested) {
      return Optional.of(String.join(".", java.util.Arrays.stream(nested.getFieldNames()).map(ShoalFilters::quote).toList()));
    }
    if (expression instanceof CallExpression call && call.getFunctionDefinition() == BuiltInFunctionDefinitions.GET
        && call.getResolvedChildren().size() == 2
        && call.getResolvedChildren().get(1) instanceof ValueLiteralExpression name) {
      Optional<String> parent = path(call.getResolvedChildren().get(0));
      Optional<String> segment = name.getValueAs(String.class);
      if (parent.isPresent() && segment.isPresent()) {
        return Optional.of(parent.get() + "." + quote(segment.get()));
      }
    }
    return Optional.empty();
  }

  /** A path segment double-quoted (a quote inside is doubled). */
  static String quote(String segment) {
    return "\"" + segment.replace("\"", "\"\"") + "\"";
  }

  /** The literal when its type family is the column's, else empty (the comparison stays with Flink). */
  private static Optional<String> literal(ValueLiteralExpression literal, LogicalType column, ZoneId sessionZone) {
    LogicalType type = literal.getOutputDataType().getLogicalType();
    if (literal.isNull()) {
      return Optional.empty(); // `x = NULL` is never true; Flink knows
    }
    if (column.is(org.apache.flink.table.types.logical.LogicalTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE)) {
      if (type.is(org.apache.flink.table.types.logical.LogicalTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE)) {
        return literal.getValueAs(Instant.class).map(ShoalFilters::timestamp);
      }
      if (type.is(org.apache.flink.table.types.logical.LogicalTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE)) {
        return literal.getValueAs(LocalDateTime.class).map(t -> timestamp(t.atZone(sessionZone).toInstant()));
      }
      return Optional.empty();
    }
    if (column.is(org.apache.flink.table.types.logical.LogicalTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE)) {
      if (type.is(org.apache.flink.table.types.logical.LogicalTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE)) {
        return literal.getValueAs(LocalDateTime.class).map(t -> timestamp(t.toInstant(ZoneOffset.UTC)));
      }
      return Optional.empty();
    }
    if (type.is(LogicalTypeFamily.CHARACTER_STRING) && column.is(LogicalTypeFamily.CHARACTER_STRING)) {
      return literal.getValueAs(String.class).map(s -> "'" + s.replace("'", "''") + "'");
    }
    if (type.is(LogicalTypeFamily.NUMERIC) && column.is(LogicalTypeFamily.NUMERIC)) {
      return literal.getValueAs(BigDecimal.class).map(BigDecimal::toPlainString);
    }
    if (type.is(org.apache.flink.table.types.logical.LogicalTypeRoot.BOOLEAN)
        && column.is(org.apache.flink.table.types.logical.LogicalTypeRoot.BOOLEAN)) {
      return literal.getValueAs(Boolean.class).map(b -> b ? "TRUE" : "FALSE");
    }
    return Optional.empty();
  }

  /** shoal's timestamp literal: {@code TIMESTAMP '2021-07-21T10:00:00Z'}. */
  private static String timestamp(Instant instant) {
    return "TIMESTAMP '" + DateTimeFormatter.ISO_INSTANT.format(instant) + "'";
  }
}
