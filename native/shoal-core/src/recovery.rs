//! Recovery of an on-disk table after a clean shutdown or a crash (FASTER §6.5,
//! FishStore Appendix E).
//!
//! The log on the device is the truth. Pages are flushed in order and every page carries
//! a footer of two checksummed commit slots, each naming a prefix of the page
//! ([`crate::log::device`]); a page is only ever appended to, so a write cut at any byte
//! leaves the prefix acknowledged before it proven. The durable log is therefore a
//! sequence of whole pages and, last, the proven prefix of the page that was open: recovery
//! reads pages from the first one until a page is missing (the clean end), proves only a
//! prefix (the open page: bytes after it were a write cut short, never acknowledged, and
//! are cut and reported as [`RecoveryReport::torn_write`]), or has no valid slot at all (a
//! torn first write of a page, or damage: cut off together with everything after it and
//! reported as [`RecoveryReport::corrupt_page`]).
//!
//! Within that prefix, chains need no repair: a key pointer's previous address always
//! points to an older key pointer (FishStore Alg. 1 keeps chains descending), older
//! addresses are in the prefix too, and a key pointer is never changed after its page
//! was flushed. Only the chain *heads* live in memory, in the hash index. Recovery
//! rebuilds them by replaying the key pointers of every visible record: the head of a
//! property is its newest key pointer. The PSFs (ids, definitions, safe boundaries) come
//! from `table.json`; the inferred schema from `checkpoint.json` when it covers a prefix
//! of the recovered log, re-inferred for the pages after it.
//!
//! The recovered log continues at the start of the page after the last recovered page
//! (the rest of a partly filled last page is closed with a filler, by appends), or in that
//! page when it held no record.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::checkpoint::index as index_checkpoint;
use crate::checkpoint::{
    read_json, CheckpointState, ObservedTotals, TableMeta, CHECKPOINT_FILE, FORMAT_VERSION, TABLE_META_FILE,
};
use crate::error::{Error, Result};
use crate::index::HashIndex;
use crate::ingest::property_hash;
use crate::log::device::{Device, PageCommit, PageState};
use crate::log::{DeviceConfig, HybridLog, FIRST_ADDRESS};
use crate::psf::{PsfKind, NOT_YET};
use crate::record::KeyPointer;
use crate::log::device::SegmentFiles;
use crate::record::RecordHeader;
use crate::schema::{InferredSchema, MAX_SCHEMA_FIELDS};
use crate::session::Marker;
use crate::record::PageRecords;
use crate::table::{Observed, Table, TableConfig};
use crate::LogAddress;

/// What [`Table::open`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// Pages read and replayed.
    pub pages_replayed: u64,
    /// Bytes read from segment files.
    pub bytes_replayed: u64,
    /// Visible records in the recovered table.
    pub records: u64,
    /// The fuzzy index checkpoint loaded, if any (then replay began at its start).
    pub index_checkpoint: Option<String>,
    /// First page replayed (0 without an index checkpoint).
    pub first_page_replayed: u64,
    /// Key pointers linked into the rebuilt index.
    pub key_pointers: u64,
    /// End of the recovered log: one past the last record.
    pub end_address: LogAddress,
    /// Where ingestion continues (the start of the page after the last one recovered).
    pub tail_address: LogAddress,
    /// Whether `checkpoint.json` provided the schema (else it was inferred from scratch).
    pub checkpoint_used: bool,
    /// Why the checkpoint was not used, when there was one.
    pub checkpoint_ignored: Option<String>,
    /// Bytes of pages the schema was inferred from during recovery.
    pub schema_bytes_inferred: u64,
    /// The first page that failed its check, with the reason; it and every later page
    /// were cut off.
    pub corrupt_page: Option<(u64, String)>,
    /// The page whose last write was cut short after its last commit, and the address
    /// up to which its records were kept: the bytes from there to the page's end were
    /// never acknowledged and were cut.
    pub torn_write: Option<(u64, LogAddress)>,
    /// Bytes removed from segment files (damaged pages and anything after them).
    pub bytes_cut: u64,
    /// Writer batches that had begun but not ended at the crash, `(writer, serial)`:
    /// the log was cut at the oldest one's `begin` marker (see [`crate::session`]).
    pub open_batches_cut: Vec<(String, u64)>,
    /// Where the log was cut because of them.
    pub cut_address: Option<LogAddress>,
    /// Writers known after recovery, with their last serial.
    pub writers: usize,
    /// A keyed table's versions (records and tombstones) read into its rebuilt key index.
    pub keys: u64,
    /// Wall-clock time of the recovery, in milliseconds.
    pub elapsed_ms: u64,
}

