//! One table's mirror into the remote store: its claim (a new owner epoch), then rounds
//! that upload what changed in its directory and commit a manifest naming it.
//!
//! A round reads, in this order: the directory's files other than the log (`table.json`,
//! `checkpoint.json`, index checkpoints, columnar files, backfill runs, transactions; each
//! read again only when its length or modification time changed), then the log's pages
//! from the first one not yet in the store up to the page holding the flushed address
//! (closed pages as runs of whole page images, the open page's proven bytes as a chunk
//! after the part already uploaded: [`shoal_core::table::PageSnapshot`]), then
//! `withdrawn.bin`. Files first, log after: whatever a file names of the log (a
//! checkpoint's end, a columnar file's addresses) was flushed before it was written, so
//! the store holds it too; recovery treats the result as it treats a crash. Each object
//! is written under a name only this owner, manifest number and attempt use
//! (`tables/<name>/data/e<epoch>-s<seq>-a<attempt>/...`), then the manifest is committed with a conditional create
//! ([`super::manifest::commit`]); the engine is told how far the log is in the store
//! ([`Table::advance_remote_durable`]) only after that commit.

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use shoal_core::table::Table;

use super::manifest::{self, Chunk, CommitError, FileObject, Manifest, OpenPage, PageRun};

/// Most pages in one run object (4 MiB pages: 8 MiB objects; 32 MiB objects ingested 0.49× of
/// the S3 server's own PUT rate, 8 MiB ones 0.55×: bench/results/remote-results-1g-2026-11-28.md).
const PAGES_PER_RUN: u64 = 2;
/// Most pages one round reads (a round after a long outage commits in steps).
const PAGES_PER_ROUND: u64 = 64;
/// Most objects one round writes at once.
const CONCURRENT_PUTS: usize = 4;
/// The file of a table's directory that says which owner epoch the local copy is of.
pub const LOCAL_STATE_FILE: &str = "remote.json";
/// The withdrawn-records list, read after the pages.
const WITHDRAWN_FILE: &str = "withdrawn.bin";

/// What the local copy of a table is of (`remote.json`): the epoch it was claimed at.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct LocalState {
    /// The owner epoch this directory was claimed (or restored) at.
    pub epoch: u64,
}

/// A round's failure.
#[derive(Debug)]
pub enum RoundError {
    /// Another owner holds the table ([`CommitError::Fenced`]).
    Fenced(String),
    /// Reading the local files or writing the store failed; the next round retries.
    Failed(String),
}

/// The mirror of one table, after its claim.
pub struct Mirror {
    store: Arc<dyn ObjectStore>,
    /// The store's prefix (objects are named relative to it).
    root: Path,
    /// `root/tables/<name>`.
    prefix: Path,
    table: Arc<Table>,
    dir: PathBuf,
    /// The number of the last manifest committed.
    seq: u64,
    /// The last manifest committed.
    manifest: Manifest,
    /// Length and modification time of each file when it was last uploaded.
    uploaded: BTreeMap<String, (u64, SystemTime)>,
    /// The first page not in a closed run.
    next_page: u64,
    /// [`Table::withdrawn_generation`] when `withdrawn.bin` was last read.
    withdrawn_generation: Option<u64>,
    /// Rounds attempted: part of every object's name, so that a retried round never
    /// overwrites an object a manifest written by an attempt whose answer was lost names.
    attempts: u64,
    /// The table's page source, told of each manifest's runs before the engine is
    /// (`local_cache_bytes`: pages are evicted only below what the engine is told).
    published: Option<Arc<super::cache::RemotePages>>,
}

