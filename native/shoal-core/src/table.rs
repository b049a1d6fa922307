//! A table: one hybrid log, one hash index, one PSF registry, one inferred schema.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::checkpoint::{
    write_json_atomic, CheckpointState, IndexCheckpointRef, ObservedTotals, PsfMeta, TableMeta, CHECKPOINT_FILE,
    FORMAT_VERSION, TABLE_META_FILE,
};
use crate::columnar::{ColumnarStats, ColumnarStore};
use crate::completion::InFlight;
use crate::error::{Error, Result};
use crate::index::HashIndex;
use crate::keys::{KeyStats, Keyed, PrimaryKey, PRIMARY_KEY_PSF};
use crate::log::HybridLog;
use crate::parser::{default_parser, RecordParser};
use crate::psf::{Psf, PsfKind, PsfRegistry, PsfSpec};
use crate::record::PageRecords;
use crate::schema::{InferredSchema, TailSchema, MAX_SCHEMA_FIELDS};
use crate::session::state::Sessions;
use crate::LogAddress;

pub use crate::config::{DurabilityPolicy, InvalidJsonPolicy, RetentionPolicy, TableConfig};
pub use crate::log::{page_location, DeviceConfig, LogConfig, PageCacheStats, PageSnapshot, PageSource, PageSourceRef, PAGE_FOOTER_SIZE};

/// Counters of a table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// Records ingested.
    pub records: u64,
    /// Payload bytes ingested.
    pub payload_bytes: u64,
    /// Records skipped as invalid JSON.
    pub skipped_records: u64,
    /// Lowest valid log address.
    pub begin_address: LogAddress,
    /// Lowest in-memory address.
    pub head_address: LogAddress,
    /// Everything below is on the device.
    pub flushed_until_address: LogAddress,
    /// Whole pages below this address were merged into the inferred schema by the log's
    /// observer (which runs at a lower priority, so it may lag behind the tail under
    /// load); the schema of later records is inferred when the schema is asked for.
    pub observed_until_address: LogAddress,
    /// Next address to allocate.
    pub tail_address: LogAddress,
    /// Every record below it is complete ([`Table::complete_until`]): what a query's
    /// answer is complete up to, and where a follower that is caught up stands.
    pub complete_until: LogAddress,
    /// Everything below it survives a crash ([`Table::durable_address`]; 0 for in-memory
    /// tables): where a follower that must never see a record a crash could take back
    /// stops (`durable_only`).
    pub durable_address: LogAddress,
    /// Bytes of the log not yet in the remote store ([`Table::remote_lag_bytes`]); absent
    /// without a remote store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_lag_bytes: Option<u64>,
    /// With a page source (the daemon's `local_cache_bytes`): pages fetched from the remote
    /// store and evicted since the table was opened, and the bytes its segment files take
    /// on the local disk now; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_cache: Option<PageCacheUse>,
    /// Bytes of one log page (the unit of flushing, eviction and observation: whole pages
    /// below `observed_until_address` are in the schema).
    pub page_size_bytes: u64,
    /// Bytes of the hash index.
    pub index_bytes: u64,
    /// Overflow buckets in use.
    pub index_overflow_buckets: u64,
    /// The columnar tier.
    pub columnar: ColumnarStats,
    /// The retention policy (`{}`: keep everything).
    pub retention: RetentionPolicy,
    /// A keyed table's key index ([`crate::keys`]); absent for an append-only table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<KeyStats>,
    /// The table's memory: what it reserves now and what holds data.
    pub memory: MemoryStats,
}

/// A table's page cache ([`TableStats::page_cache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PageCacheUse {
    /// Pages fetched from the page source since the table was opened.
    pub fetched_pages: u64,
    /// Pages evicted from the segment files since the table was opened.
    pub evicted_pages: u64,
    /// Bytes the segment files take on the local disk (holes take none).
    pub disk_bytes: u64,
    /// Columnar files fetched from the remote copy since the table was opened.
    pub fetched_files: u64,
    /// Columnar files evicted (deleted here, kept in the remote copy) since the table was
    /// opened.
    pub evicted_files: u64,
    /// Bytes the columnar files take on the local disk.
    pub columnar_disk_bytes: u64,
}

/// A table's memory, in bytes ([`Table::memory_stats`]): reserved as it fills, up to its
/// bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Counted against a daemon's memory limit ([`Table::reserved_bytes`]).
    pub reserved_bytes: u64,
    /// Log bytes held in the ring (from the head, or the begin address, to the tail): the
    /// records in memory.
    pub log_bytes_in_memory: u64,
    /// The ring's frames populated so far (whole pages; at most the memory budget).
    pub log_populated_bytes: u64,
    /// The hash index's buckets in memory (0 until the first record is indexed).
    pub index_bytes: u64,
    /// The columnar tier's decoded columns as cached, and an in-memory table's files.
    pub columnar_bytes: u64,
    /// A keyed table's key index.
    pub key_index_bytes: u64,
    /// PSFs' backfill runs: an in-memory table's entries, every run's fences.
    pub backfill_bytes: u64,
    /// The most the table reserves once full ([`TableConfig::memory_bound_bytes`], with
    /// the key index as it is now).
    pub bound_bytes: u64,
}

