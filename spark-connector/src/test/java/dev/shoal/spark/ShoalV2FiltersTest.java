package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.FieldReference;
import org.apache.spark.sql.connector.expressions.LiteralValue;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.And;
import org.apache.spark.sql.connector.expressions.filter.Not;
import org.apache.spark.sql.connector.expressions.filter.Or;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/** One test per operator of {@link ShoalV2Filters}, and the cases that must stay in Spark. */
class ShoalV2FiltersTest {
  private static final StructType SCHEMA = new StructType()
      .add("type", DataTypes.StringType)
      .add("public", DataTypes.BooleanType)
      .add("score", DataTypes.DoubleType)
      .add("a.b", DataTypes.LongType)
      .add("mixed", DataTypes.StringType, true, new MetadataBuilder().putBoolean(ShoalSchemas.JSON_TEXT, true).build())
      .add("tags", new ArrayType(DataTypes.StringType, true))
      .add("actor", new StructType().add("login", DataTypes.StringType).add("id", DataTypes.LongType))
      .add("payload", new StructType().add("size", DataTypes.LongType)
          .add("pull_request", new StructType().add("head", new StructType().add("ref", DataTypes.StringType))));

  private static NamedReference col(String... names) {
    return FieldReference.apply(scala.collection.JavaConverters.asScalaBuffer(java.util.Arrays.asList(names)).toSeq());
  }

  private static Expression lit(Object value) {
    if (value instanceof String) {
      return LiteralValue.apply(UTF8String.fromString((String) value), DataTypes.StringType);
    }
    DataType type = value instanceof Long ? DataTypes.LongType
        : value instanceof Integer ? DataTypes.IntegerType
        : value instanceof Double ? DataTypes.DoubleType
        : value instanceof Boolean ? DataTypes.BooleanType : DataTypes.NullType;
    return LiteralValue.apply(value, type);
  }

  private static Predicate p(String name, Expression... children) {
    return new Predicate(name, children);
  }

  private static String t(Predicate predicate) {
    return ShoalV2Filters.translate(predicate, SCHEMA);
  }

  private static Expression timestamp(String instant) {
    long micros = java.time.temporal.ChronoUnit.MICROS.between(java.time.Instant.EPOCH, java.time.Instant.parse(instant));
    return LiteralValue.apply(micros, DataTypes.TimestampType);
  }

  private static Expression asTimestamp(Expression column) {
    return new org.apache.spark.sql.connector.expressions.Cast(column, DataTypes.TimestampType);
  }

  @Test
  void string_columns_cast_to_timestamps_compare_as_instants_in_a_utc_session() {
    org.apache.spark.sql.internal.SQLConf conf = org.apache.spark.sql.internal.SQLConf.get();
    String before = conf.sessionLocalTimeZone();
    try {
      conf.setConfString("spark.sql.session.timeZone", "UTC");
      assertEquals("\"type\" >= TIMESTAMP '2021-07-21T10:00:00Z'",
          t(p(">=", asTimestamp(col("type")), timestamp("2021-07-21T10:00:00Z"))));
      assertEquals("\"actor\".\"login\" < TIMESTAMP '2021-07-21T10:00:00.250Z'",
          t(p(">", timestamp("2021-07-21T10:00:00.250Z"), asTimestamp(col("actor", "login")))));
      assertEquals("\"type\" IN (TIMESTAMP '2021-07-21T10:00:00Z', TIMESTAMP '1969-12-31T23:59:59Z')",
          t(p("IN", asTimestamp(col("type")), timestamp("2021-07-21T10:00:00Z"), timestamp("1969-12-31T23:59:59Z"))));
      assertNull(t(p(">=", asTimestamp(col("a.b")), timestamp("2021-07-21T10:00:00Z"))), "a number cast to a timestamp");
      assertNull(t(p(">=", asTimestamp(col("mixed")), timestamp("2021-07-21T10:00:00Z"))), "JSON text");
      assertNull(t(p(">=", new org.apache.spark.sql.connector.expressions.Cast(col("type"), DataTypes.DateType),
          LiteralValue.apply(18829, DataTypes.DateType))), "a cast to a date truncates");
      assertNull(t(p(">=", asTimestamp(col("type")), lit("2021-07-21"))), "a string literal");
      conf.setConfString("spark.sql.session.timeZone", "America/New_York");
      assertNull(t(p(">=", asTimestamp(col("type")), timestamp("2021-07-21T10:00:00Z"))),
          "Spark reads a string without an offset in the session's zone, shoal in UTC");
    } finally {
      conf.setConfString("spark.sql.session.timeZone", before);
    }
  }

