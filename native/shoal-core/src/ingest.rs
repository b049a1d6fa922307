//! Concurrent ingestion (FishStore §6, Algorithm 1).
//!
//! Per batch: protect the PSF epoch and take the PSF snapshot; parse the batch with the
//! snapshot's fields of interest; evaluate every active PSF on every record and size
//! the records (all before anything is written, so a rejected batch writes nothing).
//! Then per record: allocate on the log (fetch-and-add), write header, key pointers,
//! value region and payload; link each key pointer into its chain with a CAS on the
//! hash entry (retrying only the CAS, never the allocation); finally set the visible
//! bit.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::keys::{Keyed, RecordOp};
use crate::parser::ParsedBatch;
use crate::psf::{PsfId, PsfSnapshot, ValuePlacement};
use crate::record::{record_size, KeyPointer, RecordHeader, RecordLayout, ValueMode, MAX_KEY_POINTERS};
use crate::table::{InvalidJsonPolicy, Table};
use crate::LogAddress;

/// What one [`Table::ingest`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IngestReport {
    /// Records written.
    pub records: usize,
    /// Records skipped as invalid JSON (`skip` policy).
    pub skipped: usize,
    /// Index and parse error of the first skipped records (at most 10).
    pub skipped_examples: Vec<(usize, String)>,
    /// Address of the first record written (0 if none).
    pub first_address: LogAddress,
    /// Address of the last record written (0 if none).
    pub last_address: LogAddress,
    /// Bytes of payload written.
    pub payload_bytes: usize,
    /// One past the last byte this call wrote to the log (for a writer batch: past its
    /// commit marker); 0 if nothing was written. The batch is durable once
    /// [`Table::durable_address`](crate::table::Table::durable_address) reaches it.
    pub end_address: LogAddress,
    /// The batch was a writer's resend of a serial already ingested, and was skipped
    /// ([`Table::ingest_as`](crate::table::Table::ingest_as)).
    pub duplicate: bool,
    /// Log addresses of the records written, in order (for [`Table::withdraw`]).
    pub addresses: Vec<LogAddress>,
}

pub use crate::psf::property_hash;

/// How many records ahead of the one being linked the hash buckets of its key pointers
/// are prefetched: enough to cover a miss to memory (~100 ns) with the work of writing
/// and linking the records in between, few enough that the lines stay in L1.
const PREFETCH_DISTANCE: usize = 4;

struct PendingKeyPointer {
    /// Position in the snapshot's active PSFs.
    active: usize,
    psf: PsfId,
    tag: u8,
    mode: ValueMode,
    word: u64,
    hash: u64,
}

/// A batch ready to append ([`Table::prepare_batch`]): its records, and their key
/// pointers, value regions and keys side by side (each record holds ranges into them).
struct PreparedBatch<'a> {
    pending: Vec<PendingRecord<'a>>,
    key_pointers: Vec<PendingKeyPointer>,
    value_regions: Vec<u8>,
    keys: Vec<u8>,
    /// The records skipped so far (`on_invalid_json = skip`); the rest of the report is
    /// the append's.
    report: IngestReport,
}

struct PendingRecord<'a> {
    /// Empty for a tombstone.
    payload: &'a [u8],
    size: usize,
    key_pointers: std::ops::Range<usize>,
    value_region: std::ops::Range<usize>,
    /// A keyed table's record: its key's canonical encoding, within the batch's keys.
    key: std::ops::Range<usize>,
}

