//! Subset retrieval (FishStore §7): index scans along PSF chains where a PSF covers
//! the log range, full scans elsewhere; every candidate re-checked against the filter;
//! the requested columns projected into Arrow record batches.

mod aggregate;
mod columnar;
mod keyed;
mod plan;
mod reader;

use std::ops::ControlFlow;

use arrow_array::RecordBatch;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::parser::{AdaptiveChoice, FieldSet, FullScanParser, OnDemandParser, ParsedBatch, RecordParser};
use crate::path::FieldPath;
use crate::psf::{BoundExpr, Expr};
use crate::record::{KeyPointer, RecordHeader, RecordView, KEY_POINTER_SIZE, RECORD_PREFIX};
use crate::schema::BatchBuilder;
use crate::table::Table;
use crate::LogAddress;
pub use aggregate::{Aggregate, AggregateFunction};
pub use columnar::COLUMNAR_INDEX_SHARE;
pub use keyed::DeleteReport;
pub use plan::{plan_scan, IndexScanPlan, LogRange, PropertyKey, RowGroupCounts, ScanPlan};
use reader::LogReader;

/// A scan request: which records (filter, log range), which fields, how many.
#[derive(Debug, Clone)]
pub struct ScanRequest {
    /// Records must satisfy it (`None`: all records).
    pub filter: Option<Expr>,
    /// Columns to return, as dotted paths; empty means every top-level field.
    pub columns: Vec<FieldPath>,
    /// First log address to consider.
    pub from_address: LogAddress,
    /// One past the last log address to consider ([`LogAddress::MAX`]: the tail when the
    /// scan starts).
    pub to_address: LogAddress,
    /// Stop after this many records.
    pub limit: Option<usize>,
    /// Rows per output batch.
    pub batch_rows: usize,
    /// Append each record's log address as a last, non-null `UInt64` column named
    /// [`ADDRESS_COLUMN`] (a follower's offset; `from_address = address + 1` resumes after
    /// the record).
    pub with_address: bool,
    /// The parser of full scans' records: chosen per page by measuring (default), or
    /// forced (benchmarks, comparisons).
    pub full_scan_parser: FullScanParser,
}

impl Default for ScanRequest {
    fn default() -> Self {
        Self {
            filter: None,
            columns: Vec::new(),
            from_address: LogAddress::ZERO,
            to_address: LogAddress::MAX,
            limit: None,
            batch_rows: 4096,
            with_address: false,
            full_scan_parser: FullScanParser::Adaptive,
        }
    }
}

/// The name of the column of log addresses ([`ScanRequest::with_address`]; also the
/// columnar tier's files' column of record addresses).
pub const ADDRESS_COLUMN: &str = "_address";

/// The field of the column of log addresses: non-null `UInt64`.
#[must_use]
pub fn address_field() -> arrow_schema::Field {
    arrow_schema::Field::new(ADDRESS_COLUMN, arrow_schema::DataType::UInt64, false)
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
    /// Bytes of the records the scan read from the log (index candidates and full-scanned
    /// records, before the filter): what a selective PSF saves a scan (FishStore §6).
    pub record_bytes: u64,
    /// Records that satisfied the filter and were returned.
    pub records_returned: u64,
    /// Bytes read from segment files.
    pub device_bytes: u64,
    /// Reads issued to segment files.
    pub device_reads: u64,
    /// Rows of columnar files read by columnar scans (before the filter).
    pub columnar_rows: u64,
    /// Row groups of columnar files skipped by their statistics: `_address` out of the
    /// range, or minimums and maximums that rule the filter out.
    pub columnar_row_groups_skipped: u64,
    /// Rows of columnar row groups left out by their pages' statistics (the Parquet page
    /// index), whose pages were not decoded.
    pub columnar_page_rows_skipped: u64,
    /// Keyed tables: matching records dropped by validation (superseded or deleted
    /// versions, [`crate::keys`]).
    pub versions_skipped: u64,
    /// Keyed tables: key chains walked to find the version a snapshot sees (keys updated
    /// after it).
    pub version_walks: u64,
    /// Records of full scans parsed by simdjson and by the On-Demand scanner
    /// ([`FullScanParser`]).
    pub full_scan_parsed: FullScanParsed,
}

/// How many of a scan's full-scanned records each parser parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FullScanParsed {
    /// By simdjson.
    pub simdjson: u64,
    /// By shoal's On-Demand scanner.
    pub on_demand: u64,
}

/// What a scan emits for each matching record.
enum Output {
    /// The requested columns: the field id of each, and the batch they go into.
    Columns { column_ids: Vec<usize>, builder: BatchBuilder },
    /// The record's bytes as ingested, in a non-null `Utf8` column named `json`.
    Json(arrow_array::builder::StringBuilder),
}

/// The schema of [`Table::scan_json`]'s batches: one non-null `Utf8` column, `json`.
#[must_use]
pub fn json_output_schema() -> arrow_schema::SchemaRef {
    std::sync::Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new("json", arrow_schema::DataType::Utf8, false)]))
}

impl Output {
    fn len(&self) -> usize {
        match self {
            Output::Columns { builder, .. } => builder.len(),
            Output::Json(builder) => arrow_array::builder::ArrayBuilder::len(builder),
        }
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        match self {
            Output::Columns { builder, .. } => builder.finish(),
            Output::Json(builder) => {
                let array: arrow_array::ArrayRef = std::sync::Arc::new(builder.finish());
                Ok(RecordBatch::try_new(json_output_schema(), vec![array])?)
            }
        }
    }
}

