//! Server configuration: defaults, a TOML file, then environment variables and flags
//! (in increasing precedence). Every key is documented in `docs/configuration.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shoal_core::table::DurabilityPolicy;

/// The daemon's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the Flight service. Default `127.0.0.1:50051`.
    pub listen: SocketAddr,
    /// Directory of the tables' segment files. Default `./shoal-data`.
    pub data_dir: PathBuf,
    /// Keep tables in memory only (null device): a table holds what its page ring holds
    /// and refuses batches beyond it (`RESOURCE_EXHAUSTED`). Default false.
    pub in_memory: bool,
    /// Default memory budget of each table's log ring, in bytes. Default 256 MiB.
    pub memory_budget_bytes: usize,
    /// Default durability of new tables: `none`, `group_commit` or `fsync`. Default `none`.
    pub durability: Durability,
    /// Interval of `group_commit`, in milliseconds. Default 5.
    pub group_commit_ms: u64,
    /// Seconds between automatic checkpoints of every table (0: only on demand and at
    /// shutdown). Default 60.
    pub checkpoint_interval_secs: u64,
    /// Tokio worker threads (0 = one per core). Default 0.
    pub worker_threads: usize,
    /// Most endpoints (parallel log ranges) per query plan. Default 4.
    pub endpoints_per_query: usize,
    /// If set, calls may authenticate with `authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// `USER:PASSWORD`: if set, calls may authenticate with HTTP basic credentials, and a
    /// Flight handshake with them returns a session bearer token.
    pub basic_auth: Option<String>,
    /// Address of the Prometheus metrics endpoint (`/metrics`); unset: no endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// Rows per Arrow batch in DoGet streams. Default 4096.
    pub batch_rows: usize,
    /// PEM certificate chain; with `tls_key`, the service speaks TLS (`grpc+tls://`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// A file whose content (trimmed) is the bearer token, instead of `auth_token` (which a
    /// flag would show in `ps`).
    pub auth_token_file: Option<PathBuf>,
    /// Seconds that calls in flight get to finish after SIGTERM/SIGINT before they are
    /// cancelled; the tables are then flushed and checkpointed. Default 10.
    pub shutdown_grace_secs: u64,
    /// Most tables this daemon serves. Default 1024.
    pub max_tables: usize,
    /// Most scans (`DoGet`) that run at once; more wait up to 30 s for a place, then are
    /// refused (`RESOURCE_EXHAUSTED`). Each holds a blocking thread. Default 64.
    pub max_concurrent_scans: usize,
    /// Most ingestion streams (`DoPut`) open at once, likewise (each holds two blocking
    /// threads while it is open). Default 64.
    pub max_concurrent_puts: usize,
    /// Most memory the tables' page rings and hash indexes may reserve together, in bytes
    /// (`create_table` beyond it is refused). 0: three quarters of the machine's physical
    /// memory. Default 0.
    pub max_memory_bytes: u64,
    /// Default settings of new tables' columnar tier (section `[columnar]`: `enabled`,
    /// `file_log_bytes`, `row_group_rows`, `codec`, `idle_ms`). Default: on, 64 MiB files.
    pub columnar: shoal_core::columnar::ColumnarConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            data_dir: PathBuf::from("./shoal-data"),
            in_memory: false,
            memory_budget_bytes: 256 << 20,
            durability: Durability::None,
            group_commit_ms: 5,
            checkpoint_interval_secs: 60,
            worker_threads: 0,
            endpoints_per_query: 4,
            auth_token: None,
            basic_auth: None,
            metrics_listen: None,
            batch_rows: 4096,
            tls_cert: None,
            tls_key: None,
            auth_token_file: None,
            shutdown_grace_secs: 10,
            max_tables: 1024,
            max_concurrent_scans: 64,
            max_concurrent_puts: 64,
            max_memory_bytes: 0,
            columnar: shoal_core::columnar::ColumnarConfig::default(),
        }
    }
}

/// A durability policy by name (see `shoal_core::table::DurabilityPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Durability {
    /// Acknowledged means accepted; pages are written as they fill, unsynced.
    #[default]
    None,
    /// Acknowledged once durable; the log's prefix is written and synced every interval.
    GroupCommit,
    /// Acknowledged once durable; every batch is written and synced at once.
    Fsync,
}

impl Durability {
    /// The engine's policy, with `group_commit_ms` for group commit.
    #[must_use]
    pub fn policy(self, group_commit_ms: u64) -> DurabilityPolicy {
        match self {
            Self::None => DurabilityPolicy::None,
            Self::GroupCommit => DurabilityPolicy::GroupCommit { interval_ms: group_commit_ms.max(1) },
            Self::Fsync => DurabilityPolicy::Fsync,
        }
    }
}