impl Table {
    /// FishStore Algorithm 1: links the key pointer at `kp_address` into the chain of
    /// `slot`, keeping the chain in descending address order without forward links and
    /// without re-allocating the record on CAS failure.
    ///
    /// Usually the key pointer is newer than the chain's head: set its previous address
    /// to the head and CAS the hash entry. When a newer record (allocated later, linked
    /// earlier) is already at the head, walk down the chain to the first key pointer
    /// whose previous address is older than ours and CAS that previous address instead.
    ///
    /// # Safety
    /// The caller holds log-epoch protection taken before `kp_address` was allocated
    /// and owns that record. Every key pointer newer than it is then in memory and its
    /// page cannot be flushed until the caller's epoch is released, so the CAS on a
    /// newer key pointer never races with its flush.
    unsafe fn insert_key_pointer(&self, slot: crate::index::EntrySlot<'_>, kp_address: LogAddress, template_word0: u64) {
        use std::sync::atomic::AtomicU64;
        use crate::record::ADDRESS_MASK;
        // Chains hold raw 48-bit addresses (the hash index's entries, key pointers' words).
        let kp_address = kp_address.get();
        let word0_at = |address: u64| -> &AtomicU64 { &*self.log().memory_ptr(LogAddress::new(address)).cast::<AtomicU64>() };
        let mine = word0_at(kp_address);
        let mut current = slot.load();
        'entry: loop {
            let head = current & ADDRESS_MASK;
            if head < kp_address {
                mine.store(template_word0 | head, Ordering::Release);
                match slot.swing(current, kp_address) {
                    Ok(()) => return,
                    Err(actual) => {
                        current = actual;
                        continue 'entry;
                    }
                }
            }
            // A newer key pointer heads the chain: find our place below it.
            let mut newer = head;
            loop {
                let newer_word = word0_at(newer);
                let word = newer_word.load(Ordering::Acquire);
                let older = word & ADDRESS_MASK;
                if older < kp_address {
                    mine.store(template_word0 | older, Ordering::Release);
                    let desired = (word & !ADDRESS_MASK) | kp_address;
                    if newer_word.compare_exchange(word, desired, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        return;
                    }
                    // Someone else inserted below `newer`; look again from it.
                    continue;
                }
                newer = older;
            }
        }
    }

    /// Ingests a batch of JSON records (one JSON document each, as bytes). Safe to call
    /// from many threads at once. On a keyed table every record is an upsert
    /// ([`Self::ingest_ops`]).
    ///
    /// Invalid JSON follows the table's [`InvalidJsonPolicy`]: `Reject` fails the whole
    /// batch with [`Error::InvalidRecord`] (naming the record's index) and writes
    /// nothing; `Skip` writes the valid records and counts the others.
    ///
    /// # Errors
    /// [`Error::InvalidRecord`], [`Error::InvalidKey`], [`Error::RecordTooLarge`],
    /// [`Error::Closed`].
    pub fn ingest(&self, records: &[&[u8]]) -> Result<IngestReport> {
        self.ingest_ops(records, &[])
    }

    /// Ingests a batch whose record `i` does `ops[i]` to its key ([`RecordOp`]; `ops`
    /// empty: every record is an upsert). Only keyed tables ([`crate::keys`]) take
    /// deletes and merges. A record without a usable key is refused like invalid JSON
    /// (the table's policy: the batch fails with [`Error::InvalidKey`], or the record is
    /// skipped). A delete writes a tombstone (its record needs only the key); a merge
    /// reads the key's latest version — in this batch or in the log — applies the record
    /// to its stored text as an RFC 7386 merge patch, and writes the result as an upsert
    /// (batches with merges run one at a time, FASTER's read-modify-write). The merge works
    /// on the text (`crate::merge_patch`): every member the patch does not name keeps its
    /// exact bytes (numbers beyond `f64` and `i64`, escapes, any nesting depth, every
    /// occurrence of a name given twice); a name the version holds twice has its first
    /// occurrence — the one queries answer — replaced and the others removed.
    ///
    /// # Errors
    /// As [`Self::ingest`]; [`Error::InvalidOperation`] for deletes or merges on an
    /// append-only table or when `ops` and `records` differ in length;
    /// [`Error::InvalidRecord`] for a merge whose patch nests objects deeper than 512
    /// levels, or whose key's latest version cannot be read or is not valid JSON (the
    /// batch fails; a version is never replaced by the patch alone); device errors when a
    /// merge's base version cannot be read.
    pub fn ingest_ops(&self, records: &[&[u8]], ops: &[RecordOp]) -> Result<IngestReport> {
        self.check_ops(records.len(), ops)?;
        let Some(keyed) = self.keyed() else {
            return self.ingest_resolved(records, &[], None);
        };
        if !ops.contains(&RecordOp::Merge) {
            let _shared = keyed.writes.read();
            return self.ingest_resolved(records, ops, Some(keyed));
        }
        let _exclusive = keyed.writes.write();
        let merged = self.resolve_merges(keyed, records, ops)?;
        let records: Vec<&[u8]> = records.iter().zip(&merged).map(|(r, m)| m.as_deref().unwrap_or(r)).collect();
        let ops: Vec<RecordOp> = ops.iter().map(|op| if *op == RecordOp::Merge { RecordOp::Upsert } else { *op }).collect();
        self.ingest_resolved(&records, &ops, Some(keyed))
    }

    /// Checks the operations of a batch of `records` records against the table, as
    /// [`Self::ingest_ops`] does before it writes (transactions check staged batches the
    /// same way).
    ///
    /// # Errors
    /// [`Error::InvalidOperation`] naming the first delete or merge on an append-only
    /// table, or when `ops` (not empty) and the records differ in number.
    pub fn check_ops(&self, records: usize, ops: &[RecordOp]) -> Result<()> {
        if !ops.is_empty() && ops.len() != records {
            return Err(Error::InvalidOperation(format!("a batch of {records} records has {} operations", ops.len())));
        }
        if self.keyed().is_none() {
            if let Some(index) = ops.iter().position(|op| *op != RecordOp::Upsert) {
                return Err(Error::InvalidOperation(format!(
                    "record {index} of the batch is a {:?}, which needs a keyed table (one created with a primary key); this table is append-only",
                    ops[index]
                )));
            }
        }
        Ok(())
    }

    /// The documents the merges of a batch write (`None` for the other records, and for
    /// merges whose record is not valid JSON or has no key: the ingest pass reports
    /// them): each merge patch applied to the text of its key's latest version before it —
    /// an earlier record of the batch, else the log's (the caller holds the table's merge
    /// lock) — by [`crate::merge_patch::merge_patch`], so that everything the patch does not
    /// name keeps its exact bytes.
    ///
    /// # Errors
    /// [`Error::InvalidRecord`] for a merge whose patch is refused (nested too deeply) or
    /// whose key's latest version cannot be read or is not valid JSON (damaged): never a
    /// merge into nothing in its place. Device errors reading a version.
    fn resolve_merges(&self, keyed: &Keyed, records: &[&[u8]], ops: &[RecordOp]) -> Result<Vec<Option<Vec<u8>>>> {
        /// A key's latest version within the batch.
        enum Version {
            /// Record `i` of the batch, as it is.
            Record(usize),
            /// The result of record `i`'s merge (`merged[i]`).
            Merged(usize),
            Deleted,
        }
        let mut fields = crate::parser::FieldSet::new();
        let key_ids: Vec<usize> = keyed.key.fields.iter().map(|f| fields.insert(f)).collect();
        let mut parser = self.take_parser();
        let mut parsed = ParsedBatch::default();
        parsed.reset(fields.len());
        parser.parse_batch(records, &fields, &mut parsed);
        self.return_parser(parser);
        let mut batch: std::collections::HashMap<Vec<u8>, Version> = std::collections::HashMap::new();
        let mut merged: Vec<Option<Vec<u8>>> = vec![None; records.len()];
        let mut key = Vec::new();
        for (index, op) in ops.iter().enumerate() {
            let Ok(values) = parsed.record(index) else { continue };
            if !crate::keys::PrimaryKey::encode(key_ids.iter().map(|&id| &values[id]), &mut key) {
                continue;
            }
            let version = match op {
                RecordOp::Upsert => Version::Record(index),
                RecordOp::Delete => Version::Deleted,
                RecordOp::Merge => {
                    let stored: Vec<u8>;
                    // The key's latest version, and where it is (for an error).
                    let (target, base) = match batch.get(&key) {
                        Some(Version::Record(at)) => (Some(records[*at]), format!("record {at} of this batch")),
                        Some(Version::Merged(at)) => (merged[*at].as_deref(), format!("the merge of record {at} of this batch")),
                        Some(Version::Deleted) => (None, String::new()),
                        None => match keyed.index.latest(&key) {
                            Some(latest) if !latest.tombstone => {
                                let base = format!("log address {}", latest.address);
                                let Some(payload) = self.read_payload(latest.address)? else {
                                    return Err(Error::InvalidRecord {
                                        index,
                                        reason: format!("its merge cannot be applied: the latest version of its key ({base}) cannot be read"),
                                    });
                                };
                                stored = payload;
                                (Some(stored.as_slice()), base)
                            }
                            _ => (None, String::new()),
                        },
                    };
                    let document = crate::merge_patch::merge_patch(target, records[index]).map_err(|error| {
                        let reason = match error.document {
                            crate::merge_patch::Document::Patch => format!("its merge patch cannot be applied: {error}"),
                            crate::merge_patch::Document::Target => format!(
                                "its merge cannot be applied to the stored version of its key ({base}), so nothing of the batch was written (an upsert of the key replaces that version): {error}"
                            ),
                        };
                        Error::InvalidRecord { index, reason }
                    })?;
                    merged[index] = Some(document);
                    Version::Merged(index)
                }
            };
            batch.insert(key.clone(), version);
        }
        Ok(merged)
    }

    /// [`Self::ingest_ops`] once merges are resolved to upserts.
    pub(crate) fn ingest_resolved(&self, records: &[&[u8]], ops: &[RecordOp], keyed: Option<&Keyed>) -> Result<IngestReport> {
        self.refuse_if_not_durable()?;
        let psf_guard = self.psfs().epoch().protect();
        let snapshot = self.psfs().snapshot();
        let prepared = self.prepare_batch(&snapshot, records, ops, keyed)?;
        let report = self.append_batch(&snapshot, prepared, keyed)?;
        drop(psf_guard);
        self.count_ingested(report.records, report.payload_bytes, report.skipped);
        Ok(report)
    }

    /// The side-effect-free half of ingestion (FishStore §6: parse, then PSF evaluation):
    /// every record's key pointers, value region and key, and the records skipped with
    /// their reasons. Nothing is allocated or written.
    ///
    /// # Errors
    /// A record that is not valid JSON, lacks its primary key (`on_invalid_json = reject`)
    /// or is larger than a page allows.
    fn prepare_batch<'a>(&self, snapshot: &PsfSnapshot, records: &[&'a [u8]], ops: &[RecordOp], keyed: Option<&Keyed>) -> Result<PreparedBatch<'a>> {
        let mut parser = self.take_parser();
        let mut parsed = ParsedBatch::default();
        parsed.reset(snapshot.fields.len());
        parser.parse_batch(records, &snapshot.fields, &mut parsed);
        self.return_parser(parser);

        let mut report = IngestReport::default();
        let mut pending = Vec::with_capacity(records.len());
        let mut key_pointers: Vec<PendingKeyPointer> = Vec::new();
        let mut value_regions: Vec<u8> = Vec::new();
        let mut keys: Vec<u8> = Vec::new();
        let mut canonical = Vec::new();
        let max = self.log().max_record_size();
        let skip = |report: &mut IngestReport, index: usize, reason: String| {
            report.skipped += 1;
            if report.skipped_examples.len() < 10 {
                report.skipped_examples.push((index, reason));
            }
        };
        for (index, payload) in records.iter().enumerate() {
            let values = match parsed.record(index) {
                Ok(values) => values,
                Err(reason) => match self.config().on_invalid_json {
                    InvalidJsonPolicy::Reject => return Err(Error::InvalidRecord { index, reason: reason.to_owned() }),
                    InvalidJsonPolicy::Skip => {
                        skip(&mut report, index, reason.to_owned());
                        continue;
                    }
                },
            };
            let tombstone = ops.get(index) == Some(&RecordOp::Delete);
            let payload: &[u8] = if tombstone { &[] } else { payload };
            let kp_start = key_pointers.len();
            let region_start = value_regions.len();
            let key_start = keys.len();
            for (active_index, active) in snapshot.active.iter().enumerate() {
                let is_key = keyed.is_some_and(|k| k.key.psf == active.psf.id);
                // A tombstone carries only its key, in its value region (it has no payload).
                if tombstone && !is_key {
                    continue;
                }
                let Some(placement) = active.evaluate(values, payload, &mut canonical) else { continue };
                let placement = if tombstone { ValuePlacement::ValueRegion } else { placement };
                if is_key {
                    keys.extend_from_slice(&canonical);
                }
                let (mode, word) = match placement {
                    ValuePlacement::Inline(word) => (ValueMode::Inline, word),
                    ValuePlacement::Payload(offset, len) => (ValueMode::Payload, u64::from(offset) | u64::from(len) << 32),
                    ValuePlacement::ValueRegion => {
                        let offset = (value_regions.len() - region_start) as u64;
                        value_regions.extend_from_slice(&canonical);
                        (ValueMode::ValueRegion, offset | (canonical.len() as u64) << 32)
                    }
                };
                key_pointers.push(PendingKeyPointer {
                    active: active_index,
                    psf: active.psf.id,
                    tag: canonical[0],
                    mode,
                    word,
                    hash: property_hash(active.psf.id, &canonical),
                });
            }
            if let Some(keyed) = keyed.filter(|_| keys.len() == key_start) {
                key_pointers.truncate(kp_start);
                value_regions.truncate(region_start);
                match self.config().on_invalid_json {
                    InvalidJsonPolicy::Reject => return Err(Error::InvalidKey { index, key: keyed.key.describe() }),
                    InvalidJsonPolicy::Skip => {
                        skip(&mut report, index, format!("no primary key {}", keyed.key.describe()));
                        continue;
                    }
                }
            }
            let kp_count = key_pointers.len() - kp_start;
            let size = record_size(kp_count, value_regions.len() - region_start, payload.len());
            if size > max || kp_count > MAX_KEY_POINTERS || payload.len() > u32::MAX as usize {
                return Err(Error::RecordTooLarge { index, size, page_size: self.log().page_size(), max });
            }
            pending.push(PendingRecord {
                payload,
                size,
                key_pointers: kp_start..key_pointers.len(),
                value_region: region_start..value_regions.len(),
                key: key_start..keys.len(),
            });
        }
        Ok(PreparedBatch { pending, key_pointers, value_regions, keys, report })
    }

    /// The other half: allocates each prepared record on the log, writes it
    /// ([`RecordLayout`]), links its key pointers into their chains (Algorithm 1) and makes
    /// it visible; a keyed table's key index learns each record before it is visible.
    ///
    /// # Errors
    /// The log's (a failing device, no room) or a full hash index.
    fn append_batch(&self, snapshot: &PsfSnapshot, prepared: PreparedBatch<'_>, keyed: Option<&Keyed>) -> Result<IngestReport> {
        let PreparedBatch { pending, key_pointers, value_regions, keys, mut report } = prepared;
        // A failing device with a full memory ring: stop here, before anything is written.
        let _room = self.log().check_room(pending.iter().map(|r| r.size).sum())?;
        // In flight from here until the last record's visible bit (`completion.rs`).
        let _in_flight = self.in_flight().begin(|| self.log().tail_address());
        let mut guard = self.log().epoch().protect();
        let mut word0_templates: Vec<u64> = Vec::new();
        let prefetch = |record: &PendingRecord<'_>| {
            for kp in &key_pointers[record.key_pointers.clone()] {
                self.index().prefetch(kp.hash);
            }
        };
        pending.iter().take(PREFETCH_DISTANCE).for_each(prefetch);
        for (number, record) in pending.iter().enumerate() {
            if let Some(ahead) = pending.get(number + PREFETCH_DISTANCE) {
                prefetch(ahead);
            }
            let address = self.log().allocate(record.size, &mut guard)?;
            let kps = &key_pointers[record.key_pointers.clone()];
            let region = &value_regions[record.value_region.clone()];
            #[allow(clippy::cast_possible_truncation)]
            let header = RecordHeader::new(record.size as u32, kps.len() as u16, self.checkpoint_version());
            // SAFETY: `allocate` gave this thread [address, address + size) in an
            // in-memory page, and the page cannot be flushed or evicted while `guard`
            // is held (it is not refreshed until the record is complete).
            let layout = RecordLayout::new(kps.len(), region.len(), record.payload.len());
            unsafe {
                self.log().write_header(address, header);
                let base = self.log().memory_ptr(address);
                word0_templates.clear();
                for (i, kp) in kps.iter().enumerate() {
                    #[allow(clippy::cast_possible_truncation)]
                    let words = KeyPointer {
                        previous: 0,
                        index: i as u16,
                        mode: kp.mode,
                        psf_id: kp.psf,
                        value_tag: kp.tag,
                        value_word: kp.word,
                    }
                    .encode();
                    word0_templates.push(words[0]);
                    layout.write_key_pointer(base, i, words);
                }
                layout.write_body(base, region, record.payload);
            }
            let mut linked = true;
            for (i, kp) in kps.iter().enumerate() {
                let kp_address = KeyPointer::address_in(address, i);
                let slot = match self.index().find_or_create_entry(kp.hash) {
                    Ok(slot) => slot,
                    Err(e) => {
                        tracing::error!(error = %e, "hash index full; record left invisible");
                        linked = false;
                        break;
                    }
                };
                let template = word0_templates[i];
                // SAFETY: this thread is protected since before it allocated
                // `kp_address`; see `insert_key_pointer`.
                unsafe { self.insert_key_pointer(slot, kp_address, template) };
                snapshot.active[kp.active].psf.count_key_pointer();
            }
            if let Some(keyed) = keyed.filter(|_| linked) {
                // Before the record is visible: a scan that sees it finds its key here.
                keyed.index.apply(&keys[record.key.clone()], address, record.payload.is_empty());
            }
            let final_header = if linked { header.with_visible() } else { header.with_invalid() };
            // SAFETY: as above.
            unsafe { self.log().write_header(address, final_header) };
            if !linked {
                return Err(Error::InvalidConfig("hash index overflow area is full; raise index_size_bits".into()));
            }
            if report.records == 0 {
                report.first_address = address;
            }
            report.last_address = address;
            report.end_address = address + record.size as u64;
            report.records += 1;
            report.addresses.push(address);
            report.payload_bytes += record.payload.len();
        }
        drop(guard);
        Ok(report)
    }
}

