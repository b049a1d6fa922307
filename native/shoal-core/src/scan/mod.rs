//! Subset retrieval (FishStore §7): index scans along PSF chains where a PSF covers
//! the log range, full scans elsewhere; every candidate re-checked against the filter;
//! the requested columns projected into Arrow record batches.

mod aggregate;
mod plan;
mod reader;

use std::ops::ControlFlow;

use arrow_array::RecordBatch;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::parser::{FieldSet, ParsedBatch, RecordParser};
use crate::path::FieldPath;
use crate::psf::{BoundExpr, Expr};
use crate::record::{KeyPointer, RecordView, KEY_POINTER_SIZE};
use crate::schema::BatchBuilder;
use crate::table::Table;
pub use aggregate::{Aggregate, AggregateFunction};
pub use plan::{plan_scan, IndexScanPlan, LogRange, PropertyKey, ScanPlan};
use reader::LogReader;

/// A scan request: which records (filter, log range), which fields, how many.
#[derive(Debug, Clone)]
pub struct ScanRequest {
    /// Records must satisfy it (`None`: all records).
    pub filter: Option<Expr>,
    /// Columns to return, as dotted paths; empty means every top-level field.
    pub columns: Vec<FieldPath>,
    /// First log address to consider.
    pub from_address: u64,
    /// One past the last log address to consider (`u64::MAX`: the tail when the scan starts).
    pub to_address: u64,
    /// Stop after this many records.
    pub limit: Option<usize>,
    /// Rows per output batch.
    pub batch_rows: usize,
}

impl Default for ScanRequest {
    fn default() -> Self {
        Self { filter: None, columns: Vec::new(), from_address: 0, to_address: u64::MAX, limit: None, batch_rows: 4096 }
    }
}

/// What a scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    /// Key pointers visited along chains.
    pub chain_entries: u64,
    /// Records read by index scans (candidates).
    pub index_candidates: u64,
    /// Records read by full scans.
    pub full_scan_records: u64,
    /// Records that satisfied the filter and were returned.
    pub records_returned: u64,
    /// Bytes read from segment files.
    pub device_bytes: u64,
    /// Reads issued to segment files.
    pub device_reads: u64,
}

struct Projector<'t> {
    table: &'t Table,
    filter: Option<BoundExpr>,
    /// Fields of interest: the filter's, then the columns'.
    fields: FieldSet,
    parser: Box<dyn RecordParser>,
    /// Field id of each output column.
    column_ids: Vec<usize>,
    builder: BatchBuilder,
    batch_rows: usize,
    remaining: usize,
    stats: ScanStats,
}