/// The largest `group_commit_ms`: one hour (a longer interval would leave acknowledged
/// batches waiting that long).
pub const MAX_GROUP_COMMIT_MS: u64 = 3_600_000;
/// The largest `checkpoint_interval_secs`: one week.
pub const MAX_CHECKPOINT_INTERVAL_SECS: u64 = 7 * 24 * 3600;
/// The largest `shutdown_grace_secs`: one hour.
pub const MAX_SHUTDOWN_GRACE_SECS: u64 = 3600;
/// The largest `endpoints_per_query`.
pub const MAX_ENDPOINTS_PER_QUERY: usize = 1024;
/// The largest `batch_rows`.
pub const MAX_BATCH_ROWS: usize = 1 << 20;
/// The largest `max_tables`.
pub const MAX_TABLES: usize = 1 << 20;
/// The largest `max_concurrent_scans` and `max_concurrent_puts`: together with the
/// blocking threads they hold, within tokio's pool of 512.
pub const MAX_CONCURRENT_CALLS: usize = 128;
/// The largest `worker_threads`.
pub const MAX_WORKER_THREADS: usize = 1024;
/// The smallest `memory_budget_bytes`: 1 MiB (the log rounds it to at least 4 pages).
pub const MIN_MEMORY_BUDGET_BYTES: usize = 1 << 20;
/// The largest `memory_budget_bytes`: 1 TiB.
pub const MAX_MEMORY_BUDGET_BYTES: usize = 1 << 40;

impl ServerConfig {
    /// Checks that every setting is within its documented range (`docs/configuration.md`),
    /// so that a value that would hang or break the daemon stops it at start instead.
    ///
    /// # Errors
    /// A message naming the first setting out of range, its value and the range.
    pub fn validate(&self) -> Result<(), String> {
        fn range<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T, max: T, unit: &str) -> Result<(), String> {
            if value < min || value > max {
                return Err(format!("{key} = {value} is out of range: it must be between {min} and {max}{unit}"));
            }
            Ok(())
        }
        range("group_commit_ms", self.group_commit_ms, 1, MAX_GROUP_COMMIT_MS, " milliseconds")?;
        range("checkpoint_interval_secs", self.checkpoint_interval_secs, 0, MAX_CHECKPOINT_INTERVAL_SECS, " seconds")?;
        range("shutdown_grace_secs", self.shutdown_grace_secs, 0, MAX_SHUTDOWN_GRACE_SECS, " seconds")?;
        range("endpoints_per_query", self.endpoints_per_query, 1, MAX_ENDPOINTS_PER_QUERY, "")?;
        range("batch_rows", self.batch_rows, 1, MAX_BATCH_ROWS, " rows")?;
        range("worker_threads", self.worker_threads, 0, MAX_WORKER_THREADS, " (0: one per core)")?;
        range("memory_budget_bytes", self.memory_budget_bytes, MIN_MEMORY_BUDGET_BYTES, MAX_MEMORY_BUDGET_BYTES, " bytes")?;
        range("max_tables", self.max_tables, 1, MAX_TABLES, "")?;
        range("max_concurrent_scans", self.max_concurrent_scans, 1, MAX_CONCURRENT_CALLS, "")?;
        range("max_concurrent_puts", self.max_concurrent_puts, 1, MAX_CONCURRENT_CALLS, "")?;
        range("columnar.file_log_bytes", self.columnar.file_log_bytes, 1, 1 << 40, " bytes")?;
        range("columnar.row_group_rows", self.columnar.row_group_rows, 1, 1 << 24, " rows")?;
        range("columnar.idle_ms", self.columnar.idle_ms, 0, 3_600_000, " milliseconds")?;
        if self.auth_token.as_deref().is_some_and(str::is_empty) {
            return Err("auth_token is empty: give a token, or none to serve without authentication".into());
        }
        if self.auth_token.is_some() && self.auth_token_file.is_some() {
            return Err("auth_token and auth_token_file are both set: use one".into());
        }
        Ok(())
    }

    /// The memory the tables may reserve together: `max_memory_bytes`, or three quarters
    /// of the physical memory when it is 0 (unbounded where that cannot be read).
    #[must_use]
    pub fn memory_limit_bytes(&self) -> u64 {
        if self.max_memory_bytes > 0 {
            return self.max_memory_bytes;
        }
        // SAFETY: sysconf reads system constants; no memory is touched.
        let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        match (u64::try_from(pages), u64::try_from(page_size)) {
            (Ok(pages), Ok(size)) if pages > 0 && size > 0 => pages.saturating_mul(size) / 4 * 3,
            _ => u64::MAX,
        }
    }

    /// The bearer token: `auth_token`, else the trimmed content of `auth_token_file`.
    ///
    /// # Errors
    /// A message naming the file when it cannot be read or holds no token.
    pub fn bearer_token(&self) -> Result<Option<String>, String> {
        let Some(path) = &self.auth_token_file else { return Ok(self.auth_token.clone()) };
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read auth_token_file {}: {e}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("auth_token_file {} holds no token", path.display()));
        }
        Ok(Some(token.to_owned()))
    }

    /// Reads a TOML file (keys as in this struct; missing keys keep their defaults).
    ///
    /// # Errors
    /// A message naming the file and the key or line that is wrong.
    pub fn from_toml_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("invalid config file {}: {e}", path.display()))
    }
}