impl Mirror {
    /// Claims the table: reads its newest manifest, keeps what the local copy agrees with
    /// (the closed runs whose pages the local segment files hold as they are; recovery may
    /// have cut the log's end), and commits the next manifest with the next epoch.
    ///
    /// # Errors
    /// The store's error, or the local files'.
    pub async fn claim(store: Arc<dyn ObjectStore>, root: Path, name: &str, table: Arc<Table>, owner: &str) -> Result<Self, String> {
        let prefix = manifest::table_prefix(&root, name);
        let dir = table.directory().ok_or_else(|| format!("table {name:?} is in memory: it has nothing to mirror"))?.to_path_buf();
        let page_size = 1u64 << table.config().log.page_size_bits;
        let pages_per_segment = table.config().log.pages_per_segment;
        for _ in 0..5 {
            let latest = manifest::latest(store.as_ref(), &prefix).await?;
            let (seq, mut claimed) = match latest {
                Some((seq, m)) if !m.dropped && m.page_size == page_size && m.pages_per_segment == pages_per_segment => (seq + 1, m),
                Some((seq, m)) => (seq + 1, Manifest { epoch: m.epoch, ..Manifest::default() }),
                None => (0, Manifest::default()),
            };
            claimed.table = name.to_owned();
            claimed.epoch += 1;
            claimed.owner = owner.to_owned();
            claimed.dropped = false;
            claimed.page_size = page_size;
            claimed.pages_per_segment = pages_per_segment;
            let keep = {
                let (table, runs) = (Arc::clone(&table), claimed.runs.clone());
                tokio::task::spawn_blocking(move || agreeing_runs(&table, &runs)).await.map_err(|e| e.to_string())??
            };
            claimed.runs.truncate(keep);
            claimed.open_page = None;
            let next_page = claimed.runs.last().map_or(0, |r| r.end);
            claimed.log_end = claimed.log_end.min(next_page * page_size);
            // The local copy names the epoch before the store does: a crash between the two
            // leaves a copy at least as new as the store's newest epoch, which the next start
            // keeps ([`super::RemoteStore::prepare`]).
            shoal_core::checkpoint::write_json_atomic(&dir, LOCAL_STATE_FILE, &LocalState { epoch: claimed.epoch }).map_err(|e| e.to_string())?;
            match manifest::commit(store.as_ref(), &prefix, seq, &claimed).await {
                Ok(()) => {
                    tracing::info!(table = name, epoch = claimed.epoch, seq, runs = claimed.runs.len(), files = claimed.files.len(), "remote store: table claimed");
                    table.advance_remote_durable(shoal_core::LogAddress::new(claimed.log_end));
                    return Ok(Self { store, root, prefix, table, dir, seq, manifest: claimed, uploaded: BTreeMap::new(), next_page, withdrawn_generation: None, attempts: 0, published: None });
                }
                // Another process claimed it meanwhile: claim above it.
                Err(CommitError::Fenced { epoch, owner }) => {
                    tracing::warn!(table = name, epoch, owner, "remote store: claimed by another process meanwhile; claiming again");
                }
                // An earlier claim of this process whose answer was lost: claim above it.
                Err(CommitError::Taken(_)) => {}
                Err(CommitError::Store(e)) => return Err(e),
            }
        }
        Err(format!("table {name:?}: five claims in a row lost to other processes"))
    }

    /// From now on, tells `pages` the runs and columnar files of every manifest committed
    /// (before the engine learns how far the store holds the log), starting with the claim's.
    pub fn publish_to(&mut self, pages: Arc<super::cache::RemotePages>) {
        pages.set(&self.manifest);
        self.published = Some(pages);
    }

    fn publish(&self) {
        if let Some(pages) = &self.published {
            pages.set(&self.manifest);
        }
    }

