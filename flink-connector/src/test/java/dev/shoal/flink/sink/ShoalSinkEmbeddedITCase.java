package dev.shoal.flink.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import dev.shoal.client.testing.TargetMode;
import dev.shoal.embedded.ShoalEmbedded;
import dev.shoal.flink.EmbeddedShoal;
import dev.shoal.flink.ShoalDaemon;
import dev.shoal.flink.ShoalMode;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link ShoalSinkITCase} against the engine in the test JVM ({@code embedded:<dir>}; the jobs'
 * writers run in the MiniCluster of this JVM, and the tests read what they wrote through a {@code
 * ShoalEmbedded} handle on the same engine), plus the hand-over between the modes and the error
 * of a directory that a daemon holds.
 */
@ShoalMode(TargetMode.EMBEDDED)
class ShoalSinkEmbeddedITCase extends ShoalSinkITCase {

  @Test
  void whatAJobWroteIsServedByADaemonOnceTheJobsEngineClosed(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    try (ShoalEmbedded store = ShoalEmbedded.open(dir)) {
      store.createTable("handover"); // the engine closes with this handle
    }
    StreamExecutionEnvironment env = environment("none");
    env.enableCheckpointing(500);
    events(env).sinkTo(ShoalSink.<String>builder()
        .setEndpoint("embedded:" + dir)
        .setTable("handover")
        .setMaxBatchSize(500)
        .setMaxTimeInBuffer(Duration.ofMillis(200))
        .setEmbeddedKeepAlive(Duration.ZERO) // the engine closes with the job's last writer
        .build());
    env.execute("github events -> embedded shoal, then a daemon");

    // The writers released the directory (the engine flushed, checkpointed and unlocked it), so a
    // daemon can take it over and serves every record once.
    EmbeddedShoal.awaitReleasedBySink(dir);
    ShoalDaemon daemon = new ShoalDaemon();
    daemon.start(dir);
    try {
      assertEquals(counts(ShoalDaemon.eventIds()), counts(daemon.column("handover", "id")),
          "the daemon serves every event id once");
    } finally {
      daemon.stop();
    }
  }

  @Test
  void aDirectoryHeldByADaemonFailsTheJobNamingOptionEndpoint(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    ShoalDaemon daemon = new ShoalDaemon();
    daemon.start(dir);
    try {
      daemon.createTable("held", "reject");
      StreamExecutionEnvironment env = environment("none");
      env.setParallelism(1);
      env.fromData("{\"id\":\"a\"}").sinkTo(ShoalSink.<String>builder().setEndpoint("embedded:" + dir).setTable("held").build());

      Exception e = assertThrows(Exception.class, () -> env.execute("embedded on a daemon's directory"));

      Optional<Throwable> cause = ExceptionUtils.findThrowableWithMessage(e, "option 'endpoint'");
      assertTrue(cause.isPresent(), () -> "an error naming option 'endpoint' in " + ExceptionUtils.stringifyException(e));
      String message = cause.get().getMessage();
      assertTrue(message.contains("shoal table \"held\" at embedded:" + dir) && message.contains("FAILED_PRECONDITION")
          && message.contains("LOCK") && message.contains("held by a running daemon")
          && message.contains("grpc://host:port"), message);
      assertEquals(0, new com.fasterxml.jackson.databind.ObjectMapper()
          .readTree(daemon.action("stats", "{\"table\":\"held\"}")).get("records").asLong(), "the daemon's table is untouched");
    } finally {
      daemon.stop();
    }
  }

  @Test
  void aFailedJobLeavesNoHandleBehind(@TempDir Path tmp) throws Exception {
    Path dir = tmp.resolve("data");
    StreamExecutionEnvironment env = environment("none");
    env.enableCheckpointing(200);
    env.fromData("{\"id\":\"a\"}", "{\"id\":\"b\"}").sinkTo(ShoalSink.<String>builder()
        .setEndpoint("embedded:" + dir)
        .setTable("missing") // the exactly-once writers fail while starting: list_transactions
        .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .setEmbeddedKeepAlive(Duration.ZERO)
        .build());

    Exception e = assertThrows(Exception.class, () -> env.execute("exactly-once into a missing table"));
    assertTrue(ExceptionUtils.findThrowableWithMessage(e, "the table does not exist").isPresent(),
        () -> ExceptionUtils.stringifyException(e));

    // Every writer and committer closed its handle (also those that failed to start): the engine
    // closed with the last one, and a daemon can take the directory.
    EmbeddedShoal.awaitReleasedBySink(dir);
    ShoalDaemon daemon = new ShoalDaemon();
    daemon.start(dir);
    daemon.stop();
  }
}
