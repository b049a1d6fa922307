package dev.shoal.flink.table;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.Optional;
import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.expressions.CallExpression;
import org.apache.flink.table.expressions.FieldReferenceExpression;
import org.apache.flink.table.expressions.ResolvedExpression;
import org.apache.flink.table.expressions.ValueLiteralExpression;
import org.apache.flink.table.functions.BuiltInFunctionDefinitions;
import org.apache.flink.table.functions.BuiltInFunctionDefinition;
import org.junit.jupiter.api.Test;

/** What {@link ShoalFilters} sends to shoal for Flink's filter expressions, and what it leaves to Flink. */
class ShoalFiltersTest {

  private static final FieldReferenceExpression TYPE = new FieldReferenceExpression("type", DataTypes.STRING(), 0, 0);
  private static final FieldReferenceExpression SIZE = new FieldReferenceExpression("size", DataTypes.BIGINT(), 0, 1);
  private static final FieldReferenceExpression PAYLOAD =
      new FieldReferenceExpression("payload", DataTypes.ROW(DataTypes.FIELD("a\"b", DataTypes.STRING())), 0, 2);

  private static CallExpression call(BuiltInFunctionDefinition f, ResolvedExpression... args) {
    return CallExpression.permanent(f, List.of(args), DataTypes.BOOLEAN());
  }

  @Test
  void comparisonsOfColumnsAndNestedFieldsWithLiteralsOfTheirTypeAreTranslated() {
    assertEquals(Optional.of("(\"type\" = 'it''s')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, TYPE, new ValueLiteralExpression("it's"))));
    assertEquals(Optional.of("(\"size\" < 5)"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.GREATER_THAN, new ValueLiteralExpression(5L), SIZE)));
    CallExpression nested = CallExpression.permanent(BuiltInFunctionDefinitions.GET,
        List.of(PAYLOAD, new ValueLiteralExpression("a\"b")), DataTypes.STRING());
    assertEquals(Optional.of("((\"payload\".\"a\"\"b\" IS NOT NULL) OR (NOT (\"size\" >= 2.5)))"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.OR, call(BuiltInFunctionDefinitions.IS_NOT_NULL, nested),
            call(BuiltInFunctionDefinitions.NOT, call(BuiltInFunctionDefinitions.GREATER_THAN_OR_EQUAL, SIZE,
                new ValueLiteralExpression(new java.math.BigDecimal("2.5")))))));
  }

