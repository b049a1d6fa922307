package dev.shoal.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;

/**
 * The Spark line this connector jar was built for, checked against the Spark it runs in.
 *
 * <p>Each Spark major needs its own jar (Scala 2.12 against 2.13, and the Arrow and Netty lines
 * the connector takes from Spark: ../spark-parent/pom.xml). A jar loaded into the other major
 * would fail later with a low-level error (for the 3.5 jar on Spark 4: {@code
 * UnsupportedOperationException} in Netty's {@code AbstractHttp2Headers.iterator}, reported as
 * "GetSchema failed (UNKNOWN)"); {@link #check()} fails first, with a message naming the jar to
 * use. The built-for version comes from {@code dev/shoal/spark/build.properties} (written by the
 * build), the running one from Spark's own {@code spark-version-info.properties}.
 */
final class SparkLine {
  private SparkLine() {}

  private static volatile boolean checked;

  /**
   * Throws {@link ShoalException} when the running Spark's major version is not the one this jar
   * was built for. Does nothing when either version cannot be read (a Spark build without its
   * version file is not refused).
   */
  static void check() {
    if (checked) {
      return;
    }
    Properties built = load(SparkLine.class.getClassLoader(), "dev/shoal/spark/build.properties");
    Properties running = load(Thread.currentThread().getContextClassLoader(), "spark-version-info.properties");
    if (running.isEmpty()) {
      running = load(org.apache.spark.sql.SparkSession.class.getClassLoader(), "spark-version-info.properties");
    }
    String problem = mismatch(built.getProperty("spark.version"), running.getProperty("version"),
        built.getProperty("artifact", "shoal-spark-connector"), built.getProperty("version", "VERSION"));
    if (problem != null) {
      throw new ShoalException(problem);
    }
    checked = true;
  }

  /**
   * The error for a jar built for Spark {@code builtFor} running on Spark {@code running}, or null
   * when the majors agree or a version is unknown.
   */
  static String mismatch(String builtFor, String running, String artifact, String version) {
    String builtMajor = major(builtFor);
    String runningMajor = major(running);
    if (builtMajor == null || runningMajor == null || builtMajor.equals(runningMajor)) {
      return null;
    }
    String wanted = "3".equals(runningMajor) ? "shoal-spark-connector-" + version + "-shaded.jar"
        : "shoal-spark" + runningMajor + "-connector-" + version + "-shaded.jar";
    return "this shoal connector jar (" + artifact + "-" + version + ") is built for Spark " + builtFor
        + ", but Spark " + running + " is running: use " + wanted + " (docs/spark.md, \"Which jar\")";
  }

  private static String major(String version) {
    if (version == null || version.isEmpty() || version.startsWith("$")) {
      return null;
    }
    int dot = version.indexOf('.');
    return dot < 0 ? version : version.substring(0, dot);
  }

  private static Properties load(ClassLoader loader, String resource) {
    Properties p = new Properties();
    if (loader == null) {
      return p;
    }
    try (InputStream in = loader.getResourceAsStream(resource)) {
      if (in != null) {
        p.load(in);
      }
    } catch (IOException e) {
      throw new UncheckedIOException("reading " + resource, e);
    }
    return p;
  }
}
