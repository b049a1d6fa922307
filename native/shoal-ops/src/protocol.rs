//! The public protocol: JSON bodies of commands, actions, tickets and results
//! (documented in `docs/protocol.md`), and the mapping of engine errors onto Flight
//! status codes.
//!
//! Every body is a JSON object; unknown keys, wrong types and malformed JSON are
//! `INVALID_ARGUMENT` with a message that names the key.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shoal_core::psf::PsfSpec;
use shoal_core::scan::{Aggregate, AggregateFunction};
use shoal_core::table::InvalidJsonPolicy;

use crate::config::Durability;
use crate::error::OpsError;
use shoal_core::LogAddress;

/// Version of the ticket format: 2 carries the plan it was issued for (1 carried the
/// filter and a log range, and was planned again by `DoGet`).
pub const TICKET_VERSION: u32 = 2;

/// Parses a JSON body of `what` (an action or command name), mapping every error to
/// `INVALID_ARGUMENT` with serde's message (which names the key and the position).
pub fn parse_body<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, OpsError> {
    if body.is_empty() {
        return Err(OpsError::invalid_argument(format!("{what}: the body must be a JSON object, got nothing")));
    }
    // serde's messages quote the offending value, which a client may make huge.
    serde_json::from_slice(body).map_err(|e| OpsError::invalid_argument(bounded(format!("{what}: invalid JSON body: {e}"))))
}

pub use crate::error::{bounded, MAX_STATUS_MESSAGE_BYTES};

/// A client-supplied name or text as a message quotes it: at most 256 bytes, in quotes.
#[must_use]
pub fn quoted(text: &str) -> String {
    format!("{:?}", shoal_core::psf::expr::echo(text))
}

/// `create_table`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTable {
    /// Table name: 1–128 characters of `[A-Za-z0-9_.-]`, not starting with `.`.
    pub name: String,
    /// `reject` (default) or `skip`.
    #[serde(default)]
    pub on_invalid_json: InvalidJsonPolicy,
    /// Memory budget of the table's log, in bytes (default: the server's).
    #[serde(default)]
    pub memory_budget_bytes: Option<usize>,
    /// log2 of the page size in bytes (default 22 = 4 MiB).
    #[serde(default)]
    pub page_size_bits: Option<u32>,
    /// log2 of the hash bucket count (default 18).
    #[serde(default)]
    pub index_size_bits: Option<u32>,
    /// Succeed without change if the table exists (default false: `ALREADY_EXISTS`).
    #[serde(default)]
    pub if_not_exists: bool,
    /// `none`, `group_commit`, `fsync` or `remote` (default: the server's `durability`).
    #[serde(default)]
    pub durability: Option<Durability>,
    /// Group-commit interval in milliseconds (default: the server's `group_commit_ms`).
    #[serde(default)]
    pub group_commit_ms: Option<u64>,
    /// The columnar tier's settings (`enabled`, `file_log_bytes`, `row_group_rows`,
    /// `codec`, `idle_ms`; those not given: the server's `columnar` section).
    #[serde(default)]
    pub columnar: Option<serde_json::Value>,
    /// What retention keeps of the log: `{"keep_bytes"?, "max_age_secs"?}` (Kafka's
    /// `retention.bytes`/`retention.ms`), applied every `retention_check_secs`. Default:
    /// keep everything.
    #[serde(default)]
    pub retention: Option<shoal_core::table::RetentionPolicy>,
    /// The primary key of a keyed table (`"id"`, or `["tenant", "id"]` for a composite
    /// key; dotted paths): its records are upserted, deleted and merged by key (a DoPut
    /// batch's `op` column) and queries see each key's latest version. Absent: an
    /// append-only table.
    #[serde(default)]
    pub primary_key: Option<KeyFields>,
}

/// The fields of a primary key as `create_table` takes them: one dotted path or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KeyFields {
    /// One field.
    One(String),
    /// A composite key's fields, in key order.
    Many(Vec<String>),
}

