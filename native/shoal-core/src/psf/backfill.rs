//! Backfill: a PSF over the records that were in the log before it was registered.
//!
//! FishStore's PSFs index forward only (§5, the safe register boundary): a record's key
//! pointers are written with the record, and records already flushed are immutable, so
//! chains cannot be threaded through them afterwards. A backfill indexes the range
//! `[begin, safe register address)` beside the log instead, in **sorted runs**: one run per
//! [`RUN_PAGES`] log pages, holding the `(property hash, record address)` pair of every
//! record of the range that has a property, sorted by hash then address — the hash is the
//! one the chains' buckets use ([`super::property_hash`]). The runs are made from
//! the safe register address down towards the begin address, each ending where the
//! previous one began, so that what is indexed is always one contiguous range
//! `[backfilled_from, safe register address)` ([`Psf::backfilled_from`]): the PSF's
//! coverage ([`Psf::coverage`]) grows downwards run by run, and the planner and the index
//! scan need no other notion of partial coverage. An index scan walks the chains above
//! the safe register address and looks the property's hash up in the runs below it; each
//! address found is read and re-checked against the whole filter, like every candidate of
//! a chain (a hash shared by two values costs a read, never a wrong row).
//!
//! A run is a file `psf-<id>-<from>-<to>.run` in `<table>/backfill/` (in memory for an
//! in-memory table): a 64-byte header (magic, version, PSF id, range, counts; CRC-32), the
//! entries (16 bytes each), then one fence per block of [`BLOCK_ENTRIES`] entries (its
//! first hash and the CRC-32 of its bytes) and the CRC-32 of the fences. The header and
//! fences are read and checked when the table opens; a lookup reads only the blocks whose
//! hash range holds the hash and checks each against its fence before trusting it. A run
//! is written to a temporary file, synced and renamed, so the directory holds whole runs
//! only; a file `psf-<id>.backfill` marks a PSF whose backfill was asked for. At open, the
//! runs that chain down from the (recovered) safe register address are kept, the others
//! deleted, and the backfill goes on from where they end (a crash loses at most the run
//! being made). A run never outlives the records it points at: recovery clamps a safe
//! register address to the recovered tail, and a run chains only when it ends at that
//! address, so after a crash that lost records below it (whose addresses new records then
//! take) every run of the PSF is deleted and made again.
//!
//! One thread per table makes the runs — one pass over the pages for every PSF whose
//! backfill starts at the same address (PSFs registered together) — started when a
//! backfill is asked for or resumed, ending when none is left, at the observer's lowered priority ([`crate::log::OBSERVER_NICE`])
//! so that ingestion keeps its pace; deregistering the PSF stops its backfill and deletes
//! its runs.
//!
//! Rejected: threading chains through flushed records by rewriting their pages (breaks the
//! log's immutability and its page checksums, and races readers); a second hash index
//! for the historical range (random writes per record, memory for its buckets); one
//! sorted file for the whole range (no progress until it is done, and all of it redone
//! after a crash); keeping the runs' entries in memory (16 bytes per record and PSF,
//! unbounded with the log).

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex as StdMutex};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Psf, PsfId, PsfSnapshot, NOT_YET};
use crate::error::{Error, Result};
use crate::log::HybridLog;
use crate::parser::ParsedBatch;
use crate::LogAddress;

/// Log pages indexed into one run (64 MiB with the default 4 MiB pages).
pub const RUN_PAGES: u64 = 16;
/// Entries per block of a run: the unit a lookup reads and checks (16 KiB).
pub const BLOCK_ENTRIES: usize = 1024;
const ENTRY_BYTES: usize = 16;
const FENCE_BYTES: usize = 12;
const HEADER_BYTES: usize = 64;
const MAGIC: &[u8; 8] = b"SHOALRUN";
const VERSION: u32 = 1;
/// The directory of a table's runs, under the table's directory.
pub const BACKFILL_DIR: &str = "backfill";

