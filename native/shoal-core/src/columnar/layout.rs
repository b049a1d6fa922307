//! Which columns of a columnar file hold which path, and what a path the file does not
//! list means there.
//!
//! A file stores, for every path of its records' inferred schema (object keys only, as
//! [`FieldPath`]s address them), one column per JSON scalar type that path held in the
//! file — the AsterixDB tuple compactor's union types (Alkowaileet et al., VLDB 2019,
//! §3.2): `"a": 1` and `"a": "1"` go to two columns, so that a filter keeps exactly its
//! three-valued meaning (`a = 1` is unknown on the string). In any row at most one of a
//! path's columns is non-null; none is when the path is missing or JSON `null` (which
//! filters, projections and aggregates treat alike).
//!
//! Paths that held an object or an array somewhere in the file are *opaque*: their value
//! is not in the file (only their children's are), so a query that needs such a value
//! reads the raw records — except that a path that held only objects (and nulls) has a
//! column marking the rows whose value is an object ([`PathColumns::object`]), from
//! which a scan rebuilds the value as a struct out of its children's columns when the
//! output asks for a struct, and a path that held only arrays of scalars of one type (or
//! numbers) and nulls has a `List` column of them ([`PathColumns::list`]), which a scan
//! outputs as the list it asks for (`crate::columnar::assemble`). Filters on such paths
//! still read the raw records. So are paths below a container deeper than the schema's depth
//! limit, whose contents were not inferred, and below an object that lost keys to the file's
//! bound on columns (records whose keys keep changing: maps keyed by ids).

use serde::{Deserialize, Serialize};

use crate::path::FieldPath;
use crate::schema::TypeSet;
use crate::value::FieldValue;

/// The JSON scalar type a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalarType {
    /// `true` / `false`: an Arrow `Boolean` column.
    Bool,
    /// Integral numbers in `i64` range: `Int64`.
    Int,
    /// Other numbers: `Float64`.
    Float,
    /// Strings (unescaped): `Utf8`.
    String,
}

impl ScalarType {
    /// All four, in the order a path's columns are laid out.
    pub const ALL: [ScalarType; 4] = [ScalarType::Bool, ScalarType::Int, ScalarType::Float, ScalarType::String];

    /// The type of a parsed value; `None` for missing, null, objects and arrays.
    #[must_use]
    pub fn of(value: &FieldValue<'_>) -> Option<ScalarType> {
        match value {
            FieldValue::Bool(_) => Some(ScalarType::Bool),
            FieldValue::Int(_) => Some(ScalarType::Int),
            FieldValue::Float(_) => Some(ScalarType::Float),
            FieldValue::Str(_) => Some(ScalarType::String),
            _ => None,
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }

    /// The Arrow type of its columns: `Boolean`, `Int64`, `Float64`, `Utf8`.
    #[must_use]
    pub fn data_type(self) -> arrow_schema::DataType {
        match self {
            ScalarType::Bool => arrow_schema::DataType::Boolean,
            ScalarType::Int => arrow_schema::DataType::Int64,
            ScalarType::Float => arrow_schema::DataType::Float64,
            ScalarType::String => arrow_schema::DataType::Utf8,
        }
    }

    /// The suffix of the column's name when its path holds several types (`a:int`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::Int => "int",
            ScalarType::Float => "float",
            ScalarType::String => "string",
        }
    }
}

/// One path of a file: its columns by type (Parquet leaf indices), and whether its value
/// is opaque (it held an object or array in some record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathColumns {
    /// The path's keys.
    pub path: Vec<String>,
    /// The leaf index of its column of each [`ScalarType`] (by [`ScalarType::ALL`] order).
    pub columns: [Option<usize>; 4],
    /// The path held an object or an array in some record: its value is not in the file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opaque: bool,
    /// The leaf index of a `Boolean` column, `true` in the rows whose value is an object
    /// (null elsewhere), when the path held only objects and nulls: its value is then the
    /// struct of its children's columns. Absent in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<usize>,
    /// Its `List` column, when the path held only arrays (and nulls) whose items are
    /// scalars of one type, or numbers, and nulls. Absent in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<ListColumn>,
}

/// A path's arrays as a `List` column: null where the row holds no array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListColumn {
    /// The leaf index of the column.
    pub leaf: usize,
    /// What its items are.
    pub items: ListItems,
}