struct Projector<'t> {
    table: &'t Table,
    filter: Option<BoundExpr>,
    /// The filter as a tree, for columnar scans' vectorised evaluation.
    filter_expr: Option<Expr>,
    /// Fields of interest: the filter's, then the columns'. None (no filter, JSON
    /// output): records are not parsed at all.
    fields: FieldSet,
    /// simdjson (stage 1 over whole records, fastest when fields of interest are often
    /// absent, so that records are read to the end anyway): one of full scans' two
    /// parsers ([`FullScanParser`]).
    parser: Box<dyn RecordParser>,
    /// For the candidates of index scans (and full scans' other parser): the On-Demand
    /// scanner, whose trusted pass stops
    /// at the last field of interest (candidates mostly have the filter's fields, which
    /// GitHub-like events hold near their start: Q2's fields are found in the first ~15%
    /// of an IssuesEvent). Measured in `benches/parser.rs`.
    chain_parser: OnDemandParser,
    /// Which parser full scans use ([`ScanRequest::full_scan_parser`]), and the running
    /// choice between `parser` (0) and `chain_parser` (1) when it is adaptive.
    full_scan_parser: FullScanParser,
    full_scan_choice: AdaptiveChoice,
    output: Output,
    /// The records' log addresses, when the request asks for them.
    addresses: Option<arrow_array::builder::UInt64Builder>,
    batch_rows: usize,
    remaining: usize,
    stats: ScanStats,
    /// A keyed table's validation of each match against the plan's snapshot.
    validator: Option<keyed::Validator<'t>>,
}

