//! The CLI's Flight client commands: they talk to a running daemon exactly as any
//! other Flight client would.

use std::io::{Read, Write as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, StringArray};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{Action, FlightClient, FlightDescriptor, FlightInfo};
use arrow_schema::{DataType, Field, Schema};
use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Value};

use crate::ingest_input::InputFormat;

/// Where the daemon is.
#[derive(clap::Args, Clone)]
pub struct Connection {
    /// Daemon address.
    #[arg(long, global = true, env = "SHOAL_ENDPOINT", default_value = "grpc://127.0.0.1:50051")]
    endpoint: String,
    /// Bearer token, if the daemon requires one.
    #[arg(long, global = true, env = "SHOAL_AUTH_TOKEN")]
    token: Option<String>,
    /// Basic credentials USER:PASSWORD, if the daemon requires them (sent with every call).
    #[arg(long, global = true, env = "SHOAL_BASIC_AUTH", conflicts_with = "token")]
    basic_auth: Option<String>,
    /// PEM certificate(s) to trust for a `grpc+tls://` endpoint.
    #[arg(long, global = true, env = "SHOAL_TLS_CA")]
    tls_ca: Option<PathBuf>,
}

impl Connection {
    /// The daemon's address as given (`--endpoint`).
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// `shoal ingest`.
#[derive(clap::Args)]
pub struct IngestArgs {
    #[command(flatten)]
    connection: Connection,
    /// TABLE INPUT: the table, then the input file (NDJSON, JSON documents, a JSON array of
    /// records, or CSV) or `-` for standard input; with `--table`, the input alone.
    #[arg(value_name = "TABLE INPUT", num_args = 1..=2, required = true)]
    positional: Vec<String>,
    /// The table (the older spelling of the positional TABLE).
    #[arg(long = "table", value_name = "TABLE")]
    table_flag: Option<String>,
    /// Create the table if it does not exist.
    #[arg(long)]
    create: bool,
    /// Records per DoPut batch.
    #[arg(long, default_value_t = 4096)]
    batch_records: usize,
    /// What every record does to its key, for a keyed table (one created with
    /// `--primary-key`): upsert, delete (records need only the key) or merge (RFC 7386
    /// merge patch onto the key's latest version) [default: upsert].
    #[arg(long, value_enum)]
    op: Option<IngestOp>,
    /// The input's form: NDJSON, JSON documents or an array of records, CSV with a header
    /// (`auto`: by the `.csv` extension and the first characters).
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    format: InputFormat,
}

impl IngestArgs {
    /// The table and the input: `TABLE INPUT`, or `--table TABLE INPUT`.
    ///
    /// # Errors
    /// Neither form, naming both.
    fn target(&self) -> Result<(String, PathBuf), String> {
        match (&self.table_flag, self.positional.as_slice()) {
            (Some(table), [input]) => Ok((table.clone(), PathBuf::from(input))),
            (None, [table, input]) => Ok((table.clone(), PathBuf::from(input))),
            _ => Err("shoal ingest takes TABLE INPUT (or --table TABLE INPUT): e.g. shoal ingest events events.ndjson".to_owned()),
        }
    }
}

/// A table named positionally (`shoal query events`) or, as before, with `--table`.
#[derive(clap::Args, Clone)]
pub struct TableArg {
    /// Table name.
    #[arg(value_name = "TABLE")]
    positional: Option<String>,
    /// Table name (the older spelling of the positional TABLE).
    #[arg(long = "table", value_name = "TABLE", conflicts_with = "positional")]
    flag: Option<String>,
}

impl TableArg {
    /// The table, if one was named.
    fn name(&self) -> Option<&str> {
        self.positional.as_deref().or(self.flag.as_deref())
    }

    /// The table.
    ///
    /// # Errors
    /// None named: how to name one, for `command`.
    fn required(&self, command: &str) -> Result<String, String> {
        self.name().map(ToOwned::to_owned).ok_or_else(|| format!("{command} needs a table: shoal {command} TABLE …"))
    }
}

/// `shoal ingest --op`: the operation of every record of a keyed table.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum IngestOp {
    /// The record becomes its key's latest version.
    Upsert,
    /// The record's key is deleted.
    Delete,
    /// The record is merged into its key's latest version (RFC 7386).
    Merge,
}

impl IngestOp {
    fn as_str(self) -> &'static str {
        match self {
            IngestOp::Upsert => "upsert",
            IngestOp::Delete => "delete",
            IngestOp::Merge => "merge",
        }
    }
}

/// `shoal psf`.
#[derive(clap::Args)]
pub struct PsfArgs {
    #[command(flatten)]
    connection: Connection,
    #[command(subcommand)]
    command: PsfCommand,
}

#[derive(clap::Subcommand)]
enum PsfCommand {
    /// Register a PSF (exactly one of --projection, --predicate, --range, --composite).
    Add {
        #[command(flatten)]
        table: TableArg,
        /// PSF name.
        #[arg(long)]
        name: String,
        /// Field projection: a dotted path.
        #[arg(long, group = "kind")]
        projection: Option<String>,
        /// Boolean predicate: a SQL expression.
        #[arg(long, group = "kind")]
        predicate: Option<String>,
        /// Range PSF: a field bucketed by --boundaries (numbers, or strings in byte order), or
        /// with --timestamp by instants (--boundaries or --bucket).
        #[arg(long, group = "kind")]
        range: Option<String>,
        /// Ascending bucket boundaries for --range, comma separated: numbers, or strings
        /// (e.g. hours of RFC 3339 timestamps: 2021-07-21T10,2021-07-21T11), or with
        /// --timestamp instants (2021-07-21T10:00:00Z,2021-07-21T11:00:00Z).
        #[arg(long, value_delimiter = ',', conflicts_with = "bucket")]
        boundaries: Vec<String>,
        /// --range over instants: RFC 3339 strings (any offset or spelling) and epoch numbers
        /// (in --unit), compared as time by `field >= TIMESTAMP '…'` filters.
        #[arg(long, requires = "range")]
        timestamp: bool,
        /// --timestamp buckets instead of --boundaries: a fixed width from the epoch (1h,
        /// 15m, 1d, 30s, …) or a calendar unit in UTC (week, month, quarter, year)
        #[arg(long, requires = "timestamp")]
        bucket: Option<String>,
        /// --timestamp: the unit of epoch numbers (s, ms or us; default s).
        #[arg(long, requires = "timestamp", value_parser = ["s", "ms", "us"])]
        unit: Option<String>,
        /// Composite projection: comma-separated dotted paths.
        #[arg(long, group = "kind", value_delimiter = ',')]
        composite: Vec<String>,
        /// Index only what is ingested from now on (FishStore's PSF), not the records already
        /// in the table (by default they are indexed in the background: its backfill).
        #[arg(long, conflicts_with = "wait")]
        no_backfill: bool,
        /// Wait until the backfill covers the whole table, with a progress bar on a terminal.
        #[arg(long)]
        wait: bool,
    },
    /// List PSFs with their safe boundaries.
    List {
        #[command(flatten)]
        table: TableArg,
    },
    /// Deregister a PSF.
    Drop {
        #[command(flatten)]
        table: TableArg,
        /// PSF name.
        #[arg(long)]
        name: String,
    },
}

