//! The engine's settings: where and how tables are kept, the defaults of new tables and
//! the bounds on them (`docs/configuration.md`). The daemon's configuration
//! (`flight-server/src/config.rs`) is these plus the service's own settings (listen
//! address, TLS, authentication, metrics, admission of calls), which
//! [`DAEMON_SETTINGS`] names so that the embedded mode can refuse them by name.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use shoal_core::table::DurabilityPolicy;

/// The engine's settings (the catalog's, the operations' and every new table's defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Directory of the tables' segment files. Default `./shoal-data`.
    pub data_dir: PathBuf,
    /// Keep tables in memory only (null device): a table holds what its page ring holds
    /// and refuses batches beyond it (`RESOURCE_EXHAUSTED`). Default false.
    pub in_memory: bool,
    /// Default memory budget of each table's log ring, in bytes. Default 256 MiB.
    pub memory_budget_bytes: usize,
    /// Default durability of new tables: `none`, `group_commit`, `fsync` or `remote` (with
    /// the daemon's `[storage] remote`). Default `none`.
    pub durability: Durability,
    /// Interval of `group_commit`, in milliseconds. Default 5.
    pub group_commit_ms: u64,
    /// Seconds between automatic checkpoints of every table (0: only on demand and at
    /// shutdown). Default 60.
    pub checkpoint_interval_secs: u64,
    /// Seconds between applications of the tables' retention policies (`create_table`'s
    /// `retention`; 0: never). Default 30.
    pub retention_check_secs: u64,
    /// Most endpoints (parallel log ranges) per query plan. Default 4.
    pub endpoints_per_query: usize,
    /// Rows per Arrow batch of a scan's result. Default 4096.
    pub batch_rows: usize,
    /// Most tables this engine serves. Default 1024.
    pub max_tables: usize,
    /// Most memory the tables' page rings and hash indexes may reserve together, in bytes
    /// (`create_table` beyond it is refused). 0: three quarters of the machine's physical
    /// memory. Default 0.
    pub max_memory_bytes: u64,
    /// Default settings of new tables' columnar tier (section `[columnar]`: `enabled`,
    /// `file_log_bytes`, `row_group_rows`, `codec`, `idle_ms`, `cache_bytes`). Default: on, 64 MiB files.
    pub columnar: shoal_core::columnar::ColumnarConfig,
    /// The interval of durability `remote`, in milliseconds, when the tables have a remote
    /// store to be acknowledged by (the daemon's `[storage] remote`, which sets this from
    /// `[storage] remote_commit_ms`); `None`: no remote store, and durability `remote` is
    /// refused. Not a setting of its own.
    #[serde(skip)]
    pub remote_commit_ms: Option<u64>,
    /// Where each table's pages missing from its segment files are read from (the daemon's
    /// remote store, with `[storage] local_cache_bytes`): by table name. `None`: every page
    /// is local. Not a setting of its own.
    #[serde(skip)]
    pub page_sources: Option<PageSources>,
}

/// A table's page source by its name (`None`: every page of it is local).
pub type PageSourceFor = dyn Fn(&str) -> Option<shoal_core::table::PageSourceRef> + Send + Sync;

/// The page source of each table, by name ([`EngineConfig::page_sources`]).
#[derive(Clone)]
pub struct PageSources(pub std::sync::Arc<PageSourceFor>);

impl std::fmt::Debug for PageSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageSources")
    }
}

/// The settings of the daemon's Flight service that the engine does not take (the
/// embedded mode refuses them by name): `flight-server`'s `ServerConfig` has exactly
/// these besides [`EngineConfig`]'s (its tests check).
pub const DAEMON_SETTINGS: &[&str] = &[
    "listen",
    "cluster",
    "worker_threads",
    "auth_token",
    "auth_token_file",
    "basic_auth",
    "metrics_listen",
    "tls_cert",
    "tls_key",
    "shutdown_grace_secs",
    "max_concurrent_scans",
    "max_concurrent_puts",
    "scan_wait_timeout_ms",
    "stream_idle_timeout_secs",
    "handshake_timeout_secs",
    "max_streams_per_connection",
    "storage",
];

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./shoal-data"),
            in_memory: false,
            memory_budget_bytes: 256 << 20,
            durability: Durability::None,
            group_commit_ms: 5,
            checkpoint_interval_secs: 60,
            retention_check_secs: 30,
            endpoints_per_query: 4,
            batch_rows: 4096,
            max_tables: 1024,
            max_memory_bytes: 0,
            columnar: shoal_core::columnar::ColumnarConfig::default(),
            remote_commit_ms: None,
            page_sources: None,
        }
    }
}