impl Table {
    /// Opens the table in `config`'s directory, recovering it as described in the
    /// [module documentation](self). The log geometry, memory budget, index size and
    /// invalid-JSON policy are the ones the table was created with (from `table.json`);
    /// the sync policy is `config`'s.
    ///
    /// Recovery runs in phases, as FASTER's `Recover*` functions do: [`recover_meta`]
    /// (the table's definition), [`recover_index_checkpoint`] (the fuzzy index copy, which
    /// decides where replay starts), [`replay_log`] (the durable prefix of pages: chain
    /// heads, schema, writer batches), then the log is cut where it must be
    /// ([`cut_unfinished_batches`] recovers again after a cut), the checkpoint's schema and
    /// counters are merged with the replayed ones ([`restore_observed`]), and the table is
    /// assembled with its PSFs, writers and counters; a keyed table's key index is then
    /// rebuilt from the log ([`Table::rebuild_key_index`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the directory holds no table, its metadata is
    /// damaged or of another format version, or the config has no directory device;
    /// [`Error::Io`]; [`Error::InvalidPsf`] for a stored PSF definition that does not
    /// parse.
    pub fn open(config: TableConfig) -> Result<(Arc<Self>, RecoveryReport)> {
        let started = Instant::now();
        let Recovered { dir, meta, config, psf_kinds } = recover_meta(config)?;
        let mut report = RecoveryReport::default();
        let (checkpoint, index, replay_from) = recover_index_checkpoint(&dir, &config, &mut report)?;
        let page_size = 1usize << config.log.page_size_bits;
        let Device::Segments(files) = Device::open(&config.log.device, page_size, config.log.pages_per_segment, config.log.page_source.as_ref())? else {
            return Err(Error::InvalidConfig("a directory device opened as the null device".into()));
        };
        let begin = meta.begin_address.max(LogAddress::FIRST);
        let mut buffer = vec![0u8; page_size];
        let replay = replay_log(&files, &config, &psf_kinds, &index, checkpoint.as_ref(), replay_from.max(begin), &mut buffer, &mut report)?;
        report.bytes_cut = files.truncate_from(replay.next_page)?;
        if !replay.open_batches.is_empty() {
            return cut_unfinished_batches(files, config, replay.open_batches, report, &mut buffer, started);
        }
        // A last page that was flushed partly (group commit) ends in zeros, which
        // readers take for records in flight: close it with a filler, as a full flush would.
        let mut next_page = replay.next_page;
        if replay.next_page > report.first_page_replayed {
            report.bytes_cut += cut_log_at(&files, replay.end_address, config.log.page_size_bits, &mut buffer)?;
            // The log continues after the page holding its end (`cut_log_at` removed every
            // later one), or in it when it holds no record (a group commit of an empty page,
            // then the crash: it was removed whole).
            let end_page = replay.end_address.get() >> config.log.page_size_bits;
            let empty = replay.end_address.get() <= (end_page << config.log.page_size_bits).max(FIRST_ADDRESS);
            next_page = if empty { end_page } else { end_page + 1 };
        }
        // Withdrawn records that never reached the device: their addresses go to new records.
        files.withdrawn().forget_from(replay.end_address)?;
        drop(files);

        let recovered_end = LogAddress::new((next_page << config.log.page_size_bits).max(FIRST_ADDRESS));
        let Some(observed) = restore_observed(checkpoint, replay.schema, replay.totals, recovered_end, replay.end_address, &mut report) else {
            // Pages before the checkpoint's were not replayed: start over without it.
            return Self::open_without_checkpoint(config, &dir, report, started);
        };
        let (records, payload_bytes) = (observed.totals.records, observed.totals.payload_bytes);
        let key_pointer_counts = observed.totals.key_pointers.clone();

        let log = HybridLog::recover(&config.log, begin, next_page.max(begin.get() >> config.log.page_size_bits))?;
        let tail = log.tail_address();
        let table = Table::assemble(config, log, index, observed)?;
        // Boundaries past the recovered tail would claim chains for records written
        // after recovery under a different PSF set: clamp them to the tail.
        let restored = meta
            .psfs
            .iter()
            .zip(psf_kinds)
            .map(|(p, kind)| {
                let deregister = p.safe_deregister_address.map_or(NOT_YET, |d| d.min(tail));
                let register = p.safe_register_address.map_or(NOT_YET, |r| r.min(tail).min(deregister));
                (p.name.clone(), kind, register, deregister)
            })
            .collect();
        table.psfs().restore(restored);
        // Backfills asked for before: their runs that still hold, and the rest resumed.
        if let Err(error) = table.backfill().resume(&table.psfs().all()) {
            tracing::warn!(%error, "the PSFs' backfills could not be resumed; they cover what they index from now on");
        }
        for (psf, count) in table.psfs().all().iter().zip(key_pointer_counts) {
            psf.add_key_pointers(count);
        }
        report.records = records;
        table.sessions().restore(&replay.last_serials);
        report.writers = replay.last_serials.len();
        table.restore_counts(records, payload_bytes);
        report.end_address = replay.end_address;
        report.tail_address = tail;
        if let Some(keyed) = table.keyed() {
            // A horizon above the recovered tail was saved by a compaction that had not
            // dropped the head yet (that waits for its copies to be durable up to it).
            keyed.snapshots.raise_horizon(meta.snapshot_horizon.min(tail));
        }
        table.rebuild_key_index(&mut report)?;
        report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(dir = %dir.display(), ?report, "table recovered");
        Ok((table, report))
    }

