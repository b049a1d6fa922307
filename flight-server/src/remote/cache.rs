//! The local disk as a bounded cache of the remote store (`[storage] local_cache_bytes`,
//! issue 47): each table's log pages and columnar files are read from the store when they
//! are not on the local disk ([`RemotePages`], the engine's [`PageSource`]: a page from its
//! page run, a columnar file whole), and what the store holds is evicted while the local
//! disk holds more than the budget ([`evict_to_budget`]: pages first, chosen by CLOCK in
//! `shoal_core::log::cache`, then the least recently read columnar files).
//!
//! A table opened from the store with a cache is restored without its page runs and its
//! columnar files (only its other files and the open page's chunks): recovery and reads fetch
//! what they need (the columnar files' footers once at the open, each file whole when a scan
//! reads it). Every table the store keeps has its [`RemotePages`] as page source, with or
//! without a cache: a page damaged on the local disk is replaced by the store's copy.

use std::ops::Range;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use shoal_core::table::{PageSource, Table};

use super::manifest::{self, FileObject, Manifest, PageRun};

/// How long a page fetch may take before the read fails (the store's client retries
/// within it).
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);

/// The runtime page fetches run on: the engine's reads are synchronous and may run on the
/// daemon's own runtime threads, which must not wait on tasks of their own runtime. Never
/// dropped (a runtime dropped inside another's context panics).
fn fetch_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("shoal-fetch").enable_all().build().expect("the page fetch runtime starts")
    })
}

/// One table's log pages in the remote store: the page runs of its newest manifest this
/// process knows (set by the start's restore and by every manifest its mirror commits).
pub struct RemotePages {
    store: Arc<dyn ObjectStore>,
    /// The store's prefix (manifests name objects relative to it).
    root: Path,
    table: String,
    /// Sorted by first page, not overlapping.
    runs: RwLock<Vec<PageRun>>,
    /// The columnar files (`columnar/<name>`), by name in `columnar/`.
    columnar: RwLock<std::collections::BTreeMap<String, FileObject>>,
}

impl RemotePages {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, root: Path, table: &str) -> Self {
        Self { store, root, table: table.to_owned(), runs: RwLock::new(Vec::new()), columnar: RwLock::new(std::collections::BTreeMap::new()) }
    }

    /// The runs and columnar files `manifest` names, from now on (set before the engine is
    /// told that the store holds them: pages are evicted only below that).
    pub(crate) fn set(&self, manifest: &Manifest) {
        let mut sorted = manifest.runs.clone();
        sorted.sort_by_key(|r| r.first);
        *self.runs.write().unwrap_or_else(std::sync::PoisonError::into_inner) = sorted;
        let files = manifest.files.iter().filter_map(|(name, file)| Some((name.strip_prefix(COLUMNAR_DIR)?.to_owned(), file.clone()))).collect();
        *self.columnar.write().unwrap_or_else(std::sync::PoisonError::into_inner) = files;
    }

    /// Runs `get` on the fetch runtime and waits for it (up to [`FETCH_TIMEOUT`]).
    fn wait_for<T: Send + 'static>(&self, path: &Path, get: impl std::future::Future<Output = Result<T, String>> + Send + 'static) -> Result<T, String> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        fetch_runtime().spawn(async move {
            let _ = sender.send(get.await);
        });
        match receiver.recv_timeout(FETCH_TIMEOUT) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(format!("table {:?}: reading {path}: {e}", self.table)),
            Err(_) => Err(format!("table {:?}: reading {path}: no answer within {} s", self.table, FETCH_TIMEOUT.as_secs())),
        }
    }

    /// The run holding `page` and the byte range of the page in its object.
    fn locate(&self, page: u64, page_size: u64) -> Option<(Path, Range<u64>)> {
        let runs = self.runs.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = runs.partition_point(|r| r.first <= page).checked_sub(1)?;
        let run = runs.get(at).filter(|r| page < r.end)?;
        let from = (page - run.first) * page_size;
        Some((manifest::object_path(&self.root, &run.object), from..from + page_size))
    }
}

impl PageSource for RemotePages {
    fn fetch_page(&self, page: u64, buf: &mut [u8]) -> Result<bool, String> {
        let page_size = buf.len() as u64;
        let Some((path, range)) = self.locate(page, page_size) else {
            return Ok(false);
        };
        let (store, at) = (Arc::clone(&self.store), path.clone());
        let bytes = self.wait_for(&path, async move { store.get_range(&at, range).await.map_err(|e| e.to_string()) })?;
        if bytes.len() != buf.len() {
            return Err(format!("table {:?}: {path} holds {} bytes of page {page}, not {}", self.table, bytes.len(), buf.len()));
        }
        buf.copy_from_slice(&bytes);
        tracing::debug!(table = %self.table, page, object = %path, "remote store: page fetched");
        Ok(true)
    }

    fn fetch_columnar_file(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let Some(file) = self.columnar.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).cloned() else {
            return Ok(None);
        };
        let path = manifest::object_path(&self.root, &file.object);
        let (store, at) = (Arc::clone(&self.store), path.clone());
        let bytes = self.wait_for(&path, async move { manifest::get_checked(store.as_ref(), &at, file.crc32).await })?;
        tracing::debug!(table = %self.table, file = name, object = %path, bytes = bytes.len(), "remote store: columnar file fetched");
        Ok(Some(bytes.to_vec()))
    }

    fn holds_columnar_file(&self, name: &str, crc32: u32) -> bool {
        self.columnar.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).is_some_and(|file| file.crc32 == crc32)
    }
}

/// Where a table's columnar files are in its directory (and in its manifests' file names).
pub(crate) const COLUMNAR_DIR: &str = "columnar/";

/// Whether `name` (a file of a table's directory) is a columnar data file: kept in the
/// store and fetched when read, with a cache (not the columnar manifest).
pub(crate) fn is_columnar_file(name: &str) -> bool {
    name.strip_prefix(COLUMNAR_DIR).is_some_and(|file| file.ends_with(".parquet"))
}

/// Evicts what the remote store holds from the local disk until the tables' segment files
/// and columnar files take at most `budget` bytes together: pages first (each table in turn
/// gives up what is over the budget; pages not yet in the store, and the open page, stay),
/// then the least recently read columnar files the store holds. Returns the bytes they
/// take after. Blocking (file system calls).
pub(crate) fn evict_to_budget(tables: &[Arc<Table>], budget: u64) -> u64 {
    let sizes: Vec<u64> = tables.iter().map(|t| t.log_disk_bytes().unwrap_or(0) + t.columnar_disk_bytes()).collect();
    let mut total: u64 = sizes.iter().sum();
    for table in tables {
        if total <= budget {
            return total;
        }
        let page_size = 1u64 << table.config().log.page_size_bits;
        match table.evict_cached_pages((total - budget).div_ceil(page_size)) {
            Ok(pages) => total = total.saturating_sub(pages * page_size),
            Err(e) => {
                tracing::warn!(error = %e, "remote store: cannot evict pages from the local cache")
            }
        }
    }
    for table in tables {
        if total <= budget {
            break;
        }
        match table.evict_columnar_files(total - budget) {
            Ok(evicted) => total = total.saturating_sub(evicted.bytes),
            Err(e) => tracing::warn!(error = %e, "remote store: cannot evict columnar files from the local cache"),
        }
    }
    total
}