/// `shoal psf add --wait`: polls `list_psfs` until PSF `name`'s backfill is done, showing
/// its progress (log bytes indexed of those below the PSF) on a terminal; returns the PSF.
async fn wait_for_backfill(client: &mut FlightClient, table: &str, name: &str) -> Result<Value, String> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("backfill {msg} [{elapsed_precise}] {bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(name.to_owned());
    loop {
        let psfs = action(client, "list_psfs", &json!({"table": table})).await?;
        let Some(psf) = psfs.as_array().and_then(|all| all.iter().find(|p| p["name"] == name && p["active"] == true)).cloned() else {
            bar.abandon();
            return Err(format!("PSF {name:?} of table {table:?} was deregistered while its backfill ran"));
        };
        let backfill = &psf["backfill"];
        if backfill.is_null() || backfill["done"] == true {
            bar.finish();
            return Ok(psf);
        }
        let register = psf["safe_register_address"].as_u64().unwrap_or(0);
        let (from, target) = (backfill["backfilled_from"].as_u64().unwrap_or(register), backfill["target"].as_u64().unwrap_or(0));
        bar.set_length(register.saturating_sub(target));
        bar.set_position(register.saturating_sub(from));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How `shoal query` writes its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// A pretty table of the first `--show` rows, then the count, the time and the plan.
    Table,
    /// One JSON array of row objects.
    Json,
    /// One JSON object per row and line (NDJSON).
    Jsonl,
    /// CSV with a header line; nested columns are refused (select leaves with `--columns`).
    Csv,
    /// An Arrow IPC file (Feather v2: `pyarrow.ipc.open_file`, `pandas.read_feather`).
    Arrow,
}

/// `shoal query`.
#[derive(clap::Args)]
pub struct QueryArgs {
    #[command(flatten)]
    connection: Connection,
    #[command(flatten)]
    table: TableArg,
    /// Filter (SQL expression over dotted paths).
    #[arg(long, conflicts_with = "filter_file")]
    filter: Option<String>,
    /// A whole SQL statement instead of TABLE, --filter, --columns and --aggregate (`SELECT
    /// … FROM TABLE …`, as `shoal sql` takes it: docs/sql.md), sent over Flight SQL; its rows
    /// are printed as for any query (every --format, -o, --show, the plan line).
    #[arg(long, conflicts_with_all = ["positional", "flag", "filter", "filter_file", "columns", "limit", "aggregate", "to_address", "raw"])]
    sql: Option<String>,
    /// Read the filter from this file, or from standard input with `-`.
    #[arg(long)]
    filter_file: Option<PathBuf>,
    /// Output format: every format but `table` writes all rows, and the count and time go to
    /// standard error.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// Write the rows to this file instead of standard output.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Columns (comma-separated dotted paths); default all top-level fields.
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// At most this many rows.
    #[arg(long)]
    limit: Option<usize>,
    /// Print the whole plan (JSON: index, columnar and full scans, the planner's reason) instead
    /// of its one-line summary.
    #[arg(long)]
    plan: bool,
    /// Aggregates computed next to the data, one row: `count`, `count:PATH`, `min:PATH`,
    /// `max:PATH`, `sum:PATH`, `avg:PATH` (comma-separated; docs/protocol.md "Aggregates").
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["columns", "raw"])]
    aggregate: Vec<String>,
    /// Time travel: the table as it was at this log address (records below it; e.g. a
    /// `stats` tail_address noted earlier).
    #[arg(long)]
    to_address: Option<u64>,
    /// Print at most this many rows (the count is always exact).
    #[arg(long, default_value_t = 20)]
    show: usize,
    /// Print every matching record as ingested, one per line (NDJSON), on stdout or `-o FILE` (the
    /// count and time go to stderr); asks for `"output": "json"` in one `DoGet`.
    #[arg(long, conflicts_with_all = ["columns", "show", "format"])]
    raw: bool,
}

/// `shoal drop-table`.
#[derive(clap::Args)]
pub struct TableNameArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name.
    name: String,
}

/// `shoal truncate`: the `truncate` action (retention), exactly one rule.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("rule").required(true).args(["before_address", "keep_bytes", "older_than_secs"])))]
pub struct TruncateArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name.
    name: String,
    /// Drop the records below this log address (rounded down to a page).
    #[arg(long)]
    before_address: Option<u64>,
    /// Keep about this many bytes of the log's newest part, drop the rest.
    #[arg(long)]
    keep_bytes: Option<u64>,
    /// Drop the log's segments last written more than this many seconds ago.
    #[arg(long)]
    older_than_secs: Option<u64>,
}

/// `shoal compact`.
#[derive(clap::Args)]
pub struct CompactArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name (a keyed table).
    name: String,
    /// Compact below this log address [default: everything flushed].
    #[arg(long)]
    until_address: Option<u64>,
    /// Milliseconds to wait for queries with older snapshots to finish before the head
    /// is left for the next compaction.
    #[arg(long, default_value_t = 30_000)]
    wait_ms: u64,
}

/// `shoal delete`.
#[derive(clap::Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name (a keyed table).
    name: String,
    /// The rows to delete, in the filter language (e.g. `status = 'closed'`).
    #[arg(long = "where", conflicts_with = "all")]
    filter: Option<String>,
    /// Delete every row (no filter).
    #[arg(long)]
    all: bool,
}

/// `shoal tables`.
#[derive(clap::Args)]
pub struct TablesArgs {
    #[command(flatten)]
    connection: Connection,
}

/// `shoal cluster`.
#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    connection: Connection,
    /// Print the `cluster` action's answer (JSON) instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Option<ClusterCommand>,
}

/// `shoal cluster`'s subcommands.
#[derive(clap::Subcommand)]
pub enum ClusterCommand {
    /// Move a shard of a sharded table to another node, online, through the nodes' remote
    /// store (no copy of its data; its batches are refused with UNAVAILABLE, and retried by
    /// writers, for the moment of the hand-over).
    MoveShard {
        /// The sharded table.
        table: String,
        /// The shard's number.
        shard: usize,
        /// The node to move it to (its id).
        #[arg(long)]
        to: usize,
    },
}

/// `shoal checkpoint`.
#[derive(clap::Args)]
pub struct CheckpointArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name (default: every table).
    name: Option<String>,
}