/// The JSON types of a list column's items (null items aside), and how they are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListItems {
    /// Only null items, or only empty arrays: `Boolean` items, all null.
    Null,
    /// Booleans: `Boolean`.
    Bool,
    /// Integers in `i64` range: `Int64`.
    Int,
    /// Other numbers: `Float64`.
    Float,
    /// Integers and other numbers: `Float64` (integers converted, rounded to nearest).
    Number,
    /// Strings (unescaped): `Utf8`.
    String,
}

impl ListItems {
    /// The items of arrays whose items had the JSON types `types`; `None` when they cannot
    /// be one list column (containers, or several kinds of scalars).
    #[must_use]
    pub fn of(types: TypeSet) -> Option<ListItems> {
        let types = types.without(TypeSet::NULL);
        Some(match types {
            t if t.is_empty() => ListItems::Null,
            t if t == TypeSet::BOOL => ListItems::Bool,
            t if t == TypeSet::INT => ListItems::Int,
            t if t == TypeSet::FLOAT => ListItems::Float,
            t if t == TypeSet::INT | TypeSet::FLOAT => ListItems::Number,
            t if t == TypeSet::STRING => ListItems::String,
            _ => return None,
        })
    }

    /// The scalar type the items are stored as; `None` for all-null items.
    #[must_use]
    pub fn stored(self) -> Option<ScalarType> {
        match self {
            ListItems::Null => None,
            ListItems::Bool => Some(ScalarType::Bool),
            ListItems::Int => Some(ScalarType::Int),
            ListItems::Float | ListItems::Number => Some(ScalarType::Float),
            ListItems::String => Some(ScalarType::String),
        }
    }
}

/// The layout of one file, stored in its Parquet footer (key [`LAYOUT_METADATA_KEY`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLayout {
    /// Leaf index of the `_address` column (the record's log address, `UInt64`).
    pub address_column: usize,
    /// Every path of the file's schema, parents before children.
    pub paths: Vec<PathColumns>,
    /// Paths whose contents are not all in the file: containers beyond the depth limit, and
    /// objects that lost keys to the file's bound on paths (records with ever new keys,
    /// `write::MAX_FILE_CELLS`); every path below one that `paths` does not list is opaque.
    /// The empty path (all of them) when the cut reached the top level.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deep: Vec<Vec<String>>,
}

/// The Parquet key-value metadata key holding a file's [`FileLayout`] as JSON.
pub const LAYOUT_METADATA_KEY: &str = "shoal.layout";

/// The Parquet key-value metadata key holding a file's [`InstantStatistics`] as JSON.
pub const INSTANTS_METADATA_KEY: &str = "shoal.instants";

/// The instants the strings of a file's string columns name, per row group: the lowest and
/// highest ([`crate::timestamp::parse_timestamp`], microseconds since the epoch) over the
/// values that name one. A `TIMESTAMP` comparison can hold only for such values, so a row
/// group whose range misses the literal's side is skipped — which byte-wise string statistics
/// cannot decide (offsets and fractions reorder RFC 3339 text). A string column that is not
/// listed holds no instant anywhere in the file; `null` for a row group: none there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstantStatistics {
    /// Row groups of the file (a check against its footer).
    pub row_groups: usize,
    /// Leaf index of a string column → per row group, `[lowest, highest]` or `null`.
    pub leaves: std::collections::BTreeMap<usize, Vec<Option<[i64; 2]>>>,
}

impl InstantStatistics {
    /// Whether these statistics describe a file of `row_groups` row groups.
    #[must_use]
    pub fn fits(&self, row_groups: usize) -> bool {
        self.row_groups == row_groups && self.leaves.values().all(|groups| groups.len() == row_groups)
    }

    /// The lowest and highest instant of string leaf `leaf` in `row_group`; `None` when it
    /// names none there.
    #[must_use]
    pub fn range(&self, row_group: usize, leaf: usize) -> Option<(i64, i64)> {
        let groups = self.leaves.get(&leaf)?;
        groups.get(row_group).copied().flatten().map(|[low, high]| (low, high))
    }

    /// The statistics of string column `strings` (leaf `leaf`) cut into row groups of
    /// `per_group` rows; nothing is added when no value names an instant.
    pub fn add(&mut self, leaf: usize, strings: &arrow_array::StringArray, per_group: usize) {
        use arrow_array::Array;
        let mut groups = Vec::with_capacity(self.row_groups);
        let mut any = false;
        for start in (0..strings.len()).step_by(per_group.max(1)) {
            let mut range: Option<[i64; 2]> = None;
            for row in start..(start + per_group).min(strings.len()) {
                if strings.is_null(row) {
                    continue;
                }
                if let Some(t) = crate::timestamp::parse_timestamp(strings.value(row)) {
                    range = Some(range.map_or([t, t], |[low, high]| [low.min(t), high.max(t)]));
                }
            }
            any |= range.is_some();
            groups.push(range);
        }
        if any {
            self.leaves.insert(leaf, groups);
        }
    }
}

