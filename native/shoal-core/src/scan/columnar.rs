//! Columnar scans: the part of a plan that the columnar tier's files cover
//! ([`crate::columnar`]), planned by cost against index scans and run over columns.

use std::ops::ControlFlow;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Int64Array, RecordBatch};

use super::reader::LogReader;
use super::{corrupt, merge_adjacent, words, IndexScanPlan, LogRange, Output, Projector, RowGroupCounts, ScanPlan};
use crate::columnar::assemble::Assembly;
use crate::columnar::eval::{evaluate, PathView, TRUE};
use crate::columnar::layout::{Resolved, ScalarType};
use crate::columnar::{instants_of, ColumnarFile};
use crate::error::Result;
use crate::keys::Verdict;
use crate::path::FieldPath;
use crate::psf::{Expr, Literal};
use crate::record::{KeyPointer, RecordHeader, RecordView, KEY_POINTER_SIZE, RECORD_PREFIX};
use crate::table::Table;
use crate::value::FieldValue;
use crate::LogAddress;

/// Share of a range's records from which an index scan over a range the columnar tier
/// covers is replaced by a columnar scan: a candidate of a chain costs a random read and
/// a parse, a row of a columnar scan a few nanoseconds per column. Measured at 1 GB of
/// GitHub events (`bench/compare.py`, Q2: 9,134 candidates, 1.8 % of the records): the
/// index scan 9–10 ms (~1.1 µs per candidate), the columnar scan with its columns cached
/// 4.2 ms (~8.5 ns per row for two filter and two output columns): even at about 0.8 %.
/// Columns not decoded yet (the first such query after a restart, or columns beyond
/// `columnar.cache_bytes`) cost their decoding once (tens of ms per GB of log), which the
/// later queries of a recurring workload do not pay again.
pub const COLUMNAR_INDEX_SHARE: f64 = 0.01;

/// Key pointers read from the head of an index scan's chains to estimate their density.
const CHAIN_SAMPLE: usize = 1_024;

impl Table {
    /// Moves the parts of `plan` that columnar files cover onto columnar scans: every
    /// full-scan range, and each index scan whose chains hold at least
    /// [`COLUMNAR_INDEX_SHARE`] of the records of its range (estimated from the newest
    /// entries of its chains) — provided each file holds the filter's paths in columns.
    pub(super) fn plan_columnar(&self, plan: &mut ScanPlan, filter: Option<&Expr>) {
        let files = self.columnar().files();
        if files.is_empty() {
            return;
        }
        let paths = filter.map(Expr::fields).unwrap_or_default();
        let usable: Vec<(LogAddress, LogAddress)> =
            files.iter().filter(|f| f.layout.serves(paths.iter())).map(|f| (f.from, f.to)).collect();
        if usable.is_empty() {
            plan.reason.push_str("; the columnar files do not hold the filter's paths in columns");
            return;
        }
        let mut moved = Vec::new();
        let full_scans = std::mem::take(&mut plan.full_scans);
        for range in full_scans {
            let (covered, rest) = carve(range, &usable);
            moved.extend(covered);
            plan.full_scans.extend(rest);
        }
        let stats = self.stats();
        let span = stats.tail_address.bytes_since(stats.begin_address).max(1);
        let mut index_moved = Vec::new();
        let index_scans = std::mem::take(&mut plan.index_scans);
        for scan in index_scans {
            let (covered, rest) = carve(LogRange { from: scan.from, to: scan.to }, &usable);
            let covered_bytes: u64 = covered.iter().map(|r| r.to - r.from).sum();
            #[allow(clippy::cast_precision_loss)]
            let records_in_range = stats.records as f64 * (scan.to - scan.from) as f64 / span as f64;
            let threshold = records_in_range * COLUMNAR_INDEX_SHARE;
            let dense = covered_bytes > 0 && records_in_range >= 1_000.0 && self.estimate_chain_entries(&scan, threshold) >= threshold;
            if dense {
                index_moved.push(scan.psfs.clone());
                moved.extend(covered);
                plan.index_scans.extend(rest.into_iter().map(|r| IndexScanPlan { from: r.from, to: r.to, ..scan.clone() }));
            } else {
                plan.index_scans.push(scan);
            }
        }
        if moved.is_empty() {
            return;
        }
        moved.sort_by_key(|r| r.from);
        merge_adjacent(&mut moved);
        let bytes: u64 = moved.iter().map(|r| r.to - r.from).sum();
        // The row groups those ranges read, and those the filter's statistics rule out.
        let mut counts = RowGroupCounts { total: 0, skipped: 0 };
        for file in &files {
            for range in moved.iter().filter(|r| r.from < file.to && file.from < r.to) {
                for row_group in file.row_groups_in(range.from.max(file.from), range.to.min(file.to)) {
                    counts.total += 1;
                    counts.skipped += u64::from(filter.is_some_and(|f| !file.may_match(row_group, f)));
                }
            }
        }
        plan.reason.push_str(&format!(
            "; columnar scans over {bytes} bytes of log ({} row groups, {} skipped by their statistics)",
            counts.total, counts.skipped
        ));
        plan.columnar_row_groups = Some(counts);
        for psfs in index_moved {
            plan.reason.push_str(&format!(" (the chains of {psfs:?} are dense there)"));
        }
        plan.columnar_scans = moved;
    }

