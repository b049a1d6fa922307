package dev.shoal.flink.table;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.shoal.client.testing.TargetMode;
import dev.shoal.flink.ShoalMode;
import dev.shoal.flink.ShoalTarget;
import java.util.Optional;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Test;

/** {@link ShoalTableITCase} against the real daemon, plus its authentication: a missing token. */
@ShoalMode(TargetMode.DAEMON)
class ShoalTableDaemonITCase extends ShoalTableITCase {

  @Test
  void missingTokenFailsTheJobAsUnauthenticated() {
    SHOAL.createTable("sql_no_token", "reject");
    StreamTableEnvironment tEnv = tableEnvironment();
    tEnv.executeSql(shoalTable("shoal_no_token", "sql_no_token", "id STRING", ""));
    Exception e = assertThrows(Exception.class,
        () -> tEnv.executeSql("INSERT INTO shoal_no_token VALUES ('a')").await());
    Optional<Throwable> cause = ExceptionUtils.findThrowableWithMessage(e, "UNAUTHENTICATED");
    assertTrue(cause.isPresent(), () -> ExceptionUtils.stringifyException(e));
    assertTrue(cause.get().getMessage().contains("shoal table \"sql_no_token\""), cause.get().getMessage());
  }
}
