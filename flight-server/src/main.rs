//! `shoal`: the daemon (`shoal serve`) and a command-line Flight client for it
//! (`shoal ingest`, `shoal psf`, `shoal query`, `shoal stats`).

mod client;
mod ingest_input;
mod sql_shell;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use clap::{Parser, Subcommand};
use tonic::{Request, Status};

use shoal_server::auth::Authenticator;
use shoal_server::cluster::Cluster;
use shoal_server::remote::RemoteStore;
use shoal_ops::catalog::Catalog;
use shoal_server::config::{durability_value_parser, Durability, ServerConfig};
use shoal_server::service::ShoalFlightService;

#[derive(Parser)]
#[command(name = "shoal", version, about = "shoal: JSON records queryable the moment they land (FishStore over Arrow Flight)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon.
    Serve(Box<ServeArgs>),
    /// Ingest NDJSON (a file or `-` for stdin) into a table.
    Ingest(client::IngestArgs),
    /// Register, list or drop PSFs.
    Psf(client::PsfArgs),
    /// Run a query and print its rows and plan.
    Query(client::QueryArgs),
    /// SQL over Flight SQL: an interactive shell (\dt, \d TABLE, \timing), or -c STATEMENT.
    Sql(sql_shell::SqlArgs),
    /// Print table statistics (all tables when --table is absent).
    Stats(client::StatsArgs),
    /// Create a table.
    CreateTable(client::CreateTableArgs),
    /// Change a table's retention policy (the new policy replaces the old one).
    AlterTable(client::AlterTableArgs),
    /// List the tables, one name per line.
    Tables(client::TablesArgs),
    /// The daemon's cluster: its nodes (up or down), sharded tables and where each shard lives.
    Cluster(client::ClusterArgs),
    /// Drop a table and its data.
    DropTable(client::TableNameArgs),
    /// Delete the rows of a keyed table that match a filter (SQL's DELETE FROM … WHERE).
    Delete(client::DeleteArgs),
    /// Drop the head of a table's log (retention): records below an address, beyond a size or age.
    Truncate(client::TruncateArgs),
    /// Compact a keyed table's log: copy its live rows to the tail, drop obsolete versions with the head.
    Compact(client::CompactArgs),
    /// Checkpoint a table (or every table): recovery then replays only what follows.
    Checkpoint(client::CheckpointArgs),
    /// Restore a table of the remote store as a new table (a clone: metadata only), or as it
    /// was at a log address, or both; daemons with this remote open it at their next start.
    Restore(RestoreArgs),
    /// Delete what no table of the remote store needs any more: manifests other than each table's newest
    /// (and those younger than --keep-secs), and the objects no kept manifest names (older than --keep-secs).
    Gc(GcArgs),
    /// Print a shell completion script: `shoal completions bash > /etc/bash_completion.d/shoal`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Flags of `shoal serve`; each overrides the config file and has an environment variable.