    /// Phase 5, for a keyed table: the key index ([`crate::keys::KeyIndex`]) rebuilt from
    /// every record of the log, `[begin, tail)` (each record's key pointer of the
    /// primary-key PSF gives its key; an empty payload is a tombstone). One read of the
    /// whole log; a checkpoint of the key index is not written yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the table's first PSF is not its key's; device errors.
    fn rebuild_key_index(&self, report: &mut RecoveryReport) -> Result<()> {
        let Some(keyed) = self.keyed() else { return Ok(()) };
        match self.psfs().get(keyed.key.psf) {
            Some(psf) if psf.name == crate::keys::PRIMARY_KEY_PSF => {}
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "a keyed table's first PSF must be {:?} (table.json damaged?)",
                    crate::keys::PRIMARY_KEY_PSF
                )))
            }
        }
        let (begin, tail) = (self.log().begin_address(), self.log().tail_address());
        let mut buffer = Vec::new();
        let mut canonical = Vec::new();
        for page in self.log().page_of(begin)..=self.log().page_of(LogAddress::new(tail.get().max(1) - 1)) {
            let Some(end) = self.log().read_page(page, &mut buffer)? else { continue };
            let page_start = self.log().page_start(page);
            for (offset, view) in PageRecords::new(&buffer[..end.min(self.log().page_capacity())]) {
                let header = view.header();
                let address = page_start + offset as u64;
                if !header.is_visible() || header.is_invalid() || address < begin {
                    continue;
                }
                if keyed.record_key(&view, &mut canonical) {
                    keyed.index.apply(&canonical, address, view.payload().is_empty());
                    report.keys += 1;
                }
            }
        }
        Ok(())
    }

    /// Recovery again with the checkpoint file set aside (it covered more than the
    /// recovered log, so its schema may describe records that are gone).
    fn open_without_checkpoint(
        config: TableConfig,
        dir: &std::path::Path,
        report: RecoveryReport,
        started: Instant,
    ) -> Result<(Arc<Self>, RecoveryReport)> {
        let path = dir.join(CHECKPOINT_FILE);
        let aside = dir.join(format!("{CHECKPOINT_FILE}.ignored"));
        std::fs::rename(&path, &aside).map_err(|e| Error::io(&path, e))?;
        let (table, mut second) = Self::open(config)?;
        second.checkpoint_ignored = report.checkpoint_ignored;
        second.corrupt_page = report.corrupt_page;
        second.bytes_cut += report.bytes_cut;
        second.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok((table, second))
    }
}

