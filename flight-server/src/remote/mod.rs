//! The remote store of tables (issue 47): an object store (S3 or an S3-compatible store,
//! GCS, Azure Blob Storage, a local directory) that holds every table's log, files and
//! manifests, so that a daemon with an empty data directory and the same `[storage]
//! remote` opens the tables again, and two processes never both acknowledge writes to
//! one table.
//!
//! - [`manifest`]: the objects of a table and its owner epoch, committed by conditional
//!   creates (fencing);
//! - [`mirror`]: a table's claim and its upload rounds;
//! - [`restore`]: a table's objects written back into a local directory;
//! - [`cache`]: the local disk as a bounded cache of the store's pages (`local_cache_bytes`);
//! - [`handover`]: a table handed from one node of a cluster to another (`move_shard`);
//! - [`gc`]: the manifests and objects no table needs any more deleted (`shoal gc`).
//!
//! This module ties them to the daemon: [`StorageConfig`] (`[storage]`), [`RemoteStore::open`]
//! (the URL), [`RemoteStore::prepare`] (before the catalog opens: tables restored from the
//! store where the local copy is missing or older) and [`RemoteStore::run`] (one task per
//! table: claim, then a round every `remote_sync_ms`, or every `remote_commit_ms` for
//! tables with durability `remote`).

pub mod cache;
pub mod gc;
pub mod handover;
pub mod manifest;
pub mod mirror;
pub mod restore;

use std::collections::HashMap;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use shoal_core::table::DurabilityPolicy;
use shoal_ops::catalog::{Catalog, TableEntry};

use self::mirror::{LocalState, Mirror, RoundError, LOCAL_STATE_FILE};

/// The daemon's remote store settings (section `[storage]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// The remote store's URL: `s3://bucket/prefix` (credentials, region and endpoint from
    /// the environment as the AWS SDKs take them: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
    /// `AWS_ALLOW_HTTP`, web identity, container and instance credentials),
    /// `gs://bucket/prefix` (`GOOGLE_*`), `az://container/prefix` (`AZURE_*`),
    /// `file:///absolute/path`. Unset: tables live on the local disk only.
    pub remote: Option<String>,
    /// Milliseconds between uploads of the tables with a local durability policy (`none`,
    /// `group_commit`, `fsync`): what a lost disk can cost (`stats`' `remote_lag_bytes`).
    /// Default 1000.
    pub remote_sync_ms: u64,
    /// Milliseconds between uploads of the tables with durability `remote`: a batch is
    /// acknowledged at the upload after it (about one to two intervals, plus the store's
    /// latency). Default 50.
    pub remote_commit_ms: u64,
    /// Most bytes the tables' log pages and columnar files may take on the local disk
    /// together: what the store holds is evicted beyond it (pages first, least recently read
    /// first, then columnar files) and fetched from the store when read again, so tables may
    /// outgrow the disk; a table opened from the store fetches its pages and columnar files
    /// when they are read instead of all at the start. It may be exceeded by what is not yet
    /// uploaded and by what is fetched between two evictions (0.2 s). The tables' other
    /// files (index checkpoints, metadata) are kept whole. 0: everything is kept (the default).
    pub local_cache_bytes: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self { remote: None, remote_sync_ms: 1000, remote_commit_ms: 50, local_cache_bytes: 0 }
    }
}

impl StorageConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// An interval of 0, or a URL of no known scheme.
    pub fn validate(&self) -> Result<(), String> {
        if self.remote_sync_ms == 0 || self.remote_commit_ms == 0 {
            return Err("[storage] remote_sync_ms and remote_commit_ms must be at least 1".into());
        }
        if let Some(url) = &self.remote {
            split_url(url)?;
        }
        Ok(())
    }
}