/// `shoal stats`.
#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name (default: every table); `--table` is its older spelling.
    #[command(flatten)]
    table: TableArg,
}

/// What a table does with a record that is not valid JSON.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum OnInvalidJson {
    /// Refuse the whole batch, naming the record.
    Reject,
    /// Skip the record and count it.
    Skip,
}

/// `shoal create-table`: the `create_table` action's settings (docs/protocol.md).
#[derive(clap::Args)]
pub struct CreateTableArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name.
    name: String,
    /// What to do with records that are not valid JSON.
    #[arg(long, value_enum, default_value_t = OnInvalidJson::Reject)]
    on_invalid_json: OnInvalidJson,
    /// When a batch is acknowledged [default: the daemon's `durability`].
    #[arg(long, value_parser = shoal_server::config::durability_value_parser())]
    durability: Option<shoal_server::config::Durability>,
    /// Group-commit interval in milliseconds [default: the daemon's].
    #[arg(long)]
    group_commit_ms: Option<u64>,
    /// Memory budget of the table's log in MiB [default: the daemon's].
    #[arg(long)]
    memory_budget_mb: Option<usize>,
    /// Compact flushed pages into Parquet (the columnar tier) or not [default: the daemon's].
    #[arg(long)]
    columnar: Option<bool>,
    #[command(flatten)]
    retention: RetentionArgs,
    /// The primary key of a keyed table: a dotted path, or several (comma-separated or
    /// repeated) for a composite key. Records are then upserted, deleted and merged by
    /// key (`shoal ingest --op`) and queries see each key's latest version [default: an
    /// append-only table].
    #[arg(long, value_delimiter = ',')]
    primary_key: Vec<String>,
    /// On a node of a cluster: shard the table into this many shards, shard i on node
    /// i mod N (docs/deployment.md) [default with --shard-key: one per node].
    #[arg(long)]
    shards: Option<usize>,
    /// On a node of a cluster: route each record to its shard by this key, a dotted path or
    /// several (comma-separated) [default with --shards: the primary key, else records are
    /// spread by batch].
    #[arg(long, value_delimiter = ',')]
    shard_key: Vec<String>,
    /// Succeed without change when the table exists.
    #[arg(long)]
    if_not_exists: bool,
}

/// `shoal alter-table`: the settings an existing table may change (its retention policy).
#[derive(clap::Args)]
pub struct AlterTableArgs {
    #[command(flatten)]
    connection: Connection,
    /// Table name.
    name: String,
    #[command(flatten)]
    retention: RetentionArgs,
    /// Retention: keep everything (removes the policy).
    #[arg(long, conflicts_with_all = ["retention_bytes", "retention_secs", "compact_obsolete_percent"])]
    no_retention: bool,
}

/// A table's retention policy, as `create-table` and `alter-table` take it.
#[derive(clap::Args)]
pub struct RetentionArgs {
    /// Retention: keep about the newest this many bytes of log (a keyed table keeps its
    /// live rows: they are copied to the tail) [default: everything].
    #[arg(long)]
    retention_bytes: Option<u64>,
    /// Retention: drop segment files last written more than this many seconds ago (a
    /// keyed table keeps its live rows) [default: keep them].
    #[arg(long)]
    retention_secs: Option<u64>,
    /// Keyed tables: compact the log when this percent of its versions are obsolete
    /// (updated or deleted); 0: never [default: 50].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    compact_obsolete_percent: Option<u8>,
}

impl RetentionArgs {
    /// The `retention` object of `create_table` / `alter_table`; `None` when no flag was given.
    fn policy(&self) -> Option<serde_json::Value> {
        let fields = [
            ("keep_bytes", self.retention_bytes),
            ("max_age_secs", self.retention_secs),
            ("compact_obsolete_percent", self.compact_obsolete_percent.map(u64::from)),
        ];
        let set: serde_json::Map<String, serde_json::Value> =
            fields.into_iter().filter_map(|(key, value)| Some((key.to_owned(), json!(value?)))).collect();
        (!set.is_empty()).then_some(serde_json::Value::Object(set))
    }
}

/// Runs a client future on a small runtime.
pub fn run(future: impl std::future::Future<Output = Result<(), String>>) -> Result<(), String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(future)
}

/// The endpoint as a URI tonic takes (`http://` or `https://`), whether it speaks TLS, and
/// its host: `grpc://`, `grpc+tcp://`, `grpc+tls://` (Arrow Flight's schemes), or a bare
/// `HOST:PORT` (plain gRPC, as `grpc://`).
///
/// # Errors
/// An unknown scheme, or no port.
fn endpoint_uri(endpoint: &str) -> Result<(String, bool, String), String> {
    let (tls, rest) = match endpoint.split_once("://") {
        Some(("grpc+tls", rest)) => (true, rest),
        Some(("grpc" | "grpc+tcp", rest)) => (false, rest),
        Some((scheme, _)) => {
            return Err(format!("endpoint {endpoint:?}: unknown scheme {scheme:?} (use grpc://HOST:PORT, grpc+tls://HOST:PORT, or HOST:PORT)"))
        }
        None => (false, endpoint),
    };
    let rest = rest.trim_end_matches('/');
    let Some((host, port)) = rest.rsplit_once(':').filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) else {
        return Err(format!("endpoint {endpoint:?}: expected HOST:PORT (e.g. grpc://127.0.0.1:50051 or 127.0.0.1:50051)"));
    };
    Ok((format!("http://{host}:{port}"), tls, host.to_owned()))
}

/// A failed connection's message: the error and each of its causes (tonic's own says only
/// "transport error"), with a hint for the usual ones.
pub(crate) fn connect_error(endpoint: &str, error: &dyn std::error::Error) -> String {
    let mut causes = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !causes.iter().any(|c| c.contains(&text)) {
            causes.push(text);
        }
        source = cause.source();
    }
    let all = causes.join(": ");
    let lower = all.to_lowercase();
    let hint = if lower.contains("connection refused") {
        "nothing listens there: is `shoal serve` running, on this port?"
    } else if lower.contains("certificate") || lower.contains("unknownissuer") || lower.contains("notvalidforname") {
        "the server's TLS certificate was not accepted: pass the certificate (or its CA) with --tls-ca, and connect by a name it holds"
    } else if lower.contains("timed out") || lower.contains("deadline") {
        "no answer in time: check the address, the port and any firewall"
    } else if lower.contains("invalid http version") || lower.contains("corrupt") || lower.contains("frame") || lower.contains("received fatal alert") {
        "the server speaks another protocol: grpc+tls:// for a daemon with --tls-cert, grpc:// otherwise"
    } else if lower.contains("dns") || lower.contains("lookup") || lower.contains("resolve") || lower.contains("name or service not known") {
        "the host name does not resolve"
    } else {
        "is `shoal serve` running there?"
    };
    format!("cannot connect to {endpoint}: {all} ({hint})")
}