/// A FishStore instance: ingest JSON records, register PSFs, scan subsets.
pub struct Table {
    config: TableConfig,
    log: Arc<HybridLog>,
    index: HashIndex,
    psfs: PsfRegistry,
    /// The schema and counters of observed pages (the log's page observer).
    observed: Arc<Mutex<Observed>>,
    /// The schema of the pages the observer has not reached yet, kept up to date
    /// incrementally by [`Table::schema`].
    tail_schema: Mutex<TailSchema>,
    /// Directory of an on-disk table (metadata and checkpoint files).
    dir: Option<PathBuf>,
    /// Serialises rewrites of `table.json`.
    meta_lock: Mutex<()>,
    /// The retention policy: the configuration's until [`Table::set_retention`] changes it.
    retention: Mutex<RetentionPolicy>,
    /// Serialises checkpoints (`checkpoint.json`).
    checkpoint_lock: Mutex<()>,
    /// The columnar tier's files and compactor.
    columnar: Arc<ColumnarStore>,
    /// PSFs' backfills: sorted runs of the records below their safe register addresses.
    backfill: Arc<crate::psf::backfill::Backfill>,
    /// Writer sessions (exactly-once batches).
    sessions: Sessions,
    parsers: Mutex<Vec<Box<dyn RecordParser>>>,
    /// Batches being written ([`Table::complete_until`]).
    in_flight: InFlight,
    /// The table's counters ([`Table::stats`]): changed only through
    /// [`Table::count_ingested`], [`Table::count_withdrawn`] and [`Table::restore_counts`].
    records: AtomicU64,
    payload_bytes: AtomicU64,
    skipped: AtomicU64,
    /// A keyed table's key and key index ([`crate::keys`]).
    keyed: Option<Keyed>,
    /// What the table's owner in a remote store says of it ([`Table::advance_remote_durable`],
    /// [`Table::fence`]).
    remote: RemoteState,
}

/// What the process that mirrors a table into an object store (the daemon's remote mirror,
/// issue 47) tells the engine: how far the log is in the store, and whether another process
/// took the table over.
#[derive(Debug, Default)]
struct RemoteState {
    /// Every byte of the log below this address is in the remote store (a log address).
    durable: AtomicU64,
    /// Why this process may no longer write the table (another owner's newer epoch).
    fenced: std::sync::OnceLock<String>,
    /// Whether a remote store mirrors the table ([`Table::advance_remote_durable`] was called).
    mirrored: std::sync::atomic::AtomicBool,
    /// Since when, and why, uploads to the remote store fail ([`Table::set_remote_failure`]).
    failure: Mutex<Option<(std::time::Instant, String)>>,
    /// Why new batches are refused while the table is handed over ([`Table::close_to_writes`]);
    /// read-held by writes outside batches while they run ([`Table::hold_writable`]).
    closed: parking_lot::RwLock<Option<String>>,
    /// Whether `closed` holds a reason (read on every batch).
    closing: std::sync::atomic::AtomicBool,
    /// Signalled when `durable` advances, the table is fenced or uploads fail: what a wait
    /// for durability `remote` sleeps on ([`Table::wait_remote_durable`]).
    changed: (Mutex<()>, parking_lot::Condvar),
}

/// How long the remote store of a table with durability `remote` may fail before batches
/// are refused and waits for durability fail ([`crate::Error::RemoteUnavailable`]).
pub const REMOTE_FAILURE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("log", &self.log).field("index", &self.index).finish_non_exhaustive()
    }
}

impl Table {
    /// Adds a batch's counts (records and payload bytes ingested, records skipped) to the
    /// table's counters ([`Table::stats`]).
    /// The columnar tier's files and compactor ([`crate::columnar`]).
    pub(crate) fn columnar(&self) -> &Arc<ColumnarStore> {
        &self.columnar
    }

    /// The PSFs' backfills ([`crate::psf::backfill`]).
    pub(crate) fn backfill(&self) -> &Arc<crate::psf::backfill::Backfill> {
        &self.backfill
    }