/// A durability policy by name (see `shoal_core::table::DurabilityPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Acknowledged means accepted; pages are written as they fill, unsynced.
    #[default]
    None,
    /// Acknowledged once durable; the log's prefix is written and synced every interval.
    GroupCommit,
    /// Acknowledged once durable; every batch is written and synced at once.
    Fsync,
    /// Acknowledged once in the daemon's remote store (`[storage] remote`): the log's
    /// prefix is uploaded every `remote_commit_ms`.
    Remote,
}

impl Durability {
    /// Every policy, in the order of their names in [`Durability::NAMES`].
    pub const ALL: [Self; 4] = [Self::None, Self::GroupCommit, Self::Fsync, Self::Remote];
    /// The policies' names (`none`, `group_commit`, `fsync`, `remote`).
    pub const NAMES: [&'static str; 4] = ["none", "group_commit", "fsync", "remote"];

    /// The engine's policy, with `group_commit_ms` for group commit and `remote_commit_ms`
    /// for remote.
    #[must_use]
    pub fn policy(self, group_commit_ms: u64, remote_commit_ms: u64) -> DurabilityPolicy {
        match self {
            Self::None => DurabilityPolicy::None,
            Self::GroupCommit => DurabilityPolicy::GroupCommit { interval_ms: group_commit_ms.max(1) },
            Self::Fsync => DurabilityPolicy::Fsync,
            Self::Remote => DurabilityPolicy::Remote { interval_ms: remote_commit_ms.max(1) },
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| format!("unknown durability {name:?}: one of none, group_commit, fsync, remote"))
    }
}

/// The largest `group_commit_ms`: one hour (a longer interval would leave acknowledged
/// batches waiting that long).
pub const MAX_GROUP_COMMIT_MS: u64 = 3_600_000;
/// The largest `checkpoint_interval_secs`: one week.
pub const MAX_CHECKPOINT_INTERVAL_SECS: u64 = 7 * 24 * 3600;
/// The largest `endpoints_per_query`.
pub const MAX_ENDPOINTS_PER_QUERY: usize = 1024;
/// The largest `batch_rows`.
pub const MAX_BATCH_ROWS: usize = 1 << 20;
/// The largest `max_tables`.
pub const MAX_TABLES: usize = 1 << 20;
/// The smallest `memory_budget_bytes`: 1 MiB (the log rounds it to at least 4 pages).
pub const MIN_MEMORY_BUDGET_BYTES: usize = 1 << 20;
/// The largest `memory_budget_bytes`: 1 TiB.
pub const MAX_MEMORY_BUDGET_BYTES: usize = 1 << 40;

impl EngineConfig {
    /// Checks that every setting is within its documented range (`docs/configuration.md`),
    /// so that a value that would hang or break the engine stops it at start instead.
    ///
    /// # Errors
    /// A message naming the first setting out of range, its value and the range.
    pub fn validate(&self) -> Result<(), String> {
        check_range("group_commit_ms", self.group_commit_ms, 1, MAX_GROUP_COMMIT_MS, " milliseconds")?;
        check_range("checkpoint_interval_secs", self.checkpoint_interval_secs, 0, MAX_CHECKPOINT_INTERVAL_SECS, " seconds")?;
        check_range("retention_check_secs", self.retention_check_secs, 0, MAX_CHECKPOINT_INTERVAL_SECS, " seconds")?;
        check_range("endpoints_per_query", self.endpoints_per_query, 1, MAX_ENDPOINTS_PER_QUERY, "")?;
        check_range("batch_rows", self.batch_rows, 1, MAX_BATCH_ROWS, " rows")?;
        check_range("memory_budget_bytes", self.memory_budget_bytes, MIN_MEMORY_BUDGET_BYTES, MAX_MEMORY_BUDGET_BYTES, " bytes")?;
        check_range("max_tables", self.max_tables, 1, MAX_TABLES, "")?;
        check_range("columnar.file_log_bytes", self.columnar.file_log_bytes, 1, 1 << 40, " bytes")?;
        check_range("columnar.row_group_rows", self.columnar.row_group_rows, 1, 1 << 24, " rows")?;
        check_range("columnar.idle_ms", self.columnar.idle_ms, 0, 3_600_000, " milliseconds")?;
        check_range("columnar.cache_bytes", self.columnar.cache_bytes, 0, MAX_MEMORY_BUDGET_BYTES as u64, " bytes")?;
        check_range("columnar.threads", self.columnar.threads, 1, shoal_core::columnar::MAX_COMPACTOR_THREADS, " threads")?;
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
}

/// Checks that setting `key`'s `value` is within `min..=max` (`unit` follows the bounds
/// in the message).
///
/// # Errors
/// A message naming the setting, its value and the range.
pub fn check_range<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T, max: T, unit: &str) -> Result<(), String> {
    if value < min || value > max {
        return Err(format!("{key} = {value} is out of range: it must be between {min} and {max}{unit}"));
    }
    Ok(())
}
