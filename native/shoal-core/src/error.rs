//! The engine's error type.

use std::path::PathBuf;

/// Errors of shoal-core. Every variant names what was wrong and where, so the daemon can
/// pass the message to a client unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A dotted field path could not be parsed.
    #[error("invalid field path {path:?}: {reason}")]
    InvalidPath {
        /// The text given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A filter or PSF expression could not be parsed or is not supported.
    #[error("invalid expression {expr:?}: {reason}")]
    InvalidExpression {
        /// The expression text.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A record of an ingested batch is not valid JSON (`reject` policy).
    #[error("record {index} of the batch is not valid JSON: {reason}")]
    InvalidRecord {
        /// Zero-based index of the record within the batch.
        index: usize,
        /// The parser's message.
        reason: String,
    },
    /// A record of a batch for a keyed table has no usable primary key.
    #[error("record {index} of the batch has no primary key {key}: each key field must be a string, number or boolean (not missing, null, an array or an object)")]
    InvalidKey {
        /// Zero-based index of the record within the batch.
        index: usize,
        /// The key's fields, as dotted paths.
        key: String,
    },
    /// An operation the table cannot do: `delete` or `merge` on an append-only table, or
    /// a batch whose operations do not match its records.
    #[error("{0}")]
    InvalidOperation(String),
    /// A record is larger than what fits in one log page.
    #[error("record {index} of the batch is {size} bytes; the largest record a page of {page_size} bytes holds is {max} bytes (raise the page size)")]
    RecordTooLarge {
        /// Zero-based index of the record within the batch.
        index: usize,
        /// Encoded size in bytes.
        size: usize,
        /// The log's page size in bytes.
        page_size: usize,
        /// The largest encoded record size in bytes.
        max: usize,
    },
    /// No PSF of that name exists.
    #[error("no PSF named {0:?}")]
    PsfNotFound(String),
    /// A PSF of that name is already registered.
    #[error("a PSF named {0:?} is already registered")]
    PsfExists(String),
    /// A PSF definition is invalid.
    #[error("invalid PSF {name:?}: {reason}")]
    InvalidPsf {
        /// The PSF's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A log address that cannot be read (below the begin address, past the tail, or
    /// evicted from the null device).
    #[error("log address {address} is not readable: {reason}")]
    AddressNotReadable {
        /// The logical address.
        address: crate::LogAddress,
        /// Why.
        reason: String,
    },
    /// A keyed table's scan asked for a snapshot (its `to_address`, or the tail when a
    /// ticket was planned) below the snapshot horizon: a log compaction since moved the
    /// versions it would see ([`crate::keys::Snapshots`]). Plan the query again, or time
    /// travel to an address at or above the horizon.
    #[error("snapshot at log address {snapshot} is older than the table's snapshot horizon {horizon} (a log compaction moved the versions it saw): plan the query again, or time travel to an address at or above {horizon}")]
    SnapshotTooOld {
        /// The snapshot asked for.
        snapshot: crate::LogAddress,
        /// The lowest snapshot a scan may have.
        horizon: crate::LogAddress,
    },
    /// A flushed page failed its checksum.
    #[error("page {page} of {path} is corrupt: {reason}")]
    CorruptPage {
        /// Page number.
        page: u64,
        /// Segment file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// An in-memory table's page ring is full: its records exist nowhere else, so a batch
    /// that does not fit is refused instead of evicting acknowledged records.
    #[error("the in-memory table is full: a batch of {requested} bytes does not fit in its page ring of {capacity} bytes ({used} bytes in use); truncate it (retention), or give it a larger memory budget or a data directory")]
    MemoryFull {
        /// Bytes of records the batch needs.
        requested: u64,
        /// The ring's size in bytes.
        capacity: u64,
        /// Bytes of the log between the begin address and the tail.
        used: u64,
    },
    /// Another process owns the table now (it claimed a newer owner epoch in the remote
    /// store), or it may not be written here: this process acknowledges nothing more of
    /// it. The text says why (`fenced by epoch N: ...`).
    #[error("{0}")]
    Fenced(String),
    /// The table's remote store (durability `remote`) has failed for a while: a batch
    /// could not be acknowledged. Nothing acknowledged is lost; retry later.
    #[error("the remote store is unavailable: {0}")]
    RemoteUnavailable(String),
    /// The table is being handed to another process (a shard moving to another node,
    /// [`crate::table::Table::close_to_writes`]): the batch was refused whole; retry it,
    /// where the table is now.
    #[error("{0}")]
    Moving(String),
    /// A wait was given up because its caller went away (e.g. the client of a
    /// `make_durable` call disconnected); nothing was changed.
    #[error("cancelled: {0}")]
    Cancelled(String),
    /// An I/O error on a data file.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// A requested column (field path) is not in the table's schema.
    #[error("unknown column {column:?}: no record seen so far has this path")]
    UnknownColumn {
        /// The column's dotted path.
        column: String,
    },
    /// A requested column lies where the table's schema stopped adding keys
    /// ([`crate::schema::MAX_SCHEMA_FIELDS`]): records may have it, the schema does not.
    #[error(
        "column {column:?} is not in the table's schema: the schema holds at most {limit} fields and adds no new keys \
         under {under} (filter on the path, or ask for \"output\": \"json\" to get whole records)"
    )]
    ColumnNotInferred {
        /// The column's dotted path.
        column: String,
        /// Where keys stopped being added: `the record`, or a dotted path in backquotes.
        under: String,
        /// The schema's field limit.
        limit: usize,
    },
    /// Assembling an Arrow array or record batch failed.
    #[error("building an Arrow batch failed: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// A scan plan handed back by a client (in a Flight ticket) does not fit the table:
    /// malformed (overlapping or unordered ranges, too many chains), or stale (a PSF it
    /// walks was deregistered, or no longer covers the range).
    #[error("invalid scan plan: {0}")]
    InvalidPlan(String),
    /// A columnar file could not be written or read (the tier falls back to the raw log
    /// for reads, and compacts the range again).
    #[error("columnar tier: {0}")]
    Columnar(String),
    /// An aggregate cannot be computed over the column it names (e.g. `MIN` of a struct).
    #[error("invalid aggregate {aggregate}: {reason}")]
    InvalidAggregate {
        /// The aggregate, as `min(path)`.
        aggregate: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An integer `SUM` whose value is outside the 64-bit range (it is never wrapped).
    #[error("{aggregate}: the integer sum {sum} is outside the range of Int64")]
    AggregateOverflow {
        /// The aggregate, as `sum(path)`.
        aggregate: String,
        /// The exact sum.
        sum: i128,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}