    /// The writer sessions of exactly-once batches ([`crate::session`]).
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The batches being written ([`Table::complete_until`]).
    pub(crate) fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The schema and counters of observed pages (the log's page observer).
    pub(crate) fn observed(&self) -> &Arc<Mutex<Observed>> {
        &self.observed
    }

    /// A keyed table's key and key index ([`crate::keys`]); `None` for a log of events.
    pub(crate) fn keyed(&self) -> &Option<Keyed> {
        &self.keyed
    }

    pub(crate) fn count_ingested(&self, records: usize, payload_bytes: usize, skipped: usize) {
        self.records.fetch_add(records as u64, Ordering::Relaxed);
        self.payload_bytes.fetch_add(payload_bytes as u64, Ordering::Relaxed);
        self.skipped.fetch_add(skipped as u64, Ordering::Relaxed);
    }

    /// Takes `records` withdrawn records (a batch that could not be made durable) off the
    /// record count.
    pub(crate) fn count_withdrawn(&self, records: usize) {
        self.records.fetch_sub(records as u64, Ordering::Relaxed);
    }

    /// Sets the counters recovery found by replaying the log (records and payload bytes;
    /// skipped records are not in the log, so they start again at 0).
    pub(crate) fn restore_counts(&self, records: u64, payload_bytes: u64) {
        self.records.store(records, Ordering::Relaxed);
        self.payload_bytes.store(payload_bytes, Ordering::Relaxed);
    }

    /// Creates an empty table. On a directory device, writes its metadata
    /// (`table.json`, see [`crate::checkpoint`]) there first.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], or [`Error::Io`] when the data directory cannot be
    /// created; [`Error::InvalidConfig`] if the directory already holds a table (open it
    /// with [`Table::open`], which recovers it).
    pub fn create(config: TableConfig) -> Result<Arc<Self>> {
        if let DeviceConfig::Directory(dir) = &config.log.device {
            if holds_table(dir) {
                return Err(Error::InvalidConfig(format!(
                    "{} already holds a table; open it (recovery) instead of creating one",
                    dir.display()
                )));
            }
            // A list of withdrawn records left by an earlier table would hide new records.
            let stale = dir.join(crate::log::withdrawn::WITHDRAWN_FILE);
            if stale.exists() {
                std::fs::remove_file(&stale).map_err(|e| Error::io(&stale, e))?;
            }
        }
        // The index first: it validates its size before the log starts a thread.
        let index = HashIndex::new(config.index_size_bits)?;
        let log = HybridLog::create(&config.log)?;
        let table = Self::assemble(config, log, index, Observed::default())?;
        table.write_meta(&[])?;
        if let Some(keyed) = &table.keyed {
            // Registered first, before any record: id 0, covering the whole log.
            let kind = PrimaryKey::psf_kind(&keyed.key.fields);
            let psf = table.psfs.register(PRIMARY_KEY_PSF, kind, || table.log.tail_address(), |all| table.write_meta(all))?;
            debug_assert_eq!(psf.id, keyed.key.psf);
        }
        Ok(table)
    }

    /// A table over a log and an index that are ready (created or recovered); the
    /// inferred schema covers the log up to its tail. Starts the log's page observer,
    /// which merges every page into the schema once it is flushed.
    ///
    /// # Errors
    /// [`Error::Io`] when the observer thread cannot be started.
    pub(crate) fn assemble(config: TableConfig, log: Arc<HybridLog>, index: HashIndex, observed: Observed) -> Result<Arc<Self>> {
        let keyed = (!config.primary_key.is_empty()).then(|| Keyed::new(config.primary_key.clone(), 0));
        let observed = Arc::new(Mutex::new(Observed { until: log.tail_address(), ..observed }));
        let state = Arc::clone(&observed);
        let capacity = log.page_capacity();
        let page_size = log.page_size() as u64;
        // Whether the schema's field limit was reached (warned about once).
        let limited = std::sync::atomic::AtomicBool::new(false);
        log.set_page_observer(Box::new(move |page, bytes| {
            let mut page_schema = InferredSchema::new();
            let mut totals = ObservedTotals::default();
            // Offsets of the records counted: a record withdrawn while this page is read
            // is taken out again below if it was counted.
            let mut counted: Vec<usize> = Vec::new();
            for (offset, view) in PageRecords::new(&bytes[..capacity]) {
                let header = view.header();
                if header.is_visible() && !header.is_invalid() {
                    page_schema.observe_validated(view.payload());
                    let kps = (0..header.key_pointer_count()).filter_map(|i| view.key_pointer(i)).map(|kp| kp.psf_id);
                    totals.add(view.payload().len(), kps);
                    counted.push(offset);
                }
            }
            let mut state = state.lock();
            state.schema.merge(&page_schema);
            if state.schema.limit_fields(MAX_SCHEMA_FIELDS) && !limited.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    limit = MAX_SCHEMA_FIELDS,
                    "a table's inferred schema reached its field limit: new keys of its records are no longer columns \
                     (they stay in the records)"
                );
            }
            state.totals.merge(&totals);
            let (start, end) = (LogAddress::new(page * page_size), LogAddress::new((page + 1) * page_size));
            if state.withdrawn_unobserved.first().is_some_and(|&a| a < end) {
                // Records withdrawn while this page was read, counted if their header was
                // read before the withdrawal marked it.
                let withdrawn = std::mem::take(&mut state.withdrawn_unobserved);
                for &address in withdrawn.iter().filter(|&&a| a >= start && a < end) {
                    let offset = (address - start) as usize;
                    if counted.binary_search(&offset).is_ok() {
                        if let Some(view) = crate::record::RecordView::new(&bytes[offset..capacity]) {
                            let kps = (0..view.header().key_pointer_count()).filter_map(|i| view.key_pointer(i)).map(|kp| kp.psf_id);
                            state.totals.remove(view.payload().len(), kps);
                        }
                    }
                }
                state.withdrawn_unobserved = withdrawn.into_iter().filter(|&a| a >= end).collect();
            }
            state.until = state.until.max(end);
        }))?;
        let dir = match &config.log.device {
            DeviceConfig::Directory(dir) => Some(dir.clone()),
            DeviceConfig::Null => None,
        };
        let columnar =
            Arc::new(ColumnarStore::open(config.columnar.clone(), dir.as_deref(), log.begin_address(), log.tail_address(), config.log.page_source.as_ref())?);
        // Files a withdrawal could not drop (its manifest write failed after the list was
        // written): those that hold a withdrawn record as a row.
        if let Err(error) = columnar.drop_holding(&log.withdrawn_addresses()) {
            tracing::warn!(%error, "columnar files holding withdrawn records could not be dropped at open; they are not read");
        }
        crate::columnar::start_compactor(&columnar, &log)?;
        let backfill = crate::psf::backfill::Backfill::new(dir.as_deref(), Arc::clone(&log));
        Ok(Arc::new(Self {
            retention: Mutex::new(config.retention),
            config,
            log,
            index,
            psfs: PsfRegistry::default(),
            observed,
            tail_schema: Mutex::new(TailSchema::default()),
            dir,
            meta_lock: Mutex::new(()),
            checkpoint_lock: Mutex::new(()),
            columnar,
            backfill,
            sessions: Sessions::default(),
            parsers: Mutex::new(Vec::new()),
            in_flight: InFlight::default(),
            records: AtomicU64::new(0),
            payload_bytes: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            keyed,
            remote: RemoteState::default(),
        }))
    }

    /// Records that every byte of the log below `address` is in the remote store (the
    /// daemon's remote mirror calls it after each upload it committed). With durability
    /// [`DurabilityPolicy::Remote`] a batch is acknowledged once this passes its end
    /// ([`Table::durable_address`]); the address never moves back.
    pub fn advance_remote_durable(&self, address: LogAddress) {
        self.remote.mirrored.store(true, Ordering::Release);
        self.remote.durable.fetch_max(address.get(), Ordering::AcqRel);
        self.remote_changed();
    }

    /// Wakes the waits for durability `remote` ([`Table::wait_remote_durable`]).
    fn remote_changed(&self) {
        let _guard = self.remote.changed.0.lock();
        self.remote.changed.1.notify_all();
    }

    /// Sleeps until the remote store holds the log below `address`, the table is fenced,
    /// uploads fail, or `timeout` passes (the caller checks which).
    pub(crate) fn wait_remote_durable(&self, address: LogAddress, timeout: std::time::Duration) {
        let mut guard = self.remote.changed.0.lock();
        if self.remote_durable_address() < address {
            self.remote.changed.1.wait_for(&mut guard, timeout);
        }
    }

    /// Says that uploads to the remote store fail (`Some(why)`; the first failure's time is
    /// kept while they go on failing) or work again (`None`). With durability
    /// [`DurabilityPolicy::Remote`], once they have failed for [`REMOTE_FAILURE_GRACE`],
    /// new batches are refused and waits for durability fail with
    /// [`crate::Error::RemoteUnavailable`] naming `why`.
    pub fn set_remote_failure(&self, why: Option<String>) {
        {
            let mut failure = self.remote.failure.lock();
            *failure = why.map(|why| (failure.as_ref().map_or_else(std::time::Instant::now, |(since, _)| *since), why));
        }
        self.remote_changed();
    }

    /// The remote store's failure once it has lasted [`REMOTE_FAILURE_GRACE`], for a table
    /// with durability [`DurabilityPolicy::Remote`].
    pub(crate) fn remote_failure(&self) -> Option<crate::Error> {
        if !matches!(self.config.durability, DurabilityPolicy::Remote { .. }) {
            return None;
        }
        let failure = self.remote.failure.lock();
        let (since, why) = failure.as_ref()?;
        (since.elapsed() >= REMOTE_FAILURE_GRACE)
            .then(|| crate::Error::RemoteUnavailable(format!("{why} (failing for {} ms)", since.elapsed().as_millis())))
    }

    /// Bytes of the log not yet in the remote store (the tail minus
    /// [`Table::remote_durable_address`]): what a lost disk would cost. `None` when no
    /// remote store mirrors the table.
    #[must_use]
    pub fn remote_lag_bytes(&self) -> Option<u64> {
        self.remote.mirrored.load(Ordering::Acquire).then(|| self.tail_address().get().saturating_sub(self.remote_durable_address().get()))
    }

    /// The address below which the remote store holds the log (0 when nothing was
    /// uploaded, or the table has no remote store).
    pub fn remote_durable_address(&self) -> LogAddress {
        LogAddress::new(self.remote.durable.load(Ordering::Acquire))
    }

    /// Evicts up to `max_pages` of the log's pages from the local segment files, chosen by
    /// CLOCK among those the remote store holds and that are flushed (pages of
    /// `[begin, min(remote durable, flushed))`, whole); they are fetched again from the
    /// table's page source when read ([`crate::log::cache`]). Returns the pages evicted
    /// (0 without a page source, or before the remote store holds a page).
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming the segment file (a file system without holes).
    pub fn evict_cached_pages(&self, max_pages: u64) -> Result<u64> {
        if !self.remote.mirrored.load(Ordering::Acquire) || self.config.log.page_source.is_none() {
            return Ok(0);
        }
        let from = self.page_of(self.begin_address());
        let to = self.page_of(self.remote_durable_address()).min(self.page_of(self.flushed_address()));
        self.log.evict_pages(from, to, max_pages)
    }

    /// Deletes the least recently read columnar files the page source holds (the remote
    /// copy: [`PageSource::holds_columnar_file`]) until `max_bytes` are freed; a scan that
    /// reads one fetches it again, checked against the columnar manifest. Nothing without a
    /// page source.
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming a file that could not be deleted.
    pub fn evict_columnar_files(&self, max_bytes: u64) -> Result<crate::columnar::EvictedFiles> {
        self.columnar.evict_files(max_bytes)
    }

    /// Bytes the columnar files take on the local disk (0 for an in-memory table).
    #[must_use]
    pub fn columnar_disk_bytes(&self) -> u64 {
        self.columnar.disk_bytes()
    }

    /// The names of the table's columnar files (in its `columnar/` directory), whether or
    /// not they are on the local disk now.
    #[must_use]
    pub fn columnar_file_names(&self) -> Vec<String> {
        self.columnar.files().iter().map(|f| f.name().to_owned()).collect()
    }

    /// Bytes the log's segment files take on the local disk (holes left by eviction take
    /// none).
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming the directory.
    pub fn log_disk_bytes(&self) -> Result<u64> {
        self.log.disk_bytes()
    }

    /// The log's page cache counters: pages fetched from the page source and evicted since
    /// the table was opened (`None` without a page source).
    #[must_use]
    pub fn page_cache_stats(&self) -> Option<PageCacheStats> {
        self.log.cache_stats()
    }

    /// Refuses every new batch with [`crate::Error::Moving`] carrying `reason` (`Some`), or
    /// takes batches again (`None`): a table being handed to another process (a shard moving
    /// to another node). Unlike [`Table::fence`], batches already admitted go on and are
    /// acknowledged as their durability says; [`Table::complete_until`] reaching the tail
    /// says they are all in the log.
    ///
    /// Closing waits for the writes outside batches under way ([`Table::hold_writable`]): once
    /// it returns, none writes until the table opens again.
    pub fn close_to_writes(&self, reason: Option<String>) {
        let mut closed = self.remote.closed.write();
        self.remote.closing.store(reason.is_some(), Ordering::Release);
        *closed = reason;
    }

    /// Whether the table takes writes here: `Err` when it is fenced ([`Table::fence`]) or
    /// being handed over ([`Table::close_to_writes`]). A batch's admission asks it; writes
    /// outside batches hold [`Table::hold_writable`] instead.
    ///
    /// # Errors
    /// [`crate::Error::Fenced`], [`crate::Error::Moving`].
    pub fn check_writable(&self) -> Result<()> {
        self.writable_unless(self.closed_to_writes().as_deref())
    }

    /// `Err` when the table is fenced, or `closed` says why it is handed over.
    fn writable_unless(&self, closed: Option<&str>) -> Result<()> {
        if let Some(reason) = self.fenced() {
            return Err(crate::Error::Fenced(reason.to_owned()));
        }
        match closed {
            Some(reason) => Err(crate::Error::Moving(reason.to_owned())),
            None => Ok(()),
        }
    }

    /// [`Table::check_writable`], and then holds off [`Table::close_to_writes`] until the
    /// guard is dropped: for writes outside batches (a transaction's staged records, its
    /// steps) that must be whole in the files a hand-over uploads, or refused. Batches need
    /// none: the hand-over waits for every admitted batch to be in the log. A write holding
    /// the guard must not wait for a hand-over.
    ///
    /// # Errors
    /// As [`Table::check_writable`].
    pub fn hold_writable(&self) -> Result<impl Drop + '_> {
        let guard = self.remote.closed.read();
        self.writable_unless(guard.as_deref())?;
        Ok(guard)
    }

    /// Why new batches are refused ([`Table::close_to_writes`]), if they are.
    pub(crate) fn closed_to_writes(&self) -> Option<String> {
        // `closing` is set only under the write lock: while a write holds the read lock
        // (`hold_writable`) it is false and nothing here locks again.
        if !self.remote.closing.load(Ordering::Acquire) {
            return None;
        }
        self.remote.closed.read().clone()
    }

    /// Another process owns the table now (it claimed a newer epoch in the remote store):
    /// from here on every batch is refused and every wait for durability fails with
    /// [`crate::Error::Fenced`] carrying `reason` (the first reason given stays). Reads go on.
    pub fn fence(&self, reason: impl Into<String>) {
        let reason = reason.into();
        if self.remote.fenced.set(reason.clone()).is_ok() {
            tracing::warn!(reason, "table fenced: it acknowledges no more writes");
        }
        self.remote_changed();
    }

    /// Why the table was fenced ([`Table::fence`]), if it was.
    pub fn fenced(&self) -> Option<&str> {
        self.remote.fenced.get().map(String::as_str)
    }

    /// Rewrites `table.json` with `psfs` (no-op for in-memory tables).
    pub(crate) fn write_meta(&self, psfs: &[Arc<Psf>]) -> Result<()> {
        self.write_meta_as(psfs, self.log.begin_address())
    }

    /// Rewrites `table.json` with the current PSFs and `begin_address`.
    pub(crate) fn write_meta_with_begin(&self, begin_address: LogAddress) -> Result<()> {
        self.write_meta_as(&self.psfs.all(), begin_address)
    }

    fn write_meta_as(&self, psfs: &[Arc<Psf>], begin_address: LogAddress) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let _serialised = self.meta_lock.lock();
        let meta = TableMeta {
            format_version: FORMAT_VERSION,
            page_size_bits: self.config.log.page_size_bits,
            pages_per_segment: self.config.log.pages_per_segment,
            index_size_bits: self.config.index_size_bits,
            memory_budget_bytes: self.config.log.memory_budget_bytes,
            durability: self.config.durability,
            begin_address,
            on_invalid_json: self.config.on_invalid_json,
            psfs: psfs.iter().map(|p| PsfMeta::of(p)).collect(),
            columnar: self.config.columnar.clone(),
            retention: self.retention(),
            primary_key: self.config.primary_key.iter().map(ToString::to_string).collect(),
            snapshot_horizon: self.keyed.as_ref().map_or(LogAddress::ZERO, |k| k.snapshots.horizon()),
        };
        write_json_atomic(dir, TABLE_META_FILE, &meta)
    }

    /// The retention policy ([`TableConfig::retention`] unless [`Self::set_retention`]
    /// changed it).
    #[must_use]
    pub fn retention(&self) -> RetentionPolicy {
        *self.retention.lock()
    }

    /// Replaces the retention policy (Kafka's `alter configs` of `retention.bytes` /
    /// `retention.ms`): kept in `table.json` (a restart keeps it) and applied from the
    /// next [`Self::apply_retention`]. The policy is not checked here (the operations
    /// layer refuses zero amounts).
    ///
    /// # Errors
    /// [`Error::Io`] when `table.json` cannot be rewritten (the policy is then unchanged).
    pub fn set_retention(&self, policy: RetentionPolicy) -> Result<()> {
        let previous = std::mem::replace(&mut *self.retention.lock(), policy);
        if let Err(error) = self.write_meta(&self.psfs.all()) {
            *self.retention.lock() = previous;
            return Err(error);
        }
        Ok(())
    }

    /// The directory of an on-disk table.
    #[must_use]
    pub fn directory(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// The hybrid log (engine internals: tests and benchmarks, feature `internals`).
    #[cfg(feature = "internals")]
    #[must_use]
    pub fn log(&self) -> &Arc<HybridLog> {
        &self.log
    }

    /// The hybrid log (public with the feature `internals`).
    #[cfg(not(feature = "internals"))]
    pub(crate) fn log(&self) -> &Arc<HybridLog> {
        &self.log
    }

    /// The lowest valid log address (FASTER's begin address): records below it were dropped
    /// by retention or truncation.
    #[must_use]
    pub fn begin_address(&self) -> LogAddress {
        self.log.begin_address()
    }

    /// The log address below which the log is in its segment files (written; synced under
    /// `group_commit` and `fsync`): what a copy of the log (the daemon's remote store) can
    /// read of them. 0 for an in-memory table.
    #[must_use]
    pub fn flushed_address(&self) -> LogAddress {
        if self.log.has_storage() { self.log.flushed_until() } else { LogAddress::ZERO }
    }

    /// The page holding `address` (its number: address / page size).
    #[must_use]
    pub fn page_of(&self, address: LogAddress) -> u64 {
        self.log.page_of(address)
    }

    /// How many times the table's withdrawn records (`withdrawn.bin`) changed: a copy of
    /// the table reads that file again when this moved (the file is preallocated and
    /// rewritten in place, so its length says nothing).
    #[must_use]
    pub fn withdrawn_generation(&self) -> u64 {
        self.log.withdrawn_generation()
    }

    /// Page `page` of the log as its segment file proves it now ([`PageSnapshot`]): for
    /// copies of the log (the daemon's remote store). `None` for an in-memory table and a
    /// page never written.
    ///
    /// # Errors
    /// [`Error::Io`] naming the segment file; [`Error::CorruptPage`] when its footer proves
    /// nothing.
    pub fn snapshot_page(&self, page: u64) -> Result<Option<PageSnapshot>> {
        self.log.snapshot_page(page)
    }

    /// The log address one past the last allocated record (FASTER's tail): every record
    /// ingested so far lies below it.
    #[must_use]
    pub fn tail_address(&self) -> LogAddress {
        self.log.tail_address()
    }

    /// The log address below which every record is complete (visible, or invalid and never
    /// to be visible): at most the tail, below the first record of any batch still being
    /// written. A scan up to it misses nothing that a later scan from it would skip, so it
    /// is what a query's answer is complete up to, and a follower's next `from_address`.
    /// It only grows. See `completion.rs`.
    #[must_use]
    pub fn complete_until(&self) -> LogAddress {
        self.in_flight.complete_until(|| self.log.tail_address())
    }

    /// Whether the log flushes pages to storage (an on-disk table), rather than keeping
    /// them only in memory (the null device).
    #[must_use]
    pub fn has_storage(&self) -> bool {
        self.log.has_storage()
    }

    /// The bytes of the log's in-memory page ring (the memory budget rounded to whole
    /// pages).
    #[must_use]
    pub fn ring_bytes(&self) -> u64 {
        self.log.ring_bytes()
    }

    /// The memory this table reserves now, in bytes, counted against a daemon's memory
    /// limit: it grows as the table fills, from one log page for an empty table
    /// ([`TableConfig::empty_reserved_bytes`]) up to [`TableConfig::memory_bound_bytes`]
    /// plus what a keyed table's key index and an in-memory table's files hold. The parts:
    /// the page ring's frames populated so far (one per page, on the log's first pass
    /// through the ring), the hash index's main buckets once the first record is indexed
    /// (64 bytes each) and its overflow buckets, the inferred schema's bound
    /// ([`crate::schema::SCHEMA_RESERVED_BYTES`]) once the table has held a record, the
    /// columnar tier's decoded columns as cached and an in-memory table's Parquet files,
    /// a keyed table's key index as it is now, and what PSFs' backfill runs hold (an
    /// in-memory table's entries, every run's fences).
    #[must_use]
    pub fn reserved_bytes(&self) -> u64 {
        let key_index = self.keyed.as_ref().map_or(0, |k| k.index.memory_bytes());
        let schema = if self.payload_bytes.load(Ordering::Relaxed) > 0 { crate::schema::SCHEMA_RESERVED_BYTES } else { 0 };
        self.log.populated_bytes()
            + self.index.populated_bytes()
            + schema
            + self.columnar.reserved_bytes()
            + key_index
            + self.backfill.memory_bytes()
    }

    /// The bytes [`Self::reserved_bytes`] may grow by when a batch of `bytes` of records is
    /// ingested: the log frames its pages populate, the hash index's main buckets at the
    /// first record indexed (a table with PSFs or a primary key), the schema's bound at the
    /// first record. 0 for a table that went once through its ring (its memory does not
    /// grow with records, except a keyed table's key index). An estimate from above: the
    /// frames of a page of slack and of the flush thread's populating ahead count too.
    #[must_use]
    pub fn memory_growth_for(&self, bytes: usize) -> u64 {
        // Once the index is populated (every batch after the first indexed one), nothing to
        // look up: the PSF list is read only before that.
        let unpopulated = self.index.populated_growth();
        let index = if unpopulated > 0 && (self.keyed.is_some() || !self.psfs.all().is_empty()) { unpopulated } else { 0 };
        let schema = if self.payload_bytes.load(Ordering::Relaxed) == 0 { crate::schema::SCHEMA_RESERVED_BYTES } else { 0 };
        self.log.populated_growth_for(bytes) + index + schema
    }

    /// Lets go of the memory the table holds only to be faster — the columnar tier's cache
    /// of decoded columns and parsed footers — when the daemon's memory is wanted for data
    /// (a batch that would pass the memory limit); scans fill it again. Returns the bytes
    /// freed (they leave [`Self::reserved_bytes`] at once).
    pub fn release_cache(&self) -> u64 {
        self.columnar.release_cache()
    }

    /// The table's memory ([`MemoryStats`]).
    #[must_use]
    pub fn memory_stats(&self) -> MemoryStats {
        let in_memory = self.log.tail_address().bytes_since(self.log.head_address().max(self.log.begin_address()));
        let key_index = self.keyed.as_ref().map_or(0, |k| k.index.memory_bytes());
        MemoryStats {
            reserved_bytes: self.reserved_bytes(),
            log_bytes_in_memory: in_memory,
            log_populated_bytes: self.log.populated_bytes(),
            index_bytes: self.index.populated_bytes(),
            columnar_bytes: self.columnar.reserved_bytes(),
            key_index_bytes: key_index,
            backfill_bytes: self.backfill.memory_bytes(),
            bound_bytes: self.config.memory_bound_bytes() + key_index,
        }
    }

    /// Stops the log's flush thread after it has flushed every closed page, without a
    /// checkpoint (a table about to be dropped); further ingestion fails with
    /// [`Error::Closed`]. The columnar compactor is stopped first (joined), so that it
    /// writes no file into a directory that is being deleted.
    pub fn shutdown(&self) {
        self.backfill.shutdown();
        self.columnar.shutdown();
        self.log.shutdown();
    }

    /// The PSF registry.
    #[must_use]
    pub fn psfs(&self) -> &PsfRegistry {
        &self.psfs
    }

    /// The hash index (engine internals: tests and benchmarks, feature `internals`).
    #[cfg(feature = "internals")]
    #[must_use]
    pub fn index(&self) -> &HashIndex {
        &self.index
    }

    /// The hash index (public with the feature `internals`).
    #[cfg(not(feature = "internals"))]
    pub(crate) fn index(&self) -> &HashIndex {
        &self.index
    }


    pub(crate) fn take_parser(&self) -> Box<dyn RecordParser> {
        self.parsers.lock().pop().unwrap_or_else(default_parser)
    }

    pub(crate) fn return_parser(&self, parser: Box<dyn RecordParser>) {
        self.parsers.lock().push(parser);
    }

    pub(crate) fn checkpoint_version(&self) -> u16 {
        0
    }


    /// Checks `records` the way [`Self::ingest`] would, without writing anything:
    /// returns the index and reason of each record that is not valid JSON or too large
    /// to fit a page with this table's PSFs, or, in a keyed table, has no usable primary
    /// key (used to validate records staged for later ingestion, e.g. in a transaction, so
    /// that ingesting them cannot fail).
    #[must_use]
    pub fn check_records(&self, records: &[&[u8]]) -> Vec<(usize, String)> {
        let mut parser = self.take_parser();
        let mut parsed = crate::parser::ParsedBatch::default();
        let mut fields = crate::parser::FieldSet::new();
        let key_ids: Vec<usize> = self.keyed.iter().flat_map(|k| k.key.fields.iter()).map(|f| fields.insert(f)).collect();
        let mut key = Vec::new();
        parsed.reset(fields.len());
        parser.parse_batch(records, &fields, &mut parsed);
        self.return_parser(parser);
        // Room for a key pointer per PSF and a value region as large as the record.
        let psfs = self.psfs.all().len();
        let mut problems = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match parsed.record(index) {
                Err(reason) => {
                    problems.push((index, reason.to_owned()));
                    continue;
                }
                Ok(values) => {
                    if let Some(keyed) = &self.keyed {
                        if !PrimaryKey::encode(key_ids.iter().map(|&id| &values[id]), &mut key) {
                            problems.push((index, format!("no primary key {}", keyed.key.describe())));
                            continue;
                        }
                    }
                }
            }
            if crate::record::record_size(psfs, record.len(), record.len()) > self.log.max_record_size() {
                problems.push((index, format!("{} bytes is too large for this table's pages", record.len())));
            }
        }
        problems
    }

    /// Registers a PSF while ingestion runs (FishStore §6.2); returns it with its safe
    /// register address.
    ///
    /// # Errors
    /// [`Error::PsfExists`], [`Error::InvalidPsf`], [`Error::InvalidPath`],
    /// [`Error::InvalidExpression`].
    pub fn register_psf(&self, name: &str, spec: &PsfSpec) -> Result<Arc<Psf>> {
        if name.is_empty() {
            return Err(Error::InvalidPsf { name: String::new(), reason: "the name is empty".into() });
        }
        if name == PRIMARY_KEY_PSF {
            return Err(Error::InvalidPsf { name: name.to_owned(), reason: "the name is reserved for keyed tables' key".into() });
        }
        let kind = PsfKind::from_spec(name, spec)?;
        self.psfs.register(name, kind, || self.log.tail_address(), |all| self.write_meta(all))
    }

    /// [`Self::register_psf`], then, with `backfill`, the PSF's backfill started: the
    /// records already in the log (`[begin, safe register address)`) are indexed in the
    /// background ([`crate::psf::backfill`]), and its coverage grows down to the begin
    /// address as they are ([`Psf::coverage`], [`Self::backfill_progress`]). Without
    /// records below the PSF there is nothing to backfill.
    ///
    /// # Errors
    /// As [`Self::register_psf`]; [`Error::Io`] when the backfill's marker cannot be
    /// written (the PSF stays registered, forward only).
    pub fn register_psf_with(&self, name: &str, spec: &PsfSpec, backfill: bool) -> Result<Arc<Psf>> {
        let psf = self.register_psf(name, spec)?;
        if backfill {
            self.backfill.start(&psf)?;
        }
        Ok(psf)
    }

    /// Holds the backfill thread (no run is made) until called with `false` (engine
    /// internals: tests, feature `internals`).
    #[cfg(feature = "internals")]
    pub fn hold_backfill(&self, held: bool) {
        self.backfill.hold(held);
    }

    /// The progress of PSF `id`'s backfill, if one was asked for.
    #[must_use]
    pub fn backfill_progress(&self, id: crate::psf::PsfId) -> Option<crate::psf::backfill::BackfillProgress> {
        self.backfill.progress(id)
    }

    /// Deregisters a PSF; returns it with its safe deregister address. Its chains stay
    /// usable for the log range they covered; a backfill stops and its runs are deleted.
    ///
    /// # Errors
    /// [`Error::PsfNotFound`].
    pub fn deregister_psf(&self, name: &str) -> Result<Arc<Psf>> {
        if self.keyed.is_some() && name == PRIMARY_KEY_PSF {
            return Err(Error::InvalidPsf {
                name: name.to_owned(),
                reason: "it indexes the table's primary key and cannot be deregistered".into(),
            });
        }
        let psf = self.psfs.deregister(name, || self.log.tail_address(), |all| self.write_meta(all))?;
        // Its backfill stops, and its runs go: it covers what its chains hold.
        self.backfill.forget(&psf);
        Ok(psf)
    }

    /// The inferred schema: pages merged by the log's observer once flushed, plus the
    /// pages it has not reached yet (closed pages still queued, and the open tail page),
    /// observed here so that every record ingested so far is reflected.
    #[must_use]
    pub fn schema(&self) -> InferredSchema {
        // Lock order: tail, then observed (the log's page observer takes only the
        // latter). Holding the tail lock keeps concurrent callers from observing the
        // same new records twice.
        let mut tail = self.tail_schema.lock();
        let (mut schema, observed_until) = {
            let observed = self.observed.lock();
            (observed.schema.clone(), observed.until)
        };
        tail.catch_up_and_merge(&self.log, self.log.page_of(observed_until), &mut schema);
        schema.limit_fields(MAX_SCHEMA_FIELDS);
        schema
    }

    /// Counters and log addresses.
    #[must_use]
    pub fn stats(&self) -> TableStats {
        TableStats {
            records: self.records.load(Ordering::Relaxed),
            payload_bytes: self.payload_bytes.load(Ordering::Relaxed),
            skipped_records: self.skipped.load(Ordering::Relaxed),
            begin_address: self.log.begin_address(),
            head_address: self.log.head_address(),
            flushed_until_address: self.log.flushed_until(),
            observed_until_address: self.log.observed_until(),
            tail_address: self.log.tail_address(),
            complete_until: self.complete_until(),
            durable_address: self.durable_address(),
            remote_lag_bytes: self.remote_lag_bytes(),
            page_cache: self.page_cache_stats().map(|counts| {
                let (fetched_files, evicted_files) = self.columnar.cache_counts().unwrap_or_default();
                PageCacheUse {
                    fetched_pages: counts.fetched_pages,
                    evicted_pages: counts.evicted_pages,
                    disk_bytes: self.log_disk_bytes().unwrap_or(0),
                    fetched_files,
                    evicted_files,
                    columnar_disk_bytes: self.columnar.disk_bytes(),
                }
            }),
            page_size_bytes: self.log.page_size() as u64,
            index_bytes: self.index.memory_bytes() as u64,
            columnar: self.columnar.stats(
                self.log.begin_address(),
                self.log.page_start(self.log.page_of(self.log.flushed_until())),
            ),
            index_overflow_buckets: self.index.overflow_bucket_count(),
            retention: self.retention(),
            keys: self.keyed.as_ref().map(|k| KeyStats {
                primary_key: k.key.fields.iter().map(ToString::to_string).collect(),
                snapshot_horizon: k.snapshots.horizon(),
                ..k.index.stats()
            }),
            memory: self.memory_stats(),
        }
    }

    /// Flushes everything ingested so far to the device (closing the open page) and
    /// waits for it. Returns the flushed address.
    ///
    /// # Errors
    /// [`Error::Closed`].
    pub fn flush(&self) -> Result<LogAddress> {
        let target = self.log.close_tail_page()?;
        Ok(self.log.wait_flushed(target, std::time::Duration::from_secs(60)))
    }

    /// Takes a checkpoint (FASTER §6.5's fuzzy checkpoint, FishStore Appendix E) while
    /// ingestion continues: every writer's last serial; the log tail `start`; a copy of
    /// the hash index (`index-<end>.checkpoint`); the tail `end`; the log made durable up
    /// to `end` (without closing the open page); then `checkpoint.json` with the inferred
    /// schema and counters of the flushed pages and a reference to the index copy. After a
    /// crash, recovery loads the copy and replays the log only from `start` (or from the
    /// first page the schema does not cover, if earlier). In-memory tables only flush.
    ///
    /// # Errors
    /// [`Error::Closed`]; [`Error::Io`] writing the files or making the log durable.
    pub fn checkpoint(&self) -> Result<CheckpointState> {
        // One checkpoint at a time: concurrent ones would race on the file's rename.
        let _one_at_a_time = self.checkpoint_lock.lock();
        let Some(dir) = &self.dir else {
            let flushed = self.flush()?;
            return Ok(CheckpointState { log_end_address: flushed, ..CheckpointState::default() });
        };
        // Serials first: every commit marker they count is below the tail read after.
        let writers = self.sessions.last_serials();
        let start = self.log.tail_address();
        let header =
            crate::checkpoint::index::write(dir, &self.index, self.config.index_size_bits, start, || self.log.tail_address())?;
        self.wait_durable(header.end, std::time::Duration::from_secs(60))?;
        // The schema of every whole page below the end, so that recovery has none to
        // infer again (a lagging observer only makes recovery infer more: the state
        // records how far the schema goes).
        let last_whole_page = self.log.page_start(self.log.page_of(header.end));
        self.log.wait_observed(last_whole_page, std::time::Duration::from_secs(60));
        let observed = self.observed.lock().clone();
        let state = CheckpointState {
            log_end_address: header.end,
            schema: observed.schema,
            schema_observed_until: observed.until,
            writers,
            totals: observed.totals,
            index: Some(IndexCheckpointRef {
                file: crate::checkpoint::index::file_name(header.end),
                start,
                end: header.end,
                entries: header.entries,
            }),
        };
        write_json_atomic(dir, CHECKPOINT_FILE, &state)?;
        // Older index copies are no longer referenced.
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.filter_map(std::result::Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let current = state.index.as_ref().is_some_and(|i| i.file == name);
                if name.starts_with("index-") && name.ends_with(".checkpoint") && !current {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(state)
    }

    /// Flushes every page (so the checkpoint's schema covers the whole log), takes a
    /// checkpoint and stops the table's background thread.
    ///
    /// # Errors
    /// As [`Self::checkpoint`].
    pub fn close(&self) -> Result<()> {
        let result = self.flush().and_then(|_| self.checkpoint()).map(|_| ());
        self.backfill.shutdown();
        self.columnar.shutdown();
        self.log.shutdown();
        result
    }
}

impl Drop for Table {
    /// A table dropped without [`Table::close`] lets its log's threads end (after they
    /// flushed and observed the closed pages) instead of keeping its log, ring and
    /// threads alive.
    fn drop(&mut self) {
        self.backfill.shutdown();
        self.columnar.shutdown();
        self.log.release_threads();
    }
}

/// The schema and counters of the log's observed pages (whole pages, flushed), below
/// `until`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    pub(crate) schema: InferredSchema,
    pub(crate) totals: ObservedTotals,
    pub(crate) until: LogAddress,
    /// Records withdrawn at or above `until` (sorted): the observer takes those it
    /// counted out of `totals` again (it may have read their page before the withdrawal).
    /// Their fields stay in the schema, which may name fields no record has.
    pub(crate) withdrawn_unobserved: Vec<LogAddress>,
}

