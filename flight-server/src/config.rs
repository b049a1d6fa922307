//! Server configuration: defaults, a TOML file, then environment variables and flags
//! (in increasing precedence). Every key is documented in `docs/configuration.md`. The
//! file is flat: the engine's settings ([`EngineConfig`], shared with the embedded mode)
//! and the Flight service's own, side by side.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
pub use shoal_ops::config::{check_range, Durability, EngineConfig};

/// The daemon's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct ServerConfig {
    /// Address of the Flight service, `HOST:PORT` (an IP address or a host name, resolved
    /// at start: [`socket_address`]). Default `127.0.0.1:50051`.
    #[serde(deserialize_with = "deserialize_socket_address")]
    pub listen: SocketAddr,
    /// The engine's settings (data directory, table defaults and bounds).
    #[serde(flatten)]
    pub engine: EngineConfig,
    /// Tokio worker threads (0 = one per core). Default 0.
    pub worker_threads: usize,
    /// If set, calls may authenticate with `authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// `USER:PASSWORD`: if set, calls may authenticate with HTTP basic credentials, and a
    /// Flight handshake with them returns a session bearer token.
    pub basic_auth: Option<String>,
    /// Address of the Prometheus metrics endpoint (`/metrics`), `HOST:PORT` as `listen`;
    /// unset: no endpoint.
    #[serde(deserialize_with = "deserialize_optional_socket_address")]
    pub metrics_listen: Option<SocketAddr>,
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
    /// Most scans (`DoGet`) that run at once; more wait up to `scan_wait_timeout_ms` for a
    /// place, in the order they came, then are refused (`RESOURCE_EXHAUSTED`). Each holds a
    /// blocking thread. One connection runs at most half of them. Default 64.
    pub max_concurrent_scans: usize,
    /// Most `DoPut` streams ingesting at once (a stream holds a place while a batch of it is
    /// in flight, not while it is silent); more wait up to 30 s, likewise. One connection
    /// holds at most half of them. Default 64.
    pub max_concurrent_puts: usize,
    /// Milliseconds a scan waits for a place among the running ones before
    /// `RESOURCE_EXHAUSTED` naming `max_concurrent_scans`. Default 30000.
    pub scan_wait_timeout_ms: u64,
    /// Seconds a stream may send (`DoPut`) or read (`DoGet`; `DoPut`'s results) nothing
    /// before it is ended with `DEADLINE_EXCEEDED` and its place goes to the next call; 0:
    /// never. Default 30.
    pub stream_idle_timeout_secs: u64,
    /// Seconds a new connection has to send its first 24 bytes (the HTTP/2 preface, or a TLS
    /// hello) before it is closed. Default 10.
    pub handshake_timeout_secs: u64,
    /// Most HTTP/2 streams (calls) one connection has open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`;
    /// a client queues the others). Default 256.
    pub max_streams_per_connection: u32,
    /// The cluster this daemon is a node of (`[cluster]`: `nodes`, `node_id`, `tls_ca`);
    /// default: none (`docs/deployment.md`, "A cluster").
    pub cluster: crate::cluster::ClusterConfig,
    /// The remote store of the tables (`[storage]`: `remote`, `remote_sync_ms`,
    /// `remote_commit_ms`, `local_cache_bytes`); default: none (`docs/deployment.md`, "Object storage").
    pub storage: crate::remote::StorageConfig,
    /// Keys of the file that are no setting (the flattened engine settings leave them
    /// here); [`ServerConfig::validate`] refuses them.
    #[serde(flatten, skip_serializing)]
    unknown: BTreeMap<String, serde::de::IgnoredAny>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            engine: EngineConfig::default(),
            worker_threads: 0,
            auth_token: None,
            basic_auth: None,
            metrics_listen: None,
            tls_cert: None,
            tls_key: None,
            auth_token_file: None,
            shutdown_grace_secs: 10,
            max_concurrent_scans: 64,
            max_concurrent_puts: 64,
            scan_wait_timeout_ms: 30_000,
            stream_idle_timeout_secs: 30,
            handshake_timeout_secs: 10,
            max_streams_per_connection: 256,
            cluster: crate::cluster::ClusterConfig::default(),
            storage: crate::remote::StorageConfig::default(),
            unknown: BTreeMap::new(),
        }
    }
}

