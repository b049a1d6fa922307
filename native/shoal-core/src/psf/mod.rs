//! Predicated subset functions (FishStore §3) and their registry (§6.2).
//!
//! A PSF maps a record to a value (or to nothing); every record with value `v` belongs
//! to the subset of property `(f, v)`, whose members are linked in one hash chain.
//! Kinds: [`PsfKind::Projection`] (one chain per distinct field value),
//! [`PsfKind::Predicate`] (the chain of records where a boolean expression is true),
//! [`PsfKind::Range`] (one chain per bucket of a numeric field) and
//! [`PsfKind::Composite`] (one chain per tuple of field values).
//!
//! PSFs are registered and deregistered while ingestion runs. Registration moves
//! REST → PREPARE (the new PSF set is published) → PENDING (every ingestion batch that
//! could still use the old set has ended: an epoch of the registry's own
//! [`LightEpoch`] is safe) → REST. At PENDING the log tail is the PSF's *safe register
//! address*: every record at or above it is indexed. Deregistration records the tail
//! before unpublishing as the *safe deregister address*: every record between the two
//! boundaries is indexed, so index scans are exact there and full scans cover the rest.
//! Below the safe register address, a PSF's [`backfill`] indexes the records that were
//! there before it, into sorted runs beside the log (not in FishStore).

pub mod backfill;
pub mod expr;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::epoch::LightEpoch;
use crate::error::{Error, Result};
use crate::parser::FieldSet;
use crate::path::FieldPath;
use crate::timestamp::{format_duration, format_timestamp, parse_duration, parse_timestamp, EpochUnit, TruncUnit};
use crate::value::{encode_bucket, encode_canonical, encode_composite, tag, FieldValue};
use crate::LogAddress;
pub use expr::{parse_expr, BoundExpr, CmpOp, Expr, Function, Literal};

/// Identifier of a PSF within its table; never reused.
pub type PsfId = u32;

/// What a PSF computes.
#[derive(Debug, Clone, PartialEq)]
pub enum PsfKind {
    /// The value of a field — or of a function of it (`lower(actor.login)`,
    /// [`expr::Function`]) — : one chain per distinct non-null scalar value.
    Projection {
        /// The field.
        field: FieldPath,
        /// The function applied to the field's value first, if any.
        function: Option<expr::Function>,
    },
    /// A boolean expression: one chain, of the records where it is true.
    Predicate {
        /// The expression (normalised).
        expr: Expr,
    },
    /// A field split at ascending boundaries `b0 < b1 < … < bk`: bucket 0 holds values
    /// `< b0`, bucket `i` values in `[b(i-1), b(i))`, bucket `k+1` values `≥ bk`. Numeric
    /// boundaries bucket numbers; string boundaries bucket strings in byte order (the filter
    /// language's string order); timestamp buckets bucket instants (RFC 3339 strings, epoch
    /// numbers in a unit) at given instants or every fixed width (`"bucket": "1h"`).
    Range {
        /// The field.
        field: FieldPath,
        /// Its buckets.
        buckets: RangeBuckets,
    },
    /// A tuple of fields: one chain per distinct tuple of non-null scalar values.
    Composite {
        /// The fields, in tuple order.
        fields: Vec<FieldPath>,
    },
}

/// A PSF as a user writes it: a name and a kind. Serialisable for the protocol and
/// for checkpoints (expressions as SQL text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PsfSpec {
    /// See [`PsfKind::Projection`].
    Projection {
        /// Dotted path, or a function of one: `lower(actor.login)`, `upper(…)`, `length(…)`.
        field: String,
    },
    /// See [`PsfKind::Predicate`].
    Predicate {
        /// SQL expression text.
        expr: String,
    },
    /// See [`PsfKind::Range`].
    Range {
        /// Dotted path.
        field: String,
        /// Ascending boundaries: all numbers, or all strings. With `"type": "timestamp"`,
        /// instants (RFC 3339 strings, or epoch numbers in `unit`); absent when `bucket` is given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boundaries: Option<Boundaries>,
        /// `"timestamp"`: the field's values are instants ([`crate::timestamp`]); absent: the
        /// boundaries' type (numbers or strings).
        #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
        value_type: Option<RangeType>,
        /// A timestamp range's bucket width (`"1h"`, `"15m"`, `"1d"`;
        /// [`crate::timestamp::parse_duration`]): buckets aligned to the epoch, instead of boundaries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bucket: Option<String>,
        /// A timestamp range's unit of epoch numbers: `"s"` (the default), `"ms"`, `"us"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unit: Option<EpochUnit>,
    },
    /// See [`PsfKind::Composite`].
    Composite {
        /// Dotted paths.
        fields: Vec<String>,
    },
}

impl PsfSpec {
    /// A numeric or string range PSF over `field` split at `boundaries`.
    #[must_use]
    pub fn range(field: &str, boundaries: impl Into<Boundaries>) -> Self {
        PsfSpec::Range { field: field.to_owned(), boundaries: Some(boundaries.into()), value_type: None, bucket: None, unit: None }
    }

    /// A timestamp range PSF over `field` with buckets `width` wide (`"1h"`), aligned to the
    /// epoch; epoch numbers read in `unit`.
    #[must_use]
    pub fn time_buckets(field: &str, width: &str, unit: EpochUnit) -> Self {
        PsfSpec::Range {
            field: field.to_owned(),
            boundaries: None,
            value_type: Some(RangeType::Timestamp),
            bucket: Some(width.to_owned()),
            unit: Some(unit),
        }
    }
}

/// The `"type"` of a range PSF's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RangeType {
    /// Numbers (numeric boundaries).
    Number,
    /// Strings in byte order (string boundaries).
    String,
    /// Instants: RFC 3339 strings and epoch numbers ([`crate::timestamp`]).
    Timestamp,
}