/// A channel to the daemon of `connection` and the headers every call carries (its
/// credentials).
///
/// # Errors
/// The endpoint or credentials malformed, or the connection failed ([`connect_error`]).
pub(crate) async fn connect_channel(connection: &Connection) -> Result<(tonic::transport::Channel, Vec<(&'static str, String)>), String> {
    let (uri, tls, host) = endpoint_uri(&connection.endpoint)?;
    if connection.tls_ca.is_some() && !tls {
        return Err(format!("--tls-ca is for grpc+tls:// endpoints; {} is plain gRPC", connection.endpoint));
    }
    let endpoint = tonic::transport::Endpoint::from_shared(uri)
        .map_err(|e| format!("invalid endpoint {:?}: {e}", connection.endpoint))?
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(10));
    let channel = if tls {
        let config = shoal_server::tls_client::client_config(connection.tls_ca.as_deref())?;
        shoal_server::tls_client::connect(endpoint, config, &host).await
    } else {
        endpoint.connect().await
    };
    let channel = channel.map_err(|e| connect_error(&connection.endpoint, &e))?;
    let mut headers = Vec::new();
    if let Some(token) = &connection.token {
        headers.push(("authorization", format!("Bearer {token}")));
    }
    if let Some(credentials) = &connection.basic_auth {
        if !credentials.contains(':') {
            return Err("--basic-auth must be USER:PASSWORD".to_owned());
        }
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, credentials);
        headers.push(("authorization", format!("Basic {encoded}")));
    }
    Ok((channel, headers))
}

async fn connect(connection: &Connection) -> Result<FlightClient, String> {
    let (channel, headers) = connect_channel(connection).await?;
    let mut client = FlightClient::new(channel);
    for (key, value) in headers {
        client.add_header(key, &value).map_err(|e| e.to_string())?;
    }
    Ok(client)
}

/// A daemon's message in the CLI's words: the action to run becomes the command
/// (`create it with the create_table action` → `create it with shoal create-table NAME`).
fn cli_words(message: &str) -> String {
    const ACTION: &str = "(create it with the create_table action)";
    let Some(at) = message.find(ACTION) else { return message.to_owned() };
    let name = message[..at].split('"').nth(1).unwrap_or("NAME");
    format!("{}(create it with `shoal create-table {name}`){}", &message[..at], &message[at + ACTION.len()..])
}

fn flight_error(context: &str, error: FlightError) -> String {
    match error {
        FlightError::Tonic(status) if status.code() == tonic::Code::Unauthenticated => format!(
            "{context}: {} (Unauthenticated: give the daemon's credentials with --token / SHOAL_AUTH_TOKEN or --basic-auth USER:PASSWORD)",
            status.message()
        ),
        FlightError::Tonic(status) if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown) && std::error::Error::source(&*status).is_some() => {
            connect_error(context, &*status)
        }
        FlightError::Tonic(status) => format!("{context}: {} ({:?})", cli_words(status.message()), status.code()),
        other => format!("{context}: {other}"),
    }
}

async fn action(client: &mut FlightClient, name: &str, body: &Value) -> Result<Value, String> {
    let mut results = client
        .do_action(Action::new(name, body.to_string()))
        .await
        .map_err(|e| flight_error(name, e))?;
    let body = results.next().await.ok_or_else(|| format!("{name}: empty answer"))?.map_err(|e| flight_error(name, e))?;
    serde_json::from_slice(&body).map_err(|e| format!("{name}: answer is not JSON: {e}"))
}

/// `shoal create-table`.
pub async fn create_table(args: CreateTableArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    let mut body = json!({
        "name": args.name,
        "on_invalid_json": match args.on_invalid_json { OnInvalidJson::Reject => "reject", OnInvalidJson::Skip => "skip" },
        "if_not_exists": args.if_not_exists,
    });
    if let Some(durability) = args.durability {
        body["durability"] = serde_json::to_value(durability).map_err(|e| e.to_string())?;
    }
    if let Some(ms) = args.group_commit_ms {
        body["group_commit_ms"] = json!(ms);
    }
    if let Some(mb) = args.memory_budget_mb {
        let bytes = mb.checked_mul(1 << 20).ok_or_else(|| format!("--memory-budget-mb {mb} is too large"))?;
        body["memory_budget_bytes"] = json!(bytes);
    }
    if let Some(retention) = args.retention.policy() {
        body["retention"] = retention;
    }
    if let Some(enabled) = args.columnar {
        body["columnar"] = json!({"enabled": enabled});
    }
    if !args.primary_key.is_empty() {
        body["primary_key"] = json!(args.primary_key);
    }
    if let Some(shards) = args.shards {
        body["shards"] = json!(shards);
    }
    if !args.shard_key.is_empty() {
        body["shard_key"] = json!(args.shard_key);
    }
    let result = action(&mut client, "create_table", &body).await?;
    println!("{result}");
    Ok(())
}

/// `shoal alter-table`: replaces the table's retention policy (`alter_table`).
pub async fn alter_table(args: AlterTableArgs) -> Result<(), String> {
    let retention = args.retention.policy();
    if !args.no_retention && retention.is_none() {
        return Err(
            "alter-table: say what changes: --retention-bytes, --retention-secs, --compact-obsolete-percent (the new policy) or --no-retention"
                .to_owned(),
        );
    }
    let retention = retention.unwrap_or_else(|| json!({}));
    let mut client = connect(&args.connection).await?;
    let result = action(&mut client, "alter_table", &json!({"table": args.name, "retention": retention})).await?;
    println!("{result}");
    Ok(())
}

/// Every table's name, from `ListFlights`.
async fn table_names(client: &mut FlightClient) -> Result<Vec<String>, String> {
    let infos: Vec<_> = client
        .list_flights(bytes::Bytes::new())
        .await
        .map_err(|e| flight_error("ListFlights", e))?
        .try_collect()
        .await
        .map_err(|e| flight_error("ListFlights", e))?;
    Ok(infos.iter().filter_map(|i| i.flight_descriptor.as_ref()?.path.first().cloned()).collect())
}

/// `shoal tables`: one name per line.
pub async fn tables(args: TablesArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    for name in table_names(&mut client).await? {
        println!("{name}");
    }
    Ok(())
}