/// `scheme`, `bucket` (or the directory for `file://`) and the prefix inside it.
fn split_url(url: &str) -> Result<(&str, &str, &str), String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("remote {url:?}: not a URL (s3://bucket/prefix, gs://, az://, file:///path)"))?;
    match scheme {
        "file" => {
            if !rest.starts_with('/') {
                return Err(format!("remote {url:?}: a file:// URL names an absolute directory (file:///path)"));
            }
            Ok((scheme, rest, ""))
        }
        "s3" | "s3a" | "gs" | "az" | "abfs" | "abfss" | "adl" | "azure" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("remote {url:?}: no bucket"));
            }
            Ok((scheme, bucket, prefix.trim_matches('/')))
        }
        "memory" => Ok((scheme, "", rest.trim_matches('/'))),
        other => Err(format!("remote {url:?}: unknown scheme {other:?} (s3, gs, az, file)")),
    }
}

/// The remote store of the daemon's tables.
pub struct RemoteStore {
    store: Arc<dyn ObjectStore>,
    /// The prefix every object of this daemon's tables is under.
    root: Path,
    url: String,
    config: StorageConfig,
    /// Who claims tables: host name, process id, node id.
    owner: String,
    /// The tables mirrored, each by its task.
    mirrors: Mutex<HashMap<String, MirrorTask>>,
    /// Set at shutdown: every task makes a last round, then ends.
    stopping: tokio::sync::watch::Sender<bool>,
    /// A node of a cluster: `<data_dir>/cluster/` (the sharded tables' definitions), kept
    /// under `<root>/cluster/` too, so that a node's replacement on an empty volume has them.
    cluster_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// Length and modification time of each definition when last uploaded.
    cluster_uploaded: Mutex<HashMap<String, (u64, std::time::SystemTime)>>,
    is_node: bool,
    /// Each table's pages in the store, read by its log when not local (with
    /// `local_cache_bytes` only).
    pages: Mutex<HashMap<String, Arc<cache::RemotePages>>>,
    /// The data directory ([`Self::prepare`]'s).
    data_dir: std::sync::OnceLock<std::path::PathBuf>,
}

/// A table's mirror task, and the table it mirrors.
struct MirrorTask {
    entry: Arc<TableEntry>,
    task: tokio::task::JoinHandle<()>,
    /// Rounds the task finished with the store up to date (it ends the channel when it ends).
    rounds: tokio::sync::watch::Receiver<u64>,
    /// Starts the task's next round now.
    wake: Arc<tokio::sync::Notify>,
}

/// What [`RemoteStore::sync_table`] waits for.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// The actions that change a table's files (its metadata, PSFs, retention, existence):
/// answered once the remote store holds the change ([`RemoteStore::sync_table`]).
pub const SYNCED_ACTIONS: &[&str] =
    &["create_table", "drop_table", "alter_table", "register_psf", "deregister_psf", "truncate", "compact", "checkpoint"];

/// The transaction actions whose answer waits for the store on a table with durability
/// `remote` (a prepared transaction's staged records are promised to survive the node).
pub const SYNCED_TRANSACTION_ACTIONS: &[&str] = &["begin_transaction", "prepare_transaction", "commit_transaction", "abort_transaction"];

/// The table whose change action `name` with `body` must wait for the store before it
/// answers ([`RemoteStore::sync_table`]): the [`SYNCED_ACTIONS`] always, the
/// [`SYNCED_TRANSACTION_ACTIONS`] on a table with durability `remote`; `None` otherwise.
#[must_use]
pub fn synced_table(catalog: &Catalog, name: &str, body: &[u8]) -> Option<String> {
    let transaction = SYNCED_TRANSACTION_ACTIONS.contains(&name);
    if !SYNCED_ACTIONS.contains(&name) && !transaction {
        return None;
    }
    let body: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let table = body.get("table").or_else(|| body.get("name")).and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
    if transaction && !catalog.get(&table).is_ok_and(|entry| matches!(entry.table.config().durability, DurabilityPolicy::Remote { .. })) {
        return None;
    }
    Some(table)
}