impl PsfKind {
    /// Builds a kind from its textual spec.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::InvalidExpression`], or [`Error::InvalidPsf`]
    /// (for `name`) for boundaries that are empty, not finite or not ascending, or a
    /// composite with fewer than two fields.
    pub fn from_spec(name: &str, spec: &PsfSpec) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidPsf { name: name.to_owned(), reason };
        Ok(match spec {
            PsfSpec::Projection { field } => match projected_function(field) {
                Some((name, inner)) if matches!(name.to_ascii_lowercase().as_str(), "substr" | "substring") => {
                    // `substr(field, start[, length])`: the positions are whole numbers.
                    let mut parts = inner.split(',').map(str::trim);
                    let field = FieldPath::parse(parts.next().unwrap_or_default())?;
                    let numbers = parts
                        .map(|p| p.parse::<i64>().map_err(|_| invalid(format!("`{p}` in `{name}(…)` is not a whole number"))))
                        .collect::<Result<Vec<i64>>>()?;
                    let function = match numbers.as_slice() {
                        [start] => expr::Function::Substr { start: *start, length: None },
                        [start, length] => expr::Function::Substr { start: *start, length: Some(*length) },
                        _ => return Err(invalid(format!("`{name}` takes a field, a start and an optional length"))),
                    };
                    PsfKind::Projection { field, function: Some(function) }
                }
                Some((name, inner)) if name.eq_ignore_ascii_case("date_trunc") => {
                    // One chain per hour (month, …) of a field is a timestamp range PSF.
                    let (unit, field) = inner.split_once(',').unwrap_or(("'hour'", inner));
                    return Err(invalid(format!(
                        "a PSF over date_trunc is a timestamp range PSF: {{\"kind\": \"range\", \"field\": \"{}\", \"type\": \"timestamp\", \"bucket\": \"{}\"}}",
                        field.trim(),
                        unit.trim().trim_matches('\'')
                    )));
                }
                Some((name, inner)) => {
                    let function = expr::Function::named(name).ok_or_else(|| {
                        invalid(format!("`{name}` is not a function of a projection (lower, upper, length, substr are)"))
                    })?;
                    PsfKind::Projection { field: FieldPath::parse(inner)?, function: Some(function) }
                }
                None => PsfKind::Projection { field: FieldPath::parse(field)?, function: None },
            },
            PsfSpec::Predicate { expr } => PsfKind::Predicate { expr: parse_expr(expr)? },
            PsfSpec::Range { field, boundaries, value_type, bucket, unit } => {
                let buckets = RangeBuckets::from_spec(boundaries.as_ref(), *value_type, bucket.as_deref(), *unit).map_err(invalid)?;
                PsfKind::Range { field: FieldPath::parse(field)?, buckets }
            }
            PsfSpec::Composite { fields } => {
                if fields.len() < 2 {
                    return Err(invalid("a composite PSF needs at least two fields".into()));
                }
                PsfKind::Composite { fields: fields.iter().map(|f| FieldPath::parse(f)).collect::<Result<_>>()? }
            }
        })
    }

    /// The textual spec of this kind.
    #[must_use]
    pub fn to_spec(&self) -> PsfSpec {
        match self {
            PsfKind::Projection { field, function: None } => PsfSpec::Projection { field: field.to_string() },
            PsfKind::Projection { field, function: Some(function) } => PsfSpec::Projection { field: function.call(&field.to_string()) },
            PsfKind::Predicate { expr } => PsfSpec::Predicate { expr: expr.to_string() },
            PsfKind::Range { field, buckets } => buckets.to_spec(field.to_string()),
            PsfKind::Composite { fields } => PsfSpec::Composite { fields: fields.iter().map(ToString::to_string).collect() },
        }
    }

    /// The fields the PSF reads (its fields of interest).
    #[must_use]
    pub fn fields(&self) -> Vec<FieldPath> {
        match self {
            PsfKind::Projection { field, .. } | PsfKind::Range { field, .. } => vec![field.clone()],
            PsfKind::Predicate { expr } => expr.fields(),
            PsfKind::Composite { fields } => fields.clone(),
        }
    }
}

/// `("lower", "actor.login")` for a projection's `lower(actor.login)`; `None` for a plain path.
fn projected_function(text: &str) -> Option<(&str, &str)> {
    let (name, rest) = text.trim().split_once('(')?;
    let inner = rest.strip_suffix(')')?;
    let name = name.trim();
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some((name, inner.trim()))
}

/// A range PSF's boundaries: numbers, or strings compared byte-wise. In JSON, an array of
/// numbers or of strings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Boundaries {
    /// Numeric boundaries: numbers are bucketed, other values have no bucket.
    Numbers(Vec<f64>),
    /// String boundaries: strings are bucketed in byte order, other values have none.
    Strings(Vec<String>),
}

impl Boundaries {
    /// How many boundaries (the buckets are one more).
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Boundaries::Numbers(b) => b.len(),
            Boundaries::Strings(b) => b.len(),
        }
    }

    /// True when there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Vec<f64>> for Boundaries {
    fn from(boundaries: Vec<f64>) -> Self {
        Boundaries::Numbers(boundaries)
    }
}

impl From<Vec<String>> for Boundaries {
    fn from(boundaries: Vec<String>) -> Self {
        Boundaries::Strings(boundaries)
    }
}

/// The buckets of a [`PsfKind::Range`]: bucket 0 below the first boundary, bucket `i` from
/// boundary `i - 1` (included) to boundary `i` (excluded), the last one from the last boundary up.
#[derive(Debug, Clone, PartialEq)]
pub enum RangeBuckets {
    /// Numbers split at ascending finite boundaries; other values have no bucket.
    Numbers(Vec<f64>),
    /// Strings split at ascending boundaries in byte order; other values have no bucket.
    Strings(Vec<String>),
    /// Instants ([`crate::timestamp`]): strings naming one ([`parse_timestamp`]) and epoch
    /// numbers in `unit`; other values (and strings naming no instant) have no bucket.
    Time {
        /// Where the buckets begin.
        edges: TimeEdges,
        /// The unit of epoch numbers.
        unit: EpochUnit,
    },
}

