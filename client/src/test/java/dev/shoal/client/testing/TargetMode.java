package dev.shoal.client.testing;

/**
 * Where a connector test's shoal runs; the connectors' test classes run once per mode, reaching
 * shoal only through the {@code endpoint} option, so every mode runs the same code.
 */
public enum TargetMode {
  /** A {@code shoal serve} child process ({@link DaemonProcess}), {@code grpc://127.0.0.1:PORT}. */
  DAEMON,
  /** {@code embedded:<tmpdir>}: the engine in the test JVM through JNI. */
  EMBEDDED,
  /** Three daemons forming a cluster, the endpoint naming one of them; tables are sharded over them. */
  CLUSTER
}
