//! The columnar cold tier: flushed runs of log pages rewritten as Parquet files, one row
//! per visible record, one column per path and JSON scalar type, so that scans of cold
//! data read columns instead of parsing JSON.
//!
//! It follows two of the papers shoal is built on:
//! - the **AsterixDB tuple compactor** (Alkowaileet et al., VLDB 2019, §3): the schema is
//!   inferred while flushed data is rewritten, and the rewritten records are stored in a
//!   compact, schema'd form with union types where a path held several types
//!   ([`layout`]);
//! - **TellStore** (Pilman et al., "Fast Scans on Key-Value Stores", VLDB 2017, §4–5):
//!   the write path stays row-oriented (the hybrid log), scans run over a columnar
//!   layout, the selection evaluated vectorised ([`eval`]).
//!
//! **Files.** The compactor (a background thread per table, at the observer's lowered
//! priority) takes the next run of whole flushed pages not yet covered — at most
//! [`ColumnarConfig::file_log_bytes`] of log, or less once ingestion has paused for
//! [`ColumnarConfig::idle_ms`] — and writes its visible records as one Parquet file
//! (zstd, dictionaries, page statistics and index; a `UInt64` column `_address` leads
//! each row back to its raw record). An on-disk table keeps the files in `columnar/`
//! beside its segments, written atomically (temporary file, fsync, rename) and listed in
//! `columnar/manifest.json` with their size and CRC-32; an in-memory table keeps their
//! bytes in memory. Files are derived data: at open, a file that is missing, of another
//! size or checksum, beyond the recovered log or not in the manifest is deleted and its
//! range compacted again from the log. Retention deletes the files wholly below the new
//! begin address.
//!
//! **Scans** use a file for the part of a plan it covers ([`crate::scan`]): the filter
//! runs over its columns; rows come straight from the columns when every requested path
//! is in them, and otherwise the matching records are read from the log by `_address`.

pub(crate) mod assemble;
mod compactor;
mod decoded;
mod dense;
pub(crate) mod eval;
pub mod layout;
mod remote;
mod shred;
mod verified;
mod write;

/// Builds the columnar file of `records` (log address and JSON payload, ascending
/// addresses) as the compactor does with the default settings, and returns the Parquet
/// file's size in bytes and the time spent shredding and encoding: for the compaction
/// benchmark (`benches/compaction.rs`). Not part of the engine's API.
///
/// # Errors
/// [`crate::Error::Columnar`] when Parquet encoding fails.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub fn bench_write_file(records: &[(LogAddress, &[u8])]) -> Result<(usize, [std::time::Duration; 2])> {
    write::write_file(records, &ColumnarConfig::default()).map(|w| (w.bytes.len(), w.phases))
}

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::statistics::Statistics;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::LogAddress;
use arrow_array::{ArrayRef, Int64Array, StringArray};
pub(crate) use decoded::{instants_of, DecodedColumns};
pub use layout::{FileLayout, ScalarType};
pub(crate) use compactor::start as start_compactor;
pub use remote::EvictedFiles;
use write::columnar_error;

/// Compression codec of the columnar files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnarCodec {
    /// zstd level 1 (the default: GitHub events compact to ~15 % of their JSON).
    #[default]
    Zstd,
    /// LZ4 (raw blocks): larger files, faster to decode.
    Lz4,
    /// No compression.
    None,
}

/// Settings of a table's columnar tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ColumnarConfig {
    /// Whether flushed pages are compacted into columnar files. Default true.
    pub enabled: bool,
    /// Log bytes one file covers at most (rounded to whole pages, at least one). Default
    /// 64 MiB.
    pub file_log_bytes: u64,
    /// Rows per Parquet row group at most (a file's rows are split into groups of equal
    /// size). Default 65,536: one group per 64 MiB file of GitHub events; every column chunk
    /// costs a column writer and a codec context, so smaller groups made compaction slower
    /// and files larger (10.9 % of the JSON with 16,384 rows, 7.1 % with one group per file,
    /// zstd) without a faster query in `bench/compare.py`.
    pub row_group_rows: usize,
    /// Compression codec. Default lz4 (LZ4_RAW): compaction 1.2–1.5× faster than zstd
    /// level 1 (most of zstd's cost is a context per column chunk) for files of 9.3 % of the
    /// JSON instead of 6.9 % (`shoal-bench --cases compaction`, GitHub events).
    pub codec: ColumnarCodec,
    /// Milliseconds the log tail must stand still before a run of flushed pages shorter
    /// than `file_log_bytes` is compacted. Default 1,000.
    pub idle_ms: u64,
    /// Bytes of decoded columns (Arrow arrays) kept in memory for later scans, least
    /// recently used evicted first; 0 decodes every scan's columns afresh. Counted in the
    /// table's memory as it fills ([`crate::Table::reserved_bytes`]). Default 64 MiB (the columns that `bench/compare.py`'s
    /// queries read of 1 GB of GitHub events take ~40 MB).
    pub cache_bytes: u64,
    /// Compactor threads of the table (1 – [`MAX_COMPACTOR_THREADS`]): each compacts the
    /// oldest run of flushed pages no other one has taken, so a backlog — after a burst, or
    /// at open — is compacted that many files at a time. Each holds a run's records and
    /// columns in memory while it works (~3 × `file_log_bytes`). Default 1. Kept with the
    /// table like the other settings (left out of its metadata when 1, so that an older
    /// binary still opens the table).
    #[serde(skip_serializing_if = "is_one")]
    pub threads: usize,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_one(n: &usize) -> bool {
    *n == 1
}

/// The most compactor threads a table may have.
pub const MAX_COMPACTOR_THREADS: usize = 64;

impl Default for ColumnarConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            file_log_bytes: 64 << 20,
            row_group_rows: 65_536,
            codec: ColumnarCodec::Lz4,
            idle_ms: 1_000,
            cache_bytes: 64 << 20,
            threads: 1,
        }
    }
}

impl ColumnarConfig {
    /// The tier switched off: every scan reads the raw log.
    #[must_use]
    pub fn disabled() -> Self {
        Self { enabled: false, ..Self::default() }
    }
}

/// Where a file's bytes are.
#[derive(Debug)]
enum Source {
    /// A file of an on-disk table.
    File(PathBuf),
    /// The bytes of an in-memory table's file.
    Memory(bytes::Bytes),
}