/// Where a timestamp range PSF's buckets begin.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeEdges {
    /// At these ascending instants (microseconds since the epoch).
    At(Vec<i64>),
    /// Every `width` microseconds from the epoch: instant `t` is in bucket
    /// `⌊t / width⌋ + 2³¹`, clamped to `u32` (`"1h"` buckets span ±245,000 years).
    Every(i64),
    /// One bucket per calendar week (from Monday), month, quarter or year, in UTC
    /// ([`TruncUnit::index`] + 2³¹): what `date_trunc(unit, t)` groups together.
    Calendar(TruncUnit),
}

/// At most this many chains are read for one range condition: a wider range of a timestamp
/// PSF's fixed-width buckets (or of a PSF with thousands of boundaries) is scanned instead.
pub const MAX_RANGE_CHAINS: u32 = 4096;

impl RangeBuckets {
    fn from_spec(boundaries: Option<&Boundaries>, value_type: Option<RangeType>, bucket: Option<&str>, unit: Option<EpochUnit>) -> std::result::Result<Self, String> {
        if value_type != Some(RangeType::Timestamp) && (bucket.is_some() || unit.is_some()) {
            return Err("`bucket` and `unit` belong to a range PSF with \"type\": \"timestamp\"".into());
        }
        let buckets = match (value_type, boundaries, bucket) {
            (Some(RangeType::Timestamp), Some(_), Some(_)) => return Err("give `boundaries` or `bucket`, not both".into()),
            (Some(RangeType::Timestamp), None, None) => {
                return Err("a timestamp range PSF needs `boundaries` (instants) or `bucket` (a width such as \"1h\")".into())
            }
            (Some(RangeType::Timestamp), None, Some(width)) => {
                let edges = match TruncUnit::named(width) {
                    Some(TruncUnit::Fixed(width)) => TimeEdges::Every(width),
                    Some(calendar) => TimeEdges::Calendar(calendar),
                    None => TimeEdges::Every(parse_duration(width).map_err(|e| {
                        format!("{e}; or a unit of the calendar: \"week\" (from Monday), \"month\", \"quarter\", \"year\"")
                    })?),
                };
                RangeBuckets::Time { edges, unit: unit.unwrap_or_default() }
            }
            (Some(RangeType::Timestamp), Some(list), None) => {
                let unit = unit.unwrap_or_default();
                let edges = match list {
                    Boundaries::Strings(b) => b
                        .iter()
                        .map(|text| parse_timestamp(text).ok_or_else(|| format!("boundary `{text}` is not a timestamp (RFC 3339, e.g. 2021-07-21T10:00:00Z)")))
                        .collect::<std::result::Result<Vec<_>, _>>()?,
                    Boundaries::Numbers(b) => b.iter().map(|n| unit.at(*n).ok_or_else(|| format!("boundary {n} is not a number"))).collect::<std::result::Result<Vec<_>, _>>()?,
                };
                RangeBuckets::Time { edges: TimeEdges::At(edges), unit }
            }
            (_, None, _) => return Err("a range PSF needs `boundaries`".into()),
            (Some(RangeType::Number), Some(Boundaries::Strings(_)), _) | (Some(RangeType::String), Some(Boundaries::Numbers(_)), _) => {
                return Err(format!("the boundaries are not of the PSF's type {value_type:?}"))
            }
            (_, Some(Boundaries::Numbers(b)), _) => RangeBuckets::Numbers(b.clone()),
            (_, Some(Boundaries::Strings(b)), _) => RangeBuckets::Strings(b.clone()),
        };
        let (count, ascending) = match &buckets {
            RangeBuckets::Numbers(b) => (b.len(), b.iter().all(|b| b.is_finite()) && b.windows(2).all(|w| w[0] < w[1])),
            RangeBuckets::Strings(b) => (b.len(), b.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes())),
            RangeBuckets::Time { edges: TimeEdges::At(b), .. } => (b.len(), b.windows(2).all(|w| w[0] < w[1])),
            RangeBuckets::Time { edges: TimeEdges::Every(_) | TimeEdges::Calendar(_), .. } => (1, true),
        };
        if count == 0 {
            return Err("a range PSF needs at least one boundary".into());
        }
        if !ascending {
            return Err(format!(
                "boundaries must be strictly ascending (numbers finite; strings in byte order; timestamps in time), got {boundaries:?}"
            ));
        }
        Ok(buckets)
    }

    fn to_spec(&self, field: String) -> PsfSpec {
        match self {
            RangeBuckets::Numbers(b) => PsfSpec::range(&field, b.clone()),
            RangeBuckets::Strings(b) => PsfSpec::range(&field, b.clone()),
            RangeBuckets::Time { edges, unit } => {
                let (boundaries, bucket) = match edges {
                    TimeEdges::At(b) => (Some(Boundaries::Strings(b.iter().map(|t| format_timestamp(*t)).collect())), None),
                    TimeEdges::Every(width) => (None, Some(format_duration(*width))),
                    TimeEdges::Calendar(calendar) => (None, Some(calendar.name().to_owned())),
                };
                PsfSpec::Range { field, boundaries, value_type: Some(RangeType::Timestamp), bucket, unit: Some(*unit) }
            }
        }
    }

    /// The highest bucket number.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)]
    pub fn last(&self) -> u32 {
        match self {
            RangeBuckets::Numbers(b) => b.len() as u32,
            RangeBuckets::Strings(b) => b.len() as u32,
            RangeBuckets::Time { edges: TimeEdges::At(b), .. } => b.len() as u32,
            RangeBuckets::Time { edges: TimeEdges::Every(_) | TimeEdges::Calendar(_), .. } => u32::MAX,
        }
    }

    /// The bucket of a record's value, or `None` if the value is not of the buckets' type (a
    /// number for numeric boundaries, a string for string ones, an instant for timestamps).
    #[must_use]
    #[allow(clippy::cast_possible_truncation)]
    pub fn bucket(&self, value: &FieldValue<'_>) -> Option<u32> {
        match (self, value) {
            (RangeBuckets::Numbers(boundaries), value) => {
                let v = value.as_f64()?;
                if v.is_nan() {
                    return None;
                }
                Some(boundaries.partition_point(|b| *b <= v) as u32)
            }
            (RangeBuckets::Strings(boundaries), FieldValue::Str(s)) => {
                Some(boundaries.partition_point(|b| b.as_bytes() <= s.as_bytes()) as u32)
            }
            (RangeBuckets::Strings(_), _) => None,
            (RangeBuckets::Time { edges, .. }, FieldValue::Str(s)) => Some(edges.bucket(parse_timestamp(s)?)),
            (RangeBuckets::Time { edges, unit }, value) => Some(edges.bucket(unit.at(value.as_f64()?)?)),
        }
    }

    /// The bucket of a filter's literal: every value the filter language orders at or below
    /// (above) the literal is in this bucket or a lower (higher) one. `None` when no value
    /// the literal compares with has a bucket here: a string literal against timestamp buckets
    /// (the filter compares strings as text, the buckets as instants), a timestamp literal
    /// against numeric or string boundaries, `NULL` and booleans.
    #[must_use]
    pub fn literal_bucket(&self, literal: &Literal) -> Option<u32> {
        match (self, literal) {
            (RangeBuckets::Time { edges, .. }, Literal::Timestamp(t)) => Some(edges.bucket(*t)),
            (RangeBuckets::Time { .. }, Literal::Str(_)) | (_, Literal::Timestamp(_)) => None,
            (_, literal) => self.bucket(&literal.as_field_value()),
        }
    }
}