/// `shoal cluster`: the nodes of the daemon's cluster (each asked whether it answers, with the
/// same credentials), then each sharded table's shards and the node holding each.
pub async fn cluster(args: ClusterArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    if let Some(ClusterCommand::MoveShard { table, shard, to }) = &args.command {
        eprintln!("moving shard {shard} of {table:?} to node {to} ...");
        let moved = action(&mut client, "move_shard", &json!({"table": table, "shard": shard, "to": to})).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&moved).unwrap_or_default());
        } else if moved["moved"].as_bool() == Some(true) {
            println!("shard {shard} of {table:?} moved from node {} to node {to} in {} ms", moved["from"], moved["elapsed_ms"]);
        } else {
            println!("shard {shard} of {table:?} is on node {to} already");
        }
        return Ok(());
    }
    let described = action(&mut client, "cluster", &json!({})).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&described).unwrap_or_default());
        return Ok(());
    }
    let Some(me) = described["node_id"].as_u64() else {
        println!("{} is a single daemon, not a node of a cluster (no [cluster] in its config: docs/deployment.md)", args.connection.endpoint);
        return Ok(());
    };
    let nodes = described["nodes"].as_array().cloned().unwrap_or_default();
    println!("{} nodes; this is node {me}", nodes.len());
    for node in &nodes {
        let location = node["location"].as_str().unwrap_or("");
        let id = node["id"].as_u64().unwrap_or(0);
        let state = if id == me {
            "up (answered this call)".to_owned()
        } else {
            let peer = Connection { endpoint: location.to_owned(), ..args.connection.clone() };
            match tokio::time::timeout(std::time::Duration::from_secs(5), async {
                let mut peer = connect(&peer).await?;
                action(&mut peer, "cluster", &json!({})).await
            })
            .await
            {
                Ok(Ok(_)) => "up".to_owned(),
                Ok(Err(e)) => format!("DOWN: {e}"),
                Err(_) => "DOWN: no answer in 5 s".to_owned(),
            }
        };
        println!("  node {id}  {location}  {state}");
    }
    let tables = described["tables"].as_array().cloned().unwrap_or_default();
    if tables.is_empty() {
        println!("no sharded tables (create one: shoal create-table NAME --shard-key PATH)");
    }
    for table in &tables {
        let key: Vec<&str> = table["shard_key"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        println!("table {}: {} shards by {}", table["name"].as_str().unwrap_or(""), table["shards"], key.join(", "));
        for shard in table["shard_map"].as_array().into_iter().flatten() {
            println!("  shard {}  {}  on node {} ({})", shard["shard"], shard["table"].as_str().unwrap_or(""), shard["node"], shard["location"].as_str().unwrap_or(""));
        }
    }
    Ok(())
}

/// `shoal drop-table`.
pub async fn drop_table(args: TableNameArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    println!("{}", action(&mut client, "drop_table", &json!({"table": args.name})).await?);
    Ok(())
}

/// `shoal truncate`.
pub async fn truncate(args: TruncateArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    let mut body = json!({"table": args.name});
    for (key, value) in [("before_address", args.before_address), ("keep_bytes", args.keep_bytes), ("older_than_secs", args.older_than_secs)] {
        if let Some(value) = value {
            body[key] = json!(value);
        }
    }
    println!("{}", action(&mut client, "truncate", &body).await?);
    Ok(())
}

/// `shoal compact`: a keyed table's log compaction (the `compact` action).
pub async fn compact(args: CompactArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    let mut body = json!({"table": args.name, "wait_ms": args.wait_ms});
    if let Some(until) = args.until_address {
        body["until_address"] = json!(until);
    }
    println!("{}", action(&mut client, "compact", &body).await?);
    Ok(())
}

/// `shoal delete`: SQL's `DELETE FROM` on a keyed table (the `delete` action).
pub async fn delete(args: DeleteArgs) -> Result<(), String> {
    if args.filter.is_none() && !args.all {
        return Err("delete: say which rows: --where FILTER, or --all for every row".to_owned());
    }
    let mut client = connect(&args.connection).await?;
    let body = json!({"table": args.name, "filter": args.filter});
    println!("{}", action(&mut client, "delete", &body).await?);
    Ok(())
}

/// `shoal checkpoint`: one table, or every table in turn.
pub async fn checkpoint(args: CheckpointArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    let names = match args.name {
        Some(name) => vec![name],
        None => table_names(&mut client).await?,
    };
    for name in names {
        println!("{}", action(&mut client, "checkpoint", &json!({"table": name})).await?);
    }
    Ok(())
}

/// `shoal ingest`: reads NDJSON, sends batches through DoPut, shows progress and MB/s.
pub async fn ingest(args: IngestArgs) -> Result<(), String> {
    let (table, input) = args.target()?;
    let mut client = connect(&args.connection).await?;
    let created = if args.create {
        let answer = action(&mut client, "create_table", &json!({"name": table, "if_not_exists": true})).await?;
        answer["created"].as_bool() == Some(true)
    } else {
        false
    };
    let result = ingest_into(&mut client, &args, &table, &input).await;
    if result.is_err() && created {
        // `--create` made the table for this input: a failed ingest leaves nothing behind.
        match action(&mut client, "drop_table", &json!({"table": table})).await {
            Ok(_) => eprintln!("dropped table {table:?}, which --create made for this input"),
            Err(e) => eprintln!("table {table:?}, made by --create, could not be dropped: {e}"),
        }
    }
    result
}

/// The lines of the records of recent batches, by batch number (the daemon names a bad
/// record by batch and row): the batches in flight, and some.
#[derive(Default)]
struct BatchLines {
    batches: std::collections::BTreeMap<usize, Vec<u64>>,
}

impl BatchLines {
    const KEPT: usize = 64;

    fn add(&mut self, batch: usize, lines: Vec<u64>) {
        self.batches.insert(batch, lines);
        while self.batches.len() > Self::KEPT {
            self.batches.pop_first();
        }
    }

    fn line(&self, batch: usize, row: usize) -> Option<u64> {
        self.batches.get(&batch).and_then(|lines| lines.get(row)).copied()
    }