/// One columnar file: the visible records of the log range `[from, to)`.
#[derive(Debug)]
pub struct ColumnarFile {
    /// Unique among the files loaded by this process (the key of its decoded columns).
    id: u64,
    /// Set when retention dropped the file: scans still reading it no longer keep its
    /// decoded columns.
    dropped: AtomicBool,
    /// First log address covered (a page boundary).
    pub from: LogAddress,
    /// One past the last log address covered (a page boundary).
    pub to: LogAddress,
    /// Rows (visible records).
    pub rows: u64,
    /// Bytes of the Parquet file.
    pub parquet_bytes: u64,
    /// Bytes of JSON (record payloads) it holds.
    pub json_bytes: u64,
    /// Its layout.
    pub layout: FileLayout,
    /// Per row group, per leaf column: the statistics row-group pruning reads. The parsed
    /// footer itself is read again when the file is decoded (the last ones kept, within a
    /// quarter of `columnar.cache_bytes`: [`DecodedColumns::footer`]).
    statistics: Vec<Vec<LeafStatistics>>,
    /// Per row group, the instants its string columns name (`TIMESTAMP` comparisons prune by
    /// them); `None` for a file written without them, or whose entry does not fit its row groups.
    instants: Option<layout::InstantStatistics>,
    /// Rows of each row group.
    row_group_rows: Vec<usize>,
    /// Lowest and highest `_address` of each row group.
    row_group_addresses: Vec<(LogAddress, LogAddress)>,
    source: Source,
    crc32: u32,
    name: String,
    /// The block checksums every read of a file on disk is checked against (`None` for an
    /// in-memory table's bytes).
    checks: Option<Arc<verified::FileChecks>>,
    /// Where the file is fetched from when it is not here (a table kept in a remote store).
    remote: Option<Arc<remote::RemoteFiles>>,
    /// When it was last read ([`remote::tick`]): eviction takes the least recently read.
    last_read: AtomicU64,
}