impl RangeBuckets {
    /// Whether `literal` is where its bucket begins — every value the filter orders below it
    /// is in a lower bucket — so that `< literal` needs only the buckets below
    /// [`Self::literal_bucket`]'s: a `TIMESTAMP` literal on an edge of timestamp buckets (the
    /// hour of `"1h"`, the first of the month of `"month"`). Other buckets answer `false`
    /// (numbers order ints and floats through a rounding).
    #[must_use]
    pub fn begins_bucket(&self, literal: &Literal) -> bool {
        match (self, literal) {
            (RangeBuckets::Time { edges, .. }, Literal::Timestamp(t)) => match edges {
                TimeEdges::At(edges) => edges.binary_search(t).is_ok(),
                // A bucket number clamped to 0 or `u32::MAX` holds every instant beyond it too
                // (`"1ms"` buckets clamp outside ±24 days of the epoch): not an edge then.
                TimeEdges::Every(width) => t.rem_euclid(*width) == 0 && TimeEdges::unclamped(t.div_euclid(*width)),
                TimeEdges::Calendar(calendar) => calendar.floor(*t) == *t && TimeEdges::unclamped(calendar.index(*t)),
            },
            _ => false,
        }
    }
}

impl TimeEdges {
    /// Whether the bucket of unit number `index` ([`Self::bucket`]: `index + 2³¹`) is not
    /// clamped at 0, nor at `u32::MAX` where later instants' would be clamped into it too.
    fn unclamped(index: i64) -> bool {
        (1..i64::from(u32::MAX)).contains(&index.saturating_add(1 << 31))
    }

    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn bucket(&self, instant: i64) -> u32 {
        match self {
            TimeEdges::At(edges) => edges.partition_point(|e| *e <= instant) as u32,
            TimeEdges::Every(width) => (instant.div_euclid(*width) + (1 << 31)).clamp(0, i64::from(u32::MAX)) as u32,
            TimeEdges::Calendar(calendar) => (calendar.index(instant) + (1 << 31)).clamp(0, i64::from(u32::MAX)) as u32,
        }
    }
}

/// A registered PSF with its safe boundaries and chain statistics.
#[derive(Debug)]
pub struct Psf {
    /// Its id (the key pointers' PSF id).
    pub id: PsfId,
    /// Its name, unique within the table among registered PSFs.
    pub name: String,
    /// What it computes.
    pub kind: PsfKind,
    safe_register: AtomicU64,
    safe_deregister: AtomicU64,
    /// Where the PSF's backfill has reached ([`backfill`]): every record in
    /// `[backfilled_from, safe register address)` is in its sorted runs. [`NOT_YET`] without
    /// a backfill.
    backfilled_from: AtomicU64,
    key_pointers: AtomicU64,
}

/// Hash of a property `(psf, canonical value)`; selects the bucket and tag of its chain
/// (FishStore §4), and orders a backfill's runs.
#[must_use]
pub fn property_hash(psf: PsfId, canonical: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(canonical, u64::from(psf))
}

/// Value of an unset safe register address (registration still in PREPARE).
pub const NOT_YET: LogAddress = LogAddress::MAX;

impl Psf {
    /// Safe register address: every record at or above it (and below the deregister
    /// address) is in this PSF's chains. [`NOT_YET`] while registration is under way.
    #[must_use]
    pub fn safe_register_address(&self) -> LogAddress {
        LogAddress::new(self.safe_register.load(Ordering::Acquire))
    }

    /// Safe deregister address; [`NOT_YET`] ([`LogAddress::MAX`]) while the PSF is active.
    #[must_use]
    pub fn safe_deregister_address(&self) -> LogAddress {
        LogAddress::new(self.safe_deregister.load(Ordering::Acquire))
    }

    /// True while the PSF indexes new records.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.safe_deregister_address() == NOT_YET
    }

    /// The log range `[from, to)` in which this PSF is complete, if any: its chains from
    /// the safe register address up, and below it the records its backfill has indexed
    /// ([`Self::backfilled_from`]).
    #[must_use]
    pub fn coverage(&self) -> Option<(LogAddress, LogAddress)> {
        let register = self.safe_register_address();
        (register != NOT_YET).then(|| (register.min(self.backfilled_from()), self.safe_deregister_address()))
    }

    /// The lowest address the PSF's backfill has indexed from ([`backfill`]: the records
    /// in `[backfilled_from, safe register address)` are in its sorted runs, not in its
    /// chains); [`NOT_YET`] when nothing was backfilled.
    #[must_use]
    pub fn backfilled_from(&self) -> LogAddress {
        LogAddress::new(self.backfilled_from.load(Ordering::Acquire))
    }

    /// Publishes the backfill's progress ([`NOT_YET`]: none, its runs are gone).
    pub(crate) fn set_backfilled_from(&self, address: LogAddress) {
        self.backfilled_from.store(address.get(), Ordering::Release);
    }

    /// Number of key pointers written for this PSF.
    #[must_use]
    pub fn key_pointer_count(&self) -> u64 {
        self.key_pointers.load(Ordering::Relaxed)
    }

    pub(crate) fn count_key_pointer(&self) {
        self.key_pointers.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_key_pointers(&self, count: u64) {
        self.key_pointers.fetch_add(count, Ordering::Relaxed);
    }

    /// Sets the boundaries (for recovery from a checkpoint).
    pub fn restore_boundaries(&self, register: LogAddress, deregister: LogAddress) {
        self.safe_register.store(register.get(), Ordering::Release);
        self.safe_deregister.store(deregister.get(), Ordering::Release);
    }
}