/// The table's definition, read back by [`recover_meta`].
struct Recovered {
    dir: std::path::PathBuf,
    meta: TableMeta,
    /// The caller's config with the table's own geometry, policies and columnar settings.
    config: TableConfig,
    /// The stored PSFs' kinds, in id order.
    psf_kinds: Vec<PsfKind>,
}

/// Phase 1 (FASTER's `RecoverMetadata`): `table.json` — the log geometry, index size,
/// memory budget, policies and PSFs the table was created with.
fn recover_meta(config: TableConfig) -> Result<Recovered> {
    let mut config = config;
    let DeviceConfig::Directory(dir) = config.log.device.clone() else {
        return Err(Error::InvalidConfig("only tables on a directory device can be opened".into()));
    };
    let meta: TableMeta = read_json(&dir, TABLE_META_FILE)?.ok_or_else(|| {
        Error::InvalidConfig(format!("{} holds no shoal table (no {TABLE_META_FILE})", dir.display()))
    })?;
    if meta.format_version != FORMAT_VERSION {
        return Err(Error::InvalidConfig(format!(
            "{} was written in format version {}; this build reads version {FORMAT_VERSION}",
            dir.display(),
            meta.format_version
        )));
    }
    config.log.page_size_bits = meta.page_size_bits;
    config.log.pages_per_segment = meta.pages_per_segment;
    config.index_size_bits = meta.index_size_bits;
    config.log.memory_budget_bytes = meta.memory_budget_bytes;
    let mut config = config.with_durability(meta.durability);
    config.on_invalid_json = meta.on_invalid_json;
    config.columnar = meta.columnar.clone();
    config.retention = meta.retention;
    config.primary_key = meta.primary_key.iter().map(|p| crate::path::FieldPath::parse(p)).collect::<Result<_>>()?;
    let psf_kinds = meta.psfs.iter().map(|p| PsfKind::from_spec(&p.name, &p.definition)).collect::<Result<Vec<_>>>()?;
    Ok(Recovered { dir, meta, config, psf_kinds })
}

/// Phase 2 (FASTER's `RecoverFuzzyIndex`): `checkpoint.json` and its fuzzy index copy.
/// Returns the checkpoint (dropped when its index copy is unusable), the index (loaded
/// from the copy, or empty) and the address replay starts from: the copy's start, or the
/// first record the checkpoint's schema and counters do not cover if earlier; 0 without
/// a copy.
fn recover_index_checkpoint(
    dir: &std::path::Path,
    config: &TableConfig,
    report: &mut RecoveryReport,
) -> Result<(Option<CheckpointState>, HashIndex, LogAddress)> {
    // The checkpoint is derived data: a damaged one is set aside and the whole log replayed.
    let mut checkpoint: Option<CheckpointState> = match read_json(dir, CHECKPOINT_FILE) {
        Ok(checkpoint) => checkpoint,
        Err(e @ Error::InvalidConfig(_)) => {
            tracing::warn!(error = %e, "recovery: the checkpoint is damaged; replaying the whole log");
            report.checkpoint_ignored = Some(e.to_string());
            None
        }
        Err(e) => return Err(e),
    };
    let mut index = HashIndex::new(config.index_size_bits)?;
    let mut replay_from = LogAddress::ZERO;
    if let Some(reference) = checkpoint.as_ref().and_then(|c| c.index.clone()) {
        match index_checkpoint::load(&dir.join(&reference.file), &index, config.index_size_bits) {
            Ok(header) if header.start == reference.start && header.end == reference.end => {
                report.index_checkpoint = Some(reference.file.clone());
                replay_from = reference.start.min(checkpoint.as_ref().map_or(LogAddress::ZERO, |c| c.schema_observed_until));
            }
            Ok(_) => checkpoint = None,
            Err(e) => {
                tracing::warn!(error = %e, "recovery: the index checkpoint is unusable; replaying the whole log");
                report.checkpoint_ignored = Some(e.to_string());
                checkpoint = None;
            }
        }
        if checkpoint.is_none() {
            index = HashIndex::new(config.index_size_bits)?;
            report.index_checkpoint = None;
            replay_from = LogAddress::ZERO;
        }
    }
    Ok((checkpoint, index, replay_from))
}

