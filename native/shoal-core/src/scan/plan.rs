//! The scan planner (FishStore §7.1): maps a filter onto registered PSFs and splits
//! the requested log range into index scans (where a PSF's safe boundaries cover it)
//! and full scans (everywhere else).
//!
//! Access paths, tried in this order on a conjunction: a registered predicate whose
//! conjuncts all appear in the filter (its `true` chain); a composite PSF whose fields
//! all have an equality (the tuple's chain); an equality or `IN` on a projected field
//! (one chain per value); a comparison on a range-PSF field (the chains of the covering
//! buckets). An `OR` is indexable when every branch is (the union of their chains).
//! Every candidate an index scan returns is re-checked against the whole filter, so
//! plans never change results, only cost.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::psf::{MAX_RANGE_CHAINS, CmpOp, Expr, Literal, Psf, PsfId, PsfKind, NOT_YET};
use crate::LogAddress;
use crate::value::{encode_bucket, encode_canonical, encode_composite, tag, FieldValue};

/// A half-open log range `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRange {
    /// First address.
    pub from: LogAddress,
    /// One past the last address.
    pub to: LogAddress,
}

/// One property `(f, v)` whose chain an index scan walks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PropertyKey {
    /// PSF id.
    pub psf_id: PsfId,
    /// PSF name.
    pub psf: String,
    /// The value, as readable text (`'IssuesEvent'`, `true`, `bucket 2`).
    pub value: String,
    /// Canonical encoding of the value (the bytes hashed into the chain's bucket), as
    /// lowercase hex in JSON.
    #[serde(with = "hex_bytes")]
    pub canonical: Vec<u8>,
}

/// An index scan over a log range: the union of some chains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexScanPlan {
    /// Names of the PSFs used.
    pub psfs: Vec<String>,
    /// The chains walked.
    pub properties: Vec<PropertyKey>,
    /// First address covered.
    pub from: LogAddress,
    /// One past the last address covered.
    pub to: LogAddress,
}

/// Row groups of columnar files (Parquet row groups, at most `row_group_rows` records each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowGroupCounts {
    /// Row groups holding records of the columnar scans' ranges.
    pub total: u64,
    /// Those whose statistics rule the filter out (FishStore's scans skip nothing; this is
    /// Parquet's min/max pruning, `ColumnarFile::may_match`).
    pub skipped: u64,
}

/// A plan: index scans and full scans that together cover the requested range exactly
/// once. Serialisable both ways, so that a Flight ticket can carry the plan it was issued
/// for ([`crate::table::Table::check_plan`] validates one that comes back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanPlan {
    /// The filter, normalised, as SQL text (None: every record).
    pub filter: Option<String>,
    /// Index scans.
    pub index_scans: Vec<IndexScanPlan>,
    /// Full scans.
    pub full_scans: Vec<LogRange>,
    /// Columnar scans: ranges read from the columnar tier's files ([`crate::columnar`]);
    /// a part no file covers any more (retention, a damaged file) is read from the log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columnar_scans: Vec<LogRange>,
    /// The row groups of the files under the columnar scans, and how many of them the
    /// filter rules out by their statistics (counted at planning; they are not read).
    /// Absent without columnar scans, and in the parts of a split plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columnar_row_groups: Option<RowGroupCounts>,
    /// Why the plan looks as it does (which access path, or why none).
    pub reason: String,
    /// A keyed table's snapshot ([`crate::keys`]): the log address as of which each key's
    /// version is chosen (versions at or above it are ignored) — the end of the requested
    /// range at planning, kept by every part of a split plan. Absent: the plan's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<LogAddress>,
}

impl ScanPlan {
    /// The lowest and highest address of its ranges, `[from, to)`; `None` when it has
    /// no non-empty range.
    #[must_use]
    pub fn bounds(&self) -> Option<(LogAddress, LogAddress)> {
        let ranges = self.index_scans.iter().map(|s| (s.from, s.to)).chain(self.scan_ranges().map(|r| (r.from, r.to)));
        ranges.filter(|(f, t)| f < t).fold(None, |acc, (f, t)| match acc {
            None => Some((f, t)),
            Some((from, to)) => Some((from.min(f), to.max(t))),
        })
    }