/// How an active PSF is evaluated against the fields of interest of a batch.
#[derive(Debug, Clone)]
enum Evaluator {
    Projection(usize, Option<expr::Function>),
    Predicate(BoundExpr),
    Range(usize, RangeBuckets),
    Composite(Vec<usize>),
}

/// A PSF of the current set with its evaluator bound to the snapshot's fields.
#[derive(Debug, Clone)]
pub struct ActivePsf {
    /// The PSF.
    pub psf: Arc<Psf>,
    evaluator: Evaluator,
}

/// Where an evaluated PSF value should be stored in the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValuePlacement {
    /// Fits in the key pointer (`value_word`).
    Inline(u64),
    /// A string borrowed from the payload: byte offset and length of its content.
    Payload(u32, u32),
    /// The canonical encoding goes into the value region.
    ValueRegion,
}

impl ActivePsf {
    /// Evaluates the PSF on one record's field values (in the snapshot's field order).
    /// On a property, writes its canonical encoding into `canonical` (cleared first)
    /// and returns where to store it; `payload` is the record's bytes, for offsets.
    pub fn evaluate(&self, values: &[FieldValue<'_>], payload: &[u8], canonical: &mut Vec<u8>) -> Option<ValuePlacement> {
        canonical.clear();
        match &self.evaluator {
            Evaluator::Projection(field, None) => scalar_property(&values[*field], payload, canonical),
            Evaluator::Projection(field, Some(function)) => scalar_property(&function.apply(&values[*field]), payload, canonical),
            Evaluator::Predicate(expr) => (expr.eval(values) == Some(true)).then(|| {
                canonical.push(tag::TRUE);
                ValuePlacement::Inline(0)
            }),
            Evaluator::Range(field, buckets) => buckets.bucket(&values[*field]).map(|bucket| {
                encode_bucket(bucket, canonical);
                ValuePlacement::Inline(u64::from(bucket))
            }),
            Evaluator::Composite(fields) => {
                if fields.iter().any(|f| !is_indexable_scalar(&values[*f])) {
                    return None;
                }
                encode_composite(fields.iter().map(|f| &values[*f]), canonical).then_some(ValuePlacement::ValueRegion)
            }
        }
    }
}

/// Whether a value can be a PSF property (and a primary key): a string, number or boolean.
pub(crate) fn is_indexable_scalar(value: &FieldValue<'_>) -> bool {
    matches!(value, FieldValue::Bool(_) | FieldValue::Int(_) | FieldValue::Float(_) | FieldValue::Str(_))
}

/// Canonical property of a projected scalar; `None` for missing, null, objects, arrays.
fn scalar_property(value: &FieldValue<'_>, payload: &[u8], canonical: &mut Vec<u8>) -> Option<ValuePlacement> {
    if !is_indexable_scalar(value) {
        return None;
    }
    encode_canonical(value, canonical);
    Some(match value {
        FieldValue::Str(std::borrow::Cow::Borrowed(s)) => {
            let start = payload.as_ptr() as usize;
            let at = s.as_ptr() as usize;
            if at >= start && at + s.len() <= start + payload.len() {
                #[allow(clippy::cast_possible_truncation)]
                ValuePlacement::Payload((at - start) as u32, s.len() as u32)
            } else {
                ValuePlacement::ValueRegion
            }
        }
        FieldValue::Str(_) => ValuePlacement::ValueRegion,
        _ => {
            let mut word = [0u8; 8];
            let data = &canonical[1..];
            word[..data.len()].copy_from_slice(data);
            ValuePlacement::Inline(u64::from_le_bytes(word))
        }
    })
}

/// An immutable view of the PSF set that ingestion batches evaluate.
#[derive(Debug, Default)]
pub struct PsfSnapshot {
    /// Increases with every change of the set.
    pub version: u64,
    /// The active PSFs.
    pub active: Vec<ActivePsf>,
    /// Fields of interest: the union of the active PSFs' fields.
    pub fields: FieldSet,
}

impl PsfSnapshot {
    fn evaluator(psf: &Psf, fields: &mut FieldSet) -> Evaluator {
        match &psf.kind {
            PsfKind::Projection { field, function } => Evaluator::Projection(fields.insert(field), *function),
            PsfKind::Predicate { expr } => Evaluator::Predicate(expr.bind(fields)),
            PsfKind::Range { field, buckets } => Evaluator::Range(fields.insert(field), buckets.clone()),
            PsfKind::Composite { fields: paths } => Evaluator::Composite(paths.iter().map(|p| fields.insert(p)).collect()),
        }
    }

    /// The active ones of `psfs` (ingestion's set; a backfill's group of PSFs) with their
    /// evaluators over the union of their fields of interest.
    fn build(version: u64, psfs: &[Arc<Psf>]) -> Self {
        let mut fields = FieldSet::new();
        let active = psfs
            .iter()
            .filter(|p| p.is_active())
            .map(|psf| ActivePsf { psf: Arc::clone(psf), evaluator: Self::evaluator(psf, &mut fields) })
            .collect();
        Self { version, active, fields }
    }
}

/// Phases of the registration state machine (FishStore §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsfPhase {
    /// No change under way.
    Rest,
    /// A new PSF set is published; batches still running may use the old one.
    Prepare,
    /// Every batch uses the new set; boundaries are being fixed.
    Pending,
}