    /// Estimated key pointers of `scan`'s chains within its range: counted exactly when a
    /// chain ends within [`CHAIN_SAMPLE`] entries, else extrapolated from the density
    /// (entries per log byte) of its newest entries; below the PSF's safe register address,
    /// its backfill runs' entries, counted until `enough` (the answer's threshold) is reached.
    fn estimate_chain_entries(&self, scan: &IndexScanPlan, enough: f64) -> f64 {
        let mut reader = LogReader::new(self.log());
        let per_chain = (CHAIN_SAMPLE / scan.properties.len().max(1)).max(16);
        let mut total = 0.0;
        for property in &scan.properties {
            let hash = crate::ingest::property_hash(property.psf_id, &property.canonical);
            let register = self.psfs().get(property.psf_id).map_or(LogAddress::ZERO, |p| p.safe_register_address());
            let below = scan.to.min(register);
            if scan.from < below {
                #[allow(clippy::cast_precision_loss)]
                {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let cap = (enough - total).ceil().max(1.0) as u64;
                    total += self.backfilled_count(property, scan.from, below, cap) as f64;
                }
            }
            let Some(head) = self.index().find_entry(hash) else { continue };
            let head = LogAddress::new(head);
            let (mut address, mut seen, mut in_range) = (head, 0usize, 0u64);
            let mut exhausted = true;
            while address != LogAddress::ZERO && address >= scan.from && address >= self.log().begin_address() {
                if seen == per_chain {
                    exhausted = false;
                    break;
                }
                let Ok(Some(bytes)) = reader.read(address, KEY_POINTER_SIZE) else { break };
                let kp = KeyPointer::decode(words(bytes));
                if kp.psf_id == property.psf_id {
                    seen += 1;
                    in_range += u64::from(address < scan.to);
                }
                if kp.previous >= address.get() {
                    break;
                }
                address = LogAddress::new(kp.previous);
            }
            #[allow(clippy::cast_precision_loss)]
            if exhausted {
                total += in_range as f64;
            } else {
                let sampled_bytes = head.bytes_since(address).max(1) as f64;
                total += seen as f64 / sampled_bytes * (scan.to - scan.from) as f64;
            }
        }
        total
    }