impl ColumnarFile {
    /// Parses the footer of `bytes` (the whole file).
    fn load(from: LogAddress, to: LogAddress, name: String, bytes: bytes::Bytes, source: Source) -> Result<Self> {
        let damaged = |what: &str, e: &dyn std::fmt::Display| columnar_error(&format!("{name}: {what}"), e);
        let metadata = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new())
            .map_err(|e| damaged("footer", &e))?;
        let parquet = metadata.metadata();
        let layout_json = parquet
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|kv| kv.key == layout::LAYOUT_METADATA_KEY))
            .and_then(|kv| kv.value.clone())
            .ok_or_else(|| damaged("layout", &"missing from the footer"))?;
        let layout: FileLayout = serde_json::from_str(&layout_json).map_err(|e| damaged("layout", &e))?;
        let instants = parquet
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|kv| kv.key == layout::INSTANTS_METADATA_KEY))
            .and_then(|kv| kv.value.as_deref())
            .map(|json| serde_json::from_str::<layout::InstantStatistics>(json).map_err(|e| damaged("instants", &e)))
            .transpose()?
            .filter(|i| i.fits(parquet.num_row_groups()));
        let leaves = parquet.file_metadata().schema_descr().num_columns();
        let in_range = |c: &Option<usize>| c.is_none_or(|c| c < leaves);
        let listed_in_range = |p: &layout::PathColumns| {
            p.columns.iter().all(in_range) && in_range(&p.object) && in_range(&p.list.map(|l| l.leaf))
        };
        if layout.address_column >= leaves || !layout.paths.iter().all(listed_in_range) {
            return Err(damaged("layout", &"names a column the file does not have"));
        }
        let mut row_group_addresses = Vec::with_capacity(parquet.num_row_groups());
        for rg in parquet.row_groups() {
            let (low, high) = match rg.column(layout.address_column).statistics() {
                Some(Statistics::Int64(s)) => (s.min_opt().copied(), s.max_opt().copied()),
                _ => (None, None),
            };
            let (Some(low), Some(high)) = (low, high) else {
                return Err(damaged("statistics", &"a row group has no _address statistics"));
            };
            #[allow(clippy::cast_sign_loss)]
            row_group_addresses.push((LogAddress::new(low as u64), LogAddress::new(high as u64)));
        }
        let rows = u64::try_from(parquet.file_metadata().num_rows()).unwrap_or(0);
        let statistics = parquet.row_groups().iter().map(|rg| rg.columns().iter().map(|c| LeafStatistics::of(c.statistics())).collect()).collect();
        let row_group_rows = parquet.row_groups().iter().map(|rg| usize::try_from(rg.num_rows()).unwrap_or(0)).collect();
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            dropped: AtomicBool::new(false),
            from,
            to,
            rows,
            parquet_bytes: bytes.len() as u64,
            json_bytes: 0,
            layout,
            statistics,
            instants,
            row_group_rows,
            row_group_addresses,
            checks: match &source {
                Source::File(path) => Some(verified::FileChecks::of(path.clone(), &bytes)),
                Source::Memory(_) => None,
            },
            source,
            crc32: crc32fast::hash(&bytes),
            name,
            remote: None,
            last_read: AtomicU64::new(remote::tick()),
        })
    }

    /// The file's name in the table's `columnar/` directory.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a read found the file changed since it was written (a block's CRC-32
    /// differed): it must not be read again (see [`verified`]).
    pub(crate) fn damaged(&self) -> bool {
        self.checks.as_ref().is_some_and(|c| c.damaged())
    }

    /// The file at `path`, every read of it checked.
    fn verified(&self, file: std::fs::File) -> Result<verified::VerifiedFile> {
        let checks = self.checks.clone().ok_or_else(|| columnar_error(&self.name, "a file without block checksums"))?;
        Ok(verified::VerifiedFile::new(file, checks))
    }

    /// A handle on the file at `path`, opened at the scan's first read and kept in `opened`
    /// for its later ones.
    fn opened(&self, path: &Path, opened: &mut Option<std::fs::File>) -> Result<verified::VerifiedFile> {
        if opened.is_none() {
            *opened = Some(self.open_local(path)?);
        }
        let file = opened.as_ref().map(std::fs::File::try_clone).transpose().map_err(|e| Error::io(path, e))?;
        self.verified(file.ok_or_else(|| columnar_error(&self.name, "not opened"))?)
    }

    /// Whether a row group holds more than one page's rows (page pruning may apply).
    fn paged(&self) -> bool {
        self.row_group_rows.iter().any(|&rows| rows > PAGE_ROWS)
    }

    /// The lowest `_address` of row group `row_group` (the file's end past the last).
    pub(crate) fn row_group_start(&self, row_group: usize) -> LogAddress {
        self.row_group_addresses.get(row_group).map_or(self.to, |&(low, _)| low)
    }

    /// The row groups holding records in `[from, to)`.
    pub(crate) fn row_groups_in(&self, from: LogAddress, to: LogAddress) -> Vec<usize> {
        self.row_group_addresses.iter().enumerate().filter(|(_, (low, high))| *high >= from && *low < to).map(|(i, _)| i).collect()
    }

    /// Number of row groups.
    #[must_use]
    pub fn row_group_count(&self) -> usize {
        self.row_group_addresses.len()
    }

    /// Whether some row of `row_group` may satisfy `filter` (SQL true), judged from the
    /// row group's column statistics (minimum and maximum per leaf column): false only
    /// when a conjunct of `filter` is a comparison of a path with a number or string that
    /// no value between its columns' minimum and maximum satisfies, an `IN` list none of
    /// whose elements does, a `LIKE 'prefix%'` that no string in range can start with, an
    /// `OR` none of whose terms may hold, or `FALSE`. A column without
    /// statistics, a string column whose statistics are truncated, and every other kind
    /// of term can satisfy anything. Values of another JSON type than the literal's never
    /// make a comparison true ([`crate::psf::Expr::eval_with`]), so only the literal's
    /// columns count: a numeric literal's the int and float ones.
    pub(crate) fn may_match(&self, row_group: usize, filter: &crate::psf::Expr) -> bool {
        let group = &self.statistics[row_group];
        self.may_match_with(row_group, filter, &|leaf| group.get(leaf).cloned().unwrap_or(LeafStatistics::Unknown))
    }

    /// [`may_match`](Self::may_match) over the rows of `row_group` whose leaf columns'
    /// statistics `statistics` gives (the row group's, or the pages' of a range of its rows).
    fn may_match_with(&self, row_group: usize, filter: &crate::psf::Expr, statistics: &dyn Fn(usize) -> LeafStatistics) -> bool {
        use crate::psf::Expr;
        match filter {
            Expr::And(terms) => terms.iter().all(|term| self.may_match_with(row_group, term, statistics)),
            Expr::Or(terms) => terms.iter().any(|term| self.may_match_with(row_group, term, statistics)),
            Expr::Cmp { path, op, value } => self.comparison_may_hold(row_group, statistics, path, *op, value),
            // `a IN (l1, l2)` is `a = l1 OR a = l2`: true only where an element is equal.
            Expr::In { path, list, negated: false } => {
                list.iter().any(|literal| self.comparison_may_hold(row_group, statistics, path, crate::psf::CmpOp::Eq, literal))
            }
            Expr::Like { path, prefix, negated: false } => self.prefix_may_match(statistics, path, prefix),
            Expr::Const(value) => *value,
            _ => true,
        }
    }

    /// Whether some string of `path` in row group `row_group` may start with `prefix`:
    /// every such string s has `prefix <= s` and its first `prefix.len()` bytes equal to
    /// `prefix`, so none lies in the group's exact range when its maximum sorts before the
    /// prefix or its minimum's first bytes sort after it.
    fn prefix_may_match(&self, statistics: &dyn Fn(usize) -> LeafStatistics, path: &crate::path::FieldPath, prefix: &str) -> bool {
        let layout::Resolved::Columns(columns) = self.layout.resolve(path) else { return true };
        let Some(leaf) = columns[ScalarType::String.slot()] else { return false };
        match &statistics(leaf) {
            LeafStatistics::Empty => false,
            LeafStatistics::Str(min, max) => {
                let prefix = prefix.as_bytes();
                &**max >= prefix && &min[..min.len().min(prefix.len())] <= prefix
            }
            _ => true,
        }
    }

    fn comparison_may_hold(
        &self,
        row_group: usize,
        leaf_statistics: &dyn Fn(usize) -> LeafStatistics,
        path: &crate::path::FieldPath,
        op: crate::psf::CmpOp,
        literal: &crate::psf::Literal,
    ) -> bool {
        use crate::psf::Literal;
        use std::cmp::Ordering;
        let layout::Resolved::Columns(columns) = self.layout.resolve(path) else { return true };
        // `None`: the file has no column of that type (no value can satisfy); `Some(Unknown)`:
        // a column whose statistics say nothing (any value can).
        let statistics = |ty: ScalarType| columns[ty.slot()].map(leaf_statistics);
        // Whether some value v with min <= v <= max satisfies `v op literal`, from how
        // the minimum and the maximum compare with the literal.
        let between = |min: Option<Ordering>, max: Option<Ordering>| {
            let (Some(min), Some(max)) = (min, max) else { return true };
            match op {
                crate::psf::CmpOp::Eq => min != Ordering::Greater && max != Ordering::Less,
                crate::psf::CmpOp::NotEq => !(min == Ordering::Equal && max == Ordering::Equal),
                crate::psf::CmpOp::Lt => min == Ordering::Less,
                crate::psf::CmpOp::LtEq => min != Ordering::Greater,
                crate::psf::CmpOp::Gt => max == Ordering::Greater,
                crate::psf::CmpOp::GtEq => max != Ordering::Less,
            }
        };
        match literal {
            Literal::Int(_) | Literal::Float(_) => {
                #[allow(clippy::cast_precision_loss)]
                let ints = match statistics(ScalarType::Int) {
                    None | Some(LeafStatistics::Empty) => false,
                    Some(LeafStatistics::Int(min, max)) => match literal {
                        Literal::Int(l) => between(Some(min.cmp(l)), Some(max.cmp(l))),
                        Literal::Float(l) => between((min as f64).partial_cmp(l), (max as f64).partial_cmp(l)),
                        _ => true,
                    },
                    Some(_) => true,
                };
                #[allow(clippy::cast_precision_loss)]
                let floats = match statistics(ScalarType::Float) {
                    None | Some(LeafStatistics::Empty) => false,
                    Some(LeafStatistics::Float(min, max)) => match literal {
                        Literal::Int(l) => between(min.partial_cmp(&(*l as f64)), max.partial_cmp(&(*l as f64))),
                        Literal::Float(l) => between(min.partial_cmp(l), max.partial_cmp(l)),
                        _ => true,
                    },
                    Some(_) => true,
                };
                ints || floats
            }
            Literal::Str(text) => match statistics(ScalarType::String) {
                None | Some(LeafStatistics::Empty) => false,
                Some(LeafStatistics::Str(min, max)) => between(Some((*min).cmp(text.as_bytes())), Some((*max).cmp(text.as_bytes()))),
                Some(_) => true,
            },
            // Only strings name instants. Their byte-wise statistics do not bound time (offsets,
            // fractions and spacing reorder them): the instants the compactor read do.
            Literal::Timestamp(t) => match (statistics(ScalarType::String), columns[ScalarType::String.slot()]) {
                (None | Some(LeafStatistics::Empty), _) | (_, None) => false,
                (Some(_), Some(leaf)) => match self.instants.as_ref().map(|i| i.range(row_group, leaf)) {
                    None => true,
                    Some(None) => false,
                    Some(Some((min, max))) => between(Some(min.cmp(t)), Some(max.cmp(t))),
                },
            },
            Literal::Bool(_) | Literal::Null => true,
        }
    }

    /// The instants the strings of leaf `leaf` of row group `row_group` name (`strings`:
    /// that leaf's array, every row of the row group), kept in `cache` beside the decoded
    /// columns ([`DecodedColumns::instants`]).
    pub(crate) fn row_group_instants(&self, row_group: usize, leaf: usize, strings: &StringArray, cache: &DecodedColumns) -> Arc<Int64Array> {
        cache.instants(self.id, row_group, leaf, strings)
    }

    /// The arrays of `leaves` (Parquet leaf column indices) of row group `row_group`, in
    /// the order of `leaves`: taken from `cache` where it holds them, the others decoded
    /// from the file (one read of the row group's missing columns) and kept there. An
    /// on-disk file is opened at the first miss and kept in `opened` for the scan's later
    /// row groups, so a scan that began reading a file finishes it even if retention
    /// deletes the file meanwhile.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened, [`Error::Columnar`] when it does not
    /// decode.
    pub(crate) fn row_group_columns(
        &self,
        row_group: usize,
        leaves: &[usize],
        cache: &DecodedColumns,
        opened: &mut Option<std::fs::File>,
    ) -> Result<Vec<ArrayRef>> {
        let mut arrays: Vec<Option<ArrayRef>> = leaves.iter().map(|&leaf| cache.get(self.id, row_group, leaf)).collect();
        let mut missing: Vec<usize> = leaves.iter().zip(&arrays).filter(|(_, a)| a.is_none()).map(|(&leaf, _)| leaf).collect();
        if !missing.is_empty() {
            missing.sort_unstable();
            missing.dedup();
            let decoded = match &self.source {
                Source::Memory(bytes) => self.decode(bytes.clone(), row_group, &missing, cache)?,
                Source::File(path) => self.decode(self.opened(path, opened)?, row_group, &missing, cache)?,
            };
            if !self.dropped.load(Ordering::Acquire) {
                for (leaf, array) in missing.iter().zip(&decoded) {
                    cache.insert(self.id, row_group, *leaf, array);
                }
            }
            for (slot, leaf) in arrays.iter_mut().zip(leaves) {
                if slot.is_none() {
                    let at = missing.binary_search(leaf).map_err(|_| columnar_error(&self.name, "a decoded column went missing"))?;
                    *slot = Some(decoded[at].clone());
                }
            }
        }
        arrays.into_iter().map(|a| a.ok_or_else(|| columnar_error(&self.name, "a column was not decoded"))).collect()
    }

    /// The rows of `row_group` that `filter` may match judged by its pages' statistics
    /// (the Parquet page index: every data page's minimum and maximum and first row): the
    /// columns `leaves` (sorted) of those rows only, decoded without reading the other
    /// pages and not kept in `cache` (another filter needs other rows), with the number of
    /// rows left out — no arrays when no row is left. `None` when the page index rules no
    /// row out, some filter column has no page index, or every column is in `cache`
    /// already (memory beats skipping): then the caller reads the whole row group.
    ///
    /// A range of rows is left out when, with each of the filter's columns' statistics
    /// taken from the page holding those rows, [`may_match`](Self::may_match)'s test fails.
    ///
    /// # Errors
    /// As [`Self::row_group_columns`].
    pub(crate) fn row_group_pages(
        &self,
        row_group: usize,
        leaves: &[usize],
        filter: &crate::psf::Expr,
        cache: &DecodedColumns,
        opened: &mut Option<std::fs::File>,
    ) -> Result<Option<(Vec<ArrayRef>, usize)>> {
        let single_page = self.row_group_rows.get(row_group).is_none_or(|&rows| rows <= PAGE_ROWS);
        if single_page || !self.paged() || leaves.iter().all(|&leaf| cache.contains(self.id, row_group, leaf)) {
            return Ok(None);
        }
        let mut filter_leaves: Vec<usize> = filter
            .fields()
            .iter()
            .filter_map(|path| match self.layout.resolve(path) {
                layout::Resolved::Columns(columns) => Some(columns.iter().flatten().copied().collect::<Vec<_>>()),
                layout::Resolved::Opaque => None,
            })
            .flatten()
            .collect();
        filter_leaves.sort_unstable();
        filter_leaves.dedup();
        if filter_leaves.is_empty() {
            return Ok(None);
        }
        match &self.source {
            Source::Memory(bytes) => self.pages_of(bytes.clone(), row_group, leaves, &filter_leaves, filter, cache),
            Source::File(path) => self.pages_of(self.opened(path, opened)?, row_group, leaves, &filter_leaves, filter, cache),
        }
    }

    /// [`row_group_pages`](Self::row_group_pages) reading `input`.
    fn pages_of<R: parquet::file::reader::ChunkReader + 'static>(
        &self,
        input: R,
        row_group: usize,
        leaves: &[usize],
        filter_leaves: &[usize],
        filter: &crate::psf::Expr,
        cache: &DecodedColumns,
    ) -> Result<Option<(Vec<ArrayRef>, usize)>> {
        use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
        use parquet::arrow::ProjectionMask;
        let failed = |e: &dyn std::fmt::Display| Error::Columnar(format!("reading columnar file [{}, {}): {e}", self.from, self.to));
        let metadata = cache.footer(self.id, || ArrowReaderMetadata::load(&input, footer_options(self.paged())).map_err(|e| failed(&e)))?;
        let rows = self.row_group_rows.get(row_group).copied().unwrap_or(0);
        // Each filter column's pages: first rows and statistics.
        let page_index = metadata.metadata().page_index_for_row_group(row_group);
        let mut pages: Vec<(usize, Vec<usize>, Vec<LeafStatistics>)> = Vec::with_capacity(filter_leaves.len());
        for &leaf in filter_leaves {
            let (Some(offsets), Some(index)) = (page_index.offset_index(leaf), page_index.column_index(leaf)) else { return Ok(None) };
            let starts: Vec<usize> = offsets.page_locations().iter().map(|p| usize::try_from(p.first_row_index).unwrap_or(0)).collect();
            if starts.first() != Some(&0) || index.num_pages() != starts.len() as u64 {
                return Ok(None);
            }
            let statistics = (0..starts.len()).map(|page| page_statistics(index, page)).collect();
            pages.push((leaf, starts, statistics));
        }
        // The row ranges between any two page starts, kept or left out.
        let mut bounds: Vec<usize> = pages.iter().flat_map(|(_, starts, _)| starts.iter().copied()).filter(|&s| s < rows).collect();
        bounds.push(rows);
        bounds.sort_unstable();
        bounds.dedup();
        let mut selectors: Vec<RowSelector> = Vec::new();
        let mut skipped = 0;
        for range in bounds.windows(2) {
            let (start, end) = (range[0], range[1]);
            let statistics = |leaf: usize| match pages.iter().find(|(l, _, _)| *l == leaf) {
                Some((_, starts, statistics)) => statistics[starts.partition_point(|&s| s <= start) - 1].clone(),
                None => LeafStatistics::Unknown,
            };
            let keep = self.may_match_with(row_group, filter, &statistics);
            if !keep {
                skipped += end - start;
            }
            match selectors.last_mut() {
                Some(last) if last.skip != keep => last.row_count += end - start,
                _ => selectors.push(if keep { RowSelector::select(end - start) } else { RowSelector::skip(end - start) }),
            }
        }
        if skipped == 0 {
            return Ok(None);
        }
        if skipped == rows {
            return Ok(Some((Vec::new(), skipped)));
        }
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(input, metadata);
        let mask = ProjectionMask::leaves(builder.parquet_schema(), leaves.iter().copied());
        let reader = builder
            .with_projection(mask)
            .with_row_groups(vec![row_group])
            .with_row_selection(RowSelection::from(selectors))
            .with_batch_size(rows.max(1))
            .build()
            .map_err(|e| failed(&e))?;
        let batches = reader.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| failed(&e))?;
        let Some(first) = batches.first() else { return Ok(Some((Vec::new(), rows))) };
        let batch = arrow_select::concat::concat_batches(&first.schema(), &batches).map_err(|e| failed(&e))?;
        if batch.num_columns() != leaves.len() || batch.num_rows() + skipped != rows {
            return Err(failed(&format!("{} columns of {} rows decoded for {} leaves, {} rows", batch.num_columns(), batch.num_rows(), leaves.len(), rows - skipped)));
        }
        Ok(Some((batch.columns().to_vec(), skipped)))
    }

    /// Whether one of `addresses` (sorted) is a row's `_address` here: the `_address`
    /// column of each row group whose address range holds one is decoded (not cached).
    ///
    /// # Errors
    /// As [`Self::row_group_columns`].
    fn holds_any(&self, addresses: &[LogAddress], cache: &DecodedColumns) -> Result<bool> {
        for (row_group, &(low, high)) in self.row_group_addresses.iter().enumerate() {
            let first = addresses.partition_point(|&a| a < low);
            if addresses.get(first).is_none_or(|&a| a > high) {
                continue;
            }
            let leaves = [self.layout.address_column];
            let column = match &self.source {
                Source::Memory(bytes) => self.decode(bytes.clone(), row_group, &leaves, cache)?,
                Source::File(path) => {
                    let file = self.verified(self.open_local(path)?)?;
                    self.decode(file, row_group, &leaves, cache)?
                }
            };
            let rows = column.first().and_then(|c| c.as_any().downcast_ref::<arrow_array::UInt64Array>().cloned());
            let rows = rows.ok_or_else(|| columnar_error(&self.name, "the _address column is not UInt64"))?;
            if rows.iter().flatten().any(|a| addresses.binary_search(&LogAddress::new(a)).is_ok()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Decodes the columns `leaves` (sorted) of one row group: one array per leaf; the
    /// file's parsed footer comes from `cache` or is read again from `input`.
    fn decode<R: parquet::file::reader::ChunkReader + 'static>(
        &self,
        input: R,
        row_group: usize,
        leaves: &[usize],
        cache: &DecodedColumns,
    ) -> Result<Vec<ArrayRef>> {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::arrow::ProjectionMask;
        let failed = |e: &dyn std::fmt::Display| Error::Columnar(format!("reading columnar file [{}, {}): {e}", self.from, self.to));
        let metadata = cache.footer(self.id, || ArrowReaderMetadata::load(&input, footer_options(self.paged())).map_err(|e| failed(&e)))?;
        let rows = self.row_group_rows.get(row_group).copied().unwrap_or(0);
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(input, metadata);
        let mask = ProjectionMask::leaves(builder.parquet_schema(), leaves.iter().copied());
        let reader = builder.with_projection(mask).with_row_groups(vec![row_group]).with_batch_size(rows.max(1)).build().map_err(|e| failed(&e))?;
        // A batch as large as the row group: the reader answers it in one (row groups
        // are never empty: each has `_address` statistics, checked at load).
        let mut batches = reader.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| failed(&e))?;
        if batches.len() != 1 {
            return Err(failed(&format!("row group {row_group} of {rows} rows decoded as {} batches", batches.len())));
        }
        let batch = batches.remove(0);
        if batch.num_columns() != leaves.len() {
            return Err(failed(&format!("{} columns decoded for {} leaves", batch.num_columns(), leaves.len())));
        }
        Ok(batch.columns().to_vec())
    }
}