/// A listen address from `HOST:PORT`: an IP address (`127.0.0.1:50051`, `[::1]:50051`,
/// `0.0.0.0:50051`) or a host name resolved now (`localhost:50051`: its first IPv4 address,
/// else its first address, as clients connecting to the name try IPv4 first).
///
/// # Errors
/// The text and what is wrong: no port, a port that is no number, a name that does not
/// resolve.
pub fn socket_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?} is not HOST:PORT (e.g. 127.0.0.1:50051 or localhost:50051)"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{text:?} is not HOST:PORT (e.g. 127.0.0.1:50051 or localhost:50051): the port must be a number up to 65535"));
    }
    let addresses: Vec<SocketAddr> = text.to_socket_addrs().map_err(|e| format!("cannot resolve {host:?} (in {text:?}): {e}"))?.collect();
    addresses
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addresses.first())
        .copied()
        .ok_or_else(|| format!("{host:?} (in {text:?}) resolves to no address"))
}

fn deserialize_socket_address<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    socket_address(&text).map_err(serde::de::Error::custom)
}

fn deserialize_optional_socket_address<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<SocketAddr>, D::Error> {
    Option::<String>::deserialize(deserializer)?.map(|text| socket_address(&text).map_err(serde::de::Error::custom)).transpose()
}

/// The CLI's parser of a durability name (`none`, `group_commit`, `fsync`; `--help` and
/// shell completions list them).
#[must_use]
pub fn durability_value_parser() -> impl clap::builder::TypedValueParser<Value = Durability> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Durability::NAMES)
        .map(|name| name.parse::<Durability>().expect("a possible value is a durability name"))
}

/// The largest `shutdown_grace_secs`: one hour.
pub const MAX_SHUTDOWN_GRACE_SECS: u64 = 3600;
/// The largest `max_concurrent_scans` and `max_concurrent_puts`: together with the
/// blocking threads they hold, within tokio's pool of 512.
pub const MAX_CONCURRENT_CALLS: usize = 128;
/// The largest `scan_wait_timeout_ms`: one hour.
pub const MAX_WAIT_MS: u64 = 3_600_000;
/// The largest `worker_threads`.
pub const MAX_WORKER_THREADS: usize = 1024;

impl ServerConfig {
    /// Checks that every setting is known and within its documented range
    /// (`docs/configuration.md`), so that a value that would hang or break the daemon
    /// stops it at start instead.
    ///
    /// # Errors
    /// A message naming the first unknown key, or the first setting out of range, its
    /// value and the range.
    pub fn validate(&self) -> Result<(), String> {
        self.check_known_keys()?;
        self.engine.validate()?;
        check_range("shutdown_grace_secs", self.shutdown_grace_secs, 0, MAX_SHUTDOWN_GRACE_SECS, " seconds")?;
        check_range("worker_threads", self.worker_threads, 0, MAX_WORKER_THREADS, " (0: one per core)")?;
        check_range("max_concurrent_scans", self.max_concurrent_scans, 1, MAX_CONCURRENT_CALLS, "")?;
        check_range("max_concurrent_puts", self.max_concurrent_puts, 1, MAX_CONCURRENT_CALLS, "")?;
        check_range("scan_wait_timeout_ms", self.scan_wait_timeout_ms, 0, MAX_WAIT_MS, " milliseconds")?;
        check_range("stream_idle_timeout_secs", self.stream_idle_timeout_secs, 0, MAX_SHUTDOWN_GRACE_SECS, " seconds (0: never)")?;
        check_range("handshake_timeout_secs", self.handshake_timeout_secs, 1, 300, " seconds")?;
        check_range("max_streams_per_connection", u64::from(self.max_streams_per_connection), 1, 65_536, "")?;
        self.cluster.validate()?;
        self.storage.validate()?;
        if self.storage.remote.is_some() && self.engine.in_memory {
            return Err("[storage] remote keeps tables in an object store; it cannot go with --in-memory".into());
        }
        if self.storage.remote.is_none() && self.storage.local_cache_bytes > 0 {
            return Err("[storage] local_cache_bytes bounds a cache of the remote store: set [storage] remote (--remote, SHOAL_REMOTE) too".into());
        }
        if self.storage.remote.is_none() && self.engine.durability == Durability::Remote {
            return Err("durability \"remote\" needs a remote store: set [storage] remote (--remote, SHOAL_REMOTE)".into());
        }
        if self.auth_token.as_deref().is_some_and(str::is_empty) {
            return Err("auth_token is empty: give a token, or none to serve without authentication".into());
        }
        if self.auth_token.is_some() && self.auth_token_file.is_some() {
            return Err("auth_token and auth_token_file are both set: use one".into());
        }
        Ok(())
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
        let config: Self = toml::from_str(&text).map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
        config.check_known_keys().map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
        Ok(config)
    }

