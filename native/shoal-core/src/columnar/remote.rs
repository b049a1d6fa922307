//! Columnar files kept in a remote copy of the table (issue 47, "open anywhere": columnar
//! files fetched on demand into the bounded local cache). With a page source in the log's
//! config ([`crate::log::PageSource`], the daemon's remote store), the files of `columnar/`
//! are a cache of the source's copies, like the segment files of its pages:
//!
//! - at open, a file the manifest lists that is not here (a table opened from the store
//!   with an empty directory, or a file evicted before a restart) is fetched once to read
//!   its footer (statistics, layout) and block checksums, and not written here;
//! - a scan that reads a file that is not here fetches it, checks its length and CRC-32
//!   against the manifest's (a damaged copy is [`Error::Columnar`], never read), writes it
//!   at its place (temporary name, then rename) and reads it; every read of it is then
//!   checked in blocks as for any file ([`super::verified`]);
//! - eviction ([`ColumnarStore::evict_files`]) deletes the least recently read files the
//!   source holds, until enough bytes are freed; they are fetched again when read.
//!
//! The file list and the manifest do not change: an evicted file is still the table's.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{columnar_error, ColumnarFile, ColumnarStore, Source};
use crate::error::{Error, Result};
use crate::log::PageSourceRef;

/// The source of a table's columnar files and its counters (shared by the store and its
/// files).
#[derive(Debug)]
pub(crate) struct RemoteFiles {
    source: PageSourceRef,
    /// Files fetched from the source since the table was opened.
    fetched: AtomicU64,
    /// Files evicted since the table was opened.
    evicted: AtomicU64,
}

/// A clock for "least recently read": each read of a file takes the next tick.
static TICKS: AtomicU64 = AtomicU64::new(1);

pub(crate) fn tick() -> u64 {
    TICKS.fetch_add(1, Ordering::Relaxed)
}

impl RemoteFiles {
    pub(crate) fn new(source: PageSourceRef) -> Self {
        Self { source, fetched: AtomicU64::new(0), evicted: AtomicU64::new(0) }
    }

    /// The bytes of file `name` from the source, checked against the manifest's length and
    /// CRC-32.
    ///
    /// # Errors
    /// [`Error::RemoteUnavailable`] when the source fails; [`Error::Io`] (not found) when it
    /// does not hold the file; [`Error::Columnar`] when its copy differs from the manifest.
    pub(crate) fn fetch(&self, name: &str, path: &Path, parquet_bytes: u64, crc32: u32) -> Result<Vec<u8>> {
        let bytes = self.source.0.fetch_columnar_file(name).map_err(|why| Error::RemoteUnavailable(format!("columnar file {name}: {why}")))?;
        let Some(bytes) = bytes else {
            let missing = std::io::Error::new(std::io::ErrorKind::NotFound, format!("columnar file {name} is neither here nor in the remote copy"));
            return Err(Error::io(path, missing));
        };
        if bytes.len() as u64 != parquet_bytes || crc32fast::hash(&bytes) != crc32 {
            return Err(columnar_error(name, "as fetched from the remote copy: size or checksum differs from the manifest"));
        }
        self.fetched.fetch_add(1, Ordering::Relaxed);
        Ok(bytes)
    }
}

/// Writes `bytes` as `path` (a temporary name in its directory, then renamed: a reader sees
/// the whole file or none; not synced, the source keeps the copy).
fn write_fetched(path: &Path, bytes: &[u8]) -> Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let temporary = path.with_extension(format!("fetching-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&temporary, bytes).map_err(|e| Error::io(&temporary, e))?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        Error::io(path, e)
    })
}

impl ColumnarFile {
    /// Opens the file at `path` for a read, fetching it from the source first when it is
    /// not here (evicted, or never fetched since the table was opened from its copy).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; the fetch's errors ([`RemoteFiles::fetch`]).
    pub(crate) fn open_local(&self, path: &Path) -> Result<std::fs::File> {
        self.last_read.store(tick(), Ordering::Relaxed);
        // A file evicted between its fetch and the open is fetched again (it was just read,
        // so eviction takes others first: this loops at most a few times).
        for _ in 0..4 {
            match std::fs::File::open(path) {
                Ok(file) => return Ok(file),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let Some(remote) = &self.remote else { return Err(Error::io(path, e)) };
                    let bytes = remote.fetch(&self.name, path, self.parquet_bytes, self.crc32)?;
                    write_fetched(path, &bytes)?;
                    tracing::debug!(file = %self.name, bytes = bytes.len(), "columnar file fetched from the remote copy");
                }
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        std::fs::File::open(path).map_err(|e| Error::io(path, e))
    }
}

/// What [`ColumnarStore::evict_files`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvictedFiles {
    /// Files deleted here.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl ColumnarStore {
    /// The bytes of `entry`'s file fetched from the source, when the store has one and the
    /// local copy could not be used (missing or damaged): the file is loaded from them. A
    /// damaged local copy is replaced by them; a missing one stays missing until read.
    pub(crate) fn fetch_at_open(&self, name: &str, path: &Path, parquet_bytes: u64, crc32: u32) -> Option<Result<Vec<u8>>> {
        let remote = self.remote.as_ref()?;
        Some(remote.fetch(name, path, parquet_bytes, crc32).and_then(|bytes| {
            if path.exists() {
                tracing::warn!(file = %name, "a damaged columnar file was replaced by the remote copy");
                write_fetched(path, &bytes)?;
            }
            Ok(bytes)
        }))
    }

    /// Deletes the least recently read files the source holds until `max_bytes` are freed
    /// (or none is left to delete); they are fetched again when read. Nothing without a
    /// source.
    ///
    /// # Errors
    /// [`Error::Io`] naming a file that could not be deleted.
    pub(crate) fn evict_files(&self, max_bytes: u64) -> Result<EvictedFiles> {
        let (Some(remote), Some(dir)) = (&self.remote, &self.dir) else { return Ok(EvictedFiles::default()) };
        let mut candidates: Vec<(u64, String, u64)> = self
            .files()
            .iter()
            .filter(|f| matches!(f.source, Source::File(_)) && remote.source.0.holds_columnar_file(&f.name, f.crc32))
            .filter_map(|f| std::fs::metadata(dir.join(&f.name)).ok().map(|m| (f.last_read.load(Ordering::Relaxed), f.name.clone(), m.len())))
            .collect();
        candidates.sort_unstable();
        let mut evicted = EvictedFiles::default();
        for (_, name, len) in candidates {
            if evicted.bytes >= max_bytes {
                break;
            }
            let path = dir.join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    evicted.files += 1;
                    evicted.bytes += len;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        remote.evicted.fetch_add(evicted.files, Ordering::Relaxed);
        Ok(evicted)
    }

    /// Bytes the files take on the local disk.
    pub(crate) fn disk_bytes(&self) -> u64 {
        let Some(dir) = &self.dir else { return 0 };
        self.files().iter().filter_map(|f| std::fs::metadata(dir.join(&f.name)).ok()).map(|m| m.len()).sum()
    }

    /// Files fetched from the source and evicted since the table was opened (`None`
    /// without a source).
    pub(crate) fn cache_counts(&self) -> Option<(u64, u64)> {
        self.remote.as_ref().map(|r| (r.fetched.load(Ordering::Relaxed), r.evicted.load(Ordering::Relaxed)))
    }
}
