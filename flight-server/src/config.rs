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
    /// Keep tables in memory only (null device; evicted pages are lost). Default false.
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

impl ServerConfig {
    /// Reads a TOML file (keys as in this struct; missing keys keep their defaults).
    ///
    /// # Errors
    /// A message naming the file and the key or line that is wrong.
    pub fn from_toml_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("invalid config file {}: {e}", path.display()))
    }
}