    /// The owner epoch this mirror holds.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.manifest.epoch
    }

    /// Uploads what changed and commits a manifest naming it; returns whether a manifest
    /// was committed. Called until it commits nothing, it brings the store up to the
    /// flushed log.
    ///
    /// # Errors
    /// [`RoundError::Fenced`] when another owner took the table (the caller fences it);
    /// [`RoundError::Failed`] otherwise.
    pub async fn round(&mut self) -> Result<bool, RoundError> {
        let collected = {
            let (table, dir, uploaded, manifest, next_page, withdrawn) =
                (Arc::clone(&self.table), self.dir.clone(), self.uploaded.clone(), self.manifest.clone(), self.next_page, self.withdrawn_generation);
            tokio::task::spawn_blocking(move || collect(&table, &dir, &uploaded, &manifest, next_page, withdrawn))
                .await
                .map_err(|e| RoundError::Failed(e.to_string()))?
                .map_err(RoundError::Failed)?
        };
        let mut next = self.manifest.clone();
        let seq = self.seq + 1;
        self.attempts += 1;
        let folder = format!("tables/{}/data/e{}-s{seq}-a{}", next.table, next.epoch, self.attempts);
        let mut puts: Vec<(Path, Bytes)> = Vec::new();
        let mut changed = false;
        for name in &collected.removed {
            changed |= next.files.remove(name).is_some();
        }
        for file in &collected.files {
            let object = format!("{folder}/f/{}", file.name);
            next.files.insert(file.name.clone(), FileObject { object: object.clone(), bytes: file.bytes.len() as u64, crc32: crc32fast::hash(&file.bytes) });
            puts.push((manifest::object_path(&self.root, &object), file.bytes.clone()));
            changed = true;
        }
        for run in &collected.runs {
            let object = format!("{folder}/pages-{:012}-{:012}", run.first, run.end);
            next.runs.push(PageRun { first: run.first, end: run.end, object: object.clone(), crc32: crc32fast::hash(&run.bytes) });
            puts.push((manifest::object_path(&self.root, &object), run.bytes.clone()));
            changed = true;
            if next.open_page.as_ref().is_some_and(|p| p.page < run.end) {
                next.open_page = None;
            }
        }
        if let Some(chunk) = &collected.chunk {
            let object = format!("{folder}/chunk-{:012}-{}-{}", chunk.page, chunk.from, chunk.to);
            let entry = Chunk { from: chunk.from, to: chunk.to, object: object.clone(), crc32: crc32fast::hash(&chunk.bytes) };
            match &mut next.open_page {
                Some(open) if open.page == chunk.page => open.chunks.push(entry),
                _ => next.open_page = Some(OpenPage { page: chunk.page, chunks: vec![entry] }),
            }
            puts.push((manifest::object_path(&self.root, &object), chunk.bytes.clone()));
            changed = true;
        }
        let before = next.runs.len();
        next.runs.retain(|r| r.end > collected.begin_page);
        changed |= next.runs.len() != before;
        let page_size = next.page_size;
        let log_end = match &next.open_page {
            Some(open) => open.page * page_size + next.open_len(),
            None => next.runs.last().map_or(0, |r| r.end * page_size),
        };
        changed |= log_end != next.log_end;
        next.log_end = log_end.max(next.log_end);
        if !changed {
            self.record_read(collected);
            return Ok(false);
        }
        put_all(self.store.as_ref(), puts).await.map_err(RoundError::Failed)?;
        match manifest::commit(self.store.as_ref(), &self.prefix, seq, &next).await {
            Ok(()) => {}
            Err(CommitError::Fenced { epoch, owner }) => {
                return Err(RoundError::Fenced(format!(
                    "fenced by epoch {epoch}: another process ({owner}) owns this table now (this one held epoch {})",
                    self.manifest.epoch
                )));
            }
            Err(CommitError::Taken(earlier)) => {
                // An earlier attempt's manifest was written after all: go on from it.
                self.seq = seq;
                self.next_page = earlier.runs.last().map_or(0, |r| r.end);
                self.manifest = *earlier;
                self.uploaded.clear();
                self.withdrawn_generation = None;
                self.publish();
                self.table.advance_remote_durable(shoal_core::LogAddress::new(self.manifest.log_end));
                return Err(RoundError::Failed(format!("manifest {seq} was written by an earlier attempt whose answer was lost; going on from it")));
            }
            Err(CommitError::Store(e)) => return Err(RoundError::Failed(e)),
        }
        self.seq = seq;
        self.manifest = next;
        self.next_page = collected.next_page;
        self.record_read(collected);
        self.publish();
        self.table.advance_remote_durable(shoal_core::LogAddress::new(self.manifest.log_end));
        Ok(true)
    }

    /// Remembers what a round read of the files (each file's length and modification time
    /// as the store now holds it, the withdrawn records' generation), so the next round reads
    /// only what changed after.
    fn record_read(&mut self, collected: Collected) {
        self.withdrawn_generation = collected.withdrawn_generation;
        for file in collected.files {
            self.uploaded.insert(file.name, (file.bytes.len() as u64, file.modified));
        }
        for (name, len, modified) in collected.same {
            self.uploaded.insert(name, (len, modified));
        }
        for name in collected.removed {
            self.uploaded.remove(&name);
        }
    }

    /// Commits a manifest saying the table was dropped (a daemon that starts does not
    /// open it again).
    ///
    /// # Errors
    /// As [`Self::round`]'s commit.
    pub async fn dropped(&mut self) -> Result<(), RoundError> {
        let next = Manifest {
            table: self.manifest.table.clone(),
            epoch: self.manifest.epoch,
            owner: self.manifest.owner.clone(),
            dropped: true,
            ..Manifest::default()
        };
        match manifest::commit(self.store.as_ref(), &self.prefix, self.seq + 1, &next).await {
            Ok(()) => Ok(()),
            Err(CommitError::Fenced { epoch, .. }) => Err(RoundError::Fenced(format!("fenced by epoch {epoch}"))),
            Err(e @ (CommitError::Taken(_) | CommitError::Store(_))) => Err(RoundError::Failed(e.to_string())),
        }
    }
}