/// Rows per data page at most: the granularity of page pruning (a file of GitHub events,
/// ~33,000 rows in one row group, gets 4–5 pages per column, each with its minimum and
/// maximum in the page index).
pub(crate) const PAGE_ROWS: usize = 8_192;

/// How a file's footer is read for decoding: with its page index (each column chunk's
/// pages' minimum and maximum and their first rows), which page pruning reads, when a row
/// group of the file has more than one page's rows (else its statistics say as much).
fn footer_options(paged: bool) -> ArrowReaderOptions {
    let options = ArrowReaderOptions::new();
    if paged {
        options.with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional)
    } else {
        options
    }
}

/// What row-group and page pruning know of one leaf column over some rows: its minimum
/// and maximum (row groups: when the footer has them exactly, strings untruncated, at most
/// 64 bytes; pages: bounds, strings truncated to a prefix below and a bound above), that
/// it holds no value there, or nothing (any value may be there).
#[derive(Debug, Clone, PartialEq)]
enum LeafStatistics {
    Unknown,
    /// Only nulls in these rows (a page of nulls).
    Empty,
    Int(i64, i64),
    Float(f64, f64),
    Str(Box<[u8]>, Box<[u8]>),
}

/// What page `page` of a column chunk's page index says of its values.
fn page_statistics(index: &parquet::file::page_index::column_index::ColumnIndexMetaData, page: usize) -> LeafStatistics {
    use parquet::file::page_index::column_index::ColumnIndexMetaData as Index;
    if index.is_null_page(page) {
        return LeafStatistics::Empty;
    }
    match index {
        Index::INT64(pages) => match (pages.min_value(page), pages.max_value(page)) {
            (Some(min), Some(max)) => LeafStatistics::Int(*min, *max),
            _ => LeafStatistics::Unknown,
        },
        Index::DOUBLE(pages) => match (pages.min_value(page), pages.max_value(page)) {
            (Some(min), Some(max)) => LeafStatistics::Float(*min, *max),
            _ => LeafStatistics::Unknown,
        },
        Index::BYTE_ARRAY(pages) => match (pages.min_value(page), pages.max_value(page)) {
            (Some(min), Some(max)) => LeafStatistics::Str(min.into(), max.into()),
            _ => LeafStatistics::Unknown,
        },
        _ => LeafStatistics::Unknown,
    }
}

