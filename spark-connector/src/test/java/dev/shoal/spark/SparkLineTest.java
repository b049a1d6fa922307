package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.util.Properties;

import org.junit.jupiter.api.Test;

/** The jar's Spark line against the running Spark's (SparkLine). */
class SparkLineTest {
  private static Properties resource(String name) throws Exception {
    Properties p = new Properties();
    try (InputStream in = SparkLineTest.class.getClassLoader().getResourceAsStream(name)) {
      assertTrue(in != null, name + " is on the class path");
      p.load(in);
    }
    return p;
  }

  @Test
  void the_jar_records_the_spark_it_is_built_and_tested_against() throws Exception {
    String built = resource("dev/shoal/spark/build.properties").getProperty("spark.version");
    String running = resource("spark-version-info.properties").getProperty("version");
    assertEquals(running, built);
    SparkLine.check();
  }

  @Test
  void another_major_is_refused_naming_the_jar_to_use() {
    String on4 = SparkLine.mismatch("3.5.9", "4.3.0", "shoal-spark-connector", "0.1.0");
    assertEquals("this shoal connector jar (shoal-spark-connector-0.1.0) is built for Spark 3.5.9, but Spark 4.3.0 is"
        + " running: use shoal-spark4-connector-0.1.0-shaded.jar (docs/spark.md, \"Which jar\")", on4);
    String on3 = SparkLine.mismatch("4.2.0", "3.5.1", "shoal-spark4-connector", "0.1.0");
    assertTrue(on3.contains("use shoal-spark-connector-0.1.0-shaded.jar"), on3);
    assertNull(SparkLine.mismatch("4.2.0", "4.3.0", "shoal-spark4-connector", "0.1.0"), "minor versions of one major agree");
    assertNull(SparkLine.mismatch("3.5.9", null, "shoal-spark-connector", "0.1.0"), "an unknown running version is not refused");
  }
}