#[derive(clap::Args)]
struct ServeArgs {
    /// TOML config file (keys as in docs/configuration.md).
    #[arg(long, env = "SHOAL_CONFIG")]
    config: Option<PathBuf>,
    /// Flight listen address, HOST:PORT (IP address or host name) [default: 127.0.0.1:50051].
    #[arg(long, env = "SHOAL_LISTEN", value_parser = shoal_server::config::socket_address)]
    listen: Option<SocketAddr>,
    /// Data directory [default: ./shoal-data].
    #[arg(long, env = "SHOAL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Keep tables in memory only: a table holds what its page ring holds, and refuses batches beyond it.
    #[arg(long, env = "SHOAL_IN_MEMORY")]
    in_memory: bool,
    /// Memory budget per table log, in MiB [default: 256].
    #[arg(long, env = "SHOAL_MEMORY_BUDGET_MB")]
    memory_budget_mb: Option<usize>,
    /// Default durability of new tables [default: none].
    #[arg(long, env = "SHOAL_DURABILITY", value_parser = durability_value_parser())]
    durability: Option<Durability>,
    /// Group-commit interval in milliseconds [default: 5].
    #[arg(long, env = "SHOAL_GROUP_COMMIT_MS")]
    group_commit_ms: Option<u64>,
    /// The tables' remote store, their durable home: s3://bucket/prefix, gs://…, az://…, file:///path
    /// (credentials and endpoint from AWS_*, GOOGLE_*, AZURE_* as the cloud SDKs take them).
    #[arg(long, env = "SHOAL_REMOTE")]
    remote: Option<String>,
    /// Milliseconds between uploads to the remote store of tables with a local durability [default: 1000].
    #[arg(long, env = "SHOAL_REMOTE_SYNC_MS")]
    remote_sync_ms: Option<u64>,
    /// Milliseconds between uploads of tables with durability remote (their acknowledgements) [default: 50].
    #[arg(long, env = "SHOAL_REMOTE_COMMIT_MS")]
    remote_commit_ms: Option<u64>,
    /// Most bytes of log pages and columnar files kept on the local disk with a remote store;
    /// beyond, they are read from the store when needed (0: keep everything) [default: 0].
    #[arg(long, env = "SHOAL_LOCAL_CACHE_BYTES")]
    local_cache_bytes: Option<u64>,
    /// Seconds between automatic checkpoints, 0 for none [default: 60].
    #[arg(long, env = "SHOAL_CHECKPOINT_INTERVAL_SECS")]
    checkpoint_interval_secs: Option<u64>,
    /// Seconds between applications of the tables' retention policies, 0 for never [default: 30].
    #[arg(long, env = "SHOAL_RETENTION_CHECK_SECS")]
    retention_check_secs: Option<u64>,
    /// Tokio worker threads [default: one per core].
    #[arg(long, env = "SHOAL_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Require authentication; accept `authorization: Bearer <token>` (prefer
    /// --auth-token-file or the environment variable: flags show in `ps`).
    #[arg(long, env = "SHOAL_AUTH_TOKEN", conflicts_with = "auth_token_file")]
    auth_token: Option<String>,
    /// Require authentication with the bearer token held in this file (trimmed).
    #[arg(long, env = "SHOAL_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// Seconds calls in flight get to finish after SIGTERM before they are cancelled
    /// [default: 10].
    #[arg(long, env = "SHOAL_SHUTDOWN_GRACE_SECS")]
    shutdown_grace_secs: Option<u64>,
    /// Require authentication; accept basic credentials USER:PASSWORD (prefer the
    /// environment variable or the config file: flags show in `ps`).
    #[arg(long, env = "SHOAL_BASIC_AUTH")]
    basic_auth: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (HOST:PORT, IP address or host name).
    #[arg(long, env = "SHOAL_METRICS_LISTEN", value_parser = shoal_server::config::socket_address)]
    metrics_listen: Option<SocketAddr>,
    /// Most endpoints per query plan [default: 4].
    #[arg(long, env = "SHOAL_ENDPOINTS_PER_QUERY")]
    endpoints_per_query: Option<usize>,
    /// PEM certificate chain for TLS (with --tls-key).
    #[arg(long, env = "SHOAL_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS (with --tls-cert).
    #[arg(long, env = "SHOAL_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Rows per Arrow batch in DoGet streams [default: 4096].
    #[arg(long, env = "SHOAL_BATCH_ROWS")]
    batch_rows: Option<usize>,
    /// Most DoGet scans that run at once [default: 64].
    #[arg(long, env = "SHOAL_MAX_CONCURRENT_SCANS")]
    max_concurrent_scans: Option<usize>,
    /// Most DoPut streams ingesting (with a batch in flight) at once [default: 64].
    #[arg(long, env = "SHOAL_MAX_CONCURRENT_PUTS")]
    max_concurrent_puts: Option<usize>,
    /// Milliseconds a DoGet waits for a place among the running scans before RESOURCE_EXHAUSTED [default: 30000].
    #[arg(long, env = "SHOAL_SCAN_WAIT_TIMEOUT_MS")]
    scan_wait_timeout_ms: Option<u64>,
    /// Seconds a stream may send or read nothing before it is ended (0: never) [default: 30].
    #[arg(long, env = "SHOAL_STREAM_IDLE_TIMEOUT_SECS")]
    stream_idle_timeout_secs: Option<u64>,
    /// Seconds a new connection has to send its HTTP/2 preface (or TLS hello) [default: 10].
    #[arg(long, env = "SHOAL_HANDSHAKE_TIMEOUT_SECS")]
    handshake_timeout_secs: Option<u64>,
    /// Most calls (HTTP/2 streams) one connection has open at once [default: 256].
    #[arg(long, env = "SHOAL_MAX_STREAMS_PER_CONNECTION")]
    max_streams_per_connection: Option<u32>,
    /// Most tables this daemon serves [default: 1024].
    #[arg(long, env = "SHOAL_MAX_TABLES")]
    max_tables: Option<usize>,
    /// Most memory the tables' page rings and indexes may reserve, in MiB [default: 3/4 of RAM].
    #[arg(long, env = "SHOAL_MAX_MEMORY_MB")]
    max_memory_mb: Option<u64>,
    /// New tables compact flushed pages into Parquet (the columnar tier) [default: true].
    #[arg(long, env = "SHOAL_COLUMNAR")]
    columnar: Option<bool>,
    /// Log bytes one columnar file covers at most [default: 67108864].
    #[arg(long, env = "SHOAL_COLUMNAR_FILE_LOG_BYTES")]
    columnar_file_log_bytes: Option<u64>,
    /// Rows per Parquet row group at most [default: 65536].
    #[arg(long, env = "SHOAL_COLUMNAR_ROW_GROUP_ROWS")]
    columnar_row_group_rows: Option<usize>,
    /// Compression of the columnar files [default: lz4].
    #[arg(long, env = "SHOAL_COLUMNAR_CODEC", value_parser = ["zstd", "lz4", "none"])]
    columnar_codec: Option<String>,
    /// Milliseconds the log tail must stand still before a short run is compacted [default: 1000].
    #[arg(long, env = "SHOAL_COLUMNAR_IDLE_MS")]
    columnar_idle_ms: Option<u64>,
    /// Bytes of decoded columns each table keeps in memory for later scans [default: 67108864].
    #[arg(long, env = "SHOAL_COLUMNAR_CACHE_BYTES")]
    columnar_cache_bytes: Option<u64>,
    /// Compactor threads per table [default: 1].
    #[arg(long, env = "SHOAL_COLUMNAR_THREADS")]
    columnar_threads: Option<usize>,
    /// The cluster's nodes: every node's Flight location, node i at position i, comma-separated (`[cluster] nodes`).
    #[arg(long, env = "SHOAL_CLUSTER_NODES", value_delimiter = ',')]
    cluster_nodes: Option<Vec<String>>,
    /// This node's id in --cluster-nodes [default: the host name's ordinal, as shoal-2 → 2].
    #[arg(long, env = "SHOAL_NODE_ID")]
    node_id: Option<usize>,
    /// The secret the cluster's nodes share ([cluster] secret; 16 to 1024 printable ASCII bytes): calls between nodes carry it. Prefer the environment or --cluster-secret-file (a flag shows in `ps`).
    #[arg(long, env = "SHOAL_CLUSTER_SECRET", hide_env_values = true, conflicts_with = "cluster_secret_file")]
    cluster_secret: Option<String>,
    /// A file whose content (trimmed) is the cluster's secret ([cluster] secret_file).
    #[arg(long, env = "SHOAL_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// PEM certificate(s) this node trusts when it calls a grpc+tls:// node ([cluster] tls_ca) [default: the system's roots].
    #[arg(long, env = "SHOAL_CLUSTER_TLS_CA")]
    cluster_tls_ca: Option<PathBuf>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "SHOAL_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

impl ServeArgs {
    fn resolve(&self) -> Result<ServerConfig, String> {
        let mut config = match &self.config {
            Some(path) => ServerConfig::from_toml_file(path)?,
            None => ServerConfig::default(),
        };
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(dir) = &self.data_dir {
            config.engine.data_dir.clone_from(dir);
        }
        config.engine.in_memory |= self.in_memory;
        if let Some(mb) = self.memory_budget_mb {
            config.engine.memory_budget_bytes = mb << 20;
        }
        if let Some(durability) = self.durability {
            config.engine.durability = durability;
        }
        if let Some(ms) = self.group_commit_ms {
            config.engine.group_commit_ms = ms;
        }
        if let Some(secs) = self.checkpoint_interval_secs {
            config.engine.checkpoint_interval_secs = secs;
        }
        if let Some(secs) = self.retention_check_secs {
            config.engine.retention_check_secs = secs;
        }
        if let Some(threads) = self.worker_threads {
            config.worker_threads = threads;
        }
        if self.auth_token.is_some() {
            config.auth_token.clone_from(&self.auth_token);
            config.auth_token_file = None;
        }
        if self.auth_token_file.is_some() {
            config.auth_token_file.clone_from(&self.auth_token_file);
            config.auth_token = None;
        }
        if let Some(secs) = self.shutdown_grace_secs {
            config.shutdown_grace_secs = secs;
        }
        if self.basic_auth.is_some() {
            config.basic_auth.clone_from(&self.basic_auth);
        }
        if self.metrics_listen.is_some() {
            config.metrics_listen = self.metrics_listen;
        }
        if let Some(n) = self.endpoints_per_query {
            config.engine.endpoints_per_query = n;
        }
        if self.tls_cert.is_some() {
            config.tls_cert.clone_from(&self.tls_cert);
            config.tls_key.clone_from(&self.tls_key);
        }
        if let Some(rows) = self.batch_rows {
            config.engine.batch_rows = rows;
        }
        if let Some(n) = self.max_concurrent_scans {
            config.max_concurrent_scans = n;
        }
        if let Some(n) = self.max_concurrent_puts {
            config.max_concurrent_puts = n;
        }
        if let Some(ms) = self.scan_wait_timeout_ms {
            config.scan_wait_timeout_ms = ms;
        }
        if let Some(secs) = self.stream_idle_timeout_secs {
            config.stream_idle_timeout_secs = secs;
        }
        if let Some(secs) = self.handshake_timeout_secs {
            config.handshake_timeout_secs = secs;
        }
        if let Some(n) = self.max_streams_per_connection {
            config.max_streams_per_connection = n;
        }
        if let Some(n) = self.max_tables {
            config.engine.max_tables = n;
        }
        if let Some(mb) = self.max_memory_mb {
            config.engine.max_memory_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(enabled) = self.columnar {
            config.engine.columnar.enabled = enabled;
        }
        if let Some(bytes) = self.columnar_file_log_bytes {
            config.engine.columnar.file_log_bytes = bytes;
        }
        if let Some(rows) = self.columnar_row_group_rows {
            config.engine.columnar.row_group_rows = rows;
        }
        if let Some(codec) = &self.columnar_codec {
            config.engine.columnar.codec = serde_json::from_value(serde_json::json!(codec)).map_err(|e| format!("--columnar-codec: {e}"))?;
        }
        if let Some(ms) = self.columnar_idle_ms {
            config.engine.columnar.idle_ms = ms;
        }
        if let Some(bytes) = self.columnar_cache_bytes {
            config.engine.columnar.cache_bytes = bytes;
        }
        if let Some(threads) = self.columnar_threads {
            config.engine.columnar.threads = threads;
        }
        if let Some(nodes) = &self.cluster_nodes {
            config.cluster.nodes = nodes.iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect();
        }
        if self.node_id.is_some() {
            config.cluster.node_id = self.node_id;
        }
        if self.cluster_tls_ca.is_some() {
            config.cluster.tls_ca.clone_from(&self.cluster_tls_ca);
        }
        if self.cluster_secret.is_some() {
            config.cluster.secret.clone_from(&self.cluster_secret);
            config.cluster.secret_file = None;
        }
        if self.remote.is_some() {
            config.storage.remote.clone_from(&self.remote);
        }
        if let Some(ms) = self.remote_sync_ms {
            config.storage.remote_sync_ms = ms;
        }
        if let Some(ms) = self.remote_commit_ms {
            config.storage.remote_commit_ms = ms;
        }
        if let Some(bytes) = self.local_cache_bytes {
            config.storage.local_cache_bytes = bytes;
        }
        if self.cluster_secret_file.is_some() {
            config.cluster.secret_file.clone_from(&self.cluster_secret_file);
            config.cluster.secret = None;
        }
        if config.tls_cert.is_some() != config.tls_key.is_some() {
            return Err("TLS needs both tls_cert and tls_key".into());
        }
        config.validate()?;
        Ok(config)
    }
}

/// `shoal restore`.
#[derive(clap::Args)]
struct RestoreArgs {
    /// The remote store, as the daemon's --remote (s3://bucket/prefix, gs://, az://, file:///path).
    #[arg(long, env = "SHOAL_REMOTE")]
    remote: String,
    /// The table to restore.
    table: String,
    /// Write it as a new table of this name; its manifest names the table's objects (nothing is copied
    /// but the page holding --until-address).
    #[arg(long = "as", value_name = "NEW")]
    as_table: Option<String>,
    /// As the table was when its log ended at this address (a batch's end_address or durable_address);
    /// without --as the table itself is rolled back (stop its daemon first: it is fenced).
    #[arg(long, value_name = "A")]
    until_address: Option<u64>,
    /// The id of the cluster node whose table it is (its tables are under node-<id>/ of the prefix).
    #[arg(long)]
    node_id: Option<usize>,
}

async fn restore(args: RestoreArgs) -> Result<(), String> {
    let config = shoal_server::remote::StorageConfig { remote: Some(args.remote.clone()), ..Default::default() };
    config.validate()?;
    let remote = RemoteStore::open(&config, args.node_id)?;
    let target = args.as_table.as_deref().unwrap_or(&args.table);
    shoal_ops::catalog::validate_table_name(target).map_err(|e| e.message)?;
    let cloned = remote.restore_as(&args.table, target, args.until_address).await?;
    println!("{}", serde_json::to_string(&cloned).map_err(|e| e.to_string())?);
    Ok(())
}

/// `shoal gc`.
#[derive(clap::Args)]
struct GcArgs {
    /// The remote store, as the daemons' --remote (s3://bucket/prefix, gs://, az://, file:///path): the
    /// prefix they were started with, not a cluster node's node-<id>/ (other nodes' manifests may name its objects).
    #[arg(long, env = "SHOAL_REMOTE")]
    remote: String,
    /// Seconds during which a superseded manifest and an object no manifest names yet are kept: a restore
    /// or a daemon may still read them, an upload round may not have committed its manifest yet.
    #[arg(long, default_value_t = 3600)]
    keep_secs: u64,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    dry_run: bool,
}

async fn gc(args: GcArgs) -> Result<(), String> {
    let config = shoal_server::remote::StorageConfig { remote: Some(args.remote.clone()), ..Default::default() };
    config.validate()?;
    let remote = RemoteStore::open(&config, None)?;
    let collected = remote.collect_garbage(std::time::Duration::from_secs(args.keep_secs), args.dry_run).await?;
    println!("{}", serde_json::to_string(&collected).map_err(|e| e.to_string())?);
    Ok(())
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG").unwrap_or_else(|_| "info".into());
    // Colours only on a terminal, and never with NO_COLOR set (no-color.org): a log file or
    // a container's log collector gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Ingest(args) => client::run(client::ingest(args)),
        Command::Psf(args) => client::run(client::psf(args)),
        Command::Query(args) => client::run(client::query(args)),
        Command::Cluster(args) => client::run(client::cluster(args)),
        Command::Sql(args) => client::run(sql_shell::sql(args)),
        Command::Stats(args) => client::run(client::stats(args)),
        Command::CreateTable(args) => client::run(client::create_table(args)),
        Command::Tables(args) => client::run(client::tables(args)),
        Command::DropTable(args) => client::run(client::drop_table(args)),
        Command::AlterTable(args) => client::run(client::alter_table(args)),
        Command::Delete(args) => client::run(client::delete(args)),
        Command::Truncate(args) => client::run(client::truncate(args)),
        Command::Compact(args) => client::run(client::compact(args)),
        Command::Checkpoint(args) => client::run(client::checkpoint(args)),
        Command::Restore(args) => client::run(restore(args)),
        Command::Gc(args) => client::run(gc(args)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "shoal", &mut std::io::stdout());
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("shoal: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve(args: &ServeArgs) -> Result<(), String> {
    init_logging(&args.log_format);
    let config = args.resolve()?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if config.worker_threads > 0 {
        runtime.worker_threads(config.worker_threads);
    }
    let runtime = runtime.build().map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = runtime.block_on(serve_async(config));
    // Calls cancelled at the end of the grace period may leave blocking engine work
    // behind (a scan feeding a closed stream stops at its next batch): do not wait long.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    result
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn serve_async(mut config: ServerConfig) -> Result<(), String> {
    if let Some(addr) = config.metrics_listen {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the metrics endpoint has no authentication and names the tables: it is reachable beyond this host");
        }
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("cannot start the metrics endpoint on {addr}: {e}"))?;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let remote = match &config.storage.remote {
        Some(_) => {
            // A node of a cluster keeps its tables (its shards) under a prefix of its own:
            // its replacement (the same node id, an empty volume) opens exactly them.
            let node = config.cluster.is_enabled().then(|| config.cluster.resolve_node_id()).transpose()?;
            let remote = RemoteStore::open(&config.storage, node)?;
            std::fs::create_dir_all(&config.engine.data_dir).map_err(|e| format!("cannot create {}: {e}", config.engine.data_dir.display()))?;
            remote.prepare(&config.engine.data_dir).await?;
            config.engine.remote_commit_ms = Some(config.storage.remote_commit_ms);
            config.engine.page_sources = Some(remote.page_sources());
            tracing::info!(remote = remote.url(), "remote store: the tables' durable home");
            Some(remote)
        }
        None => None,
    };
    let catalog = Arc::new(Catalog::open(config.engine.clone())?);
    let mirroring = remote.as_ref().map(|remote| tokio::spawn(Arc::clone(remote).run(Arc::clone(&catalog))));
    let authenticator = Arc::new(Authenticator::new(config.bearer_token()?, config.basic_auth.as_deref())?);
    let limits = shoal_server::service::StreamLimits {
        max_concurrent_scans: config.max_concurrent_scans,
        max_concurrent_puts: config.max_concurrent_puts,
        scan_wait: std::time::Duration::from_millis(config.scan_wait_timeout_ms),
        stream_idle: std::time::Duration::from_secs(config.stream_idle_timeout_secs),
    };
    let mut service = ShoalFlightService::new(Arc::clone(&catalog), Arc::clone(&authenticator), &limits);
    if let Some(remote) = &remote {
        service = service.with_remote(Arc::clone(remote));
    }
    if config.cluster.is_enabled() {
        let map_dir = (!config.engine.in_memory).then(|| config.engine.data_dir.join("cluster"));
        let cluster = Cluster::open(&config.cluster, map_dir, config.bearer_token()?.as_deref(), config.basic_auth.as_deref())?;
        if let Some(remote) = &remote {
            cluster.set_remote(Arc::clone(remote));
        }
        tracing::info!(node_id = cluster.node_id(), nodes = config.cluster.nodes.len(), location = cluster.location(cluster.node_id()), "node of a cluster");
        service = service.with_cluster(Arc::new(cluster));
    }
    let check_auth = move |request: Request<()>| -> Result<Request<()>, Status> {
        authenticator.check(request.metadata())?;
        Ok(request)
    };
    let server = FlightServiceServer::new(service)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20);
    let server = tonic::service::interceptor::InterceptedService::new(server, check_auth);
    let gauges = tokio::spawn(update_gauges(Arc::clone(&catalog)));
    let checkpoints = (config.engine.checkpoint_interval_secs > 0 && !config.engine.in_memory)
        .then(|| tokio::spawn(checkpoint_periodically(Arc::clone(&catalog), config.engine.checkpoint_interval_secs)));
    let retention = (config.engine.retention_check_secs > 0)
        .then(|| tokio::spawn(retain_periodically(Arc::clone(&catalog), config.engine.retention_check_secs)));
    // grpc.health.v1 (Kubernetes' gRPC probes, grpc_health_probe): SERVING for the server ("")
    // and the Flight service until the shutdown signal, NOT_SERVING from then on. Outside the
    // authentication interceptor: probes carry no credentials, and the answer tells nothing
    // about the data.
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<FlightServiceServer<ShoalFlightService>>().await;
    let mut builder = tonic::transport::Server::builder().max_concurrent_streams(Some(config.max_streams_per_connection));
    if let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) {
        let read = |path: &PathBuf| std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
        let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
        builder = builder
            // The TLS handshake gets handshake_timeout_secs too (the first 24 bytes are
            // checked before it: limits::handshaken).
            .tls_config(
                tonic::transport::ServerTlsConfig::new()
                    .identity(identity)
                    .timeout(std::time::Duration::from_secs(config.handshake_timeout_secs)),
            )
            .map_err(|e| format!("invalid TLS certificate or key: {e}"))?;
    }
    let scheme = if config.tls_cert.is_some() { "grpc+tls" } else { "grpc" };
    tracing::info!(listen = %local, data_dir = %config.engine.data_dir.display(), in_memory = config.engine.in_memory, scheme, "shoal ready");
    println!("shoal ready: listening on {local} ({scheme})");
    // Graceful shutdown: on the signal the server stops accepting connections and tells
    // clients to go away; calls in flight get `shutdown_grace_secs` to finish, then the
    // server future is dropped, which cancels them.
    let (signalled, on_signal) = tokio::sync::oneshot::channel::<()>();
    let serving = builder.add_service(health_service).add_service(server).serve_with_incoming_shutdown(
        // Connections that send no preface within handshake_timeout_secs are closed
        // (TCP_NODELAY set on the others).
        shoal_server::limits::handshaken(listener, std::time::Duration::from_secs(config.handshake_timeout_secs)),
        async move {
            shutdown_signal().await;
            health_reporter.set_not_serving::<FlightServiceServer<ShoalFlightService>>().await;
            health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
            let _ = signalled.send(());
        },
    );
    let grace = std::time::Duration::from_secs(config.shutdown_grace_secs);
    let grace_over = async move {
        if on_signal.await.is_ok() {
            tracing::info!(grace_secs = grace.as_secs(), "shutdown signal: no new calls; waiting for calls in flight");
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = serving => result.map_err(|e| format!("server error: {e}"))?,
        () = grace_over => tracing::warn!("shutdown grace period over: cancelling the calls still in flight"),
    }
    gauges.abort();
    for task in [checkpoints, retention].into_iter().flatten() {
        task.abort();
    }
    tracing::info!("shutting down: flushing tables");
    let closing = Arc::clone(&catalog);
    tokio::task::spawn_blocking(move || closing.close_all()).await.map_err(|e| e.to_string())?;
    if let Some(remote) = &remote {
        // The tables are closed (checkpointed): a last round uploads their final files.
        tracing::info!("shutting down: last uploads to the remote store");
        remote.stop(std::time::Duration::from_secs(60)).await;
    }
    if let Some(task) = mirroring {
        task.abort();
    }
    tracing::info!("shoal stopped");
    Ok(())
}

/// Applies every table's retention policy every `seconds` (Kafka's
/// `log.retention.check.interval.ms`).
async fn retain_periodically(catalog: Arc<Catalog>, seconds: u64) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(seconds));
    tick.tick().await;
    loop {
        tick.tick().await;
        let catalog = Arc::clone(&catalog);
        if let Err(e) = tokio::task::spawn_blocking(move || catalog.apply_retention()).await {
            tracing::error!(error = %e, "the retention task failed");
        }
    }
}

