//! FishStore's parser interface (§5.1): a batch of records and the current *fields of
//! interest* go in; for every record, the values of those fields (borrowing the record's
//! bytes, so payload offsets follow from them) come out. Only the fields of interest are
//! materialised; the rest of each record is validated and skipped.

use crate::path::FieldPath;
use crate::value::FieldValue;

mod adaptive;
mod ondemand;
mod simdjson;

pub use adaptive::{AdaptiveChoice, FullScanParser, MIN_SAMPLE_RECORDS, PROBE_MIN_RECORDS, SAMPLE_RECORDS};
pub use ondemand::OnDemandParser;
pub(crate) use ondemand::{number as number_value, unescape_into};
pub use simdjson::SimdjsonParser;

/// An ordered set of field paths; a path's position is its field id within a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    paths: Vec<FieldPath>,
}

impl FieldSet {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `path` if absent; returns its field id either way.
    pub fn insert(&mut self, path: &FieldPath) -> usize {
        if let Some(id) = self.index_of(path) {
            return id;
        }
        self.paths.push(path.clone());
        self.paths.len() - 1
    }

    /// The field id of `path`, if present.
    #[must_use]
    pub fn index_of(&self, path: &FieldPath) -> Option<usize> {
        self.paths.iter().position(|p| p == path)
    }

    /// The paths, in field-id order.
    #[must_use]
    pub fn paths(&self) -> &[FieldPath] {
        &self.paths
    }

    /// Number of fields.
    #[must_use]
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// True when there are no fields.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

/// The output of [`RecordParser::parse_batch`]: for each record either its field values
/// (one per field of the [`FieldSet`], in field-id order) or the parse error.
#[derive(Debug, Default)]
pub struct ParsedBatch<'a> {
    field_count: usize,
    values: Vec<FieldValue<'a>>,
    /// For each record, `Ok(start index into values)` or the parse error message.
    records: Vec<Result<usize, String>>,
}

impl<'a> ParsedBatch<'a> {
    /// Empties the batch for reuse with `field_count` fields per record.
    pub fn reset(&mut self, field_count: usize) {
        self.field_count = field_count;
        self.values.clear();
        self.records.clear();
    }

    /// Appends a parsed record's values (exactly `field_count` of them).
    pub fn push_values<I: IntoIterator<Item = FieldValue<'a>>>(&mut self, values: I) {
        let start = self.values.len();
        self.values.extend(values);
        debug_assert_eq!(self.values.len() - start, self.field_count);
        self.records.push(Ok(start));
    }

    /// Moves every record of `other` (parsed with the same fields) to the end of this
    /// batch, leaving `other` empty.
    pub fn append(&mut self, other: &mut ParsedBatch<'a>) {
        debug_assert!(other.records.is_empty() || other.field_count == self.field_count);
        let offset = self.values.len();
        self.values.append(&mut other.values);
        self.records.extend(other.records.drain(..).map(|r| r.map(|start| start + offset)));
    }

    /// Appends a record that failed to parse.
    pub fn push_error(&mut self, message: String) {
        self.records.push(Err(message));
    }

    /// Number of records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when the batch holds no record.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The field values of record `index`, or its parse error.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn record(&self, index: usize) -> Result<&[FieldValue<'a>], &str> {
        match &self.records[index] {
            Ok(start) => Ok(&self.values[*start..*start + self.field_count]),
            Err(message) => Err(message),
        }
    }
}

/// FishStore's generic parser interface. Implementations must validate each record in
/// full (a record that is not exactly one JSON value, optionally surrounded by
/// whitespace, is an error) while materialising only the fields of interest.
pub trait RecordParser: Send {
    /// Parses `records` and fills `out` with one entry per record, in order.
    fn parse_batch<'a>(&mut self, records: &[&'a [u8]], fields: &FieldSet, out: &mut ParsedBatch<'a>);

    /// [`parse_batch`](Self::parse_batch) for records known to be valid JSON — the
    /// payloads of log records, which were validated in full when they were ingested. A
    /// parser may then skip what lies outside the fields of interest instead of
    /// validating it (FishStore §5.1: scans only need the fields of interest), and give
    /// any result for invalid input except undefined behaviour; given valid JSON, the
    /// values must be exactly those of `parse_batch`. Default: `parse_batch`.
    fn parse_trusted_batch<'a>(&mut self, records: &[&'a [u8]], fields: &FieldSet, out: &mut ParsedBatch<'a>) {
        self.parse_batch(records, fields, out);
    }

    /// A short name for logs and benchmarks (`"sonic-rs"`, `"simdjson-ondemand"`).
    fn name(&self) -> &'static str;
}