    /// The part of the plan within `[from, to)`: each range cut to it, empty ones
    /// dropped. The filter, chains and reason stay.
    #[must_use]
    pub fn restrict(&self, from: LogAddress, to: LogAddress) -> ScanPlan {
        let cut = |f: LogAddress, t: LogAddress| {
            let (f, t) = (f.max(from), t.min(to));
            (f < t).then_some((f, t))
        };
        ScanPlan {
            filter: self.filter.clone(),
            index_scans: self
                .index_scans
                .iter()
                .filter_map(|s| cut(s.from, s.to).map(|(f, t)| IndexScanPlan { from: f, to: t, ..s.clone() }))
                .collect(),
            full_scans: self.full_scans.iter().filter_map(|r| cut(r.from, r.to).map(|(f, t)| LogRange { from: f, to: t })).collect(),
            columnar_scans: self
                .columnar_scans
                .iter()
                .filter_map(|r| cut(r.from, r.to).map(|(f, t)| LogRange { from: f, to: t }))
                .collect(),
            columnar_row_groups: None,
            reason: self.reason.clone(),
            snapshot: self.snapshot,
        }
    }

    /// The ranges read in address order — full and columnar scans — as opposed to
    /// index scans' chain walks.
    pub fn scan_ranges(&self) -> impl Iterator<Item = &LogRange> {
        self.full_scans.iter().chain(&self.columnar_scans)
    }
}

/// `Vec<u8>` as a lowercase hex string in serde formats.
mod hex_bytes {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};
    use std::fmt::Write as _;

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            let _ = write!(text, "{b:02x}");
        }
        serializer.serialize_str(&text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        if text.len() % 2 != 0 {
            return Err(D::Error::custom("canonical: an even number of hex digits expected"));
        }
        (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                    .ok_or_else(|| D::Error::custom(format!("canonical: not a hex digit pair at offset {i}")))
            })
            .collect()
    }
}

struct AccessPath {
    psfs: Vec<Arc<Psf>>,
    properties: Vec<PropertyKey>,
}

impl AccessPath {
    fn single(psf: &Arc<Psf>, properties: Vec<PropertyKey>) -> Self {
        Self { psfs: vec![Arc::clone(psf)], properties }
    }

    /// The log range in which every PSF of the path is complete.
    fn coverage(&self) -> Option<(LogAddress, LogAddress)> {
        let mut from = LogAddress::ZERO;
        let mut to = LogAddress::MAX;
        for psf in &self.psfs {
            let (f, t) = psf.coverage()?;
            from = from.max(f);
            to = to.min(t);
        }
        (from < to).then_some((from, to))
    }
}

fn key(psf: &Psf, canonical: Vec<u8>, value: String) -> PropertyKey {
    PropertyKey { psf_id: psf.id, psf: psf.name.clone(), value, canonical }
}

fn literal_key(psf: &Psf, literal: &Literal) -> Option<PropertyKey> {
    let value = literal.as_field_value();
    // A timestamp equals strings of many spellings: no one value's chain holds them all.
    if matches!(value, FieldValue::Null) || matches!(literal, Literal::Timestamp(_)) {
        return None;
    }
    let mut canonical = Vec::new();
    encode_canonical(&value, &mut canonical);
    Some(key(psf, canonical, literal.to_string()))
}

fn usable(psfs: &[Arc<Psf>]) -> impl Iterator<Item = &Arc<Psf>> {
    psfs.iter().filter(|p| p.safe_register_address() != NOT_YET)
}