impl Table {
    /// Refuses a batch before writing anything while the log device fails (e.g. the disk
    /// is full) in a table whose writes are acknowledged only once durable: they could
    /// not be, and records accepted into memory would be visible although their writer
    /// was told they failed (7,000 such rows on a full disk before this check). Tables
    /// with `durability = none` keep accepting into memory. A fenced table ([`Table::fence`])
    /// refuses every batch.
    ///
    /// # Errors
    /// The device's error ([`Error::Io`], e.g. `ENOSPC`); [`Error::Fenced`];
    /// [`Error::RemoteUnavailable`].
    pub(crate) fn refuse_if_not_durable(&self) -> Result<()> {
        self.check_writable()?;
        if let Some(error) = self.remote_failure() {
            return Err(error);
        }
        if self.config().durability == crate::table::DurabilityPolicy::None || !self.log().has_storage() {
            return Ok(());
        }
        match self.log().device_failure(std::time::Duration::ZERO) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Withdraws records that were written but whose batch failed afterwards (it could
    /// not be made durable): each record at `addresses` is marked invalid in memory, so
    /// scans, PSF chains, schema inference and recovery skip it, and a writer that resends
    /// the batch does not duplicate it; records a flush may already have written to the
    /// device (and those below the head address) are listed in the device's withdrawn
    /// records (`withdrawn.bin`, synced before this returns), so that they stay withdrawn
    /// when read back from the device, after their page left memory or after a restart;
    /// columnar files built from them are dropped (and built again without them).
    ///
    /// Only for batches without a writer serial: a writer batch is recorded as ingested
    /// and its resend is skipped, so it must stay. A keyed table keeps the records that
    /// are durable by now, and the records below the head address.
    #[must_use]
    pub fn withdraw(&self, addresses: &[LogAddress]) -> Withdrawal {
        // Marked invalid in memory now; append-only records below the head, valid on the device.
        let (mut in_memory, mut below_head) = (Vec::new(), Vec::new());
        // A keyed table's withdrawn versions: their keys get their latest version again.
        let mut keys: Vec<Vec<u8>> = Vec::new();
        // A keyed table's version that became durable meanwhile stays (a resend applies
        // it again, which upserts, merge patches and deletes allow): a log compaction may
        // already have dropped the version it superseded.
        let durable = if self.keyed().is_some() { self.durable_address() } else { LogAddress::ZERO };
        {
            // Held while headers change: the page observer's counters (`stats.records`
            // after a restart from a checkpoint) lose the withdrawn records it counted.
            let mut observed = self.observed().lock();
            let guard = self.log().epoch().protect();
            for &address in addresses {
                if address < self.log().begin_address() || address < durable {
                    continue;
                }
                if address < self.log().head_address() {
                    if self.keyed().is_none() {
                        below_head.push(address);
                    }
                    continue;
                }
                // SAFETY: protected in the epoch, so a page at or above the head address
                // stays in its frame; headers are 8-byte aligned words changed atomically.
                unsafe {
                    let header = self.log().load_header(address);
                    if header.is_visible() && !header.is_invalid() {
                        self.log().write_header(address, header.with_invalid());
                        in_memory.push(address);
                        let view = self.log().read_in_memory(&guard, address, header.size()).and_then(crate::record::RecordView::new);
                        if let Some(view) = &view {
                            observed.uncount(address, view);
                        }
                        if let Some(keyed) = self.keyed() {
                            let mut key = Vec::new();
                            if view.is_some_and(|view| keyed.record_key(&view, &mut key)) {
                                keys.push(key);
                            }
                        }
                    }
                }
            }
            drop(guard);
            observed.sort_withdrawn();
        }
        // Records below the head, read from the device (outside the lock and the epoch):
        // the visible ones, with what the observer counted of them.
        let mut on_device: Vec<(LogAddress, usize, Vec<u32>)> = Vec::new();
        let mut bytes = Vec::new();
        for address in below_head {
            let size = match self.log().read_from_device(address, 8, &mut bytes) {
                Ok(true) => header_size(&bytes),
                _ => continue,
            };
            if !matches!(self.log().read_from_device(address, size, &mut bytes), Ok(true)) {
                continue;
            }
            if let Some(view) = crate::record::RecordView::new(&bytes).filter(|v| v.header().is_visible() && !v.header().is_invalid()) {
                let psfs = (0..view.header().key_pointer_count()).filter_map(|i| view.key_pointer(i)).map(|kp| kp.psf_id).collect();
                on_device.push((address, view.payload().len(), psfs));
            }
        }
        let device_addresses: Vec<LogAddress> = on_device.iter().map(|(a, _, _)| *a).collect();
        let (records, not_lasting) = match self.log().withdraw_on_device(&in_memory, &device_addresses) {
            Ok(listed) => {
                let mut observed = self.observed().lock();
                for (_, payload, psfs) in &on_device {
                    // Below the head: observed long ago.
                    observed.uncount_below_head(*payload, psfs);
                }
                drop(observed);
                if let Err(error) = self.columnar().drop_containing(&listed) {
                    // Not read any more by this process; dropped at the next open.
                    tracing::error!(%error, "columnar files holding withdrawn records could not be dropped from the manifest");
                }
                (in_memory.len() + on_device.len(), None)
            }
            Err(error) => {
                tracing::error!(%error, "withdrawn records could not be listed on the device: those already written there come back when read from it");
                (in_memory.len(), Some(error.to_string()))
            }
        };
        self.count_withdrawn(records);
        if let Some(keyed) = self.keyed() {
            // After the listing: a version read back from the device is then seen invalid.
            if let Err(error) = self.revalidate_withdrawn(keyed, &keys) {
                tracing::error!(%error, "keyed table: the latest versions of withdrawn keys could not be read back");
            }
        }
        Withdrawal { records, not_lasting }
    }
}

/// The size of the record whose header `bytes` start with (8 when they hold no header).
fn header_size(bytes: &[u8]) -> usize {
    bytes.get(..8).map_or(8, |word| crate::record::RecordHeader(u64::from_le_bytes(word.try_into().unwrap_or([0; 8]))).size().max(8))
}

/// What [`Table::withdraw`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawal {
    /// Records withdrawn (visible before, invalid now).
    pub records: usize,
    /// Why the withdrawal is not lasting, if so: the device's list could not be written,
    /// so the records a flush wrote before come back when read from the device (records
    /// below the head address are then not withdrawn at all).
    pub not_lasting: Option<String>,
}