    /// `message` with "DoPut batch B: record R of the batch" read as the input's line.
    fn locate(&self, input: &str, message: &str) -> String {
        let number_after = |text: &str, key: &str| -> Option<usize> {
            let at = text.find(key)? + key.len();
            text[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        };
        match (number_after(message, "DoPut batch "), number_after(message, "record ")) {
            (Some(batch), Some(row)) => match self.line(batch, row) {
                Some(line) => format!("{input}:{line}: {message}"),
                None => message.to_owned(),
            },
            _ => message.to_owned(),
        }
    }
}

async fn ingest_into(client: &mut FlightClient, args: &IngestArgs, table: &str, input: &std::path::Path) -> Result<(), String> {
    let stdin = input.as_os_str() == "-";
    let (reader, total): (Box<dyn Read + Send>, Option<u64>) = if stdin {
        (Box::new(std::io::stdin()), None)
    } else {
        let file = std::fs::File::open(input).map_err(|e| format!("cannot open {}: {e}", input.display()))?;
        let size = file.metadata().ok().map(|m| m.len());
        (Box::new(file), size)
    };
    let progress = match total {
        Some(bytes) => indicatif::ProgressBar::new(bytes),
        None => indicatif::ProgressBar::new_spinner(),
    };
    progress.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}")
            .map_err(|e| e.to_string())?,
    );
    let mut fields = vec![Field::new("json", DataType::Utf8, false)];
    if args.op.is_some() {
        fields.push(Field::new("op", DataType::Utf8, false));
    }
    let schema = Arc::new(Schema::new(fields));
    let op = args.op;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
    let batch_records = args.batch_records.max(1);
    let read_schema = Arc::clone(&schema);
    let input_name = if stdin { "standard input".to_owned() } else { input.display().to_string() };
    let path = (!stdin).then(|| input.to_path_buf());
    let format = args.format;
    let reader_progress = progress.clone();
    let lines = Arc::new(std::sync::Mutex::new(BatchLines::default()));
    let batch_lines = Arc::clone(&lines);
    let name = input_name.clone();
    let reading = tokio::task::spawn_blocking(move || -> Result<(u64, u64), String> {
        let mut records = 0u64;
        let mut batch: Vec<String> = Vec::with_capacity(batch_records);
        let mut origins: Vec<u64> = Vec::with_capacity(batch_records);
        let mut number = 0usize;
        let mut failed: Option<String> = None;
        let mut send = |batch: &mut Vec<String>, origins: &mut Vec<u64>| -> bool {
            records += batch.len() as u64;
            let rows = batch.len();
            let mut columns: Vec<arrow_array::ArrayRef> = vec![Arc::new(StringArray::from(std::mem::take(batch)))];
            if let Some(op) = op {
                columns.push(Arc::new(StringArray::from(vec![op.as_str(); rows])));
            }
            batch_lines.lock().map(|mut l| l.add(number, std::mem::take(origins))).ok();
            number += 1;
            match RecordBatch::try_new(Arc::clone(&read_schema), columns) {
                Ok(batch) => sender.blocking_send(Ok(batch)).is_ok(),
                Err(e) => {
                    failed = Some(e.to_string());
                    false
                }
            }
        };
        let bytes = crate::ingest_input::read_records(
            reader,
            &name,
            path.as_deref(),
            format,
            &mut |record| {
                batch.push(record.text);
                origins.push(record.line);
                batch.len() < batch_records || send(&mut batch, &mut origins)
            },
            &|bytes| reader_progress.set_position(bytes),
        )?;
        if !batch.is_empty() {
            send(&mut batch, &mut origins);
        }
        if let Some(error) = failed {
            return Err(error);
        }
        Ok((records, bytes))
    });
    let started = Instant::now();
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![table.to_owned()])))
        .build(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let put = async {
        let mut results = client.do_put(data).await.map_err(|e| flight_error("DoPut", e))?;
        let (mut acked, mut skipped, mut last_address) = (0u64, 0u64, None::<u64>);
        while let Some(result) = results.next().await {
            let result = result.map_err(|e| flight_error(&format!("DoPut into {table}"), e))?;
            let metadata: Value = serde_json::from_slice(&result.app_metadata).unwrap_or_default();
            acked += metadata["records"].as_u64().unwrap_or(0);
            skipped += metadata["skipped"].as_u64().unwrap_or(0);
            if let Some(address) = metadata["last_address"].as_u64() {
                last_address = Some(address);
            }
            let batch = metadata["batch"].as_u64().and_then(|b| usize::try_from(b).ok()).unwrap_or(0);
            for example in metadata["skipped_examples"].as_array().into_iter().flatten().take(3) {
                let row = example["row"].as_u64().and_then(|r| usize::try_from(r).ok()).unwrap_or(0);
                let line = lines.lock().ok().and_then(|l| l.line(batch, row));
                let place = line.map_or_else(|| format!("batch {batch}, row {row}"), |line| format!("{input_name}:{line}"));
                progress.suspend(|| eprintln!("skipped {place}: {}", example["error"].as_str().unwrap_or("")));
            }
            progress.set_message(format!("{acked} records"));
        }
        Ok::<_, String>((acked, skipped, last_address))
    };
    let put = put.await;
    let read = reading.await.map_err(|e| e.to_string())?;
    progress.finish_and_clear();
    let ((acked, skipped, last_address), (records, bytes)) = match (put, read) {
        (Err(e), _) => return Err(lines.lock().map_or(e.clone(), |l| l.locate(&input_name, &e))),
        (Ok(_), Err(e)) => return Err(e),
        (Ok(put), Ok(read)) => (put, read),
    };
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    #[allow(clippy::cast_precision_loss)]
    let rate = bytes as f64 / seconds / 1e6;
    let last = last_address.map_or_else(String::new, |a| format!("; last address {a}"));
    println!("ingested {acked} of {records} records ({skipped} skipped, {bytes} bytes) into {table} in {seconds:.2} s: {rate:.1} MB/s{last}");
    Ok(())
}

/// `shoal psf ...`.
pub async fn psf(args: PsfArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    let result = match args.command {
        PsfCommand::Add { table, name, projection, predicate, range, boundaries, timestamp, bucket, unit, composite, no_backfill, wait } => {
            let table = table.required("psf add")?;
            let mut body = json!({"table": table, "name": name, "backfill": !no_backfill});
            if let Some(field) = projection {
                body["kind"] = json!("projection");
                body["field"] = json!(field);
            } else if let Some(expr) = predicate {
                body["kind"] = json!("predicate");
                body["expr"] = json!(expr);
            } else if let Some(field) = range {
                body["kind"] = json!("range");
                body["field"] = json!(field);
                if boundaries.is_empty() && bucket.is_none() {
                    return Err("--range needs --boundaries (or, with --timestamp, --bucket)".into());
                }
                if timestamp {
                    body["type"] = json!("timestamp");
                    body["unit"] = json!(unit.unwrap_or_else(|| "s".to_owned()));
                    if let Some(width) = bucket {
                        body["bucket"] = json!(width);
                    }
                }
                if !boundaries.is_empty() {
                    // All numbers: a numeric range (epoch numbers with --timestamp); otherwise strings.
                    let numbers: Option<Vec<f64>> = boundaries.iter().map(|b| b.trim().parse().ok()).collect();
                    body["boundaries"] = match numbers {
                        Some(numbers) => json!(numbers),
                        None => json!(boundaries.iter().map(|b| b.trim()).collect::<Vec<_>>()),
                    };
                }
            } else if !composite.is_empty() {
                body["kind"] = json!("composite");
                body["fields"] = json!(composite);
            } else {
                return Err("give one of --projection, --predicate, --range or --composite".into());
            }
            let registered = action(&mut client, "register_psf", &body).await?;
            if wait {
                wait_for_backfill(&mut client, &table, &name).await?
            } else {
                registered
            }
        }
        PsfCommand::List { table } => action(&mut client, "list_psfs", &json!({"table": table.required("psf list")?})).await?,
        PsfCommand::Drop { table, name } => action(&mut client, "deregister_psf", &json!({"table": table.required("psf drop")?, "name": name})).await?,
    };
    println!("{}", serde_json::to_string_pretty(&result).unwrap_or_default());
    Ok(())
}

