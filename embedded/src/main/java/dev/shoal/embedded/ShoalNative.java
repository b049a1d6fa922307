package dev.shoal.embedded;

/**
 * The JNI entry points of {@code libshoal_jni.so} (crate {@code shoal-jni} in {@code native/jni}).
 * The contract is written down in docs/embedded.md (section "The JNI contract"); {@link
 * ShoalEmbedded} is the API to use.
 *
 * <p>Every native throws {@link ShoalEmbeddedException} (constructed in native code), never
 * lets a Rust panic through (code {@code PANIC}), and answers a closed handle with code {@code
 * CLOSED}. Handles may be used from several threads at once. JSON arguments and results are UTF-8
 * text of the Flight protocol's bodies (docs/protocol.md). Addresses are those of C Data Interface
 * structs ({@code ArrowSchema}, {@code ArrowArray}, {@code ArrowArrayStream}) allocated by the
 * caller.
 */
final class ShoalNative {
  static {
    NativeLoader.load();
  }

  private ShoalNative() {}

  /**
   * Opens (or joins) the engine on a data directory.
   *
   * @param dataDir the data directory (created if missing)
   * @param optionsJson the daemon's configuration keys as a JSON object, or null
   * @return a handle, never 0
   */
  static native long open(String dataDir, String optionsJson);

  /**
   * Closes a handle; idempotent (closing twice, or closing 0, is a no-op). The engine flushes and
   * checkpoints when its last handle closes.
   *
   * @param handle the handle
   */
  static native void close(long handle);

  /**
   * Runs a DoAction.
   *
   * @param handle the handle
   * @param type the action type, e.g. {@code create_table}
   * @param bodyJson the action's JSON body
   * @return the JSON result text
   */
  static native String action(long handle, String type, String bodyJson);

  /**
   * ListFlights.
   *
   * @param handle the handle
   * @return JSON text {@code [{"table": name, "records": n, "bytes": n}, ...]}
   */
  static native String listTables(long handle);

  /**
   * GetSchema: exports the table's schema into the ArrowSchema struct at the address.
   *
   * @param handle the handle
   * @param table the table
   * @param arrowSchemaAddress address of an ArrowSchema struct
   */
  static native void getSchema(long handle, String table, long arrowSchemaAddress);

  /**
   * GetFlightInfo: plans a query, exports the result schema into the ArrowSchema at the address.
   *
   * @param handle the handle
   * @param commandJson the query command ({@code {"table","filter","columns","limit",...}})
   * @param arrowSchemaAddress address of an ArrowSchema struct
   * @return JSON text {@code {"total_records", "metadata", "endpoints": [{"ticket", "plan"}]}}
   */
  static native String getFlightInfo(long handle, String commandJson, long arrowSchemaAddress);

  /**
   * DoGet: exports one endpoint's batches as an ArrowArrayStream at the address.
   *
   * @param handle the handle
   * @param ticket the endpoint's ticket bytes
   * @param arrowArrayStreamAddress address of an ArrowArrayStream struct
   */
  static native void doGet(long handle, byte[] ticket, long arrowArrayStreamAddress);

  /**
   * DoPut of one batch (a struct array with a column {@code json}), moved from the C structs at the
   * addresses (the native side releases them).
   *
   * @param handle the handle
   * @param table the table
   * @param arrowArrayAddress address of the exported ArrowArray
   * @param arrowSchemaAddress address of the exported ArrowSchema
   * @param appMetadataJson null, {@code {"writer","serial"}} or {@code {"transaction"}}
   * @return the PutResult app_metadata JSON text
   */
  static native String doPut(
      long handle, String table, long arrowArrayAddress, long arrowSchemaAddress, String appMetadataJson);

  /**
   * Panics inside the native library with {@code message}, to check that a Rust panic comes back
   * as a {@link ShoalEmbeddedException} with code {@code PANIC} (operation {@code selfTestPanic})
   * and the JVM lives on. For tests; it touches no engine.
   *
   * @param message the panic's message
   */
  static native void selfTestPanic(String message);
}