impl KeyFields {
    /// The fields as paths.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an empty list or a path that does not parse.
    pub fn paths(&self) -> Result<Vec<shoal_core::FieldPath>, OpsError> {
        let texts = match self {
            KeyFields::One(one) => std::slice::from_ref(one),
            KeyFields::Many(many) => many.as_slice(),
        };
        if texts.is_empty() {
            return Err(OpsError::invalid_argument("primary_key: give a field path or a non-empty list of them"));
        }
        texts
            .iter()
            .map(|t| shoal_core::FieldPath::parse(t).map_err(|e| OpsError::invalid_argument(format!("primary_key: {e}"))))
            .collect()
    }
}

/// `delete`: SQL's `DELETE FROM table WHERE filter` on a keyed table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteRows {
    /// Table name.
    pub table: String,
    /// The rows to delete: a filter in the filter language (absent: every row).
    #[serde(default)]
    pub filter: Option<String>,
}

/// `compact`: a keyed table's log compaction (`shoal_core::table::Table::compact_log`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compact {
    /// Table name.
    pub table: String,
    /// Compact below this log address (absent: everything flushed).
    #[serde(default)]
    pub until_address: Option<LogAddress>,
    /// Milliseconds to wait for scans with older snapshots to finish before the head is
    /// left for the next compaction (absent: 30,000; at most [`MAX_COMPACT_WAIT_MS`]).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// The longest `compact` wait a client may ask for, in milliseconds (10 minutes).
pub const MAX_COMPACT_WAIT_MS: u64 = 600_000;

/// `drop_table`, `stats`, `list_psfs`, `checkpoint`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableRef {
    /// Table name.
    #[serde(alias = "name")]
    pub table: String,
}

/// `register_psf`: a name and a [`PsfSpec`] (`kind` with `field`, `expr`, `fields` or
/// `field` + `boundaries`).
#[derive(Debug, Clone, Deserialize)]
pub struct RegisterPsf {
    /// Table name.
    pub table: String,
    /// PSF name (unique among the table's registered PSFs).
    pub name: String,
    /// Whether the records already in the table are indexed too, in the background
    /// (`Table::register_psf_with`; default `true`); `false` keeps FishStore's PSF, which
    /// covers what is ingested from its registration on.
    #[serde(default)]
    pub backfill: Option<bool>,
    /// The definition.
    #[serde(flatten)]
    pub spec: PsfSpec,
}

/// `deregister_psf`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeregisterPsf {
    /// Table name.
    pub table: String,
    /// PSF name.
    pub name: String,
}