/// Writes the objects, a few at a time.
async fn put_all(store: &dyn ObjectStore, puts: Vec<(Path, Bytes)>) -> Result<(), String> {
    use futures::StreamExt;
    let mut writes = futures::stream::iter(puts.into_iter().map(|(path, bytes)| async move { manifest::put(store, &path, bytes).await }))
        .buffer_unordered(CONCURRENT_PUTS);
    while let Some(result) = writes.next().await {
        result?;
    }
    Ok(())
}

/// How many of `runs` (from the first) the local segment files hold as they are: the
/// runs are compared from the last backwards, and the first that agrees ends the search.
/// With a page source (`local_cache_bytes`), a page below the flushed log that is not in
/// its segment file is the store's (evicted, or not fetched since a restore); the pages of
/// such a run that are local are compared one by one with the store's.
fn agreeing_runs(table: &Table, runs: &[PageRun]) -> Result<usize, String> {
    let source = table.config().log.page_source.clone();
    let local_end = table.page_of(table.flushed_address());
    'runs: for (i, run) in runs.iter().enumerate().rev() {
        let mut images = Vec::new();
        let mut absent = false;
        for page in run.first..run.end {
            match table.snapshot_page(page) {
                Ok(Some(snapshot)) if snapshot.is_closed() => images.push((page, snapshot.image)),
                Ok(None) if source.is_some() && page < local_end => absent = true,
                _ => continue 'runs,
            }
        }
        if !absent {
            let mut hasher = crc32fast::Hasher::new();
            for (_, image) in &images {
                hasher.update(image);
            }
            if hasher.finalize() == run.crc32 {
                return Ok(i + 1);
            }
            continue;
        }
        let Some(source) = &source else { continue };
        let mut stored = vec![0u8; 1 << table.config().log.page_size_bits];
        for (page, image) in &images {
            if !source.0.fetch_page(*page, &mut stored)? || stored != *image {
                continue 'runs;
            }
        }
        return Ok(i + 1);
    }
    Ok(0)
}

/// A file read for upload.
struct ReadFile {
    name: String,
    bytes: Bytes,
    modified: SystemTime,
}

/// Closed pages read for upload.
struct ReadRun {
    first: u64,
    end: u64,
    bytes: Bytes,
}

/// The open page's new proven bytes, then its footer.
struct ReadChunk {
    page: u64,
    from: u64,
    to: u64,
    bytes: Bytes,
}

/// What a round read of the table's directory.
struct Collected {
    files: Vec<ReadFile>,
    /// Files whose bytes are those the manifest names already: length, modification time.
    same: Vec<(String, u64, SystemTime)>,
    removed: Vec<String>,
    runs: Vec<ReadRun>,
    chunk: Option<ReadChunk>,
    next_page: u64,
    begin_page: u64,
    /// The withdrawn records' generation read before `withdrawn.bin` was.
    withdrawn_generation: Option<u64>,
}