/// The PSFs of one table.
#[derive(Debug)]
pub struct PsfRegistry {
    all: RwLock<Vec<Arc<Psf>>>,
    snapshot: RwLock<Arc<PsfSnapshot>>,
    phase: Mutex<PsfPhase>,
    /// Ingestion batches hold this epoch for their whole duration.
    epoch: LightEpoch,
    change: Mutex<()>,
}

impl Default for PsfRegistry {
    fn default() -> Self {
        Self {
            all: RwLock::new(Vec::new()),
            snapshot: RwLock::new(Arc::new(PsfSnapshot::default())),
            phase: Mutex::new(PsfPhase::Rest),
            epoch: LightEpoch::new(),
            change: Mutex::new(()),
        }
    }
}

impl PsfRegistry {
    /// The epoch that ingestion batches hold while they use a snapshot.
    #[must_use]
    pub fn epoch(&self) -> &LightEpoch {
        &self.epoch
    }

    /// The current PSF set. Ingestion takes it once per batch, after protecting
    /// [`Self::epoch`].
    #[must_use]
    pub fn snapshot(&self) -> Arc<PsfSnapshot> {
        Arc::clone(&self.snapshot.read())
    }

    /// The current phase.
    #[must_use]
    pub fn phase(&self) -> PsfPhase {
        *self.phase.lock()
    }