/// Checkpoints every table every `seconds` (fuzzy: ingestion continues), so that
/// recovery replays at most about that much of the log.
async fn checkpoint_periodically(catalog: Arc<Catalog>, seconds: u64) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(seconds));
    tick.tick().await;
    loop {
        tick.tick().await;
        for entry in catalog.list() {
            let started = std::time::Instant::now();
            let table = Arc::clone(&entry.table);
            match tokio::task::spawn_blocking(move || table.checkpoint()).await {
                Ok(Ok(state)) => tracing::info!(
                    table = %entry.name,
                    end = state.log_end_address.get(),
                    elapsed_ms = started.elapsed().as_millis(),
                    "checkpoint"
                ),
                Ok(Err(e)) => tracing::error!(table = %entry.name, error = %e, "checkpoint failed"),
                Err(e) => tracing::error!(table = %entry.name, error = %e, "checkpoint task failed"),
            }
        }
    }
}

#[allow(clippy::cast_precision_loss)]
async fn update_gauges(catalog: Arc<Catalog>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        for entry in catalog.list() {
            let stats = entry.table.stats();
            let name = entry.name.clone();
            metrics::gauge!("shoal_log_tail_address", "table" => name.clone()).set(stats.tail_address.get() as f64);
            metrics::gauge!("shoal_log_head_address", "table" => name.clone()).set(stats.head_address.get() as f64);
            metrics::gauge!("shoal_log_flushed_until_address", "table" => name.clone()).set(stats.flushed_until_address.get() as f64);
            metrics::gauge!("shoal_log_observed_until_address", "table" => name.clone()).set(stats.observed_until_address.get() as f64);
            metrics::gauge!("shoal_index_bytes", "table" => name.clone()).set(stats.index_bytes as f64);
            metrics::gauge!("shoal_memory_reserved_bytes", "table" => name.clone()).set(stats.memory.reserved_bytes as f64);
            metrics::gauge!("shoal_memory_bound_bytes", "table" => name.clone()).set(stats.memory.bound_bytes as f64);
            metrics::gauge!("shoal_log_bytes_in_memory", "table" => name.clone()).set(stats.memory.log_bytes_in_memory as f64);
            metrics::gauge!("shoal_records", "table" => name.clone()).set(stats.records as f64);
            let columnar = &stats.columnar;
            metrics::gauge!("shoal_columnar_files", "table" => name.clone()).set(columnar.files as f64);
            metrics::gauge!("shoal_columnar_log_bytes", "table" => name.clone()).set(columnar.log_bytes as f64);
            metrics::gauge!("shoal_columnar_json_bytes", "table" => name.clone()).set(columnar.json_bytes as f64);
            metrics::gauge!("shoal_columnar_parquet_bytes", "table" => name.clone()).set(columnar.parquet_bytes as f64);
            metrics::gauge!("shoal_columnar_backlog_bytes", "table" => name.clone()).set(columnar.backlog_bytes as f64);
            metrics::gauge!("shoal_columnar_compacted_json_bytes", "table" => name.clone()).set(columnar.compacted_json_bytes as f64);
            metrics::gauge!("shoal_columnar_compaction_seconds", "table" => name.clone()).set(columnar.compaction_ms as f64 / 1e3);
            metrics::gauge!("shoal_columnar_compaction_cpu_seconds", "table" => name.clone()).set(columnar.compaction_cpu_ms as f64 / 1e3);
            metrics::gauge!("shoal_columnar_damaged_files", "table" => name).set(columnar.damaged_files as f64);
        }
    }
}