    /// Refuses a key of the file that is no setting.
    ///
    /// # Errors
    /// A message naming the first unknown key.
    fn check_known_keys(&self) -> Result<(), String> {
        match self.unknown.keys().next() {
            Some(key) => Err(format!("unknown field `{key}` (the settings are listed in docs/configuration.md)")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon's settings are the engine's plus exactly the ones the embedded mode
    /// refuses by name.
    #[test]
    fn daemon_settings_are_the_servers_beyond_the_engines() {
        let keys = |value: serde_json::Value| value.as_object().unwrap().keys().cloned().collect::<std::collections::BTreeSet<_>>();
        let server = keys(serde_json::to_value(ServerConfig::default()).unwrap());
        let engine = keys(serde_json::to_value(EngineConfig::default()).unwrap());
        assert!(engine.is_subset(&server));
        let daemon: std::collections::BTreeSet<String> = server.difference(&engine).cloned().collect();
        let named: std::collections::BTreeSet<String> = shoal_ops::config::DAEMON_SETTINGS.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(daemon, named);
    }

    #[test]
    fn listen_addresses_take_ip_addresses_and_host_names() {
        assert_eq!(socket_address("127.0.0.1:7000").unwrap(), SocketAddr::from(([127, 0, 0, 1], 7000)));
        assert_eq!(socket_address("[::1]:7000").unwrap().port(), 7000);
        let local = socket_address("localhost:7000").unwrap();
        assert!(local.ip().is_loopback() && local.port() == 7000, "{local}");
        for (text, expected) in [("localhost", "not HOST:PORT"), ("localhost:http", "port must be a number"), (":7000", "not HOST:PORT")] {
            let error = socket_address(text).unwrap_err();
            assert!(error.contains(expected) && error.contains(text), "{text}: {error}");
        }
        let error = socket_address("no-such-host.invalid:7000").unwrap_err();
        assert!(error.contains("cannot resolve \"no-such-host.invalid\""), "{error}");
        let config: ServerConfig = toml::from_str("listen = \"localhost:7001\"\nmetrics_listen = \"localhost:7002\"\n").unwrap();
        assert!(config.listen.ip().is_loopback() && config.metrics_listen.unwrap().port() == 7002);
    }

    #[test]
    fn a_file_sets_engine_and_daemon_keys_and_refuses_unknown_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shoal.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:7000\"\nbatch_rows = 17\nmax_concurrent_puts = 3\n[columnar]\nidle_ms = 9\n").unwrap();
        let config = ServerConfig::from_toml_file(&path).unwrap();
        assert_eq!(config.listen.port(), 7000);
        assert_eq!(config.engine.batch_rows, 17);
        assert_eq!(config.max_concurrent_puts, 3);
        assert_eq!(config.engine.columnar.idle_ms, 9);
        config.validate().unwrap();
        std::fs::write(&path, "batch_rows = 17\nbatch_row = 3\n").unwrap();
        let error = ServerConfig::from_toml_file(&path).unwrap_err();
        assert!(error.contains("unknown field `batch_row`"), "{error}");
        std::fs::write(&path, "[columnar]\nidle = 3\n").unwrap();
        let error = ServerConfig::from_toml_file(&path).unwrap_err();
        assert!(error.contains("idle"), "{error}");
    }
}
