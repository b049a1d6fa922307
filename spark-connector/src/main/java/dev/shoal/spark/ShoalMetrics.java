package dev.shoal.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * The scan's metrics in Spark's UI (SQL tab, the scan node): rows and Arrow bytes read from the
 * daemon, and how many log ranges the daemon answered with index scans and with full scans.
 */
public final class ShoalMetrics {
  public static final String ROWS_READ = "shoalRowsRead";
  public static final String BYTES_READ = "shoalBytesRead";
  public static final String INDEX_SCANS = "shoalIndexScans";
  public static final String FULL_SCANS = "shoalFullScans";

  private ShoalMetrics() {}

  static CustomMetric[] all() {
    return new CustomMetric[] {new RowsRead(), new BytesRead(), new IndexScans(), new FullScans()};
  }

  static CustomTaskMetric task(String name, long value) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return value;
      }
    };
  }

  /** Rows the daemon returned. */
  public static final class RowsRead extends CustomSumMetric {
    @Override
    public String name() {
      return ROWS_READ;
    }

    @Override
    public String description() {
      return "shoal rows read";
    }
  }

  /** Arrow buffer bytes the daemon returned. */
  public static final class BytesRead extends CustomSumMetric {
    @Override
    public String name() {
      return BYTES_READ;
    }

    @Override
    public String description() {
      return "shoal bytes read";
    }
  }

  /** Log ranges answered by index scans (PSF chains). */
  public static final class IndexScans extends CustomSumMetric {
    @Override
    public String name() {
      return INDEX_SCANS;
    }

    @Override
    public String description() {
      return "shoal index scans";
    }
  }

  /** Log ranges answered by full scans. */
  public static final class FullScans extends CustomSumMetric {
    @Override
    public String name() {
      return FULL_SCANS;
    }

    @Override
    public String description() {
      return "shoal full scans";
    }
  }
}