    /// Every PSF ever registered (deregistered ones included), by id.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Psf>> {
        self.all.read().clone()
    }

    /// The PSF with `id`.
    #[must_use]
    pub fn get(&self, id: PsfId) -> Option<Arc<Psf>> {
        self.all.read().get(id as usize).cloned()
    }

    /// The registered (active) PSF named `name`.
    #[must_use]
    pub fn find_active(&self, name: &str) -> Option<Arc<Psf>> {
        self.all.read().iter().find(|p| p.is_active() && p.name == name).cloned()
    }

    fn publish(&self) {
        let all = self.all.read().clone();
        let mut snapshot = self.snapshot.write();
        *snapshot = Arc::new(PsfSnapshot::build(snapshot.version + 1, &all));
    }

    /// Waits until every batch that may have taken a snapshot before now has ended.
    fn wait_for_batches(&self) {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&done);
        self.epoch.bump_with(move || flag.store(true, Ordering::Release));
        while !done.load(Ordering::Acquire) {
            self.epoch.try_drain();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Registers a PSF while ingestion may run; returns it with its safe register
    /// address set. `tail` reads the log tail. `persist` is called with every PSF
    /// (this one included) twice: once its id is taken, before any record can carry a
    /// key pointer for it (a failure there abandons the registration), and once its
    /// safe register address is set.
    ///
    /// # Errors
    /// [`Error::PsfExists`] if an active PSF has that name; what `persist` returns.
    pub fn register(
        &self,
        name: &str,
        kind: PsfKind,
        tail: impl Fn() -> LogAddress,
        persist: impl Fn(&[Arc<Psf>]) -> Result<()>,
    ) -> Result<Arc<Psf>> {
        let _change = self.change.lock();
        if self.find_active(name).is_some() {
            return Err(Error::PsfExists(name.to_owned()));
        }
        let psf = {
            let mut all = self.all.write();
            let id = PsfId::try_from(all.len()).map_err(|_| Error::InvalidPsf {
                name: name.to_owned(),
                reason: "too many PSFs".into(),
            })?;
            let psf = Arc::new(Psf {
                id,
                name: name.to_owned(),
                kind,
                safe_register: AtomicU64::new(NOT_YET.get()),
                safe_deregister: AtomicU64::new(NOT_YET.get()),
                backfilled_from: AtomicU64::new(NOT_YET.get()),
                key_pointers: AtomicU64::new(0),
            });
            all.push(Arc::clone(&psf));
            if let Err(e) = persist(&all) {
                all.pop();
                return Err(e);
            }
            psf
        };
        *self.phase.lock() = PsfPhase::Prepare;
        self.publish();
        self.wait_for_batches();
        *self.phase.lock() = PsfPhase::Pending;
        psf.safe_register.store(tail().get(), Ordering::Release);
        *self.phase.lock() = PsfPhase::Rest;
        persist(&self.all())?;
        Ok(psf)
    }

    /// Replaces the (empty) registry with PSFs recovered from the table's metadata:
    /// `(name, kind, safe register address, safe deregister address)` in id order, with
    /// [`NOT_YET`] for unset boundaries. A PSF whose registration never completed keeps
    /// its id but covers nothing (deregistered at its register address).
    pub fn restore(&self, psfs: Vec<(String, PsfKind, LogAddress, LogAddress)>) {
        let _change = self.change.lock();
        let mut all = self.all.write();
        all.clear();
        for (id, (name, kind, register, deregister)) in (0..).zip(psfs) {
            let deregister = if register == NOT_YET { LogAddress::ZERO } else { deregister };
            all.push(Arc::new(Psf {
                id,
                name,
                kind,
                safe_register: AtomicU64::new(register.get()),
                safe_deregister: AtomicU64::new(deregister.get()),
                backfilled_from: AtomicU64::new(NOT_YET.get()),
                key_pointers: AtomicU64::new(0),
            }));
        }
        drop(all);
        self.publish();
    }

    /// Deregisters the active PSF `name`; returns it with its safe deregister address.
    ///
    /// # Errors
    /// [`Error::PsfNotFound`].
    pub fn deregister(
        &self,
        name: &str,
        tail: impl Fn() -> LogAddress,
        persist: impl Fn(&[Arc<Psf>]) -> Result<()>,
    ) -> Result<Arc<Psf>> {
        let _change = self.change.lock();
        let psf = self.find_active(name).ok_or_else(|| Error::PsfNotFound(name.to_owned()))?;
        *self.phase.lock() = PsfPhase::Prepare;
        psf.safe_deregister.store(tail().get(), Ordering::Release);
        self.publish();
        *self.phase.lock() = PsfPhase::Pending;
        self.wait_for_batches();
        *self.phase.lock() = PsfPhase::Rest;
        persist(&self.all())?;
        Ok(psf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_buckets_follow_the_boundaries() {
        let b = RangeBuckets::Numbers(vec![0.0, 100.0, 1000.0]);
        let bucket = |v: FieldValue<'_>| b.bucket(&v);
        assert_eq!(bucket(FieldValue::Int(-1)), Some(0));
        assert_eq!(bucket(FieldValue::Int(0)), Some(1));
        assert_eq!(bucket(FieldValue::Float(99.9)), Some(1));
        assert_eq!(bucket(FieldValue::Int(100)), Some(2));
        assert_eq!(bucket(FieldValue::Int(5000)), Some(3));
        assert_eq!(bucket(FieldValue::Str("5".into())), None);
        let hours = RangeBuckets::Strings(vec!["2021-07-21T10".to_owned(), "2021-07-21T11".to_owned()]);
        let bucket = |v: FieldValue<'_>| hours.bucket(&v);
        assert_eq!(bucket(FieldValue::Str("2021-07-21T09:59:59Z".into())), Some(0));
        assert_eq!(bucket(FieldValue::Str("2021-07-21T10".into())), Some(1));
        assert_eq!(bucket(FieldValue::Str("2021-07-21T10:30:00Z".into())), Some(1));
        assert_eq!(bucket(FieldValue::Str("2021-07-21T11:00:00Z".into())), Some(2));
        assert_eq!(bucket(FieldValue::Int(5)), None);
    }

    #[test]
    fn timestamp_buckets_hold_instants_whatever_their_spelling() {
        let spec: PsfSpec = serde_json::from_str(r#"{"kind":"range","field":"t","type":"timestamp","bucket":"1h","unit":"ms"}"#).unwrap();
        let PsfKind::Range { buckets, .. } = PsfKind::from_spec("hour", &spec).unwrap() else { panic!() };
        let bucket = |v: FieldValue<'_>| buckets.bucket(&v);
        let ten = bucket(FieldValue::Str("2021-07-21T10:00:00Z".into())).unwrap();
        assert_eq!(bucket(FieldValue::Str("2021-07-21T12:59:59.999+02:00".into())), Some(ten));
        assert_eq!(bucket(FieldValue::Str("2021-07-21 10:30:00".into())), Some(ten));
        assert_eq!(bucket(FieldValue::Int(1_626_861_600_000)), Some(ten));
        assert_eq!(bucket(FieldValue::Float(1_626_865_199_999.0)), Some(ten));
        assert_eq!(bucket(FieldValue::Str("2021-07-21T11:00:00Z".into())), Some(ten + 1));
        assert_eq!(bucket(FieldValue::Str("2021-07-21T09:59:59Z".into())), Some(ten - 1));
        assert_eq!(bucket(FieldValue::Str("yesterday".into())), None);
        assert_eq!(bucket(FieldValue::Bool(true)), None);
        // Planning: a timestamp literal has the instant's bucket; a string literal none (the
        // filter orders strings as text); numbers their instant in the unit.
        assert_eq!(buckets.literal_bucket(&Literal::Timestamp(1_626_861_600_000_000)), Some(ten));
        assert_eq!(buckets.literal_bucket(&Literal::Str("2021-07-21T10:00:00Z".into())), None);
        assert_eq!(buckets.literal_bucket(&Literal::Int(1_626_861_600_000)), Some(ten));
        assert_eq!(RangeBuckets::Numbers(vec![1.0]).literal_bucket(&Literal::Timestamp(0)), None);
        assert_eq!(serde_json::to_string(&PsfKind::from_spec("hour", &spec).unwrap().to_spec()).unwrap(), r#"{"kind":"range","field":"t","type":"timestamp","bucket":"1h","unit":"ms"}"#);
        let at: PsfSpec = serde_json::from_str(r#"{"kind":"range","field":"t","type":"timestamp","boundaries":["2021-07-21T10:00:00Z","2021-07-21 11:00:00"]}"#).unwrap();
        let kind = PsfKind::from_spec("at", &at).unwrap();
        let PsfKind::Range { buckets, .. } = &kind else { panic!() };
        assert_eq!(buckets.bucket(&FieldValue::Str("2021-07-21T10:59:59Z".into())), Some(1));
        assert_eq!(buckets.bucket(&FieldValue::Int(1_626_865_200)), Some(2));
        assert_eq!(PsfKind::from_spec("at", &kind.to_spec()).unwrap(), kind);
        // Calendar buckets: one per month (what date_trunc('month', t) groups), however spelled.
        let months: PsfSpec = serde_json::from_str(r#"{"kind":"range","field":"t","type":"timestamp","bucket":"Month"}"#).unwrap();
        let kind = PsfKind::from_spec("month", &months).unwrap();
        let PsfKind::Range { buckets, .. } = &kind else { panic!() };
        let month = |text: &str| buckets.bucket(&FieldValue::Str(text.to_owned().into())).unwrap();
        assert_eq!(month("2021-07-01T00:00:00Z"), month("2021-07-31T23:59:59.999Z"));
        assert_eq!(month("2021-07-31T23:30:00-01:00"), month("2021-08-01T00:00:00Z"));
        assert_eq!(month("2021-06-30T23:59:59Z") + 1, month("2021-07-01T00:00:00Z"));
        assert_eq!(month("2020-12-15T00:00:00Z") + 1, month("2021-01-15T00:00:00Z"));
        assert_eq!(serde_json::to_string(&kind.to_spec()).unwrap(), r#"{"kind":"range","field":"t","type":"timestamp","bucket":"month","unit":"s"}"#);
        assert_eq!(PsfKind::from_spec("month", &kind.to_spec()).unwrap(), kind);
        let at = |text: &str| Literal::Timestamp(parse_timestamp(text).unwrap());
        assert!(buckets.begins_bucket(&at("2021-07-01T00:00:00Z")));
        assert!(!buckets.begins_bucket(&at("2021-07-01T00:00:00.000001Z")));
        assert!(!buckets.begins_bucket(&Literal::Str("2021-07-01T00:00:00Z".into())));
        // Millisecond buckets clamp outside ±24 days of the epoch: 2021's instants share the
        // last bucket, so `< 2021-07-01` must read it.
        let millis: PsfSpec = serde_json::from_str(r#"{"kind":"range","field":"t","type":"timestamp","bucket":"1ms"}"#).unwrap();
        let PsfKind::Range { buckets: clamped, .. } = PsfKind::from_spec("ms", &millis).unwrap() else { panic!() };
        assert!(!clamped.begins_bucket(&at("2021-07-01T00:00:00Z")));
        assert!(clamped.begins_bucket(&at("1970-01-02T00:00:00Z")));
        assert!(!clamped.begins_bucket(&at("1969-01-01T00:00:00Z")));
        let hours: PsfSpec = serde_json::from_str(r#"{"kind":"range","field":"t","type":"timestamp","bucket":"hour"}"#).unwrap();
        let hourly = PsfKind::from_spec("hour", &hours).unwrap();
        assert!(matches!(&hourly, PsfKind::Range { buckets: RangeBuckets::Time { edges: TimeEdges::Every(3_600_000_000), .. }, .. }));
        // Projections of substrings are written back as they are read (table.json at a restart).
        for field in ["substr(repo.name, 1, 6)", "substr(a, -3)"] {
            let kind = PsfKind::from_spec("p", &PsfSpec::Projection { field: field.into() }).unwrap();
            assert_eq!(kind.to_spec(), PsfSpec::Projection { field: field.into() });
        }
        assert!(PsfKind::from_spec("p", &PsfSpec::Projection { field: "substr(a, x)".into() }).is_err());
        // A PSF over date_trunc is named for what it is.
        let truncated = PsfSpec::Projection { field: "date_trunc('month', created_at)".into() };
        let error = PsfKind::from_spec("m", &truncated).unwrap_err().to_string();
        assert!(error.contains(r#""field": "created_at", "type": "timestamp", "bucket": "month""#), "{error}");
        for bad in [
            r#"{"kind":"range","field":"t","type":"timestamp"}"#,
            r#"{"kind":"range","field":"t","type":"timestamp","bucket":"1h","boundaries":["2021-07-21"]}"#,
            r#"{"kind":"range","field":"t","type":"timestamp","bucket":"1y"}"#,
            r#"{"kind":"range","field":"t","type":"timestamp","bucket":"fortnight"}"#,
            r#"{"kind":"range","field":"t","type":"timestamp","boundaries":["not a time"]}"#,
            r#"{"kind":"range","field":"t","type":"timestamp","boundaries":["2021-07-22","2021-07-21"]}"#,
            r#"{"kind":"range","field":"t","boundaries":[1],"bucket":"1h"}"#,
            r#"{"kind":"range","field":"t","type":"number","boundaries":["a"]}"#,
        ] {
            let spec: PsfSpec = serde_json::from_str(bad).unwrap();
            assert!(matches!(PsfKind::from_spec("r", &spec), Err(Error::InvalidPsf { .. })), "{bad}");
        }
    }

    #[test]
    fn specs_are_validated_and_round_trip() {
        let spec = PsfSpec::range("user.followers_count", vec![0.0, 100.0]);
        assert_eq!(PsfKind::from_spec("r", &spec).unwrap().to_spec(), spec);
        let bad = PsfSpec::range("a", vec![5.0, 1.0]);
        assert!(matches!(PsfKind::from_spec("r", &bad), Err(Error::InvalidPsf { .. })));
        let strings: PsfSpec = serde_json::from_str(r#"{"kind":"range","field":"created_at","boundaries":["2021-07-21T10","2021-07-21T11"]}"#).unwrap();
        assert!(matches!(&strings, PsfSpec::Range { boundaries: Some(Boundaries::Strings(b)), .. } if b.len() == 2));
        assert_eq!(serde_json::to_string(&strings).unwrap(), r#"{"kind":"range","field":"created_at","boundaries":["2021-07-21T10","2021-07-21T11"]}"#);
        let unordered = PsfSpec::range("a", vec!["b".to_owned(), "a".to_owned()]);
        assert!(matches!(PsfKind::from_spec("r", &unordered), Err(Error::InvalidPsf { .. })));
        assert!(serde_json::from_str::<PsfSpec>(r#"{"kind":"range","field":"a","boundaries":[1,"b"]}"#).is_err());
        let one = PsfSpec::Composite { fields: vec!["a".into()] };
        assert!(matches!(PsfKind::from_spec("c", &one), Err(Error::InvalidPsf { .. })));
        let json = r#"{"kind":"predicate","expr":"type = 'IssuesEvent'"}"#;
        let parsed: PsfSpec = serde_json::from_str(json).unwrap();
        assert!(matches!(PsfKind::from_spec("p", &parsed).unwrap(), PsfKind::Predicate { .. }));
    }

    #[test]
    fn registration_sets_boundaries_in_order() {
        let registry = PsfRegistry::default();
        let kind = PsfKind::Projection { field: FieldPath::parse("id").unwrap(), function: None };
        let psf = registry.register("by_id", kind.clone(), || LogAddress::new(640), |_| Ok(())).unwrap();
        assert_eq!(psf.coverage(), Some((LogAddress::new(640), NOT_YET)));
        assert!(matches!(registry.register("by_id", kind, || LogAddress::ZERO, |_| Ok(())), Err(Error::PsfExists(_))));
        assert_eq!(registry.snapshot().active.len(), 1);
        registry.deregister("by_id", || LogAddress::new(1280), |_| Ok(())).unwrap();
        assert_eq!(psf.coverage(), Some((LogAddress::new(640), LogAddress::new(1280))));
        assert!(registry.snapshot().active.is_empty());
        assert!(matches!(registry.deregister("by_id", || LogAddress::ZERO, |_| Ok(())), Err(Error::PsfNotFound(_))));
        assert_eq!(registry.phase(), PsfPhase::Rest);
    }
}