/// A block's first hash and the CRC-32 of its entries' bytes.
#[derive(Debug, Clone, Copy)]
struct Fence {
    first_hash: u64,
    crc: u32,
}

#[derive(Debug)]
enum RunData {
    /// An in-memory table's run: the entries' bytes.
    Memory(Vec<u8>),
    /// A run file, read a block at a time.
    File { file: std::fs::File, path: PathBuf },
}

/// One sorted run: the `(property hash, record address)` pairs of one PSF for the
/// records in `[from, to)`.
#[derive(Debug)]
pub struct Run {
    /// First log address of the range it indexes.
    pub from: LogAddress,
    /// One past the last.
    pub to: LogAddress,
    /// Entries (records with a property).
    pub entries: u64,
    fences: Vec<Fence>,
    data: RunData,
}

impl Run {
    /// The addresses in `[from, to)` of the records whose property hashes to `hash`,
    /// appended to `out` in ascending order.
    ///
    /// # Errors
    /// [`Error::CorruptPage`]-like [`Error::InvalidConfig`] naming the file when a block
    /// fails its checksum; [`Error::Io`].
    pub fn lookup(&self, hash: u64, from: LogAddress, to: LogAddress, out: &mut Vec<LogAddress>) -> Result<()> {
        if to <= self.from || self.to <= from || self.fences.is_empty() {
            return Ok(());
        }
        // The first block that may hold `hash`: the last one starting below it (its tail may).
        let mut block = self.fences.partition_point(|f| f.first_hash < hash).saturating_sub(1);
        let mut bytes = Vec::new();
        while block < self.fences.len() && self.fences[block].first_hash <= hash {
            self.read_block(block, &mut bytes)?;
            for entry in bytes.chunks_exact(ENTRY_BYTES) {
                let entry_hash = u64::from_le_bytes(entry[..8].try_into().unwrap_or_default());
                if entry_hash > hash {
                    return Ok(());
                }
                let address = LogAddress::new(u64::from_le_bytes(entry[8..].try_into().unwrap_or_default()));
                if entry_hash == hash && address >= from && address < to {
                    out.push(address);
                }
            }
            block += 1;
        }
        Ok(())
    }

    /// How many entries of `hash` the run holds, counting at most `cap` (the planner's
    /// cost check).
    ///
    /// # Errors
    /// As [`Self::lookup`].
    pub fn count(&self, hash: u64, from: LogAddress, to: LogAddress, cap: u64) -> Result<u64> {
        let mut found = Vec::new();
        self.lookup(hash, from, to, &mut found)?;
        Ok((found.len() as u64).min(cap))
    }

    /// The memory the run holds: its fences, and an in-memory table's entries.
    fn memory_bytes(&self) -> u64 {
        let entries = match &self.data {
            RunData::Memory(bytes) => bytes.len(),
            RunData::File { .. } => 0,
        };
        (entries + self.fences.len() * std::mem::size_of::<Fence>()) as u64
    }

    fn block_range(&self, block: usize) -> std::ops::Range<usize> {
        let start = block * BLOCK_ENTRIES;
        let end = ((block + 1) * BLOCK_ENTRIES).min(usize::try_from(self.entries).unwrap_or(usize::MAX));
        start * ENTRY_BYTES..end * ENTRY_BYTES
    }