  private static Expression fn(String name, Expression... children) {
    return new org.apache.spark.sql.connector.expressions.GeneralScalarExpression(name, children);
  }

  @Test
  void lower_upper_and_length_of_string_columns_are_translated() {
    assertEquals("lower(\"actor\".\"login\") = 'bob'", t(p("=", fn("LOWER", col("actor", "login")), lit("bob"))));
    assertEquals("upper(\"type\") <> 'X'", t(p("<>", lit("X"), fn("UPPER", col("type")))));
    assertEquals("length(\"type\") > 3", t(p(">", fn("CHAR_LENGTH", col("type")), lit(3))));
    assertNull(t(p("=", fn("LOWER", col("a.b")), lit("x"))), "a number column");
    assertNull(t(p("=", fn("LOWER", col("type")), lit(3L))), "a number literal");
    assertNull(t(p("=", fn("ABS", col("a.b")), lit(3L))), "a function shoal lacks");
  }

  @Test
  void substring_of_a_string_column_with_literal_positions_is_translated() {
    assertEquals("substr(\"actor\".\"login\", 1, 6) = 'apache'", t(p("=", fn("SUBSTRING", col("actor", "login"), lit(1), lit(6)), lit("apache"))));
    assertEquals("substr(\"type\", -3, 2147483647) = 'ent'", t(p("=", fn("SUBSTRING", col("type"), lit(-3), lit(Integer.MAX_VALUE)), lit("ent"))));
    assertNull(t(p("=", fn("SUBSTRING", col("type"), col("a.b"), lit(2)), lit("x"))), "a position that is a column");
    assertNull(t(p("=", fn("SUBSTRING", col("a.b"), lit(1), lit(2)), lit("x"))), "a number column");
  }

  @Test
  void equality_on_a_top_level_string() {
    assertEquals("\"type\" = 'PushEvent'", t(p("=", col("type"), lit("PushEvent"))));
  }

  @Test
  void not_equal() {
    assertEquals("\"payload\".\"size\" <> 3", t(p("<>", col("payload", "size"), lit(3L))));
  }

  @Test
  void less_than_and_literal_on_the_left_flips_the_operator() {
    assertEquals("\"payload\".\"size\" < 5", t(p("<", col("payload", "size"), lit(5L))));
    assertEquals("\"payload\".\"size\" > 5", t(p("<", lit(5L), col("payload", "size"))));
  }

  @Test
  void less_or_equal() {
    assertEquals("\"payload\".\"size\" <= 5", t(p("<=", col("payload", "size"), lit(5))));
  }

  @Test
  void greater_than_on_a_double() {
    assertEquals("\"score\" > 1.5", t(p(">", col("score"), lit(1.5d))));
    assertEquals("\"score\" > 3", t(p(">", col("score"), lit(3L))));
  }

  @Test
  void greater_or_equal_on_a_nested_field() {
    assertEquals("\"actor\".\"id\" >= 100", t(p(">=", col("actor", "id"), lit(100L))));
  }

  @Test
  void in_list() {
    assertEquals("\"type\" IN ('a', 'b''c')", t(p("IN", col("type"), lit("a"), lit("b'c"))));
  }

  @Test
  void in_with_a_null_stays_in_spark() {
    assertNull(t(p("IN", col("type"), lit("a"), LiteralValue.apply(null, DataTypes.StringType))));
  }