/// `shoal query`: plans, reads every endpoint, prints rows, count, plan and time.
pub async fn query(args: QueryArgs) -> Result<(), String> {
    if let Some(text) = &args.sql {
        let started = Instant::now();
        let (channel, headers) = connect_channel(&args.connection).await?;
        let mut client = arrow_flight::sql::client::FlightSqlServiceClient::new(channel);
        for (key, value) in headers {
            client.set_header(key, value);
        }
        let failed = |e: &dyn std::fmt::Display| sql_error(text, e);
        let info = client.execute(text.clone(), None).await.map_err(|e| failed(&e))?;
        let mut batches = Vec::new();
        for endpoint in &info.endpoint {
            let Some(ticket) = endpoint.ticket.clone() else { continue };
            let stream = client.do_get(ticket).await.map_err(|e| failed(&e))?;
            let mut part: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| failed(&e))?;
            batches.append(&mut part);
        }
        return print_query(&args, &info, &batches, started);
    }
    let mut client = connect(&args.connection).await?;
    let started = Instant::now();
    if args.raw {
        return query_raw(&mut client, &args, started).await;
    }
    let filter = filter_text(&args)?;
    let mut command = json!({"table": args.table.required("query")?, "filter": filter, "columns": args.columns, "limit": args.limit});
    if !args.aggregate.is_empty() {
        command["aggregates"] = Value::Array(args.aggregate.iter().map(|a| aggregate_spec(a)).collect::<Result<_, _>>()?);
        command.as_object_mut().map(|c| c.remove("columns"));
    }
    if let Some(address) = args.to_address {
        command["to_address"] = json!(address);
    }
    let info = client
        .get_flight_info(FlightDescriptor::new_cmd(command.to_string()))
        .await
        .map_err(|e| flight_error("GetFlightInfo", e))?;
    let mut batches = Vec::new();
    for endpoint in &info.endpoint {
        let Some(ticket) = endpoint.ticket.clone() else { continue };
        let stream = client.do_get(ticket).await.map_err(|e| flight_error("DoGet", e))?;
        let mut part: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| flight_error("DoGet", e))?;
        batches.append(&mut part);
    }
    print_query(&args, &info, &batches, started)
}

/// A failed statement's message: the server's, without the transport's wrapping.
pub(crate) fn sql_error(statement: &str, error: &dyn std::fmt::Display) -> String {
    let text = error.to_string();
    // arrow-flight's SQL client wraps a status as `Tonic error: code: '…', message: "…"`.
    let message = match text.split_once("message: \"") {
        Some((_, rest)) => rest.strip_suffix('"').unwrap_or(rest).replace("\\\"", "\""),
        None => text,
    };
    let first = statement.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    format!("{first} …: {message}")
}

/// Prints a query's rows as `args` asks (format, `-o`, `--show`), then the count, the time
/// since `started` and the plan from `info`'s metadata.
fn print_query(args: &QueryArgs, info: &FlightInfo, batches: &[RecordBatch], started: Instant) -> Result<(), String> {
    let metadata: Value = serde_json::from_slice(&info.app_metadata).unwrap_or_default();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let elapsed = started.elapsed();
    if args.format != OutputFormat::Table {
        let schema = match batches.first() {
            Some(batch) => batch.schema(),
            None => Arc::new(info.clone().try_decode_schema().map_err(|e| format!("GetFlightInfo: the schema cannot be read: {e}"))?),
        };
        let mut out = output(args.output.as_ref())?;
        write_rows(args.format, &schema, batches, &mut out).and_then(|()| out.flush().map_err(|e| e.to_string())).map_err(|e| {
            format!("writing {} rows to {}: {e}", format!("{:?}", args.format).to_lowercase(), output_name(args.output.as_ref()))
        })?;
        eprintln!("{rows} rows in {:.1} ms", elapsed.as_secs_f64() * 1e3);
        return Ok(());
    }
    let mut out = output(args.output.as_ref())?;
    let mut shown = Vec::new();
    let mut left = args.show.min(rows);
    for batch in batches {
        if left == 0 {
            break;
        }
        let take = left.min(batch.num_rows());
        shown.push(batch.slice(0, take));
        left -= take;
    }
    let mut text = String::new();
    if !shown.is_empty() {
        text.push_str(&arrow_cast::pretty::pretty_format_batches(&shown).map_err(|e| e.to_string())?.to_string());
        text.push('\n');
    }
    text.push_str(&format!("{rows} rows in {:.1} ms\n", elapsed.as_secs_f64() * 1e3));
    if args.plan {
        text.push_str(&format!("plan: {}\n", serde_json::to_string_pretty(&metadata).unwrap_or_default()));
    } else {
        text.push_str(&format!("plan: {} (--plan for the whole plan)\n", plan_line(&metadata)));
    }
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to {}: {e}", output_name(args.output.as_ref())))
}

/// One `--aggregate`: `FUNCTION` (only `count`) or `FUNCTION:PATH`, as the query command's
/// `{"function", "column"}`.
///
/// # Errors
/// An unknown function, or one other than `count` without a path.
fn aggregate_spec(text: &str) -> Result<Value, String> {
    let (function, column) = match text.split_once(':') {
        Some((function, column)) => (function.trim().to_ascii_lowercase(), Some(column.trim())),
        None => (text.trim().to_ascii_lowercase(), None),
    };
    if !["count", "min", "max", "sum", "avg"].contains(&function.as_str()) {
        return Err(format!("--aggregate {text:?}: the functions are count, min, max, sum and avg (e.g. count, sum:payload.size)"));
    }
    match column {
        Some(column) => Ok(json!({"function": function, "column": column})),
        None if function == "count" => Ok(json!({"function": "count"})),
        None => Err(format!("--aggregate {text:?}: {function} needs a path: {function}:PATH")),
    }
}