impl Observed {
    /// Takes a record being withdrawn (still valid in `view`) out of the counters if the
    /// observer read its page, else notes it for the observer (which takes it out when it
    /// reaches the page); [`Self::sort_withdrawn`] once the batch of withdrawals is noted.
    pub(crate) fn uncount(&mut self, address: LogAddress, view: &crate::record::RecordView<'_>) {
        if address < self.until {
            let kps = (0..view.header().key_pointer_count()).filter_map(|i| view.key_pointer(i)).map(|kp| kp.psf_id);
            self.totals.remove(view.payload().len(), kps);
        } else {
            self.withdrawn_unobserved.push(address);
        }
    }

    /// Takes a withdrawn record below the head (observed long ago) out of the counters:
    /// `payload` bytes, key pointers of the PSFs `psfs`.
    pub(crate) fn uncount_below_head(&mut self, payload: usize, psfs: &[u32]) {
        self.totals.remove(payload, psfs.iter().copied());
    }

    /// Orders the withdrawals noted for the observer (it looks them up by address).
    pub(crate) fn sort_withdrawn(&mut self) {
        self.withdrawn_unobserved.sort_unstable();
    }
}

/// True when `dir` holds a table's metadata or log.
pub(crate) fn holds_table(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(std::result::Result::ok).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("segment-") || name == TABLE_META_FILE
        })
    })
}