  @Test
  void is_null_and_is_not_null() {
    assertEquals("\"actor\".\"login\" IS NULL", t(p("IS_NULL", col("actor", "login"))));
    assertEquals("\"payload\".\"pull_request\".\"head\".\"ref\" IS NOT NULL", t(p("IS_NOT_NULL", col("payload", "pull_request", "head", "ref"))));
  }

  @Test
  void starts_with_becomes_a_like_prefix_with_escapes() {
    assertEquals("\"actor\".\"login\" LIKE 'bot%'", t(p("STARTS_WITH", col("actor", "login"), lit("bot"))));
    assertEquals("\"actor\".\"login\" LIKE '50\\%\\_x%' ESCAPE '\\'", t(p("STARTS_WITH", col("actor", "login"), lit("50%_x"))));
  }

  @Test
  void ends_with_and_contains_become_like_patterns_with_escapes() {
    assertEquals("\"actor\".\"login\" LIKE '%bot'", t(p("ENDS_WITH", col("actor", "login"), lit("bot"))));
    assertEquals("\"actor\".\"login\" LIKE '%bot%'", t(p("CONTAINS", col("actor", "login"), lit("bot"))));
    assertEquals("\"actor\".\"login\" LIKE '%a\\_b%' ESCAPE '\\'", t(p("CONTAINS", col("actor", "login"), lit("a_b"))));
    assertNull(t(p("CONTAINS", col("payload", "size"), lit(1L))), "a numeric column stays in Spark");
  }

  @Test
  void and_or_not() {
    Predicate eq = p("=", col("type"), lit("IssuesEvent"));
    Predicate gt = p(">", col("payload", "size"), lit(1L));
    assertEquals("(\"type\" = 'IssuesEvent' AND \"payload\".\"size\" > 1)", t(new And(eq, gt)));
    assertEquals("(\"type\" = 'IssuesEvent' OR \"payload\".\"size\" > 1)", t(new Or(eq, gt)));
    assertEquals("NOT (\"type\" = 'IssuesEvent')", t(new Not(eq)));
  }

  @Test
  void and_or_with_an_untranslatable_child_stay_in_spark() {
    Predicate ok = p("=", col("type"), lit("IssuesEvent"));
    Predicate onArray = p("IS_NULL", col("tags"));
    assertNull(t(new And(ok, onArray)));
    assertNull(t(new Or(ok, onArray)));
    assertNull(t(new Not(onArray)));
  }

  @Test
  void booleans() {
    assertEquals("\"public\" = TRUE", t(p("=", col("public"), lit(true))));
    assertNull(t(p("=", col("public"), lit("true"))));
  }

  @Test
  void every_segment_is_quoted() {
    assertEquals("\"a.b\" = 1", t(p("=", col("a.b"), lit(1L))));
    assertEquals("\"end\"", ShoalSchemas.quoteSegment("end"));
    assertEquals("\"login\"", ShoalSchemas.quoteSegment("login"));
    assertEquals("\"say \"\"hi\"\"\"", ShoalSchemas.quoteSegment("say \"hi\""));
  }

  @Test
  void json_text_struct_array_and_unknown_columns_stay_in_spark() {
    assertNull(t(p("=", col("mixed"), lit("1"))));
    assertNull(t(p("IS_NULL", col("actor"))));
    assertNull(t(p("IS_NOT_NULL", col("tags"))));
    assertNull(t(p("=", col("nope"), lit("x"))));
  }

  @Test
  void literal_of_another_type_family_stays_in_spark() {
    assertNull(t(p("=", col("type"), lit(1L))));
    assertNull(t(p("=", col("payload", "size"), lit("1"))));
    assertNull(t(p(">", col("score"), lit(Double.NaN))));
  }

  @Test
  void other_predicates_stay_in_spark() {
    assertNull(t(p("<=>", col("type"), lit("x"))));
    assertNull(t(p("ENDS_WITH", col("type"), col("actor", "login"))), "a pattern from a column");
  }
}