    fn read_block(&self, block: usize, out: &mut Vec<u8>) -> Result<()> {
        let range = self.block_range(block);
        out.clear();
        match &self.data {
            RunData::Memory(bytes) => out.extend_from_slice(&bytes[range]),
            RunData::File { file, path } => {
                out.resize(range.len(), 0);
                file.read_exact_at(out, (HEADER_BYTES + range.start) as u64).map_err(|e| Error::io(path, e))?;
                if crc32fast::hash(out) != self.fences[block].crc {
                    return Err(Error::InvalidConfig(format!(
                        "{} is damaged (block {block} fails its checksum): it is made again; plan the query again",
                        path.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// A run of `entries` (sorted), kept in memory or written to `dir`.
    fn make(psf: PsfId, from: LogAddress, to: LogAddress, entries: &[(u64, u64)], dir: Option<&Path>) -> Result<Self> {
        let mut body = Vec::with_capacity(entries.len() * ENTRY_BYTES);
        for (hash, address) in entries {
            body.extend_from_slice(&hash.to_le_bytes());
            body.extend_from_slice(&address.to_le_bytes());
        }
        let fences: Vec<Fence> = body
            .chunks(BLOCK_ENTRIES * ENTRY_BYTES)
            .map(|block| Fence { first_hash: u64::from_le_bytes(block[..8].try_into().unwrap_or_default()), crc: crc32fast::hash(block) })
            .collect();
        let entries = entries.len() as u64;
        let Some(dir) = dir else {
            return Ok(Self { from, to, entries, fences, data: RunData::Memory(body) });
        };
        let mut header = [0u8; HEADER_BYTES];
        header[..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&psf.to_le_bytes());
        header[16..24].copy_from_slice(&from.get().to_le_bytes());
        header[24..32].copy_from_slice(&to.get().to_le_bytes());
        header[32..40].copy_from_slice(&entries.to_le_bytes());
        header[40..48].copy_from_slice(&(fences.len() as u64).to_le_bytes());
        let crc = crc32fast::hash(&header[..56]);
        header[56..60].copy_from_slice(&crc.to_le_bytes());
        let mut tail = Vec::with_capacity(fences.len() * FENCE_BYTES + 4);
        for fence in &fences {
            tail.extend_from_slice(&fence.first_hash.to_le_bytes());
            tail.extend_from_slice(&fence.crc.to_le_bytes());
        }
        let crc = crc32fast::hash(&tail);
        tail.extend_from_slice(&crc.to_le_bytes());
        let path = dir.join(run_name(psf, from, to));
        let temporary = path.with_extension("run.tmp");
        let write = || -> std::io::Result<std::fs::File> {
            std::fs::create_dir_all(dir)?;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&header)?;
            file.write_all(&body)?;
            file.write_all(&tail)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            std::fs::File::open(dir)?.sync_all()?;
            std::fs::File::open(&path)
        };
        let file = write().map_err(|e| Error::io(&path, e))?;
        Ok(Self { from, to, entries, fences, data: RunData::File { file, path } })
    }

    /// Opens the run file `path` of PSF `psf`, checking its header and fences.
    fn open(path: &Path, psf: PsfId) -> Result<Self> {
        let damaged = |what: &str| Error::InvalidConfig(format!("{} is damaged or not a run: {what}", path.display()));
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let length = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut header = [0u8; HEADER_BYTES];
        file.read_exact_at(&mut header, 0).map_err(|_| damaged("shorter than its header"))?;
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(header[56..60].try_into().unwrap_or_default());
        if &header[..8] != MAGIC || crc32fast::hash(&header[..56]) != crc {
            return Err(damaged("its header fails its checksum"));
        }
        if u32::from_le_bytes(header[8..12].try_into().unwrap_or_default()) != VERSION
            || u32::from_le_bytes(header[12..16].try_into().unwrap_or_default()) != psf
        {
            return Err(damaged("another version or PSF"));
        }
        let (from, to, entries, fence_count) = (LogAddress::new(word(16)), LogAddress::new(word(24)), word(32), word(40));
        let fences_at = HEADER_BYTES as u64 + entries * ENTRY_BYTES as u64;
        if fence_count != entries.div_ceil(BLOCK_ENTRIES as u64) || length != fences_at + fence_count * FENCE_BYTES as u64 + 4 {
            return Err(damaged("its length does not match its header"));
        }
        let mut tail = vec![0u8; usize::try_from(fence_count).unwrap_or(0) * FENCE_BYTES + 4];
        file.read_exact_at(&mut tail, fences_at).map_err(|e| Error::io(path, e))?;
        let (fences_bytes, crc) = tail.split_at(tail.len() - 4);
        if crc32fast::hash(fences_bytes) != u32::from_le_bytes(crc.try_into().unwrap_or_default()) {
            return Err(damaged("its fences fail their checksum"));
        }
        let fences = fences_bytes
            .chunks_exact(FENCE_BYTES)
            .map(|f| Fence {
                first_hash: u64::from_le_bytes(f[..8].try_into().unwrap_or_default()),
                crc: u32::from_le_bytes(f[8..].try_into().unwrap_or_default()),
            })
            .collect();
        Ok(Self { from, to, entries, fences, data: RunData::File { file, path: path.to_path_buf() } })
    }

    fn delete(&self) {
        if let RunData::File { path, .. } = &self.data {
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(path = %path.display(), %error, "a backfill run could not be deleted");
            }
        }
    }
}

/// One pass's runs: each PSF of the group with its new run.
type GroupRuns = Vec<(Arc<Psf>, Arc<Run>)>;

/// A file of the backfill directory: its PSF, its run's `[from, to)` (`None`: the PSF's
/// marker) and its path.
type BackfillFile = (PsfId, Option<(u64, u64)>, PathBuf);

fn run_name(psf: PsfId, from: LogAddress, to: LogAddress) -> String {
    format!("psf-{psf}-{}-{}.run", from.get(), to.get())
}

fn marker_name(psf: PsfId) -> String {
    format!("psf-{psf}.backfill")
}

/// A PSF's backfill: its runs (each ending where the next one in the list begins) and
/// its progress.
#[derive(Debug, Default)]
struct PsfBackfill {
    psf: Option<Arc<Psf>>,
    /// Runs from the safe register address down.
    runs: Vec<Arc<Run>>,
    /// Log bytes indexed since the backfill (re)started here, and the time it took.
    bytes: u64,
    busy: Duration,
    done: bool,
}

/// The progress of one PSF's backfill ([`Backfill::progress`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackfillProgress {
    /// Every record from here to the safe register address is indexed.
    pub backfilled_from: LogAddress,
    /// Where it goes down to: the table's begin address.
    pub target: LogAddress,
    /// Whether it reached the target.
    pub done: bool,
    /// Log bytes indexed per second of the backfill thread's work (0 before the first run).
    pub bytes_per_second: f64,
    /// Runs made.
    pub runs: usize,
    /// Entries in them (records of the range with a property).
    pub entries: u64,
}

/// A table's backfills (module documentation).
#[derive(Debug)]
pub struct Backfill {
    /// `<table>/backfill` (`None`: an in-memory table, runs in memory).
    dir: Option<PathBuf>,
    log: Arc<HybridLog>,
    state: Mutex<HashMap<PsfId, PsfBackfill>>,
    running: Mutex<bool>,
    stop: AtomicBool,
    /// Tests: no run is made while set ([`Backfill::hold`]).
    held: AtomicBool,
    /// The memory the runs hold ([`Backfill::memory_bytes`]).
    memory: std::sync::atomic::AtomicU64,
    wake: (StdMutex<bool>, Condvar),
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Backfill {
    /// The backfills of a table whose directory is `table_dir` (`None`: in memory).
    #[must_use]
    pub fn new(table_dir: Option<&Path>, log: Arc<HybridLog>) -> Arc<Self> {
        Arc::new(Self {
            dir: table_dir.map(|d| d.join(BACKFILL_DIR)),
            log,
            state: Mutex::new(HashMap::new()),
            running: Mutex::new(false),
            stop: AtomicBool::new(false),
            held: AtomicBool::new(false),
            memory: std::sync::atomic::AtomicU64::new(0),
            wake: (StdMutex::new(false), Condvar::new()),
            thread: Mutex::new(None),
        })
    }

    /// Starts the backfill of `psf` (just registered): marks it on disk, then indexes
    /// `[begin, safe register address)` in the background. Nothing to do when the log
    /// holds no record below the PSF.
    ///
    /// # Errors
    /// [`Error::Io`] when the marker cannot be written.
    pub fn start(self: &Arc<Self>, psf: &Arc<Psf>) -> Result<()> {
        if psf.safe_register_address() <= self.log.begin_address() || !psf.is_active() {
            return Ok(());
        }
        if let Some(dir) = &self.dir {
            let path = dir.join(marker_name(psf.id));
            let write = || -> std::io::Result<()> {
                std::fs::create_dir_all(dir)?;
                std::fs::File::create(&path)?.sync_all()?;
                std::fs::File::open(dir)?.sync_all()
            };
            write().map_err(|e| Error::io(&path, e))?;
        }
        self.state.lock().insert(psf.id, PsfBackfill { psf: Some(Arc::clone(psf)), ..PsfBackfill::default() });
        self.ensure_worker();
        Ok(())
    }

    /// At open, after the PSFs were restored: the runs of every PSF whose backfill was
    /// asked for, kept where they chain down from its safe register address, and its
    /// backfill resumed; every other run file deleted.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be read.
    pub fn resume(self: &Arc<Self>, psfs: &[Arc<Psf>]) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(dir, e)),
        };
        let mut files: Vec<BackfillFile> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let parsed = name.strip_prefix("psf-").and_then(|rest| {
                if let Some(id) = rest.strip_suffix(".backfill") {
                    return Some((id.parse().ok()?, None));
                }
                let mut parts = rest.strip_suffix(".run")?.split('-');
                let id = parts.next()?.parse().ok()?;
                let (from, to) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
                Some((id, Some((from, to))))
            });
            match parsed {
                Some((id, range)) => files.push((id, range, path)),
                // A run being written at the crash, or a stranger.
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let mut state = self.state.lock();
        for psf in psfs {
            let wanted = files.iter().any(|(id, range, _)| *id == psf.id && range.is_none());
            if !wanted || !psf.is_active() {
                continue;
            }
            let mut runs: Vec<Run> = Vec::new();
            for (_, range, path) in files.iter().filter(|(id, range, _)| *id == psf.id && range.is_some()) {
                match Run::open(path, psf.id) {
                    Ok(run) if Some((run.from.get(), run.to.get())) == *range => runs.push(run),
                    Ok(_) => tracing::warn!(path = %path.display(), "a backfill run's name and header disagree: it is made again"),
                    Err(error) => tracing::warn!(%error, "a backfill run is made again"),
                }
            }
            // Those that chain down from the safe register address.
            let mut chained = Vec::new();
            let mut at = psf.safe_register_address();
            while let Some(i) = runs.iter().position(|r| r.to == at && r.from < r.to) {
                let run = runs.swap_remove(i);
                at = run.from;
                chained.push(Arc::new(run));
            }
            for stray in &runs {
                stray.delete();
            }
            if !chained.is_empty() {
                psf.set_backfilled_from(at);
            }
            self.memory.fetch_add(chained.iter().map(|r| r.memory_bytes()).sum(), Ordering::Relaxed);
            let done = at <= self.log.begin_address();
            state.insert(psf.id, PsfBackfill { psf: Some(Arc::clone(psf)), runs: chained, done, ..PsfBackfill::default() });
        }
        // Files of PSFs that are not backfilled any more.
        for (id, _, path) in &files {
            if !state.contains_key(id) {
                let _ = std::fs::remove_file(path);
            }
        }
        let pending = state.values().any(|b| !b.done);
        drop(state);
        if pending {
            self.ensure_worker();
        }
        Ok(())
    }

    /// Stops the backfill of PSF `id` (deregistered) and deletes its runs and marker; its
    /// coverage goes back to its chains.
    pub fn forget(&self, psf: &Psf) {
        // Coverage first, then the runs: a scan that finds them gone sees the coverage gone
        // too (`Table::backfilled_scan`), and fails instead of answering without them.
        psf.set_backfilled_from(NOT_YET);
        let removed = self.state.lock().remove(&psf.id);
        if let Some(backfill) = removed {
            for run in &backfill.runs {
                self.memory.fetch_sub(run.memory_bytes(), Ordering::Relaxed);
                run.delete();
            }
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_file(dir.join(marker_name(psf.id)));
        }
    }

    /// A run of `psf` failed a block's checksum: it and the runs below it are deleted, the
    /// PSF's coverage goes back to where the run ended (coverage first, as in
    /// [`Self::forget`]), and the backfill makes them again.
    pub fn damaged(self: &Arc<Self>, psf: &Arc<Psf>, run: &Run) {
        let removed: Vec<Arc<Run>> = {
            let mut state = self.state.lock();
            let Some(backfill) = state.get_mut(&psf.id) else { return };
            if !backfill.runs.iter().any(|r| r.from == run.from && r.to == run.to) {
                return; // already dropped by another scan
            }
            let register = psf.safe_register_address();
            psf.set_backfilled_from(if run.to >= register { NOT_YET } else { run.to });
            let (kept, removed) = backfill.runs.drain(..).partition(|r| r.to > run.to);
            backfill.runs = kept;
            backfill.done = false;
            removed
        };
        tracing::warn!(psf = %psf.name, from = run.from.get(), to = run.to.get(), runs = removed.len(), "a backfill run is damaged: it and the runs below it are made again");
        for run in &removed {
            self.memory.fetch_sub(run.memory_bytes(), Ordering::Relaxed);
            run.delete();
        }
        self.ensure_worker();
    }

    /// The runs of PSF `id` that index records in `[from, to)`.
    #[must_use]
    pub fn runs(&self, id: PsfId, from: LogAddress, to: LogAddress) -> Vec<Arc<Run>> {
        let state = self.state.lock();
        state.get(&id).map(|b| b.runs.iter().filter(|r| r.from < to && from < r.to).cloned().collect()).unwrap_or_default()
    }

    /// The progress of PSF `id`'s backfill, if one was asked for.
    #[must_use]
    pub fn progress(&self, id: PsfId) -> Option<BackfillProgress> {
        let state = self.state.lock();
        let backfill = state.get(&id)?;
        let psf = backfill.psf.as_ref()?;
        let register = psf.safe_register_address();
        let from = psf.backfilled_from();
        let busy = backfill.busy.as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        Some(BackfillProgress {
            backfilled_from: if from == NOT_YET { register } else { from },
            target: self.log.begin_address(),
            done: backfill.done,
            bytes_per_second: if busy > 0.0 { backfill.bytes as f64 / busy } else { 0.0 },
            runs: backfill.runs.len(),
            entries: backfill.runs.iter().map(|r| r.entries).sum(),
        })
    }

    /// Holds the thread (no run is made) until called with `false`: tests that need two
    /// backfills under way at once.
    pub fn hold(&self, held: bool) {
        self.held.store(held, Ordering::Release);
        self.notify();
    }

    /// The memory the runs hold, in bytes: an in-memory table's entries (16 bytes per record
    /// with a property, per PSF) and every run's fences (12 bytes per 1,024 entries).
    #[must_use]
    pub fn memory_bytes(&self) -> u64 {
        self.memory.load(Ordering::Relaxed)
    }

    /// Whether a backfill is still under way.
    #[must_use]
    pub fn busy(&self) -> bool {
        self.state.lock().values().any(|b| !b.done)
    }

    /// Stops the backfill thread (joined unless it is the caller); runs already made stay.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.notify();
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    fn notify(&self) {
        let (lock, condvar) = &self.wake;
        *lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        condvar.notify_all();
    }

    fn ensure_worker(self: &Arc<Self>) {
        let mut running = self.running.lock();
        if *running || self.stop.load(Ordering::Acquire) {
            self.notify();
            return;
        }
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("shoal-backfill".into()).spawn(move || {
            crate::log::lower_priority(crate::log::OBSERVER_NICE);
            me.work();
        });
        match spawned {
            Ok(handle) => {
                *running = true;
                if let Some(old) = self.thread.lock().replace(handle) {
                    let _ = old.join();
                }
            }
            Err(error) => tracing::error!(%error, "the backfill thread could not be started; PSFs cover what they index from now on"),
        }
    }

    /// The thread: one pass at a time over the next [`RUN_PAGES`] pages below a group of PSFs
    /// — every unfinished backfill that starts at the same address (PSFs registered together,
    /// with no record ingested between them) — until none is left.
    fn work(self: &Arc<Self>) {
        let mut parser = crate::parser::default_parser();
        let mut page = Vec::new();
        loop {
            if self.stop.load(Ordering::Acquire) {
                *self.running.lock() = false;
                return;
            }
            if self.held.load(Ordering::Acquire) {
                self.sleep(Duration::from_millis(5));
                continue;
            }
            let (group, floor): (Vec<Arc<Psf>>, LogAddress) = {
                let mut state = self.state.lock();
                let begin = self.log.begin_address();
                for backfill in state.values_mut() {
                    let Some(psf) = &backfill.psf else { continue };
                    if !psf.is_active() || psf.coverage().is_none_or(|(from, _)| from <= begin) {
                        backfill.done = true;
                    }
                }
                let pending: Vec<Arc<Psf>> = state.values().filter(|b| !b.done).filter_map(|b| b.psf.clone()).collect();
                let Some(start) = pending.iter().filter_map(|p| p.coverage()).map(|(from, _)| from).max() else {
                    *self.running.lock() = false;
                    return;
                };
                // The next start below: this group's run ends there, so that the two groups
                // meet and go on in one pass.
                let floor = pending.iter().filter_map(|p| p.coverage()).map(|(from, _)| from).filter(|&f| f < start).max();
                let group = pending.into_iter().filter(|p| p.coverage().is_some_and(|(from, _)| from == start)).collect();
                (group, floor.unwrap_or(LogAddress::ZERO))
            };
            let started = Instant::now();
            match self.make_runs(&group, floor, parser.as_mut(), &mut page) {
                Ok(Some((runs, bytes))) => {
                    let busy = started.elapsed();
                    let mut state = self.state.lock();
                    for (psf, run) in runs {
                        match state.get_mut(&psf.id) {
                            Some(backfill) if psf.is_active() => {
                                psf.set_backfilled_from(run.from);
                                self.memory.fetch_add(run.memory_bytes(), Ordering::Relaxed);
                                backfill.runs.push(run);
                                backfill.bytes += bytes;
                                backfill.busy += busy;
                            }
                            // Deregistered meanwhile: the run goes too.
                            _ => run.delete(),
                        }
                    }
                }
                Ok(None) => self.sleep(Duration::from_millis(20)),
                Err(error) => {
                    let names: Vec<&str> = group.iter().map(|p| p.name.as_str()).collect();
                    tracing::warn!(psfs = ?names, %error, "a backfill run failed; retried in 1 s");
                    self.sleep(Duration::from_secs(1));
                }
            }
        }
    }

    fn sleep(&self, timeout: Duration) {
        let (lock, condvar) = &self.wake;
        let mut woken = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !*woken {
            woken = condvar.wait_timeout(woken, timeout).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
        *woken = false;
    }

    /// The next run of each PSF of `group` (their coverage starts at the same address): the
    /// records of the (at most) [`RUN_PAGES`] pages below it, not below `floor` (another
    /// group's start), read and parsed once (the union of their fields of interest). Returns
    /// each PSF's run and the log bytes they index; `None` when they cover nothing or the
    /// thread is stopping.
    fn make_runs(
        &self,
        group: &[Arc<Psf>],
        floor: LogAddress,
        parser: &mut dyn crate::parser::RecordParser,
        page: &mut Vec<u8>,
    ) -> Result<Option<(GroupRuns, u64)>> {
        let Some((to, _)) = group.first().and_then(|p| p.coverage()) else { return Ok(None) };
        let begin = self.log.begin_address();
        if to <= begin {
            return Ok(None);
        }
        let last_page = self.log.page_of(LogAddress::new(to.get() - 1));
        let first_page = last_page.saturating_sub(RUN_PAGES - 1).max(self.log.page_of(begin));
        let from = self.log.page_start(first_page).max(begin).max(floor);
        let first_page = self.log.page_of(from);
        // The group's evaluators over the union of their fields (a PSF deregistered since
        // the group was chosen is left out).
        let snapshot = PsfSnapshot::build(0, group);
        let mut entries: Vec<Vec<(u64, u64)>> = vec![Vec::new(); snapshot.active.len()];
        let mut canonical = Vec::new();
        for number in first_page..=last_page {
            if self.stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            let records = self.log.page_records(number, from, to, page)?;
            let payloads: Vec<&[u8]> = records.iter().map(|(_, range)| &page[range.clone()]).collect();
            let mut parsed = ParsedBatch::default();
            parsed.reset(snapshot.fields.len());
            parser.parse_trusted_batch(&payloads, &snapshot.fields, &mut parsed);
            for (i, (address, _)) in records.iter().enumerate() {
                let Ok(values) = parsed.record(i) else { continue };
                for (active, out) in snapshot.active.iter().zip(&mut entries) {
                    if active.evaluate(values, payloads[i], &mut canonical).is_some() {
                        out.push((super::property_hash(active.psf.id, &canonical), address.get()));
                    }
                }
            }
        }
        let mut runs = Vec::with_capacity(entries.len());
        for (active, mut entries) in snapshot.active.iter().zip(entries) {
            entries.sort_unstable();
            let run = Run::make(active.psf.id, from, to, &entries, self.dir.as_deref())?;
            runs.push((Arc::clone(&active.psf), Arc::new(run)));
        }
        Ok(Some((runs, to - from)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_finds_every_address_of_a_hash_across_blocks_and_checks_its_blocks() {
        let dir = std::env::temp_dir().join(format!("shoal-run-{}", std::process::id()));
        // Two blocks; hash 7 spans both.
        let mut entries: Vec<(u64, u64)> = (0..1500).map(|i| (if i < 600 { 3 } else if i < 1200 { 7 } else { 9 }, 100 + i)).collect();
        entries.sort_unstable();
        let run = Run::make(4, LogAddress::new(100), LogAddress::new(2000), &entries, Some(&dir)).unwrap();
        let reopened = Run::open(&dir.join(run_name(4, LogAddress::new(100), LogAddress::new(2000))), 4).unwrap();
        let memory = Run::make(4, LogAddress::new(100), LogAddress::new(2000), &entries, None).unwrap();
        for r in [&run, &reopened, &memory] {
            let mut found = Vec::new();
            r.lookup(7, LogAddress::ZERO, LogAddress::MAX, &mut found).unwrap();
            assert_eq!(found, (700..1300).map(LogAddress::new).collect::<Vec<_>>());
            found.clear();
            r.lookup(7, LogAddress::new(1000), LogAddress::new(1010), &mut found).unwrap();
            assert_eq!(found.len(), 10);
            found.clear();
            r.lookup(5, LogAddress::ZERO, LogAddress::MAX, &mut found).unwrap();
            assert!(found.is_empty());
            assert_eq!(r.count(9, LogAddress::ZERO, LogAddress::MAX, 100).unwrap(), 100);
        }
        assert!(Run::open(&dir.join(run_name(4, LogAddress::new(100), LogAddress::new(2000))), 5).is_err(), "another PSF's");
        // A flipped bit in an entry fails its block's checksum; in a fence, the fences'.
        let path = dir.join(run_name(4, LogAddress::new(100), LogAddress::new(2000)));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_BYTES + 20 * ENTRY_BYTES + 9] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let damaged = Run::open(&path, 4).unwrap();
        assert!(damaged.lookup(3, LogAddress::ZERO, LogAddress::MAX, &mut Vec::new()).unwrap_err().to_string().contains("checksum"));
        let fences_at = bytes.len() - 4 - 2 * FENCE_BYTES;
        bytes[fences_at + 1] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Run::open(&path, 4).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