fn term_path(term: &Expr, psfs: &[Arc<Psf>]) -> Option<AccessPath> {
    // A registered predicate equal to the term.
    for psf in usable(psfs) {
        if let PsfKind::Predicate { expr } = &psf.kind {
            if expr == term {
                return Some(AccessPath::single(psf, vec![key(psf, vec![tag::TRUE], "true".into())]));
            }
        }
    }
    match term {
        Expr::Or(branches) => {
            let mut union = AccessPath { psfs: Vec::new(), properties: Vec::new() };
            for branch in branches {
                let path = conjunction_path(branch, psfs)?;
                for psf in path.psfs {
                    if !union.psfs.iter().any(|p| p.id == psf.id) {
                        union.psfs.push(psf);
                    }
                }
                for property in path.properties {
                    if !union.properties.contains(&property) {
                        union.properties.push(property);
                    }
                }
            }
            Some(union)
        }
        Expr::Cmp { path, op: CmpOp::Eq, value } => {
            for psf in usable(psfs) {
                if let PsfKind::Projection { field, function: None } = &psf.kind {
                    if field == path {
                        return Some(AccessPath::single(psf, vec![literal_key(psf, value)?]));
                    }
                }
            }
            range_path(path, CmpOp::Eq, value, psfs)
        }
        // A projection of the same function of the field: the literal's chain.
        Expr::Function { function, path, op: CmpOp::Eq, value } => usable(psfs).find_map(|psf| match &psf.kind {
            PsfKind::Projection { field, function: Some(f) } if field == path && f == function => {
                Some(AccessPath::single(psf, vec![literal_key(psf, value)?]))
            }
            _ => None,
        }),
        Expr::Cmp { path, op, value } if *op != CmpOp::NotEq => range_path(path, *op, value, psfs),
        Expr::In { path, list, negated: false } => {
            for psf in usable(psfs) {
                if let PsfKind::Projection { field, function: None } = &psf.kind {
                    if field == path {
                        let keys: Vec<_> = list.iter().filter_map(|l| literal_key(psf, l)).collect();
                        return Some(AccessPath::single(psf, keys));
                    }
                }
            }
            None
        }
        _ => None,
    }
}

fn range_path(path: &crate::path::FieldPath, op: CmpOp, value: &Literal, psfs: &[Arc<Psf>]) -> Option<AccessPath> {
    for psf in usable(psfs) {
        let PsfKind::Range { field, buckets } = &psf.kind else { continue };
        if field != path {
            continue;
        }
        // A literal the buckets cannot place (another type) gives no path through this PSF.
        let Some(at) = buckets.literal_bucket(value) else { continue };
        let chains = match op {
            CmpOp::Eq => at..=at,
            // Below an edge: the literal's own bucket holds nothing below it.
            CmpOp::Lt if buckets.begins_bucket(value) => 0..=at.saturating_sub(1),
            CmpOp::Lt | CmpOp::LtEq => 0..=at,
            CmpOp::Gt | CmpOp::GtEq => at..=buckets.last(),
            CmpOp::NotEq => return None,
        };
        if let Some(path) = bucket_path(psf, chains) {
            return Some(path);
        }
    }
    None
}

/// The chains of `buckets` of the range PSF `psf`; `None` when they are more than
/// [`MAX_RANGE_CHAINS`] (a scan reads such a range faster than thousands of chains).
fn bucket_path(psf: &Arc<Psf>, buckets: std::ops::RangeInclusive<u32>) -> Option<AccessPath> {
    if buckets.end().saturating_sub(*buckets.start()) >= MAX_RANGE_CHAINS {
        return None;
    }
    let keys = buckets
        .map(|b| {
            let mut canonical = Vec::new();
            encode_bucket(b, &mut canonical);
            key(psf, canonical, format!("bucket {b}"))
        })
        .collect();
    Some(AccessPath::single(psf, keys))
}

/// A range PSF whose field the conjunction bounds from below and above (`a <= x AND x < b`,
/// `BETWEEN`): the buckets between the two bounds, fewer than either side's alone; none when
/// the bounds exclude each other.
fn bounded_range_paths(terms: &[&Expr], psfs: &[Arc<Psf>]) -> Vec<AccessPath> {
    let mut paths = Vec::new();
    for psf in usable(psfs) {
        let PsfKind::Range { field, buckets } = &psf.kind else { continue };
        let (mut low, mut high) = (0u32, buckets.last());
        let (mut below, mut above) = (false, false);
        for term in terms {
            let Expr::Cmp { path, op, value } = term else { continue };
            if path != field {
                continue;
            }
            let Some(at) = buckets.literal_bucket(value) else { continue };
            match op {
                CmpOp::Gt | CmpOp::GtEq => (low, below) = (low.max(at), true),
                // Below an edge: the literal's own bucket holds nothing below it.
                CmpOp::Lt if buckets.begins_bucket(value) => (high, above) = (high.min(at.saturating_sub(1)), true),
                CmpOp::Lt | CmpOp::LtEq => (high, above) = (high.min(at), true),
                CmpOp::Eq => (low, high, below, above) = (low.max(at), high.min(at), true, true),
                CmpOp::NotEq => {}
            }
        }
        if below && above {
            if low > high {
                paths.push(AccessPath::single(psf, Vec::new()));
            } else if let Some(path) = bucket_path(psf, low..=high) {
                paths.push(path);
            }
        }
    }
    paths
}