    /// Runs a columnar scan of `range`: the parts files cover from their columns, the
    /// rest (a file deleted or dropped since planning) from the log.
    pub(super) fn columnar_scan(
        &self,
        range: LogRange,
        reader: &mut LogReader<'_>,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let mut at = range.from;
        while at < range.to {
            let flow = match self.columnar().file_at(at) {
                Some(file) => {
                    let to = file.to.min(range.to);
                    let mut damaged_from = None;
                    let mut flow = self.scan_file(&file, at, to, reader, projector, sink, &mut damaged_from)?;
                    if let Some(from) = damaged_from {
                        // The file changed on disk since it was written: the rows not
                        // answered yet come from the log, and the file goes.
                        if let Err(error) = self.columnar().drop_damaged() {
                            tracing::error!(%error, "dropping a damaged columnar file failed; its range is answered from the log");
                        }
                        flow = self.full_scan(LogRange { from, to }, projector, sink)?;
                    }
                    at = to;
                    flow
                }
                None => {
                    let (gap, next_file) = self.columnar().next_gap(at);
                    debug_assert_eq!(gap, at);
                    let to = next_file.min(range.to);
                    let flow = self.full_scan(LogRange { from: at, to }, projector, sink)?;
                    at = to;
                    flow
                }
            };
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The records of `file` in `[from, to)`. When a read finds the file damaged
    /// ([`ColumnarFile::damaged`]), stops and sets `damaged_from` to the first address whose
    /// rows it has not answered (the caller answers `[damaged_from, to)` from the log).
    #[allow(clippy::too_many_arguments)]
    fn scan_file(
        &self,
        file: &ColumnarFile,
        from: LogAddress,
        to: LogAddress,
        reader: &mut LogReader<'_>,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
        damaged_from: &mut Option<LogAddress>,
    ) -> Result<ControlFlow<()>> {
        let filter_paths = projector.filter_expr.as_ref().map(Expr::fields).unwrap_or_default();
        let output_paths: Option<Vec<FieldPath>> = match &projector.output {
            Output::Columns { column_ids, .. } => Some(column_ids.iter().map(|&id| projector.fields.paths()[id].clone()).collect()),
            Output::Json(_) => None,
        };
        let filter_served = file.layout.serves(filter_paths.iter());
        // The output columns made whole from the file's columns (structs rebuilt from their
        // leaves), when every one of them can be; else row by row from the values, when
        // every path is in columns; else from the raw records.
        let assemblies: Option<Vec<Assembly>> = match (&projector.output, &output_paths) {
            (Output::Columns { builder, .. }, Some(paths)) => paths
                .iter()
                .zip(builder.schema().fields())
                .map(|(path, field)| Assembly::plan(&file.layout, path.segments(), field.data_type()))
                .collect(),
            _ => None,
        };
        let output_served =
            assemblies.is_some() || output_paths.as_ref().is_some_and(|paths| file.layout.serves(paths.iter()));
        if !filter_served || (projector.filter_expr.is_none() && !output_served) {
            // Nothing to gain from the columns: read the range's pages.
            return self.full_scan(LogRange { from, to }, projector, sink);
        }
        let mut paths = filter_paths;
        if output_served && assemblies.is_none() {
            for path in output_paths.iter().flatten() {
                if !paths.contains(path) {
                    paths.push(path.clone());
                }
            }
        }
        let mut leaves = vec![file.layout.address_column];
        for path in &paths {
            if let Resolved::Columns(columns) = file.layout.resolve(path) {
                leaves.extend(columns.iter().flatten());
            }
        }
        for assembly in assemblies.iter().flatten() {
            assembly.leaves(&mut leaves);
        }
        leaves.sort_unstable();
        leaves.dedup();
        let mut row_groups = file.row_groups_in(from, to);
        if let Some(filter) = &projector.filter_expr {
            // Row groups whose statistics rule the filter out are not read.
            row_groups.retain(|&row_group| file.may_match(row_group, filter));
        }
        projector.stats.columnar_row_groups_skipped += (file.row_group_count() - row_groups.len()) as u64;
        if row_groups.is_empty() {
            return Ok(ControlFlow::Continue(()));
        }
        let whole_file = from <= file.from && to >= file.to;
        let (mut selected_addresses, mut selected_walks) = (Vec::new(), Vec::new());
        let mut opened = None;
        for row_group in row_groups {
            // Only the pages the filter may match, when their statistics rule some out and the
            // columns are not in memory; else decoded once, then kept in memory for later
            // scans (`columnar::DecodedColumns`).
            let fetched = match &projector.filter_expr {
                Some(filter) => file.row_group_pages(row_group, &leaves, filter, &self.columnar().decoded, &mut opened),
                None => Ok(None),
            }
            .and_then(|paged| match paged {
                Some(paged) => Ok(paged),
                None => file.row_group_columns(row_group, &leaves, &self.columnar().decoded, &mut opened).map(|arrays| (arrays, 0)),
            });
            let (arrays, skipped) = match fetched {
                Ok(fetched) => fetched,
                Err(_) if file.damaged() => {
                    // Row groups are in address order: the earlier ones were answered.
                    *damaged_from = Some(file.row_group_start(row_group).max(from));
                    return Ok(ControlFlow::Continue(()));
                }
                Err(e) => return Err(e),
            };
            projector.stats.columnar_page_rows_skipped += skipped as u64;
            if arrays.is_empty() {
                continue;
            }
            let column = |leaf: usize| leaves.binary_search(&leaf).ok().map(|i| &arrays[i]);
            // The instants of the string columns a TIMESTAMP comparison reads: kept with the
            // decoded columns when the batch is the whole row group, else read for it alone.
            let instants: Vec<Option<std::sync::Arc<Int64Array>>> = paths
                .iter()
                .map(|path| {
                    let compared = projector.filter_expr.as_ref().is_some_and(|f| compares_instants(f, path));
                    let Resolved::Columns(columns) = file.layout.resolve(path) else { return None };
                    let leaf = columns[ScalarType::String.slot()].filter(|_| compared)?;
                    let strings = column(leaf)?.as_string::<i32>();
                    Some(if skipped == 0 {
                        file.row_group_instants(row_group, leaf, strings, &self.columnar().decoded)
                    } else {
                        std::sync::Arc::new(instants_of(strings))
                    })
                })
                .collect();
            let views: Vec<PathView<'_>> = paths
                .iter()
                .zip(&instants)
                .map(|(path, instants)| match file.layout.resolve(path) {
                    Resolved::Columns(columns) => {
                        let get = |ty: ScalarType| columns[ty.slot()].and_then(column);
                        PathView {
                            bools: get(ScalarType::Bool).map(|a| a.as_boolean()),
                            ints: get(ScalarType::Int).map(|a| a.as_primitive()),
                            floats: get(ScalarType::Float).map(|a| a.as_primitive()),
                            strings: get(ScalarType::String).map(|a| a.as_string()),
                            instants: instants.as_deref(),
                        }
                    }
                    Resolved::Opaque => PathView::default(),
                })
                .collect();
            let view_of = |path: &FieldPath| paths.iter().position(|p| p == path).map_or_else(PathView::default, |i| views[i]);
            let rows = column(file.layout.address_column).map_or(0, |a| a.len());
            let mut selection = match &projector.filter_expr {
                Some(filter) => evaluate(filter, &view_of, rows),
                None => vec![TRUE; rows],
            };
            let addresses = column(file.layout.address_column)
                .ok_or_else(|| crate::Error::Columnar("the _address column was not read".into()))?
                .as_primitive::<UInt64Type>();
            if !whole_file {
                for (s, address) in selection.iter_mut().zip(addresses.values()) {
                    if *address < from.get() || *address >= to.get() {
                        *s = 0;
                    }
                }
            }
            projector.stats.columnar_rows += rows as u64;
            // A keyed table's rows are validated by address (files hold every version):
            // superseded ones are dropped here, the few whose version only a chain walk can
            // tell are marked.
            let mut walks = vec![false; if projector.validator.is_some() { rows } else { 0 }];
            if let Some(validator) = &projector.validator {
                for ((s, address), walk) in selection.iter_mut().zip(addresses.values()).zip(walks.iter_mut()) {
                    if *s != TRUE {
                        continue;
                    }
                    match validator.by_address(LogAddress::new(*address)) {
                        Verdict::Live => {}
                        Verdict::Superseded => {
                            *s = 0;
                            projector.stats.versions_skipped += 1;
                        }
                        Verdict::Walk => *walk = true,
                    }
                }
            }
            if let Some(assemblies) = &assemblies {
                // Rows of a keyed table that only a walk of their key's chain can validate
                // are walked first; then the selected rows are taken from whole columns.
                if let Some(validator) = projector.validator.as_mut() {
                    for (row, walk) in walks.iter().enumerate() {
                        if *walk && selection[row] == TRUE && !validator.walk(LogAddress::new(addresses.value(row)))? {
                            selection[row] = 0;
                            projector.stats.versions_skipped += 1;
                        }
                    }
                }
                let columns = assemblies.iter().map(|a| a.build(&column, rows)).collect::<Result<Vec<_>>>()?;
                let selected: Vec<u32> = selection
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| **s == TRUE)
                    .map(|(row, _)| u32::try_from(row).unwrap_or(u32::MAX))
                    .collect();
                let addresses = column(file.layout.address_column)
                    .ok_or_else(|| crate::Error::Columnar("the _address column was not read".into()))?;
                if projector.emit_columns(columns, &selected, addresses, sink)?.is_some_and(|flow| flow.is_break()) {
                    return Ok(ControlFlow::Break(()));
                }
            } else if output_served {
                let Some(output_paths) = &output_paths else { continue };
                let output_views: Vec<PathView<'_>> = output_paths.iter().map(view_of).collect();
                let ids: Vec<usize> = match &projector.output {
                    Output::Columns { column_ids, .. } => column_ids.clone(),
                    Output::Json(_) => Vec::new(),
                };
                let mut values: Vec<FieldValue<'_>> = vec![FieldValue::Missing; projector.fields.len()];
                for (row, _) in selection.iter().enumerate().filter(|(_, s)| **s == TRUE) {
                    if walks.get(row) == Some(&true) {
                        let seen = match projector.validator.as_mut() {
                            Some(validator) => validator.walk(LogAddress::new(addresses.value(row)))?,
                            None => true,
                        };
                        if !seen {
                            projector.stats.versions_skipped += 1;
                            continue;
                        }
                    }
                    for (view, &id) in output_views.iter().zip(&ids) {
                        values[id] = view.value(row);
                    }
                    if projector.emit(&values, &[], LogAddress::new(addresses.value(row)), sink)?.is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
            } else {
                selected_addresses.clear();
                selected_walks.clear();
                for (row, (_, address)) in selection.iter().zip(addresses.values()).enumerate().filter(|(_, (s, _))| **s == TRUE) {
                    selected_addresses.push(*address);
                    if !walks.is_empty() {
                        selected_walks.push(walks[row]);
                    }
                }
                if self.read_records(&selected_addresses, &selected_walks, reader, projector, sink)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Reads the records at `addresses` (ascending; a file's `_address` values) from the log and processes them as
    /// candidates (the filter is checked again on the raw record); `walks[i]` marks a
    /// keyed table's candidate that only a chain walk can validate (empty: none).
    fn read_records(
        &self,
        addresses: &[u64],
        walks: &[bool],
        reader: &mut LogReader<'_>,
        projector: &mut Projector<'_>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let mut copied: Vec<u8> = Vec::new();
        let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
        let mut read: Vec<LogAddress> = Vec::new();
        let mut read_walks: Vec<bool> = Vec::new();
        for (number, chunk) in addresses.chunks(super::EPOCH_REFRESH_READS).enumerate() {
            copied.clear();
            spans.clear();
            read.clear();
            read_walks.clear();
            {
                let guard = self.log().epoch().protect();
                for (i, &raw) in chunk.iter().enumerate() {
                    let address = LogAddress::new(raw);
                    let in_memory = self.log().read_in_memory(&guard, address, RECORD_PREFIX).and_then(|prefix| {
                        let size = RecordHeader(u64::from_le_bytes(super::words_prefix(prefix))).size();
                        (size >= RECORD_PREFIX).then(|| self.log().read_in_memory(&guard, address, size)).flatten()
                    });
                    let record = match in_memory {
                        Some(bytes) => bytes,
                        None => match reader.read_record(address)? {
                            Some(bytes) => bytes,
                            None => continue,
                        },
                    };
                    let view = RecordView::new(record).ok_or_else(|| corrupt(address, "columnar row's record"))?;
                    let start = copied.len();
                    copied.extend_from_slice(view.payload());
                    spans.push(start..copied.len());
                    read.push(address);
                    if let Some(&walk) = walks.get(number * super::EPOCH_REFRESH_READS + i) {
                        read_walks.push(walk);
                    }
                }
            }
            let payloads: Vec<&[u8]> = spans.iter().map(|r| &copied[r.clone()]).collect();
            projector.stats.index_candidates += payloads.len() as u64;
            projector.stats.record_bytes += payloads.iter().map(|p| p.len() as u64).sum::<u64>();
            if projector.process(&payloads, &read, &read_walks, true, sink)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Splits `range` into the parts `covered` (sorted, disjoint) ranges cover and the rest.
fn carve(range: LogRange, covered: &[(LogAddress, LogAddress)]) -> (Vec<LogRange>, Vec<LogRange>) {
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    let mut at = range.from;
    for &(from, to) in covered {
        if to <= at || from >= range.to {
            continue;
        }
        if from > at {
            outside.push(LogRange { from: at, to: from });
        }
        let end = to.min(range.to);
        inside.push(LogRange { from: from.max(at), to: end });
        at = end;
    }
    if at < range.to {
        outside.push(LogRange { from: at, to: range.to });
    }
    (inside, outside)
}

/// Whether `expr` compares `path` with a `TIMESTAMP` literal somewhere (a comparison or an
/// `IN` list): its string column is then read as instants ([`PathView::instants`]).
fn compares_instants(expr: &Expr, path: &FieldPath) -> bool {
    match expr {
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(|t| compares_instants(t, path)),
        Expr::Not(inner) => compares_instants(inner, path),
        Expr::Cmp { path: p, value, .. } => p == path && matches!(value, Literal::Timestamp(_)),
        Expr::In { path: p, list, .. } => p == path && list.iter().any(|l| matches!(l, Literal::Timestamp(_))),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carve_splits_a_range_by_covered_ranges() {
        let r = |from, to| LogRange { from: LogAddress::new(from), to: LogAddress::new(to) };
        let c = |ranges: &[(u64, u64)]| -> Vec<(LogAddress, LogAddress)> { ranges.iter().map(|&(f, t)| (LogAddress::new(f), LogAddress::new(t))).collect() };
        assert_eq!(carve(r(10, 100), &c(&[(0, 20), (30, 40), (90, 200)])), (
            vec![r(10, 20), r(30, 40), r(90, 100)],
            vec![r(20, 30), r(40, 90)]
        ));
        assert_eq!(carve(r(10, 20), &c(&[(30, 40)])), (vec![], vec![r(10, 20)]));
        assert_eq!(carve(r(10, 20), &c(&[(0, 40)])), (vec![r(10, 20)], vec![]));
    }
}

