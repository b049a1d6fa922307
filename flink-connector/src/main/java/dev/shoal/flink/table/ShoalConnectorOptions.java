package dev.shoal.flink.table;

import java.time.Duration;
import dev.shoal.flink.source.ShoalSourceSettings;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.connector.base.DeliveryGuarantee;

/**
 * Options of the shoal sink, shared by the Flink SQL factory ({@code 'connector' = 'shoal'}) and
 * {@link dev.shoal.flink.sink.ShoalSinkBuilder} (whose setters take the same defaults). Every description states the
 * default and how the option interacts with the others; docs/flink.md has the same table.
 */
public final class ShoalConnectorOptions {

  private ShoalConnectorOptions() {}

  public static final ConfigOption<String> ENDPOINT =
      ConfigOptions.key("endpoint")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "Required. Where the records go: a shoal daemon's Arrow Flight endpoint - 'grpc://host:port', "
                  + "'grpc+tls://host:port' (TLS, server certificate checked against the JVM's trust store) or "
                  + "'host:port' (plain gRPC) - or 'embedded:/path/to/data' (embedded mode): the shoal engine runs "
                  + "inside the JVM of the writers, on that data directory, through JNI (no daemon). Embedded mode is "
                  + "for a job whose writers and committers all run in one JVM (a MiniCluster / local execution, or a "
                  + "single TaskManager that holds the directory); a directory a daemon or another JVM holds fails "
                  + "the job naming this option. See 'embedded.keep-alive' and 'embedded.config.*'.");

  /**
   * The format that turns a row into one JSON document. Defaults to Flink's {@code json}, as the
   * Elasticsearch connector's {@code format} does; any serialization format that writes one JSON
   * document per row works ({@code raw} over a STRING column of JSON text, {@code debezium-json},
   * ...).
   */
  public static final ConfigOption<String> FORMAT =
      ConfigOptions.key("format")
          .stringType()
          .defaultValue("json")
          .withDescription(
              "The format that serialises each row into one JSON document: 'json' (Flink's JSON format, the "
                  + "default), or another serialization format that writes one JSON document per row, such as "
                  + "'raw' over a single STRING column that holds JSON text.");

  public static final ConfigOption<Boolean> CREATE_TABLE =
      ConfigOptions.key("sink.create-table")
          .booleanType()
          .defaultValue(false)
          .withDescription(
              "Whether the sink creates the table when it does not exist (the create_table action with "
                  + "if_not_exists, the daemon's default table settings), as each writer starts. Default false: "
                  + "a missing table fails the job with an error naming it.");

  public static final ConfigOption<Boolean> ROUTE_BY_KEY =
      ConfigOptions.key("sink.route-by-key")
          .booleanType()
          .defaultValue(true)
          .withDescription(
              "For a table sharded over a cluster of daemons: whether each writer sends every record straight "
                  + "to the node holding its shard (the shard map from the 'cluster' action; one connection per "
                  + "node). Default true. false: everything goes to the 'endpoint' node, which forwards the "
                  + "records of shards it does not hold (slower; for networks where the job reaches only that "
                  + "node). No effect on a table that is not sharded.");

  public static final ConfigOption<String> TABLE =
      ConfigOptions.key("table")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "Required. The shoal table the records are written to (DoPut descriptor path [table]). The table "
                  + "must exist (DoAction create_table), or 'sink.create-table' = 'true' creates it; otherwise a "
                  + "missing table fails the job with an error naming it. "
                  + "Its on_invalid_json policy decides what a record that is not JSON does: 'reject' (default) "
                  + "fails the job naming the record, 'skip' drops and counts it.");

  public static final ConfigOption<String> TOKEN =
      ConfigOptions.key("token")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "Optional bearer token, sent as the header 'authorization: Bearer <token>' on every call; needed "
                  + "when the daemon runs with --auth-token. Default: none (no header). Ignored by 'embedded:' "
                  + "endpoints (no network, no authentication).");

  public static final ConfigOption<DeliveryGuarantee> DELIVERY_GUARANTEE =
      ConfigOptions.key("sink.delivery-guarantee")
          .enumType(DeliveryGuarantee.class)
          .defaultValue(DeliveryGuarantee.AT_LEAST_ONCE)
          .withDescription(
              "Default: 'at-least-once'. 'none': batches are sent as they fill up; a checkpoint waits only for "
                  + "the batches already in flight, and records still buffered go into the checkpoint state. "
                  + "'at-least-once': a checkpoint sends everything buffered, waits for every batch's "
                  + "acknowledgement, then waits until everything acknowledged is durable (DoAction make_durable); "
                  + "records may be written twice after a failure. 'exactly-once': the records of each checkpoint "
                  + "interval are staged in a shoal transaction (invisible to queries), prepared at the checkpoint "
                  + "and committed when the checkpoint completes (Flink's two-phase commit); readers see them only "
                  + "after the checkpoint, so the latency is about the checkpoint interval. Needs checkpointing. "
                  + "See 'sink.transactional-id-prefix'.");

  public static final ConfigOption<String> TRANSACTIONAL_ID_PREFIX =
      ConfigOptions.key("sink.transactional-id-prefix")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "Exactly-once only. Prefix of the shoal transaction ids of this sink: "
                  + "'<prefix>-<subtask>-<checkpoint>-<epoch>' (1-120 characters of A-Z a-z 0-9 _ - . :). On "
                  + "(re)start the sink aborts the open or prepared transactions with this prefix that the restored "
                  + "checkpoint does not cover, so the prefix must be unique per sink among all jobs writing to the "
                  + "table. Default: 'flink-<job id>-<hash of the sink and table>', unique but different for "
                  + "every submission of the job: set it (stable across submissions) so that a job restored from a "
                  + "savepoint also aborts what the previous submission left open.");

  public static final ConfigOption<Integer> BUFFER_FLUSH_MAX_ROWS =
      ConfigOptions.key("sink.buffer-flush.max-rows")
          .intType()
          .defaultValue(1000)
          .withDescription(
              "Default: 1000. Maximum records per DoPut batch. A batch is sent when it reaches this many records, "
                  + "when it reaches 'sink.buffer-flush.max-bytes', or when its oldest record has waited "
                  + "'sink.buffer-flush.interval', whichever comes first. Must be smaller than "
                  + "'sink.requests.max-buffered'.");

  public static final ConfigOption<MemorySize> BUFFER_FLUSH_MAX_BYTES =
      ConfigOptions.key("sink.buffer-flush.max-bytes")
          .memoryType()
          .defaultValue(MemorySize.parse("8mb"))
          .withDescription(
              "Default: 8 mb. Maximum bytes of JSON per DoPut batch (see 'sink.buffer-flush.max-rows' for when a "
                  + "batch is sent). Also the largest single record the sink accepts: a larger record fails the "
                  + "job. The daemon accepts messages up to 256 MiB and records up to its page size.");

  public static final ConfigOption<Duration> BUFFER_FLUSH_INTERVAL =
      ConfigOptions.key("sink.buffer-flush.interval")
          .durationType()
          .defaultValue(Duration.ofSeconds(1))
          .withDescription(
              "Default: 1 s. The longest a record waits in the buffer before its batch is sent even if it is "
                  + "not full. Must be > 0. Independent of checkpoints: a checkpoint flushes (at-least-once) "
                  + "regardless.");

  public static final ConfigOption<Integer> MAX_IN_FLIGHT_REQUESTS =
      ConfigOptions.key("sink.requests.max-in-flight")
          .intType()
          .defaultValue(4)
          .withDescription(
              "Default: 4. Maximum DoPut batches a writer (one per parallel subtask) has sent and not yet "
                  + "seen acknowledged. When reached, the writer stops taking records (backpressure) until an "
                  + "acknowledgement arrives. A batch being retried keeps its slot.");

  public static final ConfigOption<Integer> MAX_BUFFERED_REQUESTS =
      ConfigOptions.key("sink.requests.max-buffered")
          .intType()
          .defaultValue(10000)
          .withDescription(
              "Default: 10000. Maximum records a writer buffers (not yet in a batch in flight). When reached, "
                  + "the writer blocks (backpressure). Must be greater than 'sink.buffer-flush.max-rows'.");

  public static final ConfigOption<Integer> MAX_RETRIES =
      ConfigOptions.key("sink.max-retries")
          .intType()
          .defaultValue(10)
          .withDescription(
              "Default: 10. How often a batch (or the checkpoint action) is retried after a transient error "
                  + "(UNAVAILABLE, e.g. connection refused; deadline exceeded; RESOURCE_EXHAUSTED) before the job "
                  + "fails. Waits between attempts grow from 'sink.retry.initial-backoff' doubling up to "
                  + "'sink.retry.max-backoff'. Permanent errors (unknown table, rejected JSON, "
                  + "UNAUTHENTICATED) are never retried. A retried batch may be written twice (at-least-once).");

  public static final ConfigOption<Duration> RETRY_INITIAL_BACKOFF =
      ConfigOptions.key("sink.retry.initial-backoff")
          .durationType()
          .defaultValue(Duration.ofMillis(100))
          .withDescription("Default: 100 ms. Wait before the first retry; doubles per retry up to 'sink.retry.max-backoff'.");

  public static final ConfigOption<Duration> RETRY_MAX_BACKOFF =
      ConfigOptions.key("sink.retry.max-backoff")
          .durationType()
          .defaultValue(Duration.ofSeconds(10))
          .withDescription("Default: 10 s. Upper bound of the wait between retries; must be >= 'sink.retry.initial-backoff'.");

  public static final ConfigOption<Duration> REQUEST_TIMEOUT =
      ConfigOptions.key("sink.request-timeout")
          .durationType()
          .defaultValue(Duration.ofSeconds(60))
          .withDescription(
              "Default: 60 s. Deadline of one Flight call (a DoPut of one batch, or one checkpoint action). A "
                  + "call past it counts as a transient error and is retried per 'sink.max-retries'. 'embedded:' "
                  + "endpoints call the engine in the JVM, without a deadline.");

  public static final ConfigOption<Duration> EMBEDDED_KEEP_ALIVE =
      ConfigOptions.key("embedded.keep-alive")
          .durationType()
          .defaultValue(Duration.ofSeconds(60))
          .withDescription(
              "Default: 60 s. 'embedded:' endpoints only. The writers and committers of a JVM share one engine "
                  + "per data directory, open (and the directory locked) while any of them runs; this is how long "
                  + "it stays open after the last one closed, so that a failover (which closes them all and starts "
                  + "new ones) does not close and recover the engine. 0 closes it with the last writer or "
                  + "committer (e.g. to hand the directory to a daemon right after a bounded job). A JVM shutdown "
                  + "closes it too.");

  // ---- scan (ShoalSource, the SQL scan source) and lookup ----

  public static final ConfigOption<ShoalSourceSettings.Startup> SCAN_STARTUP_MODE =
      ConfigOptions.key("scan.startup.mode")
          .enumType(ShoalSourceSettings.Startup.class)
          .defaultValue(ShoalSourceSettings.Startup.EARLIEST)
          .withDescription(
              "Default: earliest. Where a scan starts: 'earliest' (the table's begin address: every record it "
                  + "holds), 'latest' (where the table is complete when the job starts: only records that land "
                  + "later) or 'address' (at 'scan.startup.address'). A job restored from a checkpoint resumes "
                  + "where it stood instead.");

  public static final ConfigOption<Long> SCAN_STARTUP_ADDRESS =
      ConfigOptions.key("scan.startup.address")
          .longType()
          .noDefaultValue()
          .withDescription(
              "The log address (bytes) a scan starts at with 'scan.startup.mode' = 'address', e.g. the last "
                  + "_address a reader saw + 1.");

  public static final ConfigOption<Boolean> SCAN_BOUNDED =
      ConfigOptions.key("scan.bounded")
          .booleanType()
          .defaultValue(false)
          .withDescription(
              "Default: false. true: the scan reads the table up to where it was complete when the job "
                  + "started and ends (a batch source). false: it then follows the tail, polling every "
                  + "'scan.poll-interval'.");

  public static final ConfigOption<Duration> SCAN_POLL_INTERVAL =
      ConfigOptions.key("scan.poll-interval")
          .durationType()
          .defaultValue(Duration.ofMillis(100))
          .withDescription(
              "Default: 100 ms. How long a reader that has caught up with the tail (its last request found "
                  + "nothing new) waits before asking again. A record is emitted at most about this long after "
                  + "it was acknowledged, plus one request.");

  public static final ConfigOption<MemorySize> SCAN_SPLIT_SIZE =
      ConfigOptions.key("scan.split-size")
          .memoryType()
          .defaultValue(MemorySize.parse("16mb"))
          .withDescription(
              "Default: 16 mb. Bytes of log per split of the backlog (splits are read in parallel) and per "
                  + "request of a reader: a reader holds at most one request's records in memory.");

  public static final ConfigOption<String> SCAN_FILTER =
      ConfigOptions.key("scan.filter")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "A filter in shoal's filter language (docs/protocol.md, \"Filters\"; e.g. \"type = 'PushEvent'\"): "
                  + "only matching records are read, through the PSFs that cover it. Combined with AND with "
                  + "the filters Flink SQL pushes down.");

  public static final ConfigOption<Boolean> SCAN_FAIL_ON_DATA_LOSS =
      ConfigOptions.key("scan.fail-on-data-loss")
          .booleanType()
          .defaultValue(true)
          .withDescription(
              "Default: true. A reader whose position was dropped by retention or truncate fails the job "
                  + "(OUT_OF_RANGE, naming the lost log range). false: it resumes at the table's begin address, "
                  + "logs the range and counts its bytes in the metric shoalSkippedBytes.");

  public static final ConfigOption<Boolean> SCAN_DURABLE_ONLY =
      ConfigOptions.key("scan.durable-only")
          .booleanType()
          .defaultValue(false)
          .withDescription(
              "Default: false. true: read only records that are durable, so that nothing a reader emitted "
                  + "can be lost if the daemon crashes (records of a table with durability 'none' become durable "
                  + "as pages are written; 'group_commit' every group_commit_ms). false: read everything that is "
                  + "complete, at lower latency; after a daemon crash, records a reader emitted beyond the durable "
                  + "address may be gone, and their addresses reused by new records that reader then skips.");

  public static final ConfigOption<Duration> SCAN_REQUEST_TIMEOUT =
      ConfigOptions.key("scan.request-timeout")
          .durationType()
          .defaultValue(Duration.ofSeconds(60))
          .withDescription("Default: 60 s. Deadline of one Flight call of a scan or a lookup.");

  /**
   * {@code embedded.config.KEY} ('embedded:' endpoints only): the daemon's configuration key {@code
   * KEY} (docs/configuration.md: {@code memory_budget_bytes}, {@code durability}, {@code
   * group_commit_ms}, {@code in_memory}, {@code checkpoint_interval_secs}, ...) for the engine this
   * JVM opens; {@code true}/{@code false} and integers are typed, the rest is text. They apply when
   * the engine is opened; an engine the JVM has open already is joined with the same keys or none.
   * Unknown keys and wrong types fail the job naming them. Default: the engine's defaults.
   */
  public static final String EMBEDDED_CONFIG_PREFIX = "embedded.config.";
}
