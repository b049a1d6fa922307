//! The local disk as a bounded cache of the remote store (`[storage] local_cache_bytes`,
//! issue 47): each table's log pages are read from the store's page runs when they are not
//! in its segment files ([`RemotePages`], the engine's [`PageSource`]), and pages the store
//! holds are evicted from the segment files while they take more than the budget
//! ([`evict_to_budget`]; the engine picks them by CLOCK: `shoal_core::log::cache`).
//!
//! A table opened from the store with a cache is restored without its page runs (only its
//! files and the open page's chunks): recovery and reads fetch the pages they need. Every
//! table the store keeps has its [`RemotePages`] as page source, with or without a cache: a
//! page damaged on the local disk is replaced by the store's copy.

use std::ops::Range;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use shoal_core::table::{PageSource, Table};

use super::manifest::{self, PageRun};

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
}

impl RemotePages {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, root: Path, table: &str) -> Self {
        Self { store, root, table: table.to_owned(), runs: RwLock::new(Vec::new()) }
    }

    /// The runs a manifest names, from now on (set before the engine is told that the
    /// store holds them: pages are evicted only below that).
    pub(crate) fn set_runs(&self, runs: &[PageRun]) {
        let mut sorted = runs.to_vec();
        sorted.sort_by_key(|r| r.first);
        *self.runs.write().unwrap_or_else(std::sync::PoisonError::into_inner) = sorted;
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
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        fetch_runtime().spawn(async move {
            let _ = sender.send(store.get_range(&at, range).await);
        });
        let bytes = match receiver.recv_timeout(FETCH_TIMEOUT) {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => return Err(format!("table {:?}: reading {path}: {e}", self.table)),
            Err(_) => return Err(format!("table {:?}: reading {path}: no answer within {} s", self.table, FETCH_TIMEOUT.as_secs())),
        };
        if bytes.len() != buf.len() {
            return Err(format!("table {:?}: {path} holds {} bytes of page {page}, not {}", self.table, bytes.len(), buf.len()));
        }
        buf.copy_from_slice(&bytes);
        tracing::debug!(table = %self.table, page, object = %path, "remote store: page fetched");
        Ok(true)
    }
}

/// Evicts pages the remote store holds from the tables' segment files until they take at
/// most `budget` bytes together (each table in turn gives up what is over the budget;
/// pages not yet in the store, and the open page, stay). Returns the bytes the files take
/// after. Blocking (file system calls).
pub(crate) fn evict_to_budget(tables: &[Arc<Table>], budget: u64) -> u64 {
    let sizes: Vec<u64> = tables.iter().map(|t| t.log_disk_bytes().unwrap_or(0)).collect();
    let mut total: u64 = sizes.iter().sum();
    for table in tables {
        if total <= budget {
            break;
        }
        let page_size = 1u64 << table.config().log.page_size_bits;
        match table.evict_cached_pages((total - budget).div_ceil(page_size)) {
            Ok(pages) => total = total.saturating_sub(pages * page_size),
            Err(e) => {
                tracing::warn!(error = %e, "remote store: cannot evict pages from the local cache")
            }
        }
    }
    total
}