impl RemoteStore {
    /// Opens the store `config.remote` names (nothing is read yet).
    ///
    /// # Errors
    /// A URL of no known scheme, or settings the store's client refuses.
    /// A node of a cluster (`node`: its id) keeps its tables under `node-<id>/` of the
    /// store's prefix.
    pub fn open(config: &StorageConfig, node: Option<usize>) -> Result<Arc<Self>, String> {
        let url = config.remote.clone().ok_or("no [storage] remote")?;
        let (scheme, bucket, prefix) = split_url(&url)?;
        // reqwest's rustls without a built-in provider: the process's is ring (as tonic's).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let refused = |e: object_store::Error| format!("remote {url:?}: {e}");
        let store: Arc<dyn ObjectStore> = match scheme {
            "file" => {
                std::fs::create_dir_all(bucket).map_err(|e| format!("remote {url:?}: cannot create {bucket}: {e}"))?;
                Arc::new(object_store::local::LocalFileSystem::new_with_prefix(bucket).map_err(refused)?)
            }
            "memory" => Arc::new(object_store::memory::InMemory::new()),
            "s3" | "s3a" => Arc::new(object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str()).build().map_err(refused)?),
            "gs" => Arc::new(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str()).build().map_err(refused)?),
            _ => Arc::new(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str()).build().map_err(refused)?),
        };
        let mut root = Path::parse(prefix).map_err(|e| format!("remote {url:?}: {e}"))?;
        if let Some(node) = node {
            root = root.join(format!("node-{node}").as_str());
        }
        let owner = match node {
            Some(node) => format!("{} pid {} node {node}", crate::cluster::config::host_name(), std::process::id()),
            None => format!("{} pid {}", crate::cluster::config::host_name(), std::process::id()),
        };
        let (stopping, _) = tokio::sync::watch::channel(false);
        Ok(Arc::new(Self {
            store,
            root,
            url,
            config: config.clone(),
            owner,
            mirrors: Mutex::new(HashMap::new()),
            stopping,
            cluster_dir: std::sync::OnceLock::new(),
            cluster_uploaded: Mutex::new(HashMap::new()),
            is_node: node.is_some(),
            pages: Mutex::new(HashMap::new()),
            data_dir: std::sync::OnceLock::new(),
        }))
    }

    /// The store's URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `shoal gc`: the store's garbage collected ([`gc::collect`]).
    ///
    /// # Errors
    /// As [`gc::collect`].
    pub async fn collect_garbage(&self, keep: Duration, dry_run: bool) -> Result<gc::Collected, String> {
        gc::collect(self.store.as_ref(), &self.root, keep, dry_run).await
    }

    /// `shoal restore`: table `target` written in the store as `source` is now or was at
    /// `until` ([`restore::restore_as`]).
    ///
    /// # Errors
    /// As [`restore::restore_as`].
    pub async fn restore_as(&self, source: &str, target: &str, until: Option<u64>) -> Result<restore::Cloned, String> {
        restore::restore_as(self.store.as_ref(), &self.root, source, target, until, &format!("shoal restore ({})", self.owner)).await
    }

    /// Table `name`'s pages in the store, as its log's page source: with `local_cache_bytes`
    /// the pages evicted are read from it; without, the source only repairs (a page recovery
    /// finds damaged or missing locally is taken from the store instead of cutting the log).
    fn remote_pages(&self, name: &str) -> Arc<cache::RemotePages> {
        let mut pages = self.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = pages.entry(name.to_owned()).or_insert_with(|| Arc::new(cache::RemotePages::new(Arc::clone(&self.store), self.root.clone(), name)));
        Arc::clone(entry)
    }

    /// The tables' page sources for the engine ([`shoal_ops::config::EngineConfig::page_sources`]):
    /// every table the store keeps has one ([`Self::remote_pages`]); pages are evicted only
    /// with `local_cache_bytes`.
    #[must_use]
    pub fn page_sources(self: &Arc<Self>) -> shoal_ops::config::PageSources {
        let this = Arc::clone(self);
        shoal_ops::config::PageSources(Arc::new(move |name: &str| {
            Some(shoal_core::table::PageSourceRef(this.remote_pages(name) as Arc<dyn shoal_core::table::PageSource>))
        }))
    }

    fn table_prefix(&self, name: &str) -> Path {
        manifest::table_prefix(&self.root, name)
    }

    /// Before the catalog opens `data_dir`: every table of the store whose local copy is
    /// missing, or of an older owner epoch (another process owned it since), is written
    /// into `data_dir/tables/<name>` from the store ([`restore::restore`]); a table the
    /// store says was dropped is removed locally. Logs what it does.
    ///
    /// # Errors
    /// The store's error, a damaged object (named), the local files', or a table both in
    /// the store and in a local directory that was never kept in a store.
    pub async fn prepare(&self, data_dir: &FsPath) -> Result<(), String> {
        let _ = self.data_dir.set(data_dir.to_path_buf());
        if self.is_node {
            let dir = data_dir.join("cluster");
            self.restore_cluster_definitions(&dir).await?;
            let _ = self.cluster_dir.set(dir);
        }
        let names = manifest::tables(self.store.as_ref(), &self.root).await?;
        let staging = data_dir.join("remote-restore");
        for name in names {
            if shoal_ops::catalog::validate_table_name(&name).is_err() {
                tracing::warn!(table = %name, "remote store: not a table name; skipped");
                continue;
            }
            let prefix = self.table_prefix(&name);
            let Some((seq, latest)) = manifest::latest(self.store.as_ref(), &prefix).await? else { continue };
            let local_dir = data_dir.join("tables").join(&name);
            let has_table = local_dir.join(shoal_core::checkpoint::TABLE_META_FILE).exists();
            let local: Option<LocalState> = if has_table {
                shoal_core::checkpoint::read_json(&local_dir, LOCAL_STATE_FILE).map_err(|e| e.to_string())?
            } else {
                None
            };
            if !latest.dropped {
                self.remote_pages(&name).set(&latest);
            }
            if latest.dropped {
                if local.is_some_and(|l| l.epoch <= latest.epoch) {
                    tracing::info!(table = %name, "remote store: the table was dropped; removing the local copy");
                    std::fs::remove_dir_all(&local_dir).map_err(|e| format!("removing {}: {e}", local_dir.display()))?;
                }
                continue;
            }
            if local.is_some_and(|l| l.epoch >= latest.epoch) {
                continue;
            }
            if local.is_none() && has_table {
                // A table made here before the store was configured, and a table of the same
                // name in the store: neither replaces the other silently.
                return Err(format!(
                    "table {name:?} is both in {} (never kept in a remote store) and in the remote store {}: move the local \
                     directory away to open the store's, or give this daemon another remote prefix",
                    local_dir.display(),
                    self.url
                ));
            }
            tracing::info!(table = %name, epoch = latest.epoch, seq, runs = latest.runs.len(), files = latest.files.len(), "remote store: restoring the table");
            self.restore_table(data_dir, &name, &latest).await?;
        }
        let _ = std::fs::remove_dir(&staging);
        Ok(())
    }

    /// Writes table `name` as `manifest` describes it into `<data_dir>/tables/<name>`, in
    /// place of any local copy: restored into `<data_dir>/remote-restore/<name>` first, then
    /// moved there (a crash part-way leaves the old copy or none, never half a table). With
    /// `local_cache_bytes` the page runs and columnar files stay in the store until read.
    /// Logs what it did.
    ///
    /// # Errors
    /// The store's error, a damaged object (named), or the local files'.
    async fn restore_table(&self, data_dir: &FsPath, name: &str, manifest: &manifest::Manifest) -> Result<restore::Restored, String> {
        let started = std::time::Instant::now();
        let staging = data_dir.join("remote-restore").join(name);
        let local_dir = data_dir.join("tables").join(name);
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(|e| format!("removing {}: {e}", staging.display()))?;
        }
        let restored = restore::restore(self.store.as_ref(), &self.root, manifest, &staging, self.config.local_cache_bytes == 0).await?;
        if local_dir.exists() {
            std::fs::remove_dir_all(&local_dir).map_err(|e| format!("removing {}: {e}", local_dir.display()))?;
        }
        std::fs::create_dir_all(data_dir.join("tables")).map_err(|e| e.to_string())?;
        std::fs::rename(&staging, &local_dir).map_err(|e| format!("moving {} to {}: {e}", staging.display(), local_dir.display()))?;
        tracing::info!(
            table = %name,
            objects = restored.objects,
            bytes = restored.bytes,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "remote store: table restored"
        );
        Ok(restored)
    }

    /// A node's sharded tables' definitions missing from `dir`, from the store.
    async fn restore_cluster_definitions(&self, dir: &FsPath) -> Result<(), String> {
        use futures::TryStreamExt;
        let prefix = self.root.clone().join("cluster");
        let listed: Vec<object_store::ObjectMeta> =
            self.store.list(Some(&prefix)).try_collect().await.map_err(|e| format!("listing {prefix}: {e}"))?;
        for meta in listed {
            let Some(name) = meta.location.filename().filter(|n| n.ends_with(".json") && !n.contains('/')) else { continue };
            let path = dir.join(name);
            if path.exists() {
                continue;
            }
            let bytes = manifest::get(self.store.as_ref(), &meta.location).await?;
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            std::fs::write(&path, &bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
            tracing::info!(file = %path.display(), "remote store: a sharded table's definition restored");
        }
        Ok(())
    }

    /// Uploads the definitions of `<data_dir>/cluster/` that changed, and deletes those gone.
    pub(crate) async fn upload_cluster_definitions(&self) -> Result<(), String> {
        let Some(dir) = self.cluster_dir.get() else { return Ok(()) };
        let mut present = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Ok(metadata) = entry.metadata() else { continue };
                if !metadata.is_file() || !name.ends_with(".json") {
                    continue;
                }
                let stamp = (metadata.len(), metadata.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH));
                present.push(name.clone());
                let unchanged = self.cluster_uploaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&name) == Some(&stamp);
                if unchanged {
                    continue;
                }
                let Ok(bytes) = std::fs::read(entry.path()) else { continue };
                manifest::put(self.store.as_ref(), &self.root.clone().join("cluster").join(name.as_str()), bytes.into()).await?;
                self.cluster_uploaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name, stamp);
            }
        }
        let gone: Vec<String> = {
            let uploaded = self.cluster_uploaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            uploaded.keys().filter(|name| !present.contains(name)).cloned().collect()
        };
        for name in gone {
            let path = self.root.clone().join("cluster").join(name.as_str());
            self.store.delete(&path).await.map_err(|e| format!("deleting {path}: {e}"))?;
            self.cluster_uploaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&name);
        }
        Ok(())
    }

    /// Mirrors the catalog's tables until [`Self::stop`]: starts a task for every on-disk
    /// table that has none (and for tables created later), each claiming its table and
    /// then uploading at its interval.
    pub async fn run(self: Arc<Self>, catalog: Arc<Catalog>) {
        let mut stopping = self.stopping.subscribe();
        loop {
            for entry in catalog.list() {
                self.ensure_mirror(&catalog, &entry);
            }
            if let Err(e) = self.upload_cluster_definitions().await {
                tracing::warn!(error = %e, "remote store: cannot upload the sharded tables' definitions");
            }
            if self.config.local_cache_bytes > 0 {
                let tables: Vec<_> = catalog.list().into_iter().map(|entry| Arc::clone(&entry.table)).collect();
                let budget = self.config.local_cache_bytes;
                let _ = tokio::task::spawn_blocking(move || cache::evict_to_budget(&tables, budget)).await;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stopping.changed() => return,
            }
        }
    }

    /// Starts the mirror task of `entry` unless it has one; returns its rounds and wake-up
    /// (`None` for an in-memory table).
    fn ensure_mirror(self: &Arc<Self>, catalog: &Arc<Catalog>, entry: &Arc<TableEntry>) -> Option<(tokio::sync::watch::Receiver<u64>, Arc<tokio::sync::Notify>)> {
        entry.table.directory()?;
        let mut mirrors = self.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A dropped table's task may still be recording the drop: the new one waits for it.
        let current = mirrors.get(&entry.name).filter(|m| Arc::ptr_eq(&m.entry, entry) || !m.task.is_finished());
        if let Some(m) = current {
            return Arc::ptr_eq(&m.entry, entry).then(|| (m.rounds.clone(), Arc::clone(&m.wake)));
        }
        let (rounds_sender, rounds) = tokio::sync::watch::channel(0);
        let wake = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(Arc::clone(self).mirror_table(Arc::clone(catalog), Arc::clone(entry), rounds_sender, Arc::clone(&wake)));
        mirrors.insert(entry.name.clone(), MirrorTask { entry: Arc::clone(entry), task, rounds: rounds.clone(), wake: Arc::clone(&wake) });
        Some((rounds, wake))
    }

    /// Waits until the store holds table `name` as it is now (a round that began after
    /// this call finished with the store up to date), or, for a dropped table, until its
    /// drop is recorded: what an action that changed the table's files (`create_table`,
    /// `register_psf`, `drop_table`, ... [`SYNCED_ACTIONS`]) waits for before it answers.
    ///
    /// # Errors
    /// `UNAVAILABLE` naming the store's failure when the store did not take the change
    /// within 60 s; `FAILED_PRECONDITION` when the table was fenced.
    pub async fn sync_table(self: &Arc<Self>, catalog: &Arc<Catalog>, name: &str) -> Result<(), tonic::Status> {
        let waited = match catalog.get(name) {
            Ok(entry) => {
                if entry.table.directory().is_none() {
                    return Ok(());
                }
                // A table of this name dropped just before: its task records the drop first.
                let started = std::time::Instant::now();
                let waited = loop {
                    if let Some(waited) = self.ensure_mirror(catalog, &entry) {
                        break waited;
                    }
                    if started.elapsed() >= SYNC_TIMEOUT {
                        return Err(tonic::Status::unavailable(format!("table {name:?}: the remote store did not record the drop of its predecessor")));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                Some((waited, entry))
            }
            // Dropped: its task records the drop and ends.
            Err(_) => {
                let mirrors = self.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                mirrors.get(name).map(|m| ((m.rounds.clone(), Arc::clone(&m.wake)), Arc::clone(&m.entry)))
            }
        };
        let Some(((mut rounds, wake), entry)) = waited else { return Ok(()) };
        let dropped = catalog.get(name).map_or(true, |current| !Arc::ptr_eq(&current, &entry));
        // A round under way may have read the files before the change: wait for the next.
        let target = *rounds.borrow_and_update() + 2;
        wake.notify_one();
        let waiting = async {
            loop {
                if *rounds.borrow_and_update() >= target {
                    return Ok(());
                }
                if rounds.changed().await.is_err() {
                    // The task ended: a drop recorded, or a fence.
                    return match entry.table.fenced() {
                        Some(reason) => Err(tonic::Status::failed_precondition(format!("table {name:?}: {reason}"))),
                        None if dropped => Ok(()),
                        None => Err(tonic::Status::unavailable(format!("table {name:?}: its remote store mirror ended"))),
                    };
                }
                wake.notify_one();
            }
        };
        match tokio::time::timeout(SYNC_TIMEOUT, waiting).await {
            Ok(result) => result,
            Err(_) => Err(tonic::Status::unavailable(format!(
                "table {name:?}: the change is made here, but the remote store ({}) did not take it within {} s{}; it is uploaded when the store is back",
                self.url,
                SYNC_TIMEOUT.as_secs(),
                entry.table.stats().remote_lag_bytes.map_or(String::new(), |lag| format!(" ({lag} bytes of log not uploaded)"))
            ))),
        }
    }

    /// Tells every mirror task to make its last round and end, and waits for them (at most
    /// `timeout`).
    pub async fn stop(&self, timeout: Duration) {
        let _ = self.stopping.send(true);
        if let Err(e) = self.upload_cluster_definitions().await {
            tracing::warn!(error = %e, "remote store: cannot upload the sharded tables' definitions");
        }
        let tasks: Vec<_> = self.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain().map(|(_, m)| m.task).collect();
        if tokio::time::timeout(timeout, futures::future::join_all(tasks)).await.is_err() {
            tracing::warn!(timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX), "remote store: uploads still running at shutdown were abandoned");
        }
    }

    /// One table's task: its claim, then rounds until the table is dropped (then a
    /// manifest saying so), fenced, or the daemon stops (then a last round).
    async fn mirror_table(
        self: Arc<Self>,
        catalog: Arc<Catalog>,
        entry: Arc<TableEntry>,
        finished: tokio::sync::watch::Sender<u64>,
        wake: Arc<tokio::sync::Notify>,
    ) {
        let name = entry.name.clone();
        let table = Arc::clone(&entry.table);
        let interval = Duration::from_millis(match table.config().durability {
            DurabilityPolicy::Remote { .. } => self.config.remote_commit_ms,
            _ => self.config.remote_sync_ms,
        });
        let mut stopping = self.stopping.subscribe();
        let mut backoff = interval;
        let mut mirror = loop {
            match Mirror::claim(Arc::clone(&self.store), self.root.clone(), &name, Arc::clone(&table), &self.owner).await {
                Ok(mirror) => break mirror,
                Err(e) => {
                    tracing::warn!(table = %name, error = %e, retry_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX), "remote store: cannot claim the table");
                    table.set_remote_failure(Some(e));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = wake.notified() => {}
                _ = stopping.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        };
        table.set_remote_failure(None);
        mirror.publish_to(self.remote_pages(&name));
        backoff = interval;
        loop {
            let last = tokio::select! {
                () = tokio::time::sleep(backoff) => *stopping.borrow(),
                () = wake.notified() => *stopping.borrow(),
                _ = stopping.changed() => true,
            };
            if !catalog.get(&name).is_ok_and(|current| Arc::ptr_eq(&current, &entry)) {
                match mirror.dropped().await {
                    Ok(()) => tracing::info!(table = %name, "remote store: table dropped"),
                    Err(e) => tracing::warn!(table = %name, error = ?e, "remote store: cannot record the drop"),
                }
                return;
            }
            // Round after round while each commits (a backlog; at shutdown, everything),
            // then wait again.
            let mut rounds = 0;
            let result = loop {
                rounds += 1;
                match mirror.round().await {
                    Ok(true) if rounds < if last { 10_000 } else { 16 } => {}
                    Ok(_) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            match result {
                Ok(()) => {
                    table.set_remote_failure(None);
                    backoff = interval;
                    finished.send_modify(|n| *n += 1);
                }
                Err(RoundError::Fenced(reason)) => {
                    tracing::warn!(table = %name, %reason, "remote store: the table is fenced");
                    table.fence(reason);
                    return;
                }
                Err(RoundError::Failed(e)) => {
                    tracing::warn!(table = %name, error = %e, "remote store: upload failed; retrying");
                    table.set_remote_failure(Some(e));
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
            if last {
                return;
            }
        }
    }
}