/// The `GetFlightInfo` command.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryCommand {
    /// Table name.
    pub table: String,
    /// SQL expression over dotted paths; absent: every record.
    #[serde(default)]
    pub filter: Option<String>,
    /// Dotted paths; absent or empty: every top-level field.
    #[serde(default)]
    pub columns: Vec<String>,
    /// At most this many records in total.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Most endpoints to split the log into (default: the server's `endpoints_per_query`).
    #[serde(default)]
    pub max_endpoints: Option<usize>,
    /// Lowest log address to read (default: the table's begin address).
    #[serde(default)]
    pub from_address: Option<LogAddress>,
    /// One past the highest log address (default: the tail when planned).
    #[serde(default)]
    pub to_address: Option<LogAddress>,
    /// Aggregates to compute instead of returning records (then `columns` must be empty
    /// and `limit` absent). The answer is final: the query is planned as one endpoint
    /// whose one row is the result, unless `partial`.
    #[serde(default)]
    pub aggregates: Vec<AggregateSpec>,
    /// Dotted paths of scalar columns to group by (`GROUP BY`): the answer has one row per
    /// distinct combination of their values (nulls make one group), the keys' columns
    /// first, then one column per aggregate (none: the distinct keys). At most
    /// 1,000,000 groups (then `RESOURCE_EXHAUSTED`).
    #[serde(default)]
    pub group_by: Vec<String>,
    /// With `aggregates`: split the query over endpoints as a scan of rows would be, each
    /// returning one row of **partial** aggregates over its log range, for readers that
    /// merge them (Spark's partial aggregate pushdown): sum the counts and sums, take the
    /// minimum of the minimums. `avg` is refused (merge `sum` and `count`).
    #[serde(default)]
    pub partial: bool,
    /// `arrow` (default): typed columns; `json`: one `Utf8` column `json` holding each
    /// record's bytes as ingested.
    #[serde(default)]
    pub output: OutputFormat,
    /// Append each record's log address as a last, non-null `UInt64` column `_address`
    /// (a follower's offset). Not with aggregates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_address: bool,
    /// Answer only records that are durable (below the table's durable address) instead
    /// of every complete one; `FAILED_PRECONDITION` on an in-memory table.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable_only: bool,
    /// What a query whose `from_address` lies below the table's begin address (records
    /// dropped by retention or truncation) does: `skip` (default) starts at the begin
    /// address and reports the dropped range in the plan (`truncated`); `error` is
    /// `OUT_OF_RANGE` naming it (a follower that must not miss records).
    #[serde(default, skip_serializing_if = "IfTruncated::is_skip")]
    pub if_truncated: IfTruncated,
    /// A requested column that no record of the table has had yet is answered as a
    /// column of type `Null` instead of `INVALID_ARGUMENT` (how a node of a cluster asks a
    /// shard: another shard may hold the path).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown_columns_null: bool,
}

/// [`QueryCommand::if_truncated`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IfTruncated {
    /// Start at the begin address; the plan reports `truncated: {from, to}`.
    #[default]
    Skip,
    /// `OUT_OF_RANGE`, naming the range that is gone.
    Error,
}

impl IfTruncated {
    #[allow(clippy::trivially_copy_pass_by_ref)]
    fn is_skip(&self) -> bool {
        *self == IfTruncated::Skip
    }
}

/// What a query returns per record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// The requested columns, typed by the inferred schema.
    #[default]
    Arrow,
    /// One non-null `Utf8` column named `json`: the record's bytes exactly as they were
    /// put (the mirror of `DoPut`'s `json` column).
    Json,
}

impl OutputFormat {
    fn is_arrow(&self) -> bool {
        *self == OutputFormat::Arrow
    }
}

/// One aggregate of a query: `{"function": "count"|"min"|"max", "column"?: "path"}`;
/// `count` without a column is `COUNT(*)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSpec {
    /// `count`, `min`, `max`, `sum` or `avg`.
    pub function: AggregateFunction,
    /// Dotted path of the aggregated column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
}

impl AggregateSpec {
    /// The engine's aggregate.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when `column` is not a valid dotted path.
    pub fn to_aggregate(&self) -> Result<Aggregate, OpsError> {
        let column = self
            .column
            .as_deref()
            .map(|c| shoal_core::FieldPath::parse(c).map_err(|e| OpsError::from_engine(&e)))
            .transpose()?;
        Ok(Aggregate { function: self.function, column })
    }
}

/// Metadata of one `DoPut` batch (`FlightData.app_metadata` of the message carrying
/// it, JSON; empty: none). `writer` + `serial` make the batch exactly-once (a resent
/// serial is skipped and answered with `"duplicate": true`); `transaction` stages the
/// batch in an open transaction instead of ingesting it. The two are exclusive.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchMetadata {
    /// Writer name (1–256 bytes).
    #[serde(default)]
    pub writer: Option<String>,
    /// Serial number of the batch, increasing per writer.
    #[serde(default)]
    pub serial: Option<u64>,
    /// Transaction to stage the batch in.
    #[serde(default)]
    pub transaction: Option<String>,
}