/// What [`replay_log`] found in the durable prefix of pages.
struct Replay {
    /// The first page not recovered (missing or damaged): the log ends before it.
    next_page: u64,
    /// One past the last record replayed.
    end_address: LogAddress,
    /// The schema and counters of the records the checkpoint does not cover.
    schema: InferredSchema,
    totals: ObservedTotals,
    /// Writer batches begun and not ended: `(writer, serial)` → address of `begin`.
    open_batches: std::collections::HashMap<(String, u64), LogAddress>,
    /// Every writer's last committed serial (the checkpoint's, raised by replayed commits).
    last_serials: std::collections::BTreeMap<String, u64>,
}

/// Phase 3 (FASTER's `RecoverHybridLog`, FishStore App. E): reads pages from the one
/// holding `from` until a page is missing or fails its check (reported, and cut off with
/// everything after it); for each visible record raises the chain heads of its key
/// pointers in `index` and, past the checkpoint's coverage, observes its schema and
/// counts it; follows the writer batches' control records.
#[allow(clippy::too_many_arguments)]
fn replay_log(
    files: &SegmentFiles,
    config: &TableConfig,
    psf_kinds: &[PsfKind],
    index: &HashIndex,
    checkpoint: Option<&CheckpointState>,
    from: LogAddress,
    buffer: &mut [u8],
    report: &mut RecoveryReport,
) -> Result<Replay> {
    let page_size = 1usize << config.log.page_size_bits;
    let capacity = page_size - crate::log::PAGE_FOOTER_SIZE;
    let schema_from = checkpoint.map_or(0, |c| c.schema_observed_until.get());
    let mut schema = InferredSchema::new();
    let mut totals = ObservedTotals::default();
    let mut canonical = Vec::new();
    let mut page = from.get() >> config.log.page_size_bits;
    report.first_page_replayed = page;
    let mut end_address = (page << config.log.page_size_bits).max(FIRST_ADDRESS);
    let mut open_batches = std::collections::HashMap::new();
    let mut last_serials = checkpoint.map(|c| c.writers.clone()).unwrap_or_default();
    loop {
        let page_start = page << config.log.page_size_bits;
        let recovered = match files.recover_page(page, buffer)? {
            PageState::Valid(recovered) => recovered,
            PageState::Missing => break,
            PageState::Corrupt(reason) => {
                tracing::warn!(
                    page,
                    %reason,
                    kept = %format_args!("[{}, {page_start})", from.get()),
                    cut = %format_args!("[{page_start}, end)"),
                    "recovery: damaged page; the log is cut off before it"
                );
                report.corrupt_page = Some((page, reason));
                break;
            }
        };
        let proven_end = page_start + recovered.proof.len as u64;
        if recovered.unproven_bytes {
            tracing::warn!(
                page,
                kept = %format_args!("[{page_start}, {proven_end})"),
                cut = %format_args!("[{proven_end}, {})", page_start + page_size as u64),
                "recovery: the page's last write was cut short after its last commit; its unacknowledged bytes are cut"
            );
            report.torn_write = Some((page, LogAddress::new(proven_end)));
        }
        // Records the checkpoint's schema and counters cover only update the index.
        // The bound is a record address, not a page start: a checkpoint of a table
        // whose first page was still open covers nothing past `FIRST_ADDRESS`.
        let page_end = page_start + page_size as u64;
        let infer_page = page_end > schema_from;
        let mut failure = None;
        for (offset, view) in PageRecords::new(&buffer[..capacity]) {
            let address = page_start + offset as u64;
            let header = view.header();
            end_address = address + header.size() as u64;
            if header.is_control() {
                match serde_json::from_slice::<Marker>(view.payload()) {
                    Ok(Marker::Begin { writer, serial }) => {
                        open_batches.insert((writer, serial), LogAddress::new(address));
                    }
                    Ok(Marker::Commit { writer, serial }) => {
                        open_batches.remove(&(writer.clone(), serial));
                        let last = last_serials.entry(writer).or_insert(serial);
                        *last = (*last).max(serial);
                    }
                    Ok(Marker::Abort { writer, serial }) => {
                        open_batches.remove(&(writer, serial));
                    }
                    Err(e) => tracing::warn!(address, error = %e, "recovery: unreadable control record ignored"),
                }
                continue;
            }
            if !header.is_visible() || header.is_invalid() || failure.is_some() {
                continue;
            }
            if address >= schema_from {
                schema.observe_validated(view.payload());
                let kps = (0..header.key_pointer_count()).filter_map(|i| view.key_pointer(i)).map(|kp| kp.psf_id);
                totals.add(view.payload().len(), kps);
            }
            for i in 0..header.key_pointer_count() {
                let Some(kp) = view.key_pointer(i) else { continue };
                if kp.psf_id as usize >= psf_kinds.len() {
                    continue;
                }
                canonical.clear();
                if !kp.canonical_value(view.value_region(), view.payload(), &mut canonical) {
                    continue;
                }
                let kp_address = KeyPointer::address_in(LogAddress::new(address), i);
                match index.raise_entry(property_hash(kp.psf_id, &canonical), kp_address.get()) {
                    Ok(()) => report.key_pointers += 1,
                    Err(e) => failure = Some(e),
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if infer_page {
            report.schema_bytes_inferred += page_size as u64;
            schema.limit_fields(MAX_SCHEMA_FIELDS);
        }
        report.pages_replayed += 1;
        report.bytes_replayed += page_size as u64;
        page += 1;
        if recovered.proof.len < capacity {
            // The open page's proven prefix: the durable log ends in it.
            break;
        }
    }
    Ok(Replay { next_page: page, end_address: LogAddress::new(end_address), schema, totals, open_batches, last_serials })
}

/// Phase 4, when writer batches were in flight at the crash: their records (and
/// everything after the oldest one's `begin`) were never reported durable. Cuts the log
/// there and recovers again, reporting the cut.
fn cut_unfinished_batches(
    files: SegmentFiles,
    config: TableConfig,
    open_batches: std::collections::HashMap<(String, u64), LogAddress>,
    report: RecoveryReport,
    buffer: &mut [u8],
    started: Instant,
) -> Result<(Arc<Table>, RecoveryReport)> {
    let cut = open_batches.values().copied().min().unwrap_or(LogAddress::MAX);
    let mut cut_batches: Vec<(String, u64)> = open_batches.into_keys().collect();
    cut_batches.sort();
    tracing::warn!(cut = cut.get(), batches = ?cut_batches, "recovery: cutting the log at the oldest unfinished writer batch");
    let bytes_cut = report.bytes_cut + cut_log_at(&files, cut, config.log.page_size_bits, buffer)?;
    drop(files);
    let (table, mut second) = Table::open(config)?;
    second.corrupt_page = second.corrupt_page.or(report.corrupt_page);
    second.bytes_cut += bytes_cut;
    second.open_batches_cut = cut_batches;
    second.cut_address = Some(cut);
    second.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok((table, second))
}

/// Phase 5 (FishStore App. E's schema and counters): the checkpoint's observed schema
/// and counters merged with the replayed ones, or the replayed ones alone without a
/// checkpoint. `None` when the checkpoint covers more than the recovered log (which
/// ends at `recovered_end`, last record at `end_address`): the pages before it were not
/// replayed, so recovery must start over without it (`report` says why).
fn restore_observed(
    checkpoint: Option<CheckpointState>,
    schema: InferredSchema,
    totals: ObservedTotals,
    recovered_end: LogAddress,
    end_address: LogAddress,
    report: &mut RecoveryReport,
) -> Option<Observed> {
    match checkpoint {
        Some(state)
            if state.schema_observed_until <= recovered_end
                && state.index.as_ref().is_none_or(|i| i.end <= recovered_end) =>
        {
            report.checkpoint_used = true;
            let mut observed = Observed { schema: state.schema, totals: state.totals, ..Observed::default() };
            observed.schema.merge(&schema);
            observed.schema.limit_fields(MAX_SCHEMA_FIELDS);
            observed.totals.merge(&totals);
            Some(observed)
        }
        Some(state) => {
            report.checkpoint_ignored = Some(format!(
                "it covers the log up to address {}, beyond the recovered log (end {end_address})",
                state.index.as_ref().map_or(state.schema_observed_until, |i| i.end.max(state.schema_observed_until))
            ));
            None
        }
        None => Some(Observed { schema, totals, ..Observed::default() }),
    }
}

/// Removes everything at and after `cut` from the device: the page holding it keeps its
/// records below `cut` (a filler covers the rest, unless one starts there already) and
/// later pages are deleted. Returns the bytes removed (the filled-over rest of the page
/// counts).
///
/// The page is changed by appends only, so that a crash during recovery leaves a page
/// the next recovery reads as well: when `cut` is below the proven prefix, the other
/// commit slot is first made to name `[0, cut)` (the bytes after `cut` are then no longer
/// needed by any proof), then the filler is written after `cut` with a slot naming the
/// whole page, each synced.
fn cut_log_at(files: &SegmentFiles, cut: LogAddress, page_size_bits: u32, buffer: &mut [u8]) -> Result<u64> {
    let cut = cut.get();
    let page = cut >> page_size_bits;
    let offset = (cut - (page << page_size_bits)) as usize;
    let first_record = if page == 0 { FIRST_ADDRESS as usize } else { 0 };
    if offset <= first_record {
        return files.truncate_from(page);
    }
    let PageState::Valid(recovered) = files.recover_page(page, buffer)? else {
        return Err(Error::InvalidConfig(format!("page {page} changed during recovery")));
    };
    let capacity = buffer.len() - crate::log::PAGE_FOOTER_SIZE;
    if offset >= capacity || offset > recovered.proof.len {
        return files.truncate_from(page + 1);
    }
    let header = buffer.get(offset..offset + 8).map(|h| RecordHeader(u64::from_le_bytes(h.try_into().unwrap_or_default())));
    if header.is_some_and(|h| h.is_filler()) {
        // Already closed here (a full page): only later pages go.
        return files.truncate_from(page + 1);
    }
    // Later pages go first: a crash after this leaves the page as it was (its proof, and the
    // `begin` marker of a batch being cut), so the next recovery cuts again; a crash after
    // the filler would otherwise bring the later pages back without that marker.
    let truncated = files.truncate_from(page + 1)?;
    // The proofs are over the bytes as stored: the buffer has withdrawn records masked.
    let proven = &mut buffer[..recovered.proof.len];
    files.read_unmasked(page, proven)?;
    // `offset` is at most the proven length: at it, this is the page's own proof.
    let mut commit = PageCommit::resume(page, &proven[..offset], recovered.proof.slot);
    if offset < recovered.proof.len {
        // The other slot names [0, offset) first, so that overwriting the bytes after the
        // cut can never leave the page without a proof of what stays.
        files.append_to_page(&mut commit, &[], true)?;
    }
    let removed = (capacity - offset) as u64;
    // The rest of the page: a filler record, or zeros when fewer than 8 bytes are left (no
    // record fits there); either way the page is then proven whole, as flushed pages are.
    let mut filler = vec![0u8; capacity - offset];
    if filler.len() >= 8 {
        #[allow(clippy::cast_possible_truncation)]
        filler[..8].copy_from_slice(&RecordHeader::filler((capacity - offset) as u32).0.to_le_bytes());
    }
    files.append_to_page(&mut commit, &filler, true)?;
    Ok(removed + truncated)
}