/// Reads what changed since `manifest` (blocking).
fn collect(
    table: &Table,
    dir: &FsPath,
    uploaded: &BTreeMap<String, (u64, SystemTime)>,
    manifest: &Manifest,
    next_page: u64,
    withdrawn_read: Option<u64>,
) -> Result<Collected, String> {
    // 1. The files other than the log and the withdrawn list: the metadata first.
    let mut names = Vec::new();
    list_files(dir, dir, &mut names).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    names.sort_by_key(|name| (!matches!(name.as_str(), "table.json" | "checkpoint.json" | "columnar/manifest.json"), name.clone()));
    let mut files = Vec::new();
    let mut same = Vec::new();
    let mut present = std::collections::BTreeSet::new();
    for name in names {
        if name == WITHDRAWN_FILE {
            continue;
        }
        match read_if_changed(dir, &name, uploaded, manifest)? {
            Read::Changed(file) => files.push(file),
            Read::Same(len, modified) => same.push((name.clone(), len, modified)),
            Read::Unchanged => {}
        }
        present.insert(name);
    }
    // 2. The log: closed pages in runs, then the open page's new bytes.
    let flushed = table.flushed_address();
    let begin_page = table.page_of(table.begin_address());
    let mut runs = Vec::new();
    let mut chunk = None;
    let mut page = next_page.max(begin_page);
    if flushed.get() > 0 {
        let last = table.page_of(flushed).min(page + PAGES_PER_ROUND);
        let mut run: Vec<u8> = Vec::new();
        let mut run_first = page;
        while page <= last {
            let snapshot = table.snapshot_page(page).map_err(|e| e.to_string())?;
            let Some(snapshot) = snapshot else {
                if page < last && run.is_empty() {
                    // Gone below a moving begin address (retention): go on after it.
                    page += 1;
                    run_first = page;
                    continue;
                }
                break;
            };
            if !snapshot.is_closed() {
                let from = if manifest.open_page.as_ref().is_some_and(|p| p.page == page) { manifest.open_len() } else { 0 };
                let to = snapshot.proven as u64;
                if to > from {
                    let mut bytes = snapshot.image[from as usize..to as usize].to_vec();
                    bytes.extend_from_slice(snapshot.footer());
                    chunk = Some(ReadChunk { page, from, to, bytes: Bytes::from(bytes) });
                }
                break;
            }
            run.extend_from_slice(&snapshot.image);
            page += 1;
            if page - run_first == PAGES_PER_RUN {
                runs.push(ReadRun { first: run_first, end: page, bytes: Bytes::from(std::mem::take(&mut run)) });
                run_first = page;
            }
        }
        if !run.is_empty() {
            runs.push(ReadRun { first: run_first, end: page, bytes: Bytes::from(run) });
        }
    }
    // 3. The withdrawn records, after the pages they mark: read again when they changed
    // (the file is rewritten in place, its length fixed).
    let withdrawn_generation = Some(table.withdrawn_generation());
    if dir.join(WITHDRAWN_FILE).exists() {
        let unchanged = withdrawn_generation == withdrawn_read && manifest.files.contains_key(WITHDRAWN_FILE);
        let read = if unchanged { Read::Unchanged } else { read_if_changed(dir, WITHDRAWN_FILE, &BTreeMap::new(), manifest)? };
        match read {
            Read::Changed(file) => files.push(file),
            Read::Same(len, modified) => same.push((WITHDRAWN_FILE.to_owned(), len, modified)),
            Read::Unchanged => {}
        }
        present.insert(WITHDRAWN_FILE.to_owned());
    }
    // A columnar file the table still has but that is not here was evicted (the store holds
    // it, and it is fetched again when read): it stays in the manifest.
    for name in table.columnar_file_names() {
        present.insert(format!("{}{name}", super::cache::COLUMNAR_DIR));
    }
    let removed = manifest.files.keys().filter(|name| !present.contains(*name)).cloned().collect();
    Ok(Collected { files, same, removed, runs, chunk, next_page: page, begin_page, withdrawn_generation })
}

/// The files under `dir` (relative names with `/`), without the log's segment files,
/// temporary files and the local state file.
fn list_files(root: &FsPath, dir: &FsPath, names: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            list_files(root, &path, names)?;
            continue;
        }
        let Some(name) = path.strip_prefix(root).ok().and_then(|p| p.to_str()).map(str::to_owned) else { continue };
        let base = entry.file_name().to_string_lossy().into_owned();
        let segment = dir == root && base.starts_with("segment-") && base.ends_with(".log");
        if kind.is_file() && !segment && !base.ends_with(".tmp") && name != LOCAL_STATE_FILE {
            names.push(name);
        }
    }
    Ok(())
}

/// A file as [`read_if_changed`] found it.
enum Read {
    /// New bytes to upload.
    Changed(ReadFile),
    /// Read, and the bytes are those of the object the manifest names (length, modification time).
    Same(u64, SystemTime),
    /// Its length and modification time are those it had when last uploaded, or it is gone.
    Unchanged,
}

/// Reads `dir/name` unless its length and modification time are those it had when last
/// uploaded (and the manifest names it).
fn read_if_changed(dir: &FsPath, name: &str, uploaded: &BTreeMap<String, (u64, SystemTime)>, manifest: &Manifest) -> Result<Read, String> {
    let path = dir.join(name);
    let metadata = match std::fs::metadata(&path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Unchanged),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    if uploaded.get(name) == Some(&(metadata.len(), modified)) && manifest.files.contains_key(name) {
        return Ok(Read::Unchanged);
    }
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Unchanged),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    // The same bytes as the object the manifest names (a claim's first round): no upload.
    if manifest.files.get(name).is_some_and(|f| f.bytes == bytes.len() as u64 && f.crc32 == crc32fast::hash(&bytes)) {
        return Ok(Read::Same(metadata.len(), modified));
    }
    Ok(Read::Changed(ReadFile { name: name.to_owned(), bytes: Bytes::from(bytes), modified }))
}