impl BatchMetadata {
    /// Parses a batch's `app_metadata` (empty: no metadata).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the key, or for `writer` without `serial` (or the
    /// reverse), or both a writer and a transaction.
    pub fn parse(bytes: &[u8]) -> Result<Self, OpsError> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        let metadata: Self = parse_body("DoPut batch app_metadata", bytes)?;
        if metadata.writer.is_some() != metadata.serial.is_some() {
            return Err(OpsError::invalid_argument("DoPut batch app_metadata: \"writer\" and \"serial\" go together"));
        }
        if metadata.writer.is_some() && metadata.transaction.is_some() {
            return Err(OpsError::invalid_argument(
                "DoPut batch app_metadata: a batch is either a writer's (\"writer\", \"serial\") or a transaction's, not both",
            ));
        }
        Ok(metadata)
    }
}

/// `begin_transaction`, `prepare_transaction`, `commit_transaction`, `abort_transaction`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransactionRef {
    /// Table name.
    pub table: String,
    /// Transaction id.
    pub transaction: String,
}

/// `alter_table`: the settings of an existing table that may change (the retention
/// policy today; the log geometry, durability and the invalid-JSON policy are fixed when
/// the table is created).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlterTable {
    /// Table name.
    pub table: String,
    /// The new retention policy (`{}`: keep everything).
    pub retention: shoal_core::table::RetentionPolicy,
}

/// `truncate`: exactly one of the three rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Truncate {
    /// Table name.
    pub table: String,
    /// Drop everything below this log address.
    #[serde(default)]
    pub before_address: Option<LogAddress>,
    /// Keep about the newest this many bytes of log.
    #[serde(default)]
    pub keep_bytes: Option<u64>,
    /// Drop segment files last written longer ago than this many seconds.
    #[serde(default)]
    pub older_than_secs: Option<u64>,
}

impl Truncate {
    /// The engine's rule.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` unless exactly one rule is given.
    pub fn rule(&self) -> Result<shoal_core::retention::RetentionRule, OpsError> {
        use shoal_core::retention::RetentionRule;
        match (self.before_address, self.keep_bytes, self.older_than_secs) {
            (Some(address), None, None) => Ok(RetentionRule::BeforeAddress(address)),
            (None, Some(bytes), None) => Ok(RetentionRule::KeepBytes(bytes)),
            (None, None, Some(secs)) => Ok(RetentionRule::OlderThan(std::time::Duration::from_secs(secs))),
            _ => Err(OpsError::invalid_argument(
                "truncate: give exactly one of \"before_address\", \"keep_bytes\", \"older_than_secs\"",
            )),
        }
    }
}

/// `make_durable`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MakeDurable {
    /// Table name.
    pub table: String,
    /// Address everything below which must be durable (default: the current tail).
    #[serde(default)]
    pub address: Option<LogAddress>,
}

/// `writer_status`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriterRef {
    /// Table name.
    pub table: String,
    /// Writer name.
    pub writer: String,
}

/// A `DoGet` ticket as the daemon issues it: the query and the plan of one endpoint's
/// log range (so that `DoGet` runs it without planning again or walking other ranges).
/// Opaque to clients, but JSON so that it can be logged and debugged; a ticket that was
/// tampered with or outlived the PSFs it uses is `INVALID_ARGUMENT`
/// (`Table::check_plan`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketBody {
    /// [`TICKET_VERSION`].
    pub v: u32,
    /// Table name.
    pub table: String,
    /// Dotted paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// At most this many records (the whole query's limit: a query with a limit has
    /// one endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Aggregates (empty: return records, unless `group_by`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregates: Vec<AggregateSpec>,
    /// Group keys of the aggregates (`QueryCommand::group_by`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_by: Vec<String>,
    /// What each record becomes.
    #[serde(default, skip_serializing_if = "OutputFormat::is_arrow")]
    pub output: OutputFormat,
    /// Append the `_address` column.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_address: bool,
    /// Paths no record has had yet are Null columns (`QueryCommand::unknown_columns_null`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown_columns_null: bool,
    /// The endpoint's plan: its filter (normalised SQL text), index scans (PSF ids,
    /// properties, ranges) and full-scan ranges.
    pub plan: shoal_core::scan::ScanPlan,
}