/// What a file holds for one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved<'l> {
    /// Its values are the file's columns (none: missing or null in every row).
    Columns(&'l [Option<usize>; 4]),
    /// Its values are not in the file: the raw records must be read.
    Opaque,
}

impl FileLayout {
    /// What the file holds for `path`. A listed path has its columns (every value of
    /// it in the file: nothing is listed below a container too deep to infer, and a path
    /// listed below an object that lost keys to the bound on paths was kept from its first
    /// value on); an unlisted one below (or equal to) a `deep` path is opaque; any other
    /// unlisted path is missing in every row.
    #[must_use]
    pub fn resolve(&self, path: &FieldPath) -> Resolved<'_> {
        self.resolve_segments(path.segments())
    }

    /// [`resolve`](Self::resolve) for a path given by its keys.
    #[must_use]
    pub fn resolve_segments(&self, segments: &[String]) -> Resolved<'_> {
        match self.paths.iter().find(|p| p.path == segments) {
            Some(p) if p.opaque => Resolved::Opaque,
            Some(p) => Resolved::Columns(&p.columns),
            None if self.deep.iter().any(|deep| segments.starts_with(deep)) => Resolved::Opaque,
            // No record of the file has the path: missing everywhere.
            None => Resolved::Columns(&[None; 4]),
        }
    }

    /// The leaf index of the column marking the rows where `segments` holds an object, if
    /// the file has one ([`PathColumns::object`]).
    #[must_use]
    pub fn object_column(&self, segments: &[String]) -> Option<usize> {
        self.paths.iter().find(|p| p.path == segments).and_then(|p| p.object)
    }

    /// The list column of `segments`, if the file has one ([`PathColumns::list`]).
    #[must_use]
    pub fn list_column(&self, segments: &[String]) -> Option<ListColumn> {
        self.paths.iter().find(|p| p.path == segments).and_then(|p| p.list)
    }

    /// True when every path of `paths` is in the file's columns.
    #[must_use]
    pub fn serves<'p>(&self, mut paths: impl Iterator<Item = &'p FieldPath>) -> bool {
        paths.all(|p| matches!(self.resolve(p), Resolved::Columns(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> FieldPath {
        FieldPath::parse(text).unwrap()
    }

    #[test]
    fn resolve_tells_columns_missing_and_opaque_paths_apart() {
        let layout = FileLayout {
            address_column: 0,
            paths: vec![
                PathColumns { path: vec!["a".into()], columns: [None, Some(1), None, Some(2)], opaque: false, object: None, list: None },
                PathColumns { path: vec!["o".into()], columns: [None; 4], opaque: true, object: None, list: None },
                PathColumns { path: vec!["o".into(), "k".into()], columns: [None, Some(3), None, None], opaque: false, object: None, list: None },
            ],
            deep: vec![vec!["o".into(), "d".into()]],
        };
        assert_eq!(layout.resolve(&path("a")), Resolved::Columns(&[None, Some(1), None, Some(2)]));
        assert_eq!(layout.resolve(&path("o")), Resolved::Opaque);
        assert_eq!(layout.resolve(&path("o.k")), Resolved::Columns(&[None, Some(3), None, None]));
        assert_eq!(layout.resolve(&path("nope.x")), Resolved::Columns(&[None; 4]));
        assert_eq!(layout.resolve(&path("o.d")), Resolved::Opaque);
        assert_eq!(layout.resolve(&path("o.d.e.f")), Resolved::Opaque);
        // Below an object that lost keys (here the record's root): listed paths keep their
        // columns, unlisted ones are opaque instead of missing.
        let cut = FileLayout { deep: vec![Vec::new()], ..layout.clone() };
        assert_eq!(cut.resolve(&path("a")), Resolved::Columns(&[None, Some(1), None, Some(2)]));
        assert_eq!(cut.resolve(&path("o.k")), Resolved::Columns(&[None, Some(3), None, None]));
        assert_eq!(cut.resolve(&path("nope.x")), Resolved::Opaque);
        assert!(layout.serves([path("a"), path("o.k"), path("zz")].iter()));
        assert!(!layout.serves([path("a"), path("o")].iter()));
    }
}