impl Projector<'_> {
    /// Filters `payloads`, projects the matches, and emits full batches. Breaks when the
    /// limit is reached or the sink asks to stop. In a keyed table, the candidates were
    /// validated by address before they were read; `walks[i]` marks those whose version
    /// the snapshot sees only a walk of their key's chain can tell (empty: none).
    fn process(
        &mut self,
        payloads: &[&[u8]],
        addresses: &[LogAddress],
        walks: &[bool],
        from_chains: bool,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        if payloads.is_empty() {
            return Ok(ControlFlow::Continue(()));
        }
        let mut parsed = ParsedBatch::default();
        parsed.reset(self.fields.len());
        let parse = !self.fields.is_empty();
        if parse {
            // Log records were validated in full when they were ingested.
            if from_chains {
                self.chain_parser.parse_trusted_batch(payloads, &self.fields, &mut parsed);
            } else {
                let count = payloads.len() as u64;
                match self.full_scan_parser {
                    FullScanParser::Simdjson => {
                        self.parser.parse_trusted_batch(payloads, &self.fields, &mut parsed);
                        self.full_scan_choice.records[0] += count;
                    }
                    FullScanParser::OnDemand => {
                        self.chain_parser.parse_trusted_batch(payloads, &self.fields, &mut parsed);
                        self.full_scan_choice.records[1] += count;
                    }
                    FullScanParser::Adaptive => {
                        self.full_scan_choice.parse_trusted([&mut *self.parser, &mut self.chain_parser], payloads, &self.fields, &mut parsed);
                    }
                }
            }
        }
        for (i, payload) in payloads.iter().enumerate() {
            if self.remaining == 0 {
                return Ok(ControlFlow::Break(()));
            }
            let values = if parse {
                let Ok(values) = parsed.record(i) else { continue };
                values
            } else {
                &[]
            };
            if let Some(filter) = &self.filter {
                if filter.eval(values) != Some(true) {
                    continue;
                }
            }
            if let Some(validator) = self.validator.as_mut().filter(|_| walks.get(i) == Some(&true)) {
                if !validator.walk(addresses.get(i).copied().unwrap_or(LogAddress::ZERO))? {
                    self.stats.versions_skipped += 1;
                    continue;
                }
            }
            if self.emit(values, payload, addresses.get(i).copied().unwrap_or(LogAddress::ZERO), sink)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(if self.remaining == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    }

    /// Outputs one matching record — its field `values` (by field id) or its `payload`
    /// (JSON output) — and hands a full batch to the sink. Breaks when the limit is
    /// reached or the sink asks to stop.
    fn emit(
        &mut self,
        values: &[crate::value::FieldValue<'_>],
        payload: &[u8],
        address: LogAddress,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        if self.remaining == 0 {
            return Ok(ControlFlow::Break(()));
        }
        match &mut self.output {
            Output::Columns { column_ids, builder } => builder.append_values(column_ids.iter().map(|&id| &values[id])),
            Output::Json(builder) => {
                // Ingestion validated every record as JSON, hence UTF-8.
                let text = std::str::from_utf8(payload).map_err(|_| corrupt(address, "a record's payload (not UTF-8)"))?;
                builder.append_value(text);
            }
        }
        if let Some(addresses) = &mut self.addresses {
            addresses.append_value(address.get());
        }
        self.remaining -= 1;
        self.stats.records_returned += 1;
        if self.output.len() >= self.batch_rows {
            let batch = self.finish_batch()?;
            if sink(batch)?.is_break() {
                self.remaining = 0;
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(if self.remaining == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    }

    /// Outputs the selected rows of a columnar row group straight from its decoded arrays
    /// (TellStore §5: the selection applied to whole columns, no per-row work): `columns[i]`
    /// is output column `i` for every row of the row group, of the output's type (made by
    /// `columnar::assemble`), `selected` the rows to output (ascending), `addresses` every
    /// row's log address. Returns `None`, having output nothing, when the output is not
    /// columns (JSON text), and the flow otherwise. Honours the limit, `batch_rows` and the
    /// column of addresses as [`Self::emit`] does.
    fn emit_columns(
        &mut self,
        columns: Vec<arrow_array::ArrayRef>,
        selected: &[u32],
        addresses: &arrow_array::ArrayRef,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<Option<ControlFlow<()>>> {
        let Output::Columns { builder, .. } = &self.output else { return Ok(None) };
        let schema = builder.schema();
        if selected.is_empty() || self.remaining == 0 {
            return Ok(Some(if self.remaining == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }));
        }
        // What the row-by-row path holds goes first, to keep the rows in order.
        if self.output.len() > 0 {
            let batch = self.finish_batch()?;
            if sink(batch)?.is_break() {
                self.remaining = 0;
                return Ok(Some(ControlFlow::Break(())));
            }
        }
        let selected = &selected[..selected.len().min(self.remaining)];
        // Every row selected: the arrays themselves; else the selected rows' indices.
        let indices = (selected.len() != addresses.len()).then(|| arrow_array::UInt32Array::from(selected.to_vec()));
        let take = |array: &arrow_array::ArrayRef| -> Result<arrow_array::ArrayRef> {
            match &indices {
                None => Ok(array.clone()),
                Some(indices) => Ok(arrow_select::take::take(array.as_ref(), indices, None)?),
            }
        };
        let mut arrays = Vec::with_capacity(columns.len() + 1);
        for column in &columns {
            arrays.push(take(column)?);
        }
        let mut fields: Vec<arrow_schema::FieldRef> = schema.fields().iter().cloned().collect();
        if self.addresses.is_some() {
            arrays.push(take(addresses)?);
            fields.push(std::sync::Arc::new(address_field()));
        }
        let schema = std::sync::Arc::new(arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone()));
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(selected.len()));
        let batch = RecordBatch::try_new_with_options(schema, arrays, &options)?;
        self.remaining -= selected.len();
        self.stats.records_returned += selected.len() as u64;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let length = self.batch_rows.min(batch.num_rows() - offset);
            if sink(batch.slice(offset, length))?.is_break() {
                self.remaining = 0;
                return Ok(Some(ControlFlow::Break(())));
            }
            offset += length;
        }
        Ok(Some(if self.remaining == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }))
    }

    /// The rows output so far as a batch, with the column of addresses last when asked.
    fn finish_batch(&mut self) -> Result<RecordBatch> {
        let batch = self.output.finish()?;
        let Some(addresses) = &mut self.addresses else { return Ok(batch) };
        let mut fields: Vec<arrow_schema::FieldRef> = batch.schema().fields().iter().cloned().collect();
        fields.push(std::sync::Arc::new(address_field()));
        let mut columns = batch.columns().to_vec();
        columns.push(std::sync::Arc::new(addresses.finish()));
        let schema = arrow_schema::Schema::new_with_metadata(fields, batch.schema().metadata().clone());
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Ok(RecordBatch::try_new_with_options(std::sync::Arc::new(schema), columns, &options)?)
    }

    fn finish(mut self, sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>) -> Result<ScanStats> {
        if self.output.len() > 0 {
            let batch = self.finish_batch()?;
            let _ = sink(batch)?;
        }
        self.table.return_parser(self.parser);
        let [simdjson, on_demand] = self.full_scan_choice.records;
        self.stats.full_scan_parsed = FullScanParsed { simdjson, on_demand };
        if let Some(validator) = &self.validator {
            self.stats.version_walks = validator.walks;
        }
        Ok(self.stats)
    }
}

impl Table {
    /// Plans `request` without running it: [`plan_scan`] over the table's PSFs, then
    /// a cost check on each index scan whose range reaches below the head address —
    /// when its chains hold at least [`FULL_SCAN_THRESHOLD`] of the records in its range,
    /// reading them one by one from the device costs more than one sequential full scan,
    /// so the plan switches to a full scan and says why.
    #[must_use]
    pub fn plan(&self, request: &ScanRequest) -> ScanPlan {
        let (from, to) = self.resolve_range(request);
        let psfs = self.psfs().all();
        let mut plan = plan_scan(request.filter.as_ref(), &psfs, from, to);
        let stats = self.stats();
        let span = stats.tail_address.bytes_since(stats.begin_address).max(1);
        for i in (0..plan.index_scans.len()).rev() {
            let scan = &plan.index_scans[i];
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss, clippy::cast_sign_loss)]
            let records_in_range = (stats.records as f64 * (scan.to - scan.from) as f64 / span as f64) as u64;
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss, clippy::cast_sign_loss)]
            let cap = ((records_in_range as f64 * FULL_SCAN_THRESHOLD) as u64).max(1);
            // In memory, a candidate costs a random memory read and a parse that stops at
            // the last field of interest, far less than a full scan's record: index scans
            // of 58% of the records (`shoal-bench --cases query`, `type = 'PushEvent'`, 100
            // MB) take 0.23× the full scan's time. Only ranges reaching below the head
            // (device reads) get the check.
            if records_in_range < 1_000 || scan.from >= self.log().head_address() {
                continue;
            }
            // Every key pointer its PSFs ever wrote bounds the chains' length: when that is
            // below the cap, the chains need not be walked to know the index scan is cheaper
            // (a selective predicate's chain would otherwise be walked once here and once
            // by the scan).
            let written: u64 = psfs
                .iter()
                .filter(|psf| scan.properties.iter().any(|p| p.psf_id == psf.id))
                .map(|psf| psf.key_pointer_count() + self.backfill().progress(psf.id).map_or(0, |p| p.entries))
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
        self.plan_columnar(&mut plan, request.filter.as_ref());
        if self.keyed().is_some() {
            // As of the request's address (below the range's start when it asks for time
            // travel below the begin address: the snapshot horizon then refuses it).
            plan.snapshot = Some(request.to_address.min(to));
        }
        plan
    }

    /// Splits `plan` into at most about `parts` plans whose ranges tile the plan's
    /// ([`ScanPlan::restrict`] of each), for readers that fetch them in parallel (Flight
    /// endpoints, Spark partitions): each run of adjacent index-scan ranges stays whole —
    /// a chain walk cannot be split by address without every part walking the chains
    /// down from their heads again — and the full-scan ranges share the other parts,
    /// split at page boundaries in proportion to their sizes. With `parts` ≤ 1, or a
    /// plan with no range, the one part is the whole plan. With the plan's `filter`, a part
    /// that provably selects nothing — only columnar ranges, every row group of them ruled
    /// out by its statistics — joins its neighbour instead of costing a reader a round trip
    /// for no row (a one-hour range over a day of data: four endpoints, three certainly
    /// empty, became two); the parts still tile the plan.
    #[must_use]
    pub fn split_plan(&self, plan: &ScanPlan, parts: usize, filter: Option<&crate::psf::Expr>) -> Vec<ScanPlan> {
        if parts <= 1 {
            return vec![plan.clone()];
        }
        let mut ranges: Vec<(LogAddress, LogAddress, bool)> = plan
            .index_scans
            .iter()
            .map(|s| (s.from, s.to, true))
            .chain(plan.scan_ranges().map(|r| (r.from, r.to, false)))
            .filter(|(f, t, _)| f < t)
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(LogAddress, LogAddress, bool)> = Vec::new();
        for range in ranges {
            match merged.last_mut() {
                Some(last) if last.2 && range.2 && last.1 == range.0 => last.1 = range.1,
                _ => merged.push(range),
            }
        }
        let index_groups = merged.iter().filter(|r| r.2).count();
        let full_total: u64 = merged.iter().filter(|r| !r.2).map(|r| r.1 - r.0).sum();
        let budget = parts.max(1).saturating_sub(index_groups).max(1) as u128;
        let mut bounds: Vec<(LogAddress, LogAddress)> = Vec::new();
        for (start, end, index) in merged {
            if index {
                bounds.push((start, end));
            } else {
                let share = (budget * u128::from(end - start)).div_ceil(u128::from(full_total.max(1))).max(1);
                bounds.extend(self.split_range(start, end, usize::try_from(share).unwrap_or(1)));
            }
        }
        if bounds.is_empty() {
            return vec![plan.clone()];
        }
        if let Some(filter) = filter.filter(|_| bounds.len() > 1 && !plan.columnar_scans.is_empty()) {
            let files = self.columnar().files();
            let mut joined: Vec<(LogAddress, LogAddress, bool)> = Vec::with_capacity(bounds.len());
            for (from, to) in bounds {
                let live = self.part_may_match(plan, from, to, &files, filter);
                match joined.last_mut() {
                    // A part with no match joins the one before; a part with matches joins a
                    // part before it that has none.
                    Some(last) if !live || !last.2 => (last.1, last.2) = (to, last.2 || live),
                    _ => joined.push((from, to, live)),
                }
            }
            bounds = joined.into_iter().map(|(from, to, _)| (from, to)).collect();
        }
        bounds.into_iter().map(|(from, to)| plan.restrict(from, to)).collect()
    }

    /// Whether `[from, to)` of `plan` may hold a record `filter` selects: it overlaps an
    /// index or full scan, or a columnar range that a file does not cover (read from the
    /// log) or that holds a row group the filter's statistics do not rule out.
    fn part_may_match(
        &self,
        plan: &ScanPlan,
        from: LogAddress,
        to: LogAddress,
        files: &[std::sync::Arc<crate::columnar::ColumnarFile>],
        filter: &crate::psf::Expr,
    ) -> bool {
        let overlaps = |f: LogAddress, t: LogAddress| f < to && from < t && f < t;
        if plan.index_scans.iter().any(|s| overlaps(s.from, s.to)) || plan.full_scans.iter().any(|r| overlaps(r.from, r.to)) {
            return true;
        }
        for range in plan.columnar_scans.iter().filter(|r| overlaps(r.from, r.to)) {
            let (low, high) = (range.from.max(from), range.to.min(to));
            let mut covered = 0;
            for file in files.iter().filter(|f| f.from < high && low < f.to) {
                let (a, b) = (low.max(file.from), high.min(file.to));
                covered += b - a;
                if file.row_groups_in(a, b).into_iter().any(|row_group| file.may_match(row_group, filter)) {
                    return true;
                }
            }
            if covered < high - low {
                return true;
            }
        }
        false
    }

    /// Splits `[from, to)` (non-empty) into at most `parts` ranges that start at page
    /// boundaries.
    fn split_range(&self, from: LogAddress, to: LogAddress, parts: usize) -> Vec<(LogAddress, LogAddress)> {
        let first = self.log().page_of(from);
        let last = self.log().page_of(to - 1);
        let pages = last - first + 1;
        let parts = (parts.max(1) as u64).min(pages);
        (0..parts)
            .map(|i| {
                let start = if i == 0 { from } else { self.log().page_start(first + pages * i / parts) };
                let end = if i + 1 == parts { to } else { self.log().page_start(first + pages * (i + 1) / parts) };
                (start, end)
            })
            .collect()
    }

    /// Checks a plan that comes back from a client (a Flight ticket carries the plan it
    /// was issued for, so that reading it does not plan again) and binds it to the log
    /// as it is now: ranges cut to `[begin, tail)` (a truncation since planning drops
    /// what it removed). A tampered plan can only make a scan return fewer records than
    /// the filter selects, never other ones or the same one twice: every candidate is
    /// re-checked against the filter, and the checks below keep the ranges disjoint.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] naming the problem: unordered, empty-width or overlapping
    /// ranges; more than [`MAX_PLAN_CHAINS`] chains; an index scan over a PSF id the
    /// table does not have, under another name, or outside the PSF's coverage (its safe
    /// register and deregister addresses; a stale ticket after a deregistration).
    pub fn check_plan(&self, plan: &ScanPlan) -> Result<ScanPlan> {
        let invalid = |what: String| Err(Error::InvalidPlan(what));
        let chains: usize = plan.index_scans.iter().map(|s| s.properties.len()).sum();
        if chains > MAX_PLAN_CHAINS
            || plan.index_scans.len() + plan.full_scans.len() + plan.columnar_scans.len() > MAX_PLAN_CHAINS
        {
            return invalid(format!("{chains} chains in {} index scans (at most {MAX_PLAN_CHAINS})", plan.index_scans.len()));
        }
        let mut ranges: Vec<(LogAddress, LogAddress)> = plan
            .index_scans
            .iter()
            .map(|s| (s.from, s.to))
            .chain(plan.scan_ranges().map(|r| (r.from, r.to)))
            .collect();
        if let Some((from, to)) = ranges.iter().find(|(f, t)| f >= t) {
            return invalid(format!("the range [{from}, {to}) is empty or reversed"));
        }
        ranges.sort_unstable();
        if let Some(pair) = ranges.windows(2).find(|w| w[0].1 > w[1].0) {
            return invalid(format!("the ranges [{}, {}) and [{}, {}) overlap", pair[0].0, pair[0].1, pair[1].0, pair[1].1));
        }
        for scan in &plan.index_scans {
            for property in &scan.properties {
                let Some(psf) = self.psfs().get(property.psf_id) else {
                    return invalid(format!("PSF id {} does not exist", property.psf_id));
                };
                if psf.name != property.psf {
                    return invalid(format!("PSF id {} is {:?}, not {:?}", property.psf_id, psf.name, property.psf));
                }
                let covered = psf.coverage().is_some_and(|(from, to)| from <= scan.from && scan.to <= to);
                if !covered {
                    return invalid(format!(
                        "PSF {:?} does not cover [{}, {}) (was it deregistered since the plan was made?); plan the query again",
                        psf.name, scan.from, scan.to
                    ));
                }
            }
        }
        let (begin, tail) = (self.log().begin_address(), self.log().tail_address());
        let mut bound = plan.restrict(begin, tail);
        bound.full_scans.sort_by_key(|r| r.from);
        bound.columnar_scans.sort_by_key(|r| r.from);
        Ok(bound)
    }

    /// Number of records of `property` in `[from, to)` — key pointers on its chain, and
    /// entries of its PSF's backfill runs below the safe register address — counting at
    /// most `cap`.
    #[must_use]
    pub fn chain_length(&self, property: &PropertyKey, from: LogAddress, to: LogAddress, cap: u64) -> u64 {
        let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
        // Below the safe register address: the backfill's runs.
        let register = self.psfs().get(property.psf_id).map_or(LogAddress::ZERO, |p| p.safe_register_address());
        let mut count = self.backfilled_count(property, from, to.min(register), cap);
        if count >= cap {
            return count;
        }
        let from = from.max(register);
        let Some(head) = self.index().find_entry(hash) else { return count };
        let mut address = LogAddress::new(head);
        let mut reader = LogReader::new(self.log());
        while address != LogAddress::ZERO && address >= from && address >= self.log().begin_address() && count < cap {
            let Ok(Some(bytes)) = reader.read(address, KEY_POINTER_SIZE) else { break };
            let kp = KeyPointer::decode(words(bytes));
            if address < to && kp.psf_id == property.psf_id {
                count += 1;
            }
            if kp.previous >= address.get() {
                break;
            }
            address = LogAddress::new(kp.previous);
        }
        count
    }

    /// Entries of `property` in `[from, to)` in its PSF's backfill runs (the records below its
    /// safe register address), counting at most `cap`.
    pub(crate) fn backfilled_count(&self, property: &PropertyKey, from: LogAddress, to: LogAddress, cap: u64) -> u64 {
        let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
        let mut count = 0;
        for run in self.backfill().runs(property.psf_id, from, to) {
            count += run.count(hash, from, to, cap - count).unwrap_or(0);
            if count >= cap {
                break;
            }
        }
        count
    }

    /// The log range a request reads: from its `from_address` (at least the begin
    /// address) to its `to_address`, at most [`Table::complete_until`] — so no record in
    /// flight at planning time is skipped by one answer and by the next, which starts there.
    fn resolve_range(&self, request: &ScanRequest) -> (LogAddress, LogAddress) {
        let from = request.from_address.max(self.log().begin_address());
        let to = request.to_address.min(self.complete_until());
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
        let output = Output::Columns { column_ids, builder: BatchBuilder::new(columns) };
        self.run_plan(request, plan, fields, filter, output, sink)
    }

    /// Runs `request` with `plan` like [`Self::scan_with_plan`], but each batch holds the
    /// matching records' bytes exactly as they were ingested, in one non-null `Utf8`
    /// column named `json` ([`json_output_schema`]); `request.columns` is ignored. Only
    /// the filter's fields are parsed (nothing at all without a filter).
    ///
    /// # Errors
    /// As [`Self::scan_with_plan`].
    pub fn scan_json(
        &self,
        request: &ScanRequest,
        plan: &ScanPlan,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ScanStats> {
        let mut fields = FieldSet::new();
        let filter = request.filter.as_ref().map(|f| f.bind(&mut fields));
        let output = Output::Json(arrow_array::builder::StringBuilder::new());
        self.run_plan(request, plan, fields, filter, output, sink)
    }

    fn run_plan(
        &self,
        request: &ScanRequest,
        plan: &ScanPlan,
        fields: FieldSet,
        filter: Option<BoundExpr>,
        output: Output,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ScanStats> {
        let snapshot = plan.snapshot.or_else(|| plan.bounds().map(|(_, to)| to)).unwrap_or(LogAddress::MAX);
        // A keyed table's scan holds its snapshot open, so that a log compaction does not
        // drop versions it would see ([`crate::keys::Snapshots`]).
        let _open = self.keyed().as_ref().map(|keyed| keyed.snapshots.open(snapshot)).transpose()?;
        let validator = self.keyed().as_ref().map(|keyed| keyed::Validator::new(self, keyed, snapshot));
        let mut projector = Projector {
            table: self,
            filter,
            filter_expr: request.filter.clone(),
            fields,
            parser: self.take_parser(),
            chain_parser: OnDemandParser::new(),
            full_scan_parser: request.full_scan_parser,
            full_scan_choice: AdaptiveChoice::default(),
            output,
            addresses: request.with_address.then(arrow_array::builder::UInt64Builder::new),
            batch_rows: request.batch_rows.max(1),
            remaining: request.limit.unwrap_or(usize::MAX),
            stats: ScanStats::default(),
            validator,
        };
        let mut reader = LogReader::new(self.log());
        let mut flow = ControlFlow::Continue(());
        for index_scan in &plan.index_scans {
            if flow.is_break() {
                break;
            }
            flow = self.index_scan(index_scan, &mut reader, &mut projector, sink)?;
        }
        for range in &plan.columnar_scans {
            if flow.is_break() {
                break;
            }
            flow = self.columnar_scan(*range, &mut reader, &mut projector, sink)?;
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
        let mut batches = Vec::new();
        let stats = self.replanned(request, |plan| {
            self.scan_with_plan(request, plan, &mut |batch| {
                batches.push(batch);
                Ok(ControlFlow::Continue(()))
            })
        })?;
        Ok((batches, stats))
    }

    /// Plans `request` and runs `run` on the plan; a keyed table's log compaction that
    /// raised the snapshot horizon between the two (refused before any row, with
    /// [`Error::SnapshotTooOld`]) makes it plan again, once, unless the request asks for
    /// time travel (`to_address`).
    pub(crate) fn replanned<T>(&self, request: &ScanRequest, mut run: impl FnMut(&ScanPlan) -> Result<T>) -> Result<T> {
        match run(&self.plan(request)) {
            Err(Error::SnapshotTooOld { .. }) if request.to_address == LogAddress::MAX => run(&self.plan(request)),
            other => other,
        }
    }

    /// Walks the chains of an index scan (newest to oldest, so reads on disk move
    /// towards lower addresses, which the reader's prefetch window follows), re-checks
    /// each key pointer's PSF and value (hash collisions), and processes the payloads of
    /// matching records in batches as it goes — so a limit stops the walk early and no
    /// record is read twice. With several chains (an `IN` or `OR`), a record reached
    /// through more than one of them is returned once.
    ///
    /// The walk goes in runs of at most [`EPOCH_REFRESH_READS`] chain reads under one
    /// epoch guard (each read's own protection is then nested, without a SeqCst store):
    /// key pointers and records in memory are read in place, not copied, and a run's
    /// candidates are parsed in place before the guard is dropped — so the parser touches
    /// only the bytes up to the last field of interest — while the batches it fills are
    /// handed to the sink only after, so that a slow client never holds the log's frames.
    /// Records below the head are read through `reader` and copied.
    fn index_scan(
        &self,
        scan: &IndexScanPlan,
        reader: &mut LogReader<'_>,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        enum Candidate<'g> {
            InMemory(&'g [u8]),
            Copied(std::ops::Range<usize>),
        }
        let chunk_rows = projector.batch_rows.clamp(64, 4096);
        let mut seen = std::collections::HashSet::new();
        let mut canonical = Vec::new();
        let mut copied = Vec::new();
        let mut ready: Vec<RecordBatch> = Vec::new();
        let epoch = self.log().epoch();
        let mut chains = scan.properties.iter();
        // The chain being walked, the next address on it and where the chain part of the
        // range starts: at the PSF's safe register address (its backfill's runs index
        // what lies below: `backfilled_scan`).
        let mut cursor: Option<(&PropertyKey, LogAddress, LogAddress)> = None;
        loop {
            let mut walked = false;
            let flow = {
                let guard = epoch.protect();
                let mut candidates: Vec<Candidate<'_>> = Vec::new();
                let mut candidate_addresses: Vec<LogAddress> = Vec::new();
                let mut candidate_walks: Vec<bool> = Vec::new();
                let mut reads = 0;
                while reads < EPOCH_REFRESH_READS && candidates.len() < chunk_rows {
                    let (property, address, chain_from) = match cursor {
                        Some(at) => at,
                        None => {
                            let Some(property) = chains.next() else {
                                walked = true;
                                break;
                            };
                            let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
                            let register = self.psfs().get(property.psf_id).map_or(LogAddress::ZERO, |p| p.safe_register_address());
                            (property, LogAddress::new(self.index().find_entry(hash).unwrap_or(0)), scan.from.max(register))
                        }
                    };
                    if address == LogAddress::ZERO || address < chain_from || address < self.log().begin_address() {
                        cursor = None;
                        continue;
                    }
                    reads += 1;
                    projector.stats.chain_entries += 1;
                    let kp = match self.log().read_in_memory(&guard, address, KEY_POINTER_SIZE) {
                        Some(bytes) => KeyPointer::decode(words(bytes)),
                        None => match reader.read(address, KEY_POINTER_SIZE)? {
                            Some(bytes) => KeyPointer::decode(words(bytes)),
                            None => {
                                cursor = None;
                                continue;
                            }
                        },
                    };
                    let record_address = KeyPointer::record_of(address, usize::from(kp.index));
                    // A record is in a range when its address is (its key pointers lie above it).
                    let in_range = (chain_from..scan.to).contains(&record_address) && kp.psf_id == property.psf_id;
                    // A keyed table's superseded version is dropped before it is read.
                    let verdict = match &projector.validator {
                        Some(validator) if in_range => validator.by_address(record_address),
                        _ => crate::keys::Verdict::Live,
                    };
                    let superseded = verdict == crate::keys::Verdict::Superseded;
                    if superseded {
                        projector.stats.versions_skipped += 1;
                    }
                    if in_range && !superseded && (scan.properties.len() == 1 || !seen.contains(&record_address)) {
                        let matches = |view: &RecordView<'_>, canonical: &mut Vec<u8>| {
                            let header = view.header();
                            canonical.clear();
                            // A keyed table's tombstone (empty payload) is never a match.
                            header.is_visible()
                                && !header.is_invalid()
                                && !view.payload().is_empty()
                                && kp.canonical_value(view.value_region(), view.payload(), canonical)
                                && *canonical == property.canonical
                        };
                        let found = if let Some(prefix) = self.log().read_in_memory(&guard, record_address, RECORD_PREFIX) {
                            let size = RecordHeader(u64::from_le_bytes(words_prefix(prefix))).size();
                            // As `LogReader::read_record`: a size that cannot be is no record.
                            match (size >= RECORD_PREFIX).then(|| self.log().read_in_memory(&guard, record_address, size)).flatten() {
                                Some(bytes) => {
                                    let view = RecordView::new(bytes).ok_or_else(|| corrupt(record_address, "chain record"))?;
                                    matches(&view, &mut canonical).then(|| Candidate::InMemory(view.payload()))
                                }
                                None => None,
                            }
                        } else if let Some(record) = reader.read_record(record_address)? {
                            let view = RecordView::new(record).ok_or_else(|| corrupt(record_address, "chain record"))?;
                            matches(&view, &mut canonical).then(|| {
                                let start = copied.len();
                                copied.extend_from_slice(view.payload());
                                Candidate::Copied(start..copied.len())
                            })
                        } else {
                            None
                        };
                        if let Some(candidate) = found {
                            if scan.properties.len() > 1 {
                                seen.insert(record_address);
                            }
                            candidates.push(candidate);
                            candidate_addresses.push(record_address);
                            candidate_walks.push(verdict == crate::keys::Verdict::Walk);
                        }
                    }
                    if kp.previous >= address.get() {
                        return Err(corrupt(address, "chain goes forward"));
                    }
                    cursor = Some((property, LogAddress::new(kp.previous), chain_from));
                }
                let payloads: Vec<&[u8]> = candidates
                    .iter()
                    .map(|c| match c {
                        Candidate::InMemory(bytes) => *bytes,
                        Candidate::Copied(range) => &copied[range.clone()],
                    })
                    .collect();
                projector.stats.index_candidates += payloads.len() as u64;
                projector.stats.record_bytes += payloads.iter().map(|p| p.len() as u64).sum::<u64>();
                projector.process(&payloads, &candidate_addresses, &candidate_walks, true, &mut |batch| {
                    ready.push(batch);
                    Ok(ControlFlow::Continue(()))
                })?
                // The guard is dropped here: the batches hold copies.
            };
            copied.clear();
            for batch in ready.drain(..) {
                if sink(batch)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            if flow.is_break() {
                return Ok(flow);
            }
            if walked {
                return self.backfilled_scan(scan, reader, projector, sink);
            }
        }
    }

    /// The part of an index scan below its PSFs' safe register addresses: the records
    /// their backfills indexed ([`crate::psf::backfill`]), found in the sorted runs by the
    /// properties' hashes, read by address (highest first, as a chain walk reads them) and
    /// re-checked like every candidate.
    ///
    /// # Errors
    /// A run that fails its checksum (its backfill then makes it again); device errors.
    fn backfilled_scan(
        &self,
        scan: &IndexScanPlan,
        reader: &mut LogReader<'_>,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let mut addresses = Vec::new();
        for property in &scan.properties {
            let Some(psf) = self.psfs().get(property.psf_id) else { continue };
            let to = scan.to.min(psf.safe_register_address());
            if scan.from >= to {
                continue;
            }
            let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
            let runs = self.backfill().runs(property.psf_id, scan.from, to);
            // Read after the runs: a deregistration that deleted them reset it first.
            if psf.coverage().is_none_or(|(from, _)| from > scan.from) {
                return Err(Error::InvalidPlan(format!(
                    "PSF {:?} was deregistered while the query ran (its backfill's runs are gone); plan the query again",
                    psf.name
                )));
            }
            for run in runs {
                if let Err(error) = run.lookup(hash, scan.from, to, &mut addresses) {
                    // A block that fails its checksum: the run is made again.
                    self.backfill().damaged(&psf, &run);
                    return Err(error);
                }
            }
        }
        if addresses.is_empty() {
            return Ok(ControlFlow::Continue(()));
        }
        addresses.sort_unstable_by(|a, b| b.cmp(a));
        addresses.dedup();
        projector.stats.chain_entries += addresses.len() as u64;
        let chunk_rows = projector.batch_rows.clamp(64, 4096);
        let mut copied = Vec::new();
        for chunk in addresses.chunks(chunk_rows) {
            copied.clear();
            let mut ranges = Vec::with_capacity(chunk.len());
            let mut found = Vec::with_capacity(chunk.len());
            let mut walks = Vec::with_capacity(chunk.len());
            for &address in chunk {
                let verdict = match &projector.validator {
                    Some(validator) => validator.by_address(address),
                    None => crate::keys::Verdict::Live,
                };
                if verdict == crate::keys::Verdict::Superseded {
                    projector.stats.versions_skipped += 1;
                    continue;
                }
                let Some(record) = reader.read_record(address)? else { continue };
                let view = RecordView::new(record).ok_or_else(|| corrupt(address, "backfilled record"))?;
                let header = view.header();
                if !header.is_visible() || header.is_invalid() || view.payload().is_empty() {
                    continue;
                }
                let start = copied.len();
                copied.extend_from_slice(view.payload());
                ranges.push(start..copied.len());
                found.push(address);
                walks.push(verdict == crate::keys::Verdict::Walk);
            }
            let payloads: Vec<&[u8]> = ranges.iter().map(|r| &copied[r.clone()]).collect();
            projector.stats.index_candidates += payloads.len() as u64;
            projector.stats.record_bytes += payloads.iter().map(|p| p.len() as u64).sum::<u64>();
            if projector.process(&payloads, &found, &walks, true, sink)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
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
        let first_page = self.log().page_of(range.from);
        let last_page = self.log().page_of(range.to - 1);
        for page in first_page..=last_page {
            let page_start = self.log().page_start(page);
            let mut records = self.log().page_records(page, range.from, range.to, &mut page_bytes)?;
            projector.stats.full_scan_records += records.len() as u64;
            let mut walks = Vec::new();
            if let Some(validator) = &projector.validator {
                // A keyed table's superseded versions are dropped before they are parsed.
                let before = records.len();
                records.retain(|(address, _)| match validator.by_address(*address) {
                    crate::keys::Verdict::Superseded => false,
                    verdict => {
                        walks.push(verdict == crate::keys::Verdict::Walk);
                        true
                    }
                });
                projector.stats.versions_skipped += (before - records.len()) as u64;
            }
            let payloads: Vec<&[u8]> = records.iter().map(|(_, r)| &page_bytes[r.clone()]).collect();
            projector.stats.record_bytes += payloads.iter().map(|p| p.len() as u64).sum::<u64>();
            let addresses: Vec<LogAddress> = records.iter().map(|(address, _)| *address).collect();
            if projector.process(&payloads, &addresses, &walks, false, sink)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
            if page_start + self.log().page_size() as u64 >= range.to {
                break;
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Most chains (and most ranges) a plan handed back by a client may have
/// ([`Table::check_plan`]); the planner makes one chain per value of an `IN` list, and
/// the filter language bounds those well below this.
pub const MAX_PLAN_CHAINS: usize = 65_536;

/// Chain reads between two refreshes of an index scan's epoch guard.
const EPOCH_REFRESH_READS: usize = 256;

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

/// The first eight bytes of `bytes` (at least eight long): a record's header word.
fn words_prefix(bytes: &[u8]) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[..8]);
    w
}

fn corrupt(address: LogAddress, what: &str) -> Error {
    Error::AddressNotReadable { address, reason: format!("{what} does not decode (corrupt log?)") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psf::{parse_expr, PsfSpec};
    use crate::table::TableConfig;
    use arrow_array::{Array, StringArray};
    use std::sync::Arc;

    /// A table with small pages: records 0..300 before a `kind` PSF, 300..600 after.
    fn table() -> (Arc<Table>, Vec<String>) {
        let mut config = TableConfig::in_memory(8 << 20);
        config.log.page_size_bits = 14;
        let table = Table::create(config).unwrap();
        let records: Vec<String> = (0..600)
            .map(|i| format!(r#"{{ "id":{i}, "kind": "{}", "s": "\u00e9\n{i}" }}"#, if i % 10 == 0 { "odd" } else { "even" }))
            .collect();
        let bytes: Vec<&[u8]> = records.iter().map(|r| r.as_bytes()).collect();
        table.ingest(&bytes[..300]).unwrap();
        table.register_psf("kind", &PsfSpec::Projection { field: "kind".into() }).unwrap();
        table.ingest(&bytes[300..]).unwrap();
        (table, records)
    }

    fn json_rows(table: &Table, request: &ScanRequest, plan: &ScanPlan) -> Vec<String> {
        let mut rows = Vec::new();
        table
            .scan_json(request, plan, &mut |batch| {
                let column = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                assert_eq!(column.null_count(), 0);
                rows.extend(column.iter().map(|v| v.unwrap().to_owned()));
                Ok(ControlFlow::Continue(()))
            })
            .unwrap();
        rows
    }

    #[test]
    fn json_output_gives_the_ingested_bytes_of_index_full_and_split_plans() {
        let (table, records) = table();
        let request = ScanRequest { filter: Some(parse_expr("kind = 'odd'").unwrap()), batch_rows: 7, ..ScanRequest::default() };
        let plan = table.plan(&request);
        assert!(!plan.index_scans.is_empty() && !plan.full_scans.is_empty(), "{plan:?}");
        let mut expected: Vec<String> = records.iter().step_by(10).cloned().collect();
        expected.sort();
        let mut whole = json_rows(&table, &request, &plan);
        whole.sort();
        assert_eq!(whole, expected);
        // The parts of a split plan tile it: together they give the same records once.
        let parts = table.split_plan(&plan, 4, None);
        assert!(parts.len() >= 3, "{parts:?}");
        let mut joined: Vec<String> = parts.iter().flat_map(|p| json_rows(&table, &request, p)).collect();
        joined.sort();
        assert_eq!(joined, expected);
        assert_eq!(table.split_plan(&plan, 1, None), vec![plan.clone()]);
        // No filter: nothing parsed, every record; a limit stops exactly.
        let all = ScanRequest { limit: Some(123), ..ScanRequest::default() };
        assert_eq!(json_rows(&table, &all, &table.plan(&all)).len(), 123);
    }

    /// In memory, an index scan stays one even when its chains hold most of the records
    /// (the cost check is for ranges on the device), and gives what a full scan gives.
    #[test]
    fn in_memory_index_scans_of_dense_chains_are_kept() {
        let table = Table::create(TableConfig::in_memory(32 << 20)).unwrap();
        table.register_psf("kind", &PsfSpec::Projection { field: "kind".into() }).unwrap();
        let records: Vec<String> =
            (0..3_000).map(|i| format!(r#"{{"id":{i},"kind":"{}"}}"#, if i % 10 == 0 { "rare" } else { "common" })).collect();
        let bytes: Vec<&[u8]> = records.iter().map(|r| r.as_bytes()).collect();
        table.ingest(&bytes).unwrap();
        let request = ScanRequest { filter: Some(parse_expr("kind = 'common'").unwrap()), ..ScanRequest::default() };
        let plan = table.plan(&request);
        assert!(plan.full_scans.is_empty() && plan.index_scans.len() == 1, "{plan:?}");
        let stats = table.stats();
        let full = ScanPlan {
            index_scans: Vec::new(),
            full_scans: vec![LogRange { from: stats.begin_address, to: stats.tail_address }],
            ..plan.clone()
        };
        let (mut along, mut scanned) = (json_rows(&table, &request, &plan), json_rows(&table, &request, &full));
        along.sort();
        scanned.sort();
        assert_eq!(along.len(), 2_700);
        assert_eq!(along, scanned);
    }

    #[test]
    fn plans_round_trip_through_json_and_forged_ones_are_refused() {
        let (table, _) = table();
        let request = ScanRequest { filter: Some(parse_expr("kind = 'odd'").unwrap()), ..ScanRequest::default() };
        let plan = table.plan(&request);
        let text = serde_json::to_string(&plan).unwrap();
        let back: ScanPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plan);
        assert_eq!(table.check_plan(&back).unwrap().index_scans, plan.index_scans);

        let refused = |change: &dyn Fn(&mut ScanPlan)| {
            let mut forged = plan.clone();
            change(&mut forged);
            match table.check_plan(&forged) {
                Err(Error::InvalidPlan(message)) => message,
                other => panic!("accepted {forged:?}: {other:?}"),
            }
        };
        assert!(refused(&|p| p.index_scans[0].properties[0].psf_id = 9).contains("does not exist"));
        assert!(refused(&|p| p.index_scans[0].properties[0].psf = "x".into()).contains("not \"x\""));
        assert!(refused(&|p| {
            p.full_scans.clear();
            p.index_scans[0].from = LogAddress::ZERO;
        })
        .contains("does not cover"));
        assert!(refused(&|p| p.full_scans.push(p.full_scans[0])).contains("overlap"));
        assert!(refused(&|p| p.full_scans[0].to = p.full_scans[0].from).contains("empty or reversed"));
        // Ranges past the tail are cut to it.
        let mut far = plan.clone();
        far.index_scans[0].to = LogAddress::MAX;
        assert_eq!(table.check_plan(&far).unwrap().index_scans[0].to, table.stats().tail_address);
        assert!(serde_json::from_str::<ScanPlan>(&text.replace("\"canonical\":\"", "\"canonical\":\"z")).is_err());
    }
}