impl LeafStatistics {
    fn of(statistics: Option<&Statistics>) -> Self {
        match statistics {
            Some(Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                (Some(min), Some(max)) => Self::Int(*min, *max),
                _ => Self::Unknown,
            },
            Some(Statistics::Double(s)) => match (s.min_opt(), s.max_opt()) {
                (Some(min), Some(max)) => Self::Float(*min, *max),
                _ => Self::Unknown,
            },
            Some(Statistics::ByteArray(s)) if s.min_is_exact() && s.max_is_exact() => match (s.min_bytes_opt(), s.max_bytes_opt()) {
                (Some(min), Some(max)) => Self::Str(min.into(), max.into()),
                _ => Self::Unknown,
            },
            _ => Self::Unknown,
        }
    }
}

/// An entry of `columnar/manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestEntry {
    from: LogAddress,
    to: LogAddress,
    file: String,
    rows: u64,
    parquet_bytes: u64,
    json_bytes: u64,
    crc32: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    files: Vec<ManifestEntry>,
}

/// The manifest's file name within `columnar/`.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Counters of a table's columnar tier.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ColumnarStats {
    /// Whether the tier is on.
    pub enabled: bool,
    /// Columnar files.
    pub files: u64,
    /// Log bytes the files cover.
    pub log_bytes: u64,
    /// Bytes of JSON (record payloads) the files hold.
    pub json_bytes: u64,
    /// Bytes of the files.
    pub parquet_bytes: u64,
    /// Rows (records) in the files.
    pub rows: u64,
    /// Flushed log bytes not yet compacted.
    pub backlog_bytes: u64,
    /// JSON bytes compacted since the table was opened.
    pub compacted_json_bytes: u64,
    /// Time spent compacting since the table was opened, in milliseconds.
    pub compaction_ms: u64,
    /// CPU time the compactor thread spent compacting since the table was opened, in
    /// milliseconds (less than `compaction_ms` when it waited for a core).
    pub compaction_cpu_ms: u64,
    /// Compactions that failed (each is retried).
    pub compaction_errors: u64,
    /// Files dropped because a read found them changed since they were written (their
    /// ranges are answered from the log and compacted again).
    pub damaged_files: u64,
    /// Bytes of decoded columns held in memory (at most three quarters of
    /// [`ColumnarConfig::cache_bytes`]).
    pub decoded_bytes: u64,
    /// Bytes of parsed Parquet footers held in memory for decoding (at most a quarter of
    /// [`ColumnarConfig::cache_bytes`]; a file's statistics and layout are held apart).
    pub footer_bytes: u64,
    /// Column reads of scans served by decoded columns held in memory, since the table
    /// was opened.
    pub decoded_hits: u64,
    /// Column reads of scans that decoded from the files.
    pub decoded_misses: u64,
}