impl Projector<'_> {
    /// Filters `payloads`, projects the matches, and emits full batches. Breaks when the
    /// limit is reached or the sink asks to stop.
    fn process(
        &mut self,
        payloads: &[&[u8]],
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        if payloads.is_empty() {
            return Ok(ControlFlow::Continue(()));
        }
        let mut parsed = ParsedBatch::default();
        parsed.reset(self.fields.len());
        // Log records were validated in full when they were ingested.
        self.parser.parse_trusted_batch(payloads, &self.fields, &mut parsed);
        for i in 0..payloads.len() {
            if self.remaining == 0 {
                return Ok(ControlFlow::Break(()));
            }
            let Ok(values) = parsed.record(i) else { continue };
            if let Some(filter) = &self.filter {
                if filter.eval(values) != Some(true) {
                    continue;
                }
            }
            self.builder.append_values(self.column_ids.iter().map(|&id| &values[id]));
            self.remaining -= 1;
            self.stats.records_returned += 1;
            if self.builder.len() >= self.batch_rows {
                let batch = self.builder.finish()?;
                if sink(batch)?.is_break() {
                    self.remaining = 0;
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(if self.remaining == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    }

    fn finish(mut self, sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>) -> Result<ScanStats> {
        if !self.builder.is_empty() {
            let batch = self.builder.finish()?;
            let _ = sink(batch)?;
        }
        self.table.return_parser(self.parser);
        Ok(self.stats)
    }
}

impl Table {
    /// Plans `request` without running it: [`plan_scan`] over the table's PSFs, then
    /// a cost check — when the chains of an index scan hold at least
    /// [`FULL_SCAN_THRESHOLD`] of the records in its range, reading them one by one
    /// costs more than one sequential full scan, so the plan switches to a full scan
    /// and says why.
    #[must_use]
    pub fn plan(&self, request: &ScanRequest) -> ScanPlan {
        let (from, to) = self.resolve_range(request);
        let psfs = self.psfs.all();
        let mut plan = plan_scan(request.filter.as_ref(), &psfs, from, to);
        let stats = self.stats();
        let span = stats.tail_address.saturating_sub(stats.begin_address).max(1);
        for i in (0..plan.index_scans.len()).rev() {
            let scan = &plan.index_scans[i];
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss, clippy::cast_sign_loss)]
            let records_in_range = (stats.records as f64 * (scan.to - scan.from) as f64 / span as f64) as u64;
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss, clippy::cast_sign_loss)]
            let cap = ((records_in_range as f64 * FULL_SCAN_THRESHOLD) as u64).max(1);
            if records_in_range < 1_000 {
                continue;
            }
            // Every key pointer its PSFs ever wrote bounds the chains' length: when that is
            // below the cap, the chains need not be walked to know the index scan is cheaper
            // (a selective predicate's chain would otherwise be walked once here and once
            // by the scan).
            let written: u64 = psfs
                .iter()
                .filter(|psf| scan.properties.iter().any(|p| p.psf_id == psf.id))
                .map(|psf| psf.key_pointer_count())
                .sum();
            if written < cap {
                continue;
            }
            let entries: u64 = scan.properties.iter().map(|p| self.chain_length(p, scan.from, scan.to, cap)).sum();
            if entries >= cap {
                let scan = plan.index_scans.remove(i);
                plan.reason = format!(
                    "the chains of {:?} hold at least {entries} of ~{records_in_range} records in [{}, {}): a full scan is cheaper",
                    scan.psfs, scan.from, scan.to
                );
                plan.full_scans.push(LogRange { from: scan.from, to: scan.to });
            }
        }
        plan.full_scans.sort_by_key(|r| r.from);
        merge_adjacent(&mut plan.full_scans);
        plan
    }

    /// Number of key pointers of `property` in `[from, to)`, counting at most `cap`.
    #[must_use]
    pub fn chain_length(&self, property: &PropertyKey, from: u64, to: u64, cap: u64) -> u64 {
        let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
        let Some(mut address) = self.index.find_entry(hash) else { return 0 };
        let mut reader = LogReader::new(&self.log);
        let mut count = 0;
        while address != 0 && address >= from && address >= self.log.begin_address() && count < cap {
            let Ok(Some(bytes)) = reader.read(address, KEY_POINTER_SIZE) else { break };
            let kp = KeyPointer::decode(words(bytes));
            if address < to && kp.psf_id == property.psf_id {
                count += 1;
            }
            if kp.previous >= address {
                break;
            }
            address = kp.previous;
        }
        count
    }

    fn resolve_range(&self, request: &ScanRequest) -> (u64, u64) {
        let from = request.from_address.max(self.log.begin_address());
        let to = request.to_address.min(self.log.tail_address());
        (from, to.max(from))
    }

    /// The Arrow fields of `columns` (every top-level field when empty), from the
    /// inferred schema. A requested path's column is named by its dotted text (`actor.login`,
    /// `"a.b"` for a key with a dot); a whole record's columns by their JSON keys (`a.b`).
    /// Scans name their batches' columns the same way.
    ///
    /// # Errors
    /// [`Error::UnknownColumn`] for a path no record had.
    pub fn output_columns(&self, columns: &[FieldPath]) -> Result<Vec<(FieldPath, arrow_schema::Field)>> {
        let schema = self.schema();
        if columns.is_empty() {
            schema
                .arrow_schema()
                .fields()
                .iter()
                .map(|f| Ok((FieldPath::from_segments([f.name().clone()])?, f.as_ref().clone())))
                .collect()
        } else {
            schema.columns(columns)
        }
    }

    /// Runs `request` with `plan` (from [`Self::plan`]), handing each Arrow batch of
    /// the requested columns to `sink`, which may stop the scan with
    /// `ControlFlow::Break`.
    ///
    /// # Errors
    /// [`Error::UnknownColumn`], device errors ([`Error::Io`], [`Error::CorruptPage`]),
    /// or what `sink` returns.
    pub fn scan_with_plan(
        &self,
        request: &ScanRequest,
        plan: &ScanPlan,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ScanStats> {
        let columns = self.output_columns(&request.columns)?;
        self.scan_columns(request, plan, &columns, sink)
    }

    /// [`Self::scan_with_plan`] with the output columns already resolved by
    /// [`Self::output_columns`] (possibly none: then batches carry only a row count).
    /// A caller that announced a schema before scanning (a Flight `DoGet`) passes the
    /// columns it announced, so that schema inference widening a type in between cannot
    /// make the batches disagree with it.
    ///
    /// # Errors
    /// As [`Self::scan_with_plan`].
    pub fn scan_columns(
        &self,
        request: &ScanRequest,
        plan: &ScanPlan,
        columns: &[(FieldPath, arrow_schema::Field)],
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ScanStats> {
        let mut fields = FieldSet::new();
        let filter = request.filter.as_ref().map(|f| f.bind(&mut fields));
        let column_ids = columns.iter().map(|(path, _)| fields.insert(path)).collect();
        let mut projector = Projector {
            table: self,
            filter,
            fields,
            parser: self.take_parser(),
            column_ids,
            builder: BatchBuilder::new(columns),
            batch_rows: request.batch_rows.max(1),
            remaining: request.limit.unwrap_or(usize::MAX),
            stats: ScanStats::default(),
        };
        let mut reader = LogReader::new(&self.log);
        let mut flow = ControlFlow::Continue(());
        for index_scan in &plan.index_scans {
            if flow.is_break() {
                break;
            }
            flow = self.index_scan(index_scan, &mut reader, &mut projector, sink)?;
        }
        for range in &plan.full_scans {
            if flow.is_break() {
                break;
            }
            flow = self.full_scan(*range, &mut projector, sink)?;
        }
        projector.stats.device_bytes += reader.device_bytes;
        projector.stats.device_reads += reader.device_reads;
        projector.finish(sink)
    }

    /// Plans and runs `request`, collecting the batches.
    ///
    /// # Errors
    /// As [`Self::scan_with_plan`].
    pub fn scan(&self, request: &ScanRequest) -> Result<(Vec<RecordBatch>, ScanStats)> {
        let plan = self.plan(request);
        let mut batches = Vec::new();
        let stats = self.scan_with_plan(request, &plan, &mut |batch| {
            batches.push(batch);
            Ok(ControlFlow::Continue(()))
        })?;
        Ok((batches, stats))
    }

    /// Walks the chains of an index scan (newest to oldest, so reads on disk move
    /// towards lower addresses, which the reader's prefetch window follows), re-checks
    /// each key pointer's PSF and value (hash collisions), and processes the payloads of
    /// matching records in batches as it goes — so a limit stops the walk early and no
    /// record is read twice. With several chains (an `IN` or `OR`), a record reached
    /// through more than one of them is returned once.
    fn index_scan(
        &self,
        scan: &IndexScanPlan,
        reader: &mut LogReader<'_>,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let chunk_rows = projector.batch_rows.clamp(64, 4096);
        let mut seen = std::collections::HashSet::new();
        let mut canonical = Vec::new();
        let mut buffer = Vec::new();
        let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
        let mut flush = |buffer: &mut Vec<u8>, spans: &mut Vec<std::ops::Range<usize>>, projector: &mut Projector<'_>| {
            projector.stats.index_candidates += spans.len() as u64;
            let payloads: Vec<&[u8]> = spans.iter().map(|s| &buffer[s.clone()]).collect();
            let flow = projector.process(&payloads, sink);
            buffer.clear();
            spans.clear();
            flow
        };
        for property in &scan.properties {
            let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
            let Some(mut address) = self.index.find_entry(hash) else { continue };
            while address != 0 && address >= scan.from && address >= self.log.begin_address() {
                projector.stats.chain_entries += 1;
                let Some(kp_bytes) = reader.read(address, KEY_POINTER_SIZE)? else { break };
                let kp = KeyPointer::decode(words(kp_bytes));
                let record_address = address - KeyPointer::offset_in_record(usize::from(kp.index)) as u64;
                let next = kp.previous;
                let in_range = address < scan.to && kp.psf_id == property.psf_id;
                if in_range && (scan.properties.len() == 1 || !seen.contains(&record_address)) {
                    if let Some(record) = reader.read_record(record_address)? {
                        let view = RecordView::new(record).ok_or_else(|| corrupt(record_address, "chain record"))?;
                        let header = view.header();
                        canonical.clear();
                        if header.is_visible()
                            && !header.is_invalid()
                            && kp.canonical_value(view.value_region(), view.payload(), &mut canonical)
                            && canonical == property.canonical
                        {
                            if scan.properties.len() > 1 {
                                seen.insert(record_address);
                            }
                            let start = buffer.len();
                            buffer.extend_from_slice(view.payload());
                            spans.push(start..buffer.len());
                            if spans.len() >= chunk_rows && flush(&mut buffer, &mut spans, projector)?.is_break() {
                                return Ok(ControlFlow::Break(()));
                            }
                        }
                    }
                }
                if next >= address {
                    return Err(corrupt(address, "chain goes forward"));
                }
                address = next;
            }
        }
        flush(&mut buffer, &mut spans, projector)
    }

    /// Reads every page overlapping `range` and processes its visible records.
    fn full_scan(
        &self,
        range: LogRange,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        if range.from >= range.to {
            return Ok(ControlFlow::Continue(()));
        }
        let mut page_bytes = Vec::new();
        let first_page = self.log.page_of(range.from);
        let last_page = self.log.page_of(range.to - 1);
        for page in first_page..=last_page {
            let page_start = self.log.page_start(page);
            let records = self.page_records(page, range, &mut page_bytes)?;
            projector.stats.full_scan_records += records.len() as u64;
            let payloads: Vec<&[u8]> = records.iter().map(|r| &page_bytes[r.clone()]).collect();
            if projector.process(&payloads, sink)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
            if page_start + self.log.page_size() as u64 >= range.to {
                break;
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Copies page `page` and returns the payload ranges (within `out`) of its visible
    /// records in `range`. Waits for records whose ingestion is in flight.
    fn page_records(&self, page: u64, range: LogRange, out: &mut Vec<u8>) -> Result<Vec<std::ops::Range<usize>>> {
        let page_start = self.log.page_start(page);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        'copy: loop {
            let Some(end) = self.log.read_page(page, out)? else { return Ok(Vec::new()) };
            let end = end.min(usize::try_from(range.to - page_start).unwrap_or(usize::MAX));
            let mut records = Vec::new();
            let mut offset = if page == 0 { crate::log::FIRST_ADDRESS as usize } else { 0 };
            while offset + 8 <= end {
                let header = crate::record::RecordHeader(u64::from_le_bytes(
                    out[offset..offset + 8].try_into().map_err(|_| corrupt(page_start + offset as u64, "header"))?,
                ));
                if header.is_filler() {
                    break;
                }
                let complete = header.is_visible() || header.is_invalid();
                if !complete {
                    // Allocated but not yet written or linked: wait for its writer.
                    if std::time::Instant::now() > deadline {
                        return Err(Error::AddressNotReadable {
                            address: page_start + offset as u64,
                            reason: "a record stayed in flight for 5 s".into(),
                        });
                    }
                    std::thread::yield_now();
                    continue 'copy;
                }
                let view = RecordView::new(&out[offset..]).ok_or_else(|| corrupt(page_start + offset as u64, "page record"))?;
                let address = page_start + offset as u64;
                if header.is_visible() && !header.is_invalid() && address >= range.from {
                    let payload = view.payload();
                    let start = payload.as_ptr() as usize - out.as_ptr() as usize;
                    records.push(start..start + payload.len());
                }
                offset += header.size();
            }
            return Ok(records);
        }
    }
}

/// Share of a range's records above which an index scan is replaced by a full scan.
pub const FULL_SCAN_THRESHOLD: f64 = 0.5;

fn merge_adjacent(ranges: &mut Vec<LogRange>) {
    let mut merged: Vec<LogRange> = Vec::with_capacity(ranges.len());
    for range in ranges.drain(..) {
        match merged.last_mut() {
            Some(last) if last.to == range.from => last.to = range.to,
            _ => merged.push(range),
        }
    }
    *ranges = merged;
}

fn words(bytes: &[u8]) -> [u64; 3] {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    [word(0), word(1), word(2)]
}

fn corrupt(address: u64, what: &str) -> Error {
    Error::AddressNotReadable { address, reason: format!("{what} does not decode (corrupt log?)") }
}