/// A query plan's metadata (`GetFlightInfo`'s `app_metadata`) in one line: the index scans
/// (PSFs and log ranges), columnar scans (row groups skipped) and full scans, with the bytes of
/// log each covers; for a sharded table, each shard's on its node.
fn plan_line(metadata: &Value) -> String {
    if let Some(shards) = metadata["shards"].as_array() {
        let pruned = metadata["pruned_shards"].as_u64().unwrap_or(0);
        let parts: Vec<String> = shards
            .iter()
            .map(|s| format!("shard {} on node {}: {}", s["shard"], s["node"], plan_line(&s["plan"])))
            .collect();
        let pruned = if pruned > 0 { format!(", {pruned} pruned by the shard key") } else { String::new() };
        return format!("sharded over {} shards{pruned}; {}", shards.len(), parts.join("; "));
    }
    let plan = &metadata["plan"];
    if plan.is_null() {
        return "none".to_owned();
    }
    let bytes = |ranges: &Value| -> (usize, u64) {
        let ranges = ranges.as_array().map(Vec::as_slice).unwrap_or_default();
        let total = ranges.iter().map(|r| r["to"].as_u64().unwrap_or(0).saturating_sub(r["from"].as_u64().unwrap_or(0))).sum();
        (ranges.len(), total)
    };
    let size = |bytes: u64| -> String {
        #[allow(clippy::cast_precision_loss)]
        let mb = bytes as f64 / 1e6;
        if mb >= 1.0 { format!("{mb:.1} MB") } else { format!("{bytes} bytes") }
    };
    let ranges = |n: usize| if n == 1 { "1 range".to_owned() } else { format!("{n} ranges") };
    let mut parts = Vec::new();
    let (n, total) = bytes(&plan["index_scans"]);
    if n > 0 {
        let mut psfs: Vec<String> = plan["index_scans"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["psfs"].as_array().into_iter().flatten().filter_map(Value::as_str).map(ToOwned::to_owned))
            .collect();
        psfs.sort();
        psfs.dedup();
        parts.push(format!("index scan on PSF {} over {} of log ({})", psfs.join(", "), size(total), ranges(n)));
    }
    let (n, total) = bytes(&plan["columnar_scans"]);
    if n > 0 {
        let groups = &plan["columnar_row_groups"];
        let skipped = match (groups["total"].as_u64(), groups["skipped"].as_u64()) {
            (Some(all), Some(skipped)) => format!(", {skipped} of {all} row groups skipped"),
            _ => String::new(),
        };
        parts.push(format!("columnar scan over {} of log ({}{skipped})", size(total), ranges(n)));
    }
    let (n, total) = bytes(&plan["full_scans"]);
    if n > 0 {
        parts.push(format!("full scan over {} of log ({})", size(total), ranges(n)));
    }
    if parts.is_empty() {
        return "nothing to scan".to_owned();
    }
    parts.join("; ")
}

/// The query's filter: `--filter`, or the text of `--filter-file` (`-`: standard input), trimmed.
fn filter_text(args: &QueryArgs) -> Result<Option<String>, String> {
    let Some(path) = &args.filter_file else { return Ok(args.filter.clone()) };
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(|e| format!("reading the filter from standard input: {e}"))?;
    } else {
        text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the filter file {}: {e}", path.display()))?;
    }
    let text = text.trim();
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// Standard output, or the file `--output` names (created or truncated).
fn output(path: Option<&PathBuf>) -> Result<Box<dyn std::io::Write>, String> {
    Ok(match path {
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?,
        )),
    })
}

fn output_name(path: Option<&PathBuf>) -> String {
    path.map_or_else(|| "standard output".to_owned(), |p| p.display().to_string())
}

/// Writes every row in `format` (not `table`): arrow-json, arrow-csv or an Arrow IPC file.
pub(crate) fn write_rows(format: OutputFormat, schema: &Arc<Schema>, batches: &[RecordBatch], out: &mut dyn std::io::Write) -> Result<(), String> {
    let e = |e: arrow_schema::ArrowError| e.to_string();
    match format {
        OutputFormat::Table => unreachable!("the table format is printed by query()"),
        OutputFormat::Json => {
            let mut writer = arrow_json::ArrayWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch).map_err(e)?;
            }
            writer.finish().map_err(e)?;
            out.write_all(b"\n").map_err(|e| e.to_string())
        }
        OutputFormat::Jsonl => {
            let mut writer = arrow_json::LineDelimitedWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch).map_err(e)?;
            }
            writer.finish().map_err(e)
        }
        OutputFormat::Csv => {
            if let Some(field) = schema.fields().iter().find(|f| f.data_type().is_nested()) {
                return Err(format!(
                    "column {:?} is {}: CSV holds flat columns only; choose leaves with --columns (e.g. {}.<field>) or use --format jsonl",
                    field.name(),
                    field.data_type(),
                    field.name()
                ));
            }
            let mut writer = arrow_csv::WriterBuilder::new().with_header(true).build(&mut *out);
            if batches.is_empty() {
                writer.write(&RecordBatch::new_empty(Arc::clone(schema))).map_err(e)?;
            }
            for batch in batches {
                writer.write(batch).map_err(e)?;
            }
            Ok(())
        }
        OutputFormat::Arrow => {
            let mut writer = arrow_ipc::writer::FileWriter::try_new(&mut *out, schema).map_err(e)?;
            for batch in batches {
                writer.write(batch).map_err(e)?;
            }
            writer.finish().map_err(e)
        }
    }
}

/// `shoal query --raw`: one `DoGet` whose ticket is the query command with
/// `"output": "json"`; writes each record's bytes and a newline to stdout as batches arrive.
async fn query_raw(client: &mut FlightClient, args: &QueryArgs, started: Instant) -> Result<(), String> {
    use std::io::Write as _;
    let mut command = json!({"table": args.table.required("query")?, "filter": filter_text(args)?, "limit": args.limit, "output": "json"});
    if let Some(address) = args.to_address {
        command["to_address"] = json!(address);
    }
    let ticket = arrow_flight::Ticket::new(command.to_string());
    let mut stream = client.do_get(ticket).await.map_err(|e| flight_error("DoGet", e))?;
    let mut out = output(args.output.as_ref())?;
    let mut rows = 0usize;
    while let Some(batch) = stream.try_next().await.map_err(|e| flight_error("DoGet", e))? {
        let column = batch
            .column_by_name("json")
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>())
            .ok_or("DoGet: the answer has no Utf8 \"json\" column")?;
        for record in column.iter().flatten() {
            out.write_all(record.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| format!("writing to {}: {e}", output_name(args.output.as_ref())))?;
        }
        rows += arrow_array::Array::len(column);
    }
    out.flush().map_err(|e| format!("writing to {}: {e}", output_name(args.output.as_ref())))?;
    eprintln!("{rows} rows in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

/// `shoal stats`.
pub async fn stats(args: StatsArgs) -> Result<(), String> {
    let mut client = connect(&args.connection).await?;
    let tables: Vec<String> = match args.table.name() {
        Some(table) => vec![table.to_owned()],
        None => table_names(&mut client).await?,
    };
    for table in tables {
        let stats = action(&mut client, "stats", &json!({"table": table})).await?;
        println!("{}", serde_json::to_string_pretty(&stats).unwrap_or_default());
    }
    Ok(())
}