/// The best access path for a conjunction (or a single term).
fn conjunction_path(expr: &Expr, psfs: &[Arc<Psf>]) -> Option<AccessPath> {
    let terms = expr.conjuncts();
    // 1. A registered predicate all of whose conjuncts are in the filter.
    for psf in usable(psfs) {
        if let PsfKind::Predicate { expr: predicate } = &psf.kind {
            if predicate.conjuncts().iter().all(|c| terms.contains(c)) {
                return Some(AccessPath::single(psf, vec![key(psf, vec![tag::TRUE], "true".into())]));
            }
        }
    }
    // 2. A composite with an equality on each of its fields.
    for psf in usable(psfs) {
        if let PsfKind::Composite { fields } = &psf.kind {
            let literals: Option<Vec<&Literal>> = fields
                .iter()
                .map(|f| {
                    terms.iter().find_map(|t| match t {
                        Expr::Cmp { path, op: CmpOp::Eq, value } if path == f => Some(value),
                        _ => None,
                    })
                })
                .collect();
            if let Some(literals) = literals.filter(|l| !l.iter().any(|l| matches!(l, Literal::Timestamp(_)))) {
                let values: Vec<FieldValue<'_>> = literals.iter().map(|l| l.as_field_value()).collect();
                let mut canonical = Vec::new();
                if encode_composite(values.iter(), &mut canonical) {
                    let text = literals.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                    return Some(AccessPath::single(psf, vec![key(psf, canonical, format!("({text})"))]));
                }
            }
        }
    }
    // 3. Any single indexable term, or a range PSF's field bounded on both sides; prefer the
    // one with fewest chains.
    terms.iter().filter_map(|t| term_path(t, psfs)).chain(bounded_range_paths(&terms, psfs)).min_by_key(|p| p.properties.len())
}

/// Plans a scan of `[from, to)` for `filter` over the table's PSFs.
#[must_use]
pub fn plan_scan(filter: Option<&Expr>, psfs: &[Arc<Psf>], from: LogAddress, to: LogAddress) -> ScanPlan {
    let filter_text = filter.map(ToString::to_string);
    let full = |reason: String| ScanPlan {
        filter: filter_text.clone(),
        index_scans: Vec::new(),
        full_scans: if from < to { vec![LogRange { from, to }] } else { Vec::new() },
        columnar_scans: Vec::new(),
        columnar_row_groups: None,
        reason,
        snapshot: None,
    };
    let Some(filter) = filter else {
        return full("no filter: full scan".into());
    };
    let Some(path) = conjunction_path(filter, psfs) else {
        return full("no registered PSF covers the filter: full scan".into());
    };
    let names: Vec<String> = path.psfs.iter().map(|p| p.name.clone()).collect();
    let Some((covered_from, covered_to)) = path.coverage() else {
        return full(format!("PSFs {names:?} have no common coverage: full scan"));
    };
    let index_from = covered_from.max(from);
    let index_to = covered_to.min(to);
    if index_from >= index_to {
        return full(format!(
            "PSFs {names:?} cover [{covered_from}, {}) (the records ingested since they were registered, and those their backfill has reached), outside the requested range: full scan",
            shown_bound(covered_to)
        ));
    }
    let mut full_scans = Vec::new();
    if from < index_from {
        full_scans.push(LogRange { from, to: index_from });
    }
    if index_to < to {
        full_scans.push(LogRange { from: index_to, to });
    }
    let reason = if path.properties.is_empty() {
        format!("PSFs {names:?} prove the filter matches no record in [{index_from}, {index_to})")
    } else {
        format!("index scan on {names:?} in [{index_from}, {index_to}); full scans elsewhere")
    };
    ScanPlan {
        filter: filter_text,
        index_scans: vec![IndexScanPlan { psfs: names, properties: path.properties, from: index_from, to: index_to }],
        full_scans,
        columnar_scans: Vec::new(),
        columnar_row_groups: None,
        reason,
        snapshot: None,
    }
}

/// A coverage bound as users read it: the address, or `tail` for an open end (a PSF still
/// registered covers everything ingested from now on, up to [`LogAddress::MAX`]).
fn shown_bound(address: LogAddress) -> String {
    if address == LogAddress::MAX {
        "tail".to_owned()
    } else {
        address.to_string()
    }
}