/// The default parser.
#[must_use]
pub fn default_parser() -> Box<dyn RecordParser> {
    Box::new(SimdjsonParser::new())
}

/// Test support shared by the parsers' test modules.
#[cfg(test)]
pub(crate) mod test_support {
    use std::borrow::Cow;
    use std::path::PathBuf;

    use proptest::prelude::*;
    use serde_json::Value;

    use super::FieldSet;
    use crate::path::FieldPath;
    use crate::value::FieldValue;

    /// The field set of `paths` (dotted paths, valid).
    pub(crate) fn field_set(paths: &[&str]) -> FieldSet {
        let mut set = FieldSet::new();
        for p in paths {
            set.insert(&FieldPath::parse(p).expect("valid path"));
        }
        set
    }

    /// Like `FieldValue::into_owned`, but keeps the variant (raw objects and arrays leak).
    pub(crate) fn owned(v: &FieldValue<'_>) -> FieldValue<'static> {
        match v {
            FieldValue::Missing => FieldValue::Missing,
            FieldValue::Null => FieldValue::Null,
            FieldValue::Bool(b) => FieldValue::Bool(*b),
            FieldValue::Int(i) => FieldValue::Int(*i),
            FieldValue::Float(f) => FieldValue::Float(*f),
            FieldValue::Str(s) => FieldValue::Str(Cow::Owned(s.to_string())),
            FieldValue::Object(s) => FieldValue::Object(Box::leak(s.to_string().into_boxed_str())),
            FieldValue::Array(s) => FieldValue::Array(Box::leak(s.to_string().into_boxed_str())),
        }
    }

    /// An owned string value.
    pub(crate) fn s(text: &str) -> FieldValue<'static> {
        FieldValue::Str(Cow::Owned(text.to_owned()))
    }

    /// JSON values whose keys come from a small alphabet, so that the test paths hit.
    pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
            any::<String>().prop_map(Value::String),
            "[a-c\"\\\\/é\u{1}\n😀]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(arb_key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(crate) fn arb_key() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "c", "q\"\n", "é/~", ""]).prop_map(str::to_owned)
    }

    /// The text of `data/github/events.ndjson` (NDJSON, 9,996 GitHub Archive events), or
    /// `None` (with a loud message) when `scripts/fetch-data.sh` has not fetched it — a
    /// failure instead when `SHOAL_REQUIRE_DATA=1`, as in `scripts/test.sh`.
    pub(crate) fn github_events_text() -> Option<String> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/github/events.ndjson");
        let Ok(data) = std::fs::read_to_string(&path) else {
            assert!(std::env::var("SHOAL_REQUIRE_DATA").as_deref() != Ok("1"), "{} is missing", path.display());
            eprintln!("\n!!!!!!!! SKIPPED: {} is missing (scripts/fetch-data.sh) !!!!!!!!\n", path.display());
            return None;
        };
        Some(data)
    }

    /// The JSONTestSuite `test_parsing` files (`y_`/`n_`/`i_*.json`), sorted: from
    /// `$SHOAL_JSON_TEST_SUITE`, else `../shared/data/JSONTestSuite/test_parsing` next to
    /// the repository. `None` (with a loud message) when absent — a failure instead when
    /// `SHOAL_REQUIRE_DATA=1`, as in `scripts/test.sh`.
    pub(crate) fn json_test_suite_files(who: &str) -> Option<Vec<PathBuf>> {
        let from_env = std::env::var_os("SHOAL_JSON_TEST_SUITE").map(PathBuf::from);
        let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/JSONTestSuite/test_parsing");
        let Some(dir) = from_env.into_iter().chain([default]).find(|dir| dir.is_dir()) else {
            assert!(
                std::env::var("SHOAL_REQUIRE_DATA").as_deref() != Ok("1"),
                "JSONTestSuite not found: set SHOAL_JSON_TEST_SUITE (scripts/json-test-suite.sh prints it)"
            );
            eprintln!(
                "\n!!!!!!!! JSONTestSuite NOT RUN for {who}: set SHOAL_JSON_TEST_SUITE to the test_parsing \
                 directory of https://github.com/nst/JSONTestSuite (scripts/json-test-suite.sh) !!!!!!!!\n"
            );
            return None;
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        entries.sort();
        assert!(entries.len() > 250, "only {} files in {}", entries.len(), dir.display());
        Some(entries)
    }
}