  @Test
  void timestampColumnsCompareWithTimestampLiteralsAsInstants() {
    FieldReferenceExpression ltz = new FieldReferenceExpression("created_at", DataTypes.TIMESTAMP_LTZ(3), 0, 3);
    FieldReferenceExpression local = new FieldReferenceExpression("at", DataTypes.TIMESTAMP(3), 0, 4);
    assertEquals(Optional.of("(\"created_at\" >= TIMESTAMP '2018-01-01T11:05:00Z')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.GREATER_THAN_OR_EQUAL, ltz,
            new ValueLiteralExpression(java.time.Instant.parse("2018-01-01T11:05:00Z"), DataTypes.TIMESTAMP_LTZ(3).notNull()))));
    assertEquals(Optional.of("(\"at\" > TIMESTAMP '2018-01-01T11:05:00.250Z')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.LESS_THAN,
            new ValueLiteralExpression(java.time.LocalDateTime.parse("2018-01-01T11:05:00.250"), DataTypes.TIMESTAMP(3).notNull()), local)));
    // A TIMESTAMP literal against an LTZ column is read in the session's zone, as Flink reads it.
    assertEquals(Optional.of("(\"created_at\" >= TIMESTAMP '2018-01-01T10:05:00Z')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.GREATER_THAN_OR_EQUAL, ltz,
            new ValueLiteralExpression(java.time.LocalDateTime.parse("2018-01-01T11:05:00"), DataTypes.TIMESTAMP(0).notNull())),
            java.time.ZoneId.of("Europe/Paris")));
    // An LTZ literal against a TIMESTAMP column: stays with Flink.
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.GREATER_THAN_OR_EQUAL, local,
        new ValueLiteralExpression(java.time.Instant.parse("2018-01-01T11:05:00Z"), DataTypes.TIMESTAMP_LTZ(3).notNull()))));
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, TYPE,
        new ValueLiteralExpression(java.time.LocalDateTime.parse("2018-01-01T11:05:00"), DataTypes.TIMESTAMP(3).notNull()))));
  }

  @Test
  void lowerUpperAndCharLengthOfStringColumnsAreTranslated() {
    CallExpression lower = CallExpression.permanent(BuiltInFunctionDefinitions.LOWER, List.of(TYPE), DataTypes.STRING());
    CallExpression length = CallExpression.permanent(BuiltInFunctionDefinitions.CHAR_LENGTH, List.of(TYPE), DataTypes.INT());
    assertEquals(Optional.of("(lower(\"type\") = 'push')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, lower, new ValueLiteralExpression("push"))));
    assertEquals(Optional.of("(length(\"type\") < 4)"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.GREATER_THAN, new ValueLiteralExpression(4), length)));
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS,
        CallExpression.permanent(BuiltInFunctionDefinitions.LOWER, List.of(SIZE), DataTypes.STRING()), new ValueLiteralExpression("1"))));
  }

  @Test
  void substringWithAPositiveStartIsTranslated() {
    CallExpression prefix = CallExpression.permanent(BuiltInFunctionDefinitions.SUBSTRING,
        List.of(TYPE, new ValueLiteralExpression(1), new ValueLiteralExpression(4)), DataTypes.STRING());
    assertEquals(Optional.of("(substr(\"type\", 1, 4) = 'Push')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, prefix, new ValueLiteralExpression("Push"))));
    CallExpression rest = CallExpression.permanent(BuiltInFunctionDefinitions.SUBSTR,
        List.of(TYPE, new ValueLiteralExpression(5)), DataTypes.STRING());
    assertEquals(Optional.of("(substr(\"type\", 5) = 'Event')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, rest, new ValueLiteralExpression("Event"))));
    // A nested field as the planner hands it to the source (not as GET).
    org.apache.flink.table.expressions.NestedFieldReferenceExpression login = new org.apache.flink.table.expressions.NestedFieldReferenceExpression(
        new String[] {"actor", "login"}, new int[] {2, 1}, DataTypes.STRING());
    CallExpression nested = CallExpression.permanent(BuiltInFunctionDefinitions.SUBSTRING,
        List.of(login, new ValueLiteralExpression(1), new ValueLiteralExpression(4)), DataTypes.STRING());
    assertEquals(Optional.of("(substr(\"actor\".\"login\", 1, 4) = 'dipp')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, nested, new ValueLiteralExpression("dipp"))));
    assertEquals(Optional.of("(\"actor\".\"login\" = 'dipp')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, login, new ValueLiteralExpression("dipp"))));
    // A start from the end, a negative length (NULL in Flink) and a column position stay with Flink.
    for (List<org.apache.flink.table.expressions.ResolvedExpression> args : List.of(
        List.<org.apache.flink.table.expressions.ResolvedExpression>of(TYPE, new ValueLiteralExpression(-3)),
        List.<org.apache.flink.table.expressions.ResolvedExpression>of(TYPE, new ValueLiteralExpression(1), new ValueLiteralExpression(-1)),
        List.<org.apache.flink.table.expressions.ResolvedExpression>of(TYPE, SIZE))) {
      CallExpression sub = CallExpression.permanent(BuiltInFunctionDefinitions.SUBSTRING, args, DataTypes.STRING());
      assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, sub, new ValueLiteralExpression("x"))), args.toString());
    }
  }

  @Test
  void arrayContainsIsTranslatedOutsideANot() {
    FieldReferenceExpression tags = new FieldReferenceExpression("tags", DataTypes.ARRAY(DataTypes.STRING()), 0, 5);
    CallExpression contains = call(BuiltInFunctionDefinitions.ARRAY_CONTAINS, tags, new ValueLiteralExpression("t2"));
    assertEquals(Optional.of("array_contains(\"tags\", 't2')"), ShoalFilters.toShoal(contains));
    assertEquals(Optional.of("(array_contains(\"tags\", 't2') OR (NOT (NOT array_contains(\"tags\", 't2'))))"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.OR, contains,
            call(BuiltInFunctionDefinitions.NOT, call(BuiltInFunctionDefinitions.NOT, contains)))));
    // Under one NOT: an array holding a null but not 't2' is TRUE for Flink, unknown for shoal.
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.NOT, contains)));
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.ARRAY_CONTAINS, tags, new ValueLiteralExpression(5))));
  }

  @Test
  void comparisonsAcrossTypesAndUnknownFunctionsStayWithFlink() {
    assertEquals(Optional.empty(),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.EQUALS, TYPE, new ValueLiteralExpression(5L))));
    // A backslash (an escape in Flink's LIKE) or an ESCAPE argument stays with Flink.
    assertEquals(Optional.empty(),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.LIKE, TYPE, new ValueLiteralExpression("P\\%%"))));
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.LIKE, TYPE,
        new ValueLiteralExpression("P!%%"), new ValueLiteralExpression("!"))));
    assertEquals(Optional.empty(),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.UPPER, TYPE)));
    // One untranslatable side makes the whole OR untranslatable.
    assertEquals(Optional.empty(), ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.OR,
        call(BuiltInFunctionDefinitions.EQUALS, TYPE, new ValueLiteralExpression("a")),
        call(BuiltInFunctionDefinitions.LIKE, TYPE, new ValueLiteralExpression("P\\%")))));
  }

  @Test
  void likeWithPercentAndUnderscoreAnywhereIsTranslated() {
    assertEquals(Optional.of("(\"type\" LIKE '%Push%')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.LIKE, TYPE, new ValueLiteralExpression("%Push%"))));
    assertEquals(Optional.of("(\"type\" LIKE '_ush''s%Event')"),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.LIKE, TYPE, new ValueLiteralExpression("_ush's%Event"))));
    assertEquals(Optional.empty(),
        ShoalFilters.toShoal(call(BuiltInFunctionDefinitions.LIKE, SIZE, new ValueLiteralExpression("1%"))));
  }
}
