package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Path;

import dev.shoal.client.testing.TargetMode;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link ShoalReadWriteTest} against the engine in the JVM ({@code embedded:<tmpdir>}), plus the
 * hand-over between the modes: what an embedded write acknowledged is on disk once the engine
 * closed, and a daemon started on the directory serves it.
 */
class ShoalReadWriteEmbeddedTest extends ShoalReadWriteTest {
  @RegisterExtension
  static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.EMBEDDED);

  @Test
  void an_embedded_write_is_served_by_a_daemon_once_the_engine_closed(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    Dataset<Row> source = oracle.where("type IN ('IssuesEvent', 'ReleaseEvent')");
    // keep-alive 0: the engine closes (flush, checkpoint, unlock) with the last writer
    source.write().format("shoal").option("endpoint", "embedded:" + dir).option("table", "handover")
        .option(ShoalOptions.EMBEDDED_KEEP_ALIVE, "0").option(ShoalOptions.WRITE_BATCH_ROWS, "50").mode("append").save();
    try (ShoalDaemon daemon = ShoalDaemon.start(dir)) {
      String[] cols = {"id", "type", "actor.login", "payload.action", "created_at"};
      assertEquals(rows(source.selectExpr(cols)), rows(read(daemon.endpoint(), "handover").selectExpr(cols)));
    }
  }
}