/// A table's columnar files and its compactor's state.
#[derive(Debug)]
pub(crate) struct ColumnarStore {
    pub(crate) config: ColumnarConfig,
    /// `<table>/columnar` of an on-disk table.
    dir: Option<PathBuf>,
    /// The remote copy of the files, with a page source ([`remote`]).
    remote: Option<Arc<remote::RemoteFiles>>,
    /// Sorted by `from`, disjoint.
    files: RwLock<Vec<Arc<ColumnarFile>>>,
    /// Decoded columns of the files, for later scans.
    pub(crate) decoded: DecodedColumns,
    /// Serialises changes to the file list and the manifest.
    changes: Mutex<()>,
    pub(crate) compacted_json_bytes: AtomicU64,
    pub(crate) compaction_nanos: AtomicU64,
    pub(crate) compaction_cpu_nanos: AtomicU64,
    pub(crate) compaction_errors: AtomicU64,
    /// Files dropped as damaged ([`ColumnarFile::damaged`]).
    damaged_files: AtomicU64,
    /// Runs of the log `[from, to)` a compactor thread is compacting (taken by
    /// [`Self::claim_next`]).
    claims: Mutex<Vec<(LogAddress, LogAddress)>>,
    stop: AtomicBool,
    wake: (Mutex<bool>, Condvar),
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl ColumnarStore {
    /// The memory the tier holds, in bytes: its decoded-column cache as it is filled (at
    /// most `cache_bytes`, plus the files' footers), and an in-memory table's files, whose
    /// Parquet bytes live in memory. None when the tier is off.
    pub(crate) fn reserved_bytes(&self) -> u64 {
        if !self.config.enabled {
            return 0;
        }
        let in_memory_files =
            if self.dir.is_none() { self.files.read().iter().map(|f| f.parquet_bytes).sum::<u64>() } else { 0 };
        self.decoded.used_bytes() + self.decoded.footer_bytes() + in_memory_files
    }

    /// Lets go of the decoded-column cache ([`DecodedColumns::release`]); returns the bytes
    /// freed.
    pub(crate) fn release_cache(&self) -> u64 {
        self.decoded.release()
    }

    /// The store of a table: empty for an in-memory table (`table_dir` `None`), else the
    /// files of `<table_dir>/columnar` that check out against the manifest and lie within
    /// `[begin, tail)` of the recovered log (the others are deleted, to be compacted again).
    /// With a page `source`, a listed file missing or damaged here is read from the source's
    /// copy instead ([`remote`]).
    pub(crate) fn open(
        config: ColumnarConfig,
        table_dir: Option<&Path>,
        begin: LogAddress,
        tail: LogAddress,
        source: Option<&crate::log::PageSourceRef>,
    ) -> Result<Self> {
        let dir = table_dir.map(|d| d.join("columnar"));
        let store = Self {
            remote: source.filter(|_| dir.is_some()).map(|s| Arc::new(remote::RemoteFiles::new(s.clone()))),
            decoded: DecodedColumns::new(config.cache_bytes),
            config,
            dir: dir.clone(),
            files: RwLock::new(Vec::new()),
            changes: Mutex::new(()),
            compacted_json_bytes: AtomicU64::new(0),
            compaction_nanos: AtomicU64::new(0),
            compaction_cpu_nanos: AtomicU64::new(0),
            compaction_errors: AtomicU64::new(0),
            damaged_files: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            claims: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        };
        let Some(dir) = dir else { return Ok(store) };
        if !dir.exists() {
            if store.config.enabled {
                std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            }
            return Ok(store);
        }
        let manifest: Manifest = match crate::files::read_json(&dir, MANIFEST_FILE) {
            Ok(m) => m.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "columnar manifest unreadable: its files are compacted again");
                Manifest::default()
            }
        };
        let mut kept = Vec::new();
        for entry in manifest.files {
            if !store.config.enabled || entry.to > tail || entry.to <= begin || entry.from >= entry.to {
                continue;
            }
            let path = dir.join(&entry.file);
            let check = || -> Result<ColumnarFile> {
                let local = std::fs::read(&path).map_err(|e| Error::io(&path, e)).and_then(|bytes| {
                    if bytes.len() as u64 != entry.parquet_bytes || crc32fast::hash(&bytes) != entry.crc32 {
                        return Err(columnar_error(&entry.file, "size or checksum differs from the manifest"));
                    }
                    Ok(bytes)
                });
                let bytes = match local {
                    Ok(bytes) => bytes,
                    Err(e) => store.fetch_at_open(&entry.file, &path, entry.parquet_bytes, entry.crc32).unwrap_or(Err(e))?,
                };
                let mut file =
                    ColumnarFile::load(entry.from, entry.to, entry.file.clone(), bytes::Bytes::from(bytes), Source::File(path.clone()))?;
                file.json_bytes = entry.json_bytes;
                file.remote.clone_from(&store.remote);
                Ok(file)
            };
            match check() {
                Ok(file) if kept.last().is_none_or(|last: &Arc<ColumnarFile>| last.to <= file.from) => kept.push(Arc::new(file)),
                Ok(_) => tracing::warn!(file = entry.file, "columnar file overlaps another: compacted again"),
                // The remote copy unreachable: the open fails (as recovery's does) rather
                // than compact again what the store holds.
                Err(e @ Error::RemoteUnavailable(_)) => return Err(e),
                Err(e) => tracing::warn!(error = %e, "columnar file dropped: compacted again from the log"),
            }
        }
        // Whatever the manifest does not list (a crash between rename and manifest, a
        // temporary file, a dropped entry) goes.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.filter_map(std::result::Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name != MANIFEST_FILE && !kept.iter().any(|f| f.name == name) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        *store.files.write() = kept;
        store.write_manifest()?;
        Ok(store)
    }

    /// The files, sorted by address.
    pub(crate) fn files(&self) -> Vec<Arc<ColumnarFile>> {
        self.files.read().clone()
    }

    /// The file holding `address`, if any.
    pub(crate) fn file_at(&self, address: LogAddress) -> Option<Arc<ColumnarFile>> {
        let files = self.files.read();
        let i = files.partition_point(|f| f.to <= address);
        files.get(i).filter(|f| f.from <= address).cloned()
    }

    /// The first address at or above `from` no file covers, and the start of the next
    /// file above it ([`LogAddress::MAX`] when none).
    pub(crate) fn next_gap(&self, from: LogAddress) -> (LogAddress, LogAddress) {
        let files = self.files.read();
        let mut at = from;
        for file in files.iter() {
            if file.to <= at {
                continue;
            }
            if file.from > at {
                return (at, file.from);
            }
            at = file.to;
        }
        (at, LogAddress::MAX)
    }

    /// Adds a file built for `[from, to)`: written atomically and listed in the manifest
    /// (on-disk tables), or kept in memory. A file for which `still_valid` says no (checked
    /// under the lock [`Self::drop_containing`] and [`Self::drop_below`] take: the log was
    /// truncated past it, or records were withdrawn meanwhile) is dropped.
    pub(crate) fn add(&self, from: LogAddress, to: LogAddress, written: write::WrittenFile, still_valid: impl Fn() -> bool) -> Result<()> {
        let _serialised = self.changes.lock();
        if !still_valid() {
            return Ok(());
        }
        let name = format!("{:020}-{:020}.parquet", from.get(), to.get());
        let bytes = bytes::Bytes::from(written.bytes);
        let source = match &self.dir {
            None => Source::Memory(bytes.clone()),
            Some(dir) => {
                let path = dir.join(&name);
                write_atomic(dir, &name, &bytes)?;
                Source::File(path)
            }
        };
        let mut file = ColumnarFile::load(from, to, name, bytes, source)?;
        file.json_bytes = written.json_bytes;
        file.remote.clone_from(&self.remote);
        {
            let mut files = self.files.write();
            let at = files.partition_point(|f| f.from < from);
            files.insert(at, Arc::new(file));
        }
        self.write_manifest()
    }

    /// Deletes the files wholly below `begin` (retention); returns how many.
    pub(crate) fn drop_below(&self, begin: LogAddress) -> Result<usize> {
        self.drop_files(|files| {
            let keep = files.partition_point(|f| f.to <= begin);
            files.drain(..keep).collect()
        })
    }

    /// Deletes the files whose range holds one of `addresses` (sorted; records withdrawn
    /// after the file may have been built from them): the compactor builds their ranges
    /// again from the log, where those records are invalid. Returns how many.
    pub(crate) fn drop_containing(&self, addresses: &[LogAddress]) -> Result<usize> {
        if addresses.is_empty() {
            return Ok(0);
        }
        self.drop_files(|files| {
            let (kept, dropped) = std::mem::take(files).into_iter().partition(|f| {
                let first = addresses.partition_point(|&a| a < f.from);
                addresses.get(first).is_none_or(|&a| a >= f.to)
            });
            *files = kept;
            dropped
        })
    }

    /// Deletes the files that hold one of `addresses` (sorted) as a row (their `_address`
    /// column is read; a file that does not decode is dropped too): at open, for records
    /// withdrawn after their file was built and not dropped then. Returns how many.
    pub(crate) fn drop_holding(&self, addresses: &[LogAddress]) -> Result<usize> {
        if addresses.is_empty() {
            return Ok(0);
        }
        let holding: Vec<u64> = self
            .files()
            .iter()
            .filter(|f| {
                let first = addresses.partition_point(|&a| a < f.from);
                addresses.get(first).is_some_and(|&a| a < f.to) && f.holds_any(addresses, &self.decoded).unwrap_or(true)
            })
            .map(|f| f.id)
            .collect();
        if holding.is_empty() {
            return Ok(0);
        }
        self.drop_files(|files| {
            let (dropped, kept) = std::mem::take(files).into_iter().partition(|f| holding.contains(&f.id));
            *files = kept;
            dropped
        })
    }

    /// Drops the files a read found damaged ([`ColumnarFile::damaged`]): the compactor
    /// builds their ranges again from the log. Returns how many.
    ///
    /// # Errors
    /// [`Error::Io`] writing the manifest.
    pub(crate) fn drop_damaged(&self) -> Result<usize> {
        let dropped = self.drop_files(|files| {
            let (dropped, kept) = std::mem::take(files).into_iter().partition(|f| f.damaged());
            *files = kept;
            dropped
        })?;
        if dropped > 0 {
            self.damaged_files.fetch_add(dropped as u64, Ordering::Relaxed);
            tracing::error!(files = dropped, "columnar files changed on disk since they were written: dropped, answered from the log and compacted again");
            self.notify();
        }
        Ok(dropped)
    }

    /// Removes the files `take` takes out of the list: the manifest is written, then
    /// they are deleted.
    fn drop_files(&self, take: impl FnOnce(&mut Vec<Arc<ColumnarFile>>) -> Vec<Arc<ColumnarFile>>) -> Result<usize> {
        let _serialised = self.changes.lock();
        let dropped = take(&mut self.files.write());
        if dropped.is_empty() {
            return Ok(0);
        }
        for file in &dropped {
            file.dropped.store(true, Ordering::Release);
            self.decoded.forget(file.id);
        }
        // The manifest first, so that a crash in between leaves only unlisted files.
        self.write_manifest()?;
        for file in &dropped {
            if let Source::File(path) = &file.source {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(dropped.len())
    }

    fn write_manifest(&self) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        if !dir.exists() {
            return Ok(());
        }
        let files = self.files.read();
        let manifest = Manifest {
            files: files
                .iter()
                .map(|f| ManifestEntry {
                    from: f.from,
                    to: f.to,
                    file: f.name.clone(),
                    rows: f.rows,
                    parquet_bytes: f.parquet_bytes,
                    json_bytes: f.json_bytes,
                    crc32: f.crc32,
                })
                .collect(),
        };
        crate::files::write_json_atomic(dir, MANIFEST_FILE, &manifest)
    }

    /// Counters; `flushed_whole` is the end of the log's whole flushed pages, `begin` its
    /// begin address.
    pub(crate) fn stats(&self, begin: LogAddress, flushed_whole: LogAddress) -> ColumnarStats {
        let files = self.files.read();
        let mut stats = ColumnarStats {
            enabled: self.config.enabled,
            files: files.len() as u64,
            compacted_json_bytes: self.compacted_json_bytes.load(Ordering::Relaxed),
            compaction_ms: self.compaction_nanos.load(Ordering::Relaxed) / 1_000_000,
            compaction_cpu_ms: self.compaction_cpu_nanos.load(Ordering::Relaxed) / 1_000_000,
            compaction_errors: self.compaction_errors.load(Ordering::Relaxed),
            damaged_files: self.damaged_files.load(Ordering::Relaxed),
            decoded_bytes: self.decoded.used_bytes(),
            footer_bytes: self.decoded.footer_bytes(),
            ..ColumnarStats::default()
        };
        (stats.decoded_hits, stats.decoded_misses) = self.decoded.hits_and_misses();
        let mut covered = 0;
        for f in files.iter() {
            stats.log_bytes += f.to - f.from;
            stats.json_bytes += f.json_bytes;
            stats.parquet_bytes += f.parquet_bytes;
            stats.rows += f.rows;
            covered += f.to.min(flushed_whole).bytes_since(f.from.max(begin));
        }
        if self.config.enabled {
            stats.backlog_bytes = flushed_whole.bytes_since(begin).saturating_sub(covered);
        }
        stats
    }

    /// Asks the compactor threads to stop, and waits for them.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.notify();
        let threads = std::mem::take(&mut *self.threads.lock());
        for handle in threads {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// Takes the oldest run of the log at or above `begin` that no file covers and no
    /// other compactor thread has taken: up to `file_bytes` of the whole flushed pages
    /// below `whole`. A shorter run is taken only when a file or another thread's run
    /// bounds it, or when `idle` (the tail stood still long enough). `None`: nothing to do
    /// now. The run is the caller's until [`Self::release`].
    pub(crate) fn claim_next(&self, begin: LogAddress, whole: LogAddress, file_bytes: u64, idle: bool) -> Option<(LogAddress, LogAddress)> {
        let mut claims = self.claims.lock();
        let mut taken: Vec<(LogAddress, LogAddress)> = self.files.read().iter().map(|f| (f.from, f.to)).chain(claims.iter().copied()).collect();
        taken.sort_unstable();
        let (mut at, mut next) = (begin, LogAddress::MAX);
        for (from, to) in taken {
            if to <= at {
                continue;
            }
            if from > at {
                next = from;
                break;
            }
            at = to;
        }
        let end = whole.min(next).min(at.add_bytes(file_bytes));
        let full = end - at.min(end) >= file_bytes || end == next;
        if end <= at || !(full || idle) {
            return None;
        }
        claims.push((at, end));
        Some((at, end))
    }

    /// Gives back the run starting at `from` that [`Self::claim_next`] took (compacted,
    /// or to be taken again after a failure).
    pub(crate) fn release(&self, from: LogAddress) {
        self.claims.lock().retain(|&(start, _)| start != from);
    }

    /// Wakes the compactor (new flushed pages, or shutdown).
    pub(crate) fn notify(&self) {
        let (flag, condvar) = &self.wake;
        *flag.lock() = true;
        condvar.notify_all();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Sleeps until notified or `timeout` passes.
    fn wait(&self, timeout: std::time::Duration) {
        let (flag, condvar) = &self.wake;
        let mut woken = flag.lock();
        if !*woken && !self.stopped() {
            condvar.wait_for(&mut woken, timeout);
        }
        *woken = false;
    }
}

/// Writes `dir/name` atomically: a temporary file, fsync, rename, fsync of the directory.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let path = dir.join(name);
    let temporary = dir.join(format!("{name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        Error::io(&path, e)
    })
}
