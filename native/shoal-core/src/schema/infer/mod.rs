//! Schema inference: the union of the JSON types seen per path (AsterixDB tuple
//! compactor, VLDB 2019, §3), and its mapping to Arrow.

//!
//! The tree and the schema are here; the ways of observing a record are in `validated.rs`
//! (a cursor over a record the ingest parser validated) and `general.rs` (`sonic_rs` or
//! `serde_json`, for any JSON).

mod general;
pub(crate) mod validated;

use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema};
use serde::{Deserialize, Serialize};

use general::{is_valid_json, merge_record, merge_sonic_value, open_brackets, replace_unrepresentable, SONIC_MAX_BRACKETS};
use validated::{merge_validated, Cursor};
use super::{json_text_field, KeyIndex, KeySeed};
use crate::error::{Error, Result};
use crate::path::FieldPath;

/// Nesting depth (objects and arrays, the record itself being depth 0) down to which
/// structure is inferred. A container found deeper is recorded as
/// [`TypeSet::TOO_DEEP`] and maps to JSON text. This keeps every recursion over the tree
/// shallow, and the tree's serde form (two JSON levels per object level) within
/// `serde_json`'s limit of 128 levels.
pub const MAX_INFERRED_DEPTH: usize = 32;

/// Fields (paths below the record, array items included) a table's inferred schema holds
/// at most (Elasticsearch's `index.mapping.total_fields.limit` with
/// `ignore_dynamic_beyond_limit`): records with ever new keys — map-like objects keyed by
/// ids, or a hostile client — would otherwise grow the schema, its Arrow form and every
/// checkpoint without bound. Beyond it [`InferredSchema::limit_fields`] keeps the
/// shallowest fields and new keys are no longer added; the records keep them (filters see
/// them, JSON output returns them), but they are not columns.
pub const MAX_SCHEMA_FIELDS: usize = 10_000;

/// Bytes a table reserves for its inferred schema in the daemon's memory budget: the
/// schema holds at most [`MAX_SCHEMA_FIELDS`] nodes, each a `Node` (types, children, key
/// lookup) in its parent's children and its key's text in the parent's key list and map:
/// 512 bytes bound that for keys of up to 64 bytes with every vector at twice its length
/// (the test `schema_reservation_covers_a_node` checks the arithmetic against the types'
/// sizes).
pub const SCHEMA_RESERVED_BYTES: u64 = MAX_SCHEMA_FIELDS as u64 * 512;

/// [`Node::child_position`] of a key a truncated node does not hold: no child.
const NO_CHILD: usize = usize::MAX;

/// A set of JSON types, one bit each.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TypeSet(u8);

impl TypeSet {
    /// No type.
    pub const EMPTY: Self = Self(0);
    /// `null`.
    pub const NULL: Self = Self(1);
    /// `true` / `false`.
    pub const BOOL: Self = Self(1 << 1);
    /// A number without fraction or exponent that fits an `i64`.
    pub const INT: Self = Self(1 << 2);
    /// Any other number.
    pub const FLOAT: Self = Self(1 << 3);
    /// A string.
    pub const STRING: Self = Self(1 << 4);
    /// An object.
    pub const OBJECT: Self = Self(1 << 5);
    /// An array.
    pub const ARRAY: Self = Self(1 << 6);
    /// An object or array nested deeper than [`MAX_INFERRED_DEPTH`]: its contents were
    /// not inferred.
    pub const TOO_DEEP: Self = Self(1 << 7);

    const NAMES: [(TypeSet, &'static str); 8] = [
        (Self::NULL, "null"),
        (Self::BOOL, "bool"),
        (Self::INT, "int"),
        (Self::FLOAT, "float"),
        (Self::STRING, "string"),
        (Self::OBJECT, "object"),
        (Self::ARRAY, "array"),
        (Self::TOO_DEEP, "too_deep"),
    ];

    /// True when every type of `other` is in `self`.
    #[must_use]
    pub fn contains(self, other: TypeSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Adds the types of `other`.
    pub fn insert(&mut self, other: TypeSet) {
        self.0 |= other.0;
    }

    /// `self` without the types of `other`.
    #[must_use]
    pub fn without(self, other: TypeSet) -> TypeSet {
        Self(self.0 & !other.0)
    }

    /// True when no type is in the set.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bits (`NULL` = 1, `BOOL` = 2, … `TOO_DEEP` = 128).
    #[must_use]
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for TypeSet {
    type Output = TypeSet;

    fn bitor(self, rhs: TypeSet) -> TypeSet {
        TypeSet(self.0 | rhs.0)
    }
}

impl fmt::Debug for TypeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Self::NAMES.iter().filter(|(t, _)| self.contains(*t)).map(|(_, name)| *name).collect();
        write!(f, "TypeSet({})", names.join("|"))
    }
}

/// One path of the tree: the types seen there, the keys seen under it when it held
/// objects (first-seen order) and the union of its elements when it held arrays.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "NodeRepr")]
struct Node {
    types: TypeSet,
    /// `keys.keys()[i]` names `children[i]`.
    #[serde(skip_serializing_if = "is_empty_index")]
    keys: KeyIndex,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    children: Vec<Node>,
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<Box<Node>>,
    /// The field limit cut children (or array items) of this node
    /// ([`InferredSchema::limit_fields`]): no new keys or items are added to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

fn is_empty_index(index: &KeyIndex) -> bool {
    index.len() == 0
}

/// The serialized form of [`Node`], checked (keys paired with children, repeats merged)
/// on the way in.
#[derive(Deserialize)]
struct NodeRepr {
    types: TypeSet,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    children: Vec<Node>,
    #[serde(default)]
    items: Option<Box<Node>>,
    #[serde(default)]
    truncated: bool,
}

impl From<NodeRepr> for Node {
    fn from(repr: NodeRepr) -> Self {
        let mut node = Node { types: repr.types, items: repr.items, ..Node::default() };
        // Keys without a child (or children without a key) are dropped.
        for (key, child) in repr.keys.iter().zip(repr.children) {
            let position = node.child_position(key, node.keys.len());
            match node.children.get_mut(position) {
                Some(existing) => existing.merge(&child),
                None => node.children.push(child),
            }
        }
        node.truncated = repr.truncated;
        node
    }
}

impl Node {
    /// The position of child `key`, added (with no types) if absent; [`NO_CHILD`] for a
    /// new key of a truncated node.
    fn child_position(&mut self, key: &str, hint: usize) -> usize {
        match self.keys.find(key, hint) {
            Some(position) => position,
            None if self.truncated => NO_CHILD,
            None => self.push_child(key),
        }
    }

    /// [`child_position`](Self::child_position) for a key given as bytes; `None` when a
    /// new key is not UTF-8.
    fn child_position_bytes(&mut self, key: &[u8], hint: usize) -> Option<usize> {
        match self.keys.find_bytes(key, hint) {
            Some(position) => Some(position),
            None if self.truncated => Some(NO_CHILD),
            None => Some(self.push_child(std::str::from_utf8(key).ok()?)),
        }
    }

    fn push_child(&mut self, key: &str) -> usize {
        self.children.push(Node::default());
        self.keys.push(key)
    }

    fn child(&self, key: &str) -> Option<&Node> {
        self.keys.find(key, 0).and_then(|i| self.children.get(i))
    }

    fn merge(&mut self, other: &Node) {
        self.types.insert(other.types);
        for (i, (key, child)) in other.keys.keys().iter().zip(&other.children).enumerate() {
            let position = self.child_position(key, i);
            if let Some(mine) = self.children.get_mut(position) {
                mine.merge(child);
            }
        }
        if let Some(items) = &other.items {
            if !self.truncated {
                self.items.get_or_insert_with(Box::default).merge(items);
            }
        }
        self.truncated |= other.truncated;
    }

    /// Children (keys, then the array items) at nesting `depth` below the root are counted
    /// in `per_depth[depth]`, and so on down.
    fn count_fields(&self, depth: usize, per_depth: &mut Vec<usize>) {
        for child in self.children.iter().chain(self.items.as_deref()) {
            if per_depth.len() <= depth {
                per_depth.resize(depth + 1, 0);
            }
            per_depth[depth] += 1;
            child.count_fields(depth + 1, per_depth);
        }
    }

    /// Marks this node and every node below it truncated.
    fn freeze(&mut self) {
        self.truncated = true;
        for child in self.children.iter_mut().chain(self.items.as_deref_mut()) {
            child.freeze();
        }
    }

    /// Cuts this node's fields for [`InferredSchema::limit_fields`]: its children are at
    /// `depth`; all are kept above `cut_depth`, the first `left` (in first-seen order,
    /// across nodes in depth-first order) at it, none below it.
    fn cut_fields(&mut self, depth: usize, cut_depth: usize, left: &mut usize) {
        if depth < cut_depth {
            for child in &mut self.children {
                child.cut_fields(depth + 1, cut_depth, left);
            }
            if let Some(items) = &mut self.items {
                items.cut_fields(depth + 1, cut_depth, left);
            }
            return;
        }
        let keep = if depth == cut_depth { (*left).min(self.children.len()) } else { 0 };
        *left -= keep;
        if keep < self.children.len() {
            self.children.truncate(keep);
            self.keys.truncate(keep);
            self.truncated = true;
        }
        if self.items.is_some() {
            if depth == cut_depth && *left > 0 {
                *left -= 1;
            } else {
                self.items = None;
                self.truncated = true;
            }
        }
        for child in self.children.iter_mut().chain(self.items.as_deref_mut()) {
            child.cut_fields(depth + 1, cut_depth, left);
        }
    }

    /// The Arrow field for this node, named `name`.
    fn arrow_field(&self, name: String) -> Field {
        let types = self.types.without(TypeSet::NULL);
        let data_type = match types {
            TypeSet::EMPTY | TypeSet::STRING => DataType::Utf8,
            TypeSet::BOOL => DataType::Boolean,
            TypeSet::INT => DataType::Int64,
            TypeSet::FLOAT => DataType::Float64,
            t if t == TypeSet::INT | TypeSet::FLOAT => DataType::Float64,
            TypeSet::OBJECT => DataType::Struct(self.struct_fields()),
            TypeSet::ARRAY => {
                let item = match &self.items {
                    Some(items) => items.arrow_field("item".to_owned()),
                    None => Field::new("item", DataType::Utf8, true),
                };
                DataType::List(Arc::new(item))
            }
            _ => return json_text_field(name),
        };
        Field::new(name, data_type, true)
    }

    fn struct_fields(&self) -> Fields {
        self.keys.keys().iter().zip(&self.children).map(|(key, child)| child.arrow_field(key.clone())).collect()
    }
}

/// The inferred schema of a table: for every path, the union of the JSON types of the
/// values seen there (see the [module documentation](super) for the mapping to Arrow).
///
/// Each record is parsed completely (see [`observe`](Self::observe) for how). Measured on
/// 9,996 GitHub events (20 MB, one thread, optimised build, a busy 2-core machine):
/// `sonic_rs::Value` then a walk of it, ~800 MB/s; `serde_json` streamed into the tree
/// without a document, ~700 MB/s, ~530 MB/s with the validation pass that keeps
/// invalid records out; `serde_json::Value` then a walk, ~330 MB/s.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InferredSchema {
    record_count: u64,
    root: Node,
}

impl InferredSchema {
    /// An empty schema (no records seen).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses one JSON record and merges the types of all its values. Returns false,
    /// changing nothing, when `record` is not valid JSON (surrounding whitespace is
    /// allowed; the record need not be an object, but only objects contribute fields).
    ///
    /// A record with few enough `{` and `[` (1,000 in optimised builds, 16 otherwise: a
    /// bound on its nesting, as sonic-rs's parser recurses without a depth limit) is
    /// parsed into a `sonic_rs::Value` and then merged; any other, or one sonic-rs
    /// rejects, is validated with `serde_json` and merged while parsed again. Valid JSON that neither
    /// parser represents (a number beyond ±1.8e308, a lone UTF-16 surrogate escape) is
    /// merged as if such numbers were floats and such escapes U+FFFD.
    pub fn observe(&mut self, record: &[u8]) -> bool {
        let observed = self.observe_with_sonic(record) || self.observe_with_serde_json(record);
        if observed {
            self.record_count += 1;
        }
        observed
    }

    /// [`observe`](Self::observe) for a record that is known to be valid JSON (a record of
    /// the log: the ingest parser validated it in full). One pass over the bytes without
    /// building a document — about twice as fast as `observe` on GitHub events — with the
    /// same result; records it cannot take (a key with escapes) go through `observe`.
    /// Given invalid JSON it may merge part of the record before falling back.
    pub fn observe_validated(&mut self, record: &[u8]) -> bool {
        let mut cursor = Cursor::new(record);
        let merged = merge_validated(&mut self.root, &mut cursor, 0).is_some() && {
            cursor.skip_whitespace();
            cursor.at == record.len()
        };
        if merged {
            self.record_count += 1;
            return true;
        }
        self.observe(record)
    }

    /// The fast path of [`observe`](Self::observe); false (changing nothing) when not taken
    /// or when sonic-rs does not accept the record.
    fn observe_with_sonic(&mut self, record: &[u8]) -> bool {
        if open_brackets(record) > SONIC_MAX_BRACKETS {
            return false;
        }
        match sonic_rs::from_slice::<sonic_rs::Value>(record) {
            Ok(value) => {
                merge_sonic_value(&mut self.root, &value, 0);
                true
            }
            Err(_) => false,
        }
    }

    /// The general path of [`observe`](Self::observe); false (changing nothing) for
    /// invalid JSON.
    fn observe_with_serde_json(&mut self, record: &[u8]) -> bool {
        if !is_valid_json(record) {
            return false;
        }
        if merge_record(&mut self.root, record).is_err() {
            // Part of the record was merged before the error; merging the record again
            // with the unrepresentable tokens replaced adds the rest (merging is
            // idempotent, and the replacements keep every value's type).
            let replaced = replace_unrepresentable(record);
            let merged = merge_record(&mut self.root, &replaced);
            debug_assert!(merged.is_ok(), "{merged:?}");
        }
        true
    }

    /// Adds everything `other` has seen: afterwards `self` is what observing the records
    /// of both would have given (children keep `self`'s order, then `other`'s new ones).
    pub fn merge(&mut self, other: &InferredSchema) {
        self.record_count += other.record_count;
        self.root.merge(&other.root);
    }

    /// Keeps at most `max` fields (paths below the record, array items included): all
    /// the fields of the shallowest levels, then, at the level where the budget runs out,
    /// the first ones seen (depth-first, in first-seen order); nothing deeper. Then the
    /// schema is frozen, as Elasticsearch's mappings are at their field limit: every node is
    /// marked truncated, so observing and merging still widen the types of the fields kept
    /// but never add a key or array items again (new values are parsed past), and the
    /// fields a query sees stay the same. Returns whether anything was cut. See
    /// [`MAX_SCHEMA_FIELDS`].
    pub fn limit_fields(&mut self, max: usize) -> bool {
        let mut per_depth = Vec::new();
        self.root.count_fields(0, &mut per_depth);
        if per_depth.iter().sum::<usize>() <= max {
            return false;
        }
        let mut left = max;
        let mut cut_depth = per_depth.len();
        for (depth, &fields) in per_depth.iter().enumerate() {
            if fields > left {
                cut_depth = depth;
                break;
            }
            left -= fields;
        }
        self.root.cut_fields(0, cut_depth, &mut left);
        self.root.freeze();
        true
    }

    /// Fields (paths below the record, array items included) the schema holds.
    #[must_use]
    pub fn field_count(&self) -> usize {
        let mut per_depth = Vec::new();
        self.root.count_fields(0, &mut per_depth);
        per_depth.iter().sum()
    }

    /// Where `path` leaves the schema, when that node is truncated
    /// ([`limit_fields`](Self::limit_fields)): the dotted path of the deepest node of
    /// `path` the schema holds (empty: the root), under which records may have keys the
    /// schema does not. `None` when the schema holds the whole path or that node is not
    /// truncated.
    #[must_use]
    pub fn truncated_along(&self, path: &FieldPath) -> Option<String> {
        let mut node = &self.root;
        let mut prefix: Vec<&str> = Vec::new();
        for key in path.segments() {
            match node.child(key) {
                Some(child) => {
                    prefix.push(key);
                    node = child;
                }
                None => return node.truncated.then(|| prefix.join(".")),
            }
        }
        None
    }

    /// Number of records observed (including through [`merge`](Self::merge)).
    #[must_use]
    pub fn record_count(&self) -> u64 {
        self.record_count
    }

    /// The JSON types seen at `path`, or `None` when no record had it (or it lies
    /// inside an array, where paths are not addressable).
    #[must_use]
    pub fn types_at(&self, path: &FieldPath) -> Option<TypeSet> {
        self.node(path).map(|node| node.types)
    }

    /// Every addressable path (object keys from the root, not into arrays) with the types
    /// seen there, parents before children, children in first-seen order. The columnar
    /// tier lays its files out by it.
    #[must_use]
    pub fn paths(&self) -> Vec<(Vec<String>, TypeSet)> {
        fn walk(node: &Node, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, TypeSet)>) {
            for (key, child) in node.keys.keys().iter().zip(&node.children) {
                prefix.push(key.clone());
                out.push((prefix.clone(), child.types));
                walk(child, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut Vec::new(), &mut out);
        out
    }

    /// The Arrow field for `path`, named by its dotted text, or `None` when no record had
    /// the path (or it lies inside an array).
    #[must_use]
    pub fn arrow_field(&self, path: &FieldPath) -> Option<Field> {
        self.node(path).map(|node| node.arrow_field(path.to_string()))
    }

    /// Like [`arrow_field`](Self::arrow_field), for a list of requested columns.
    ///
    /// # Errors
    /// [`Error::UnknownColumn`] for the first path that no record had;
    /// [`Error::ColumnNotInferred`] for one under a node the field limit truncated.
    pub fn columns(&self, paths: &[FieldPath]) -> Result<Vec<(FieldPath, Field)>> {
        paths
            .iter()
            .map(|path| {
                self.arrow_field(path).map(|field| (path.clone(), field)).ok_or_else(|| match self.truncated_along(path) {
                    Some(prefix) => Error::ColumnNotInferred {
                        column: path.to_string(),
                        under: if prefix.is_empty() { "the record".to_owned() } else { format!("`{prefix}`") },
                        limit: MAX_SCHEMA_FIELDS,
                    },
                    None => Error::UnknownColumn { column: path.to_string() },
                })
            })
            .collect()
    }

    /// The Arrow schema of whole records: one field per top-level key (first-seen
    /// order), objects as `Struct`s. Empty when no record was an object.
    #[must_use]
    pub fn arrow_schema(&self) -> Schema {
        Schema::new(self.root.struct_fields())
    }

    fn node(&self, path: &FieldPath) -> Option<&Node> {
        path.segments().iter().try_fold(&self.root, |node, key| node.child(key))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use validated::find_byte;

    #[test]
    fn schema_reservation_covers_a_node() {
        // A child node and its key (text, list entry, map entry), vectors at twice their
        // length, keys of 64 bytes.
        let per_field = 2 * std::mem::size_of::<Node>() + 2 * std::mem::size_of::<String>() + 2 * 64 + 2 * (16 + 8) + 64;
        assert!(per_field as u64 * MAX_SCHEMA_FIELDS as u64 <= SCHEMA_RESERVED_BYTES, "{per_field} bytes per field");
    }

    fn schema_of(records: &[&str]) -> InferredSchema {
        let mut schema = InferredSchema::new();
        for record in records {
            assert!(schema.observe(record.as_bytes()), "{record}");
        }
        schema
    }

    fn field(schema: &InferredSchema, path: &str) -> Option<Field> {
        schema.arrow_field(&FieldPath::parse(path).unwrap())
    }

    fn data_type(schema: &InferredSchema, path: &str) -> DataType {
        field(schema, path).unwrap().data_type().clone()
    }

    fn is_json_text(field: &Field) -> bool {
        crate::schema::is_json_text(field)
    }

    #[test]
    fn scalar_types_map_to_arrow_and_null_mixes_with_anything() {
        let schema = schema_of(&[
            r#"{"n": null, "b": true, "i": 1, "f": 1.5, "s": "x", "in": 1, "neg": -3}"#,
            r#"{"n": null, "b": null, "i": 2, "f": null, "s": null, "in": null}"#,
        ]);
        assert_eq!(data_type(&schema, "n"), DataType::Utf8);
        assert_eq!(data_type(&schema, "b"), DataType::Boolean);
        assert_eq!(data_type(&schema, "i"), DataType::Int64);
        assert_eq!(data_type(&schema, "neg"), DataType::Int64);
        assert_eq!(data_type(&schema, "f"), DataType::Float64);
        assert_eq!(data_type(&schema, "s"), DataType::Utf8);
        assert_eq!(data_type(&schema, "in"), DataType::Int64);
        for name in ["n", "b", "i", "f", "s", "in", "neg"] {
            let field = field(&schema, name).unwrap();
            assert!(field.is_nullable(), "{name}");
            assert!(!is_json_text(&field), "{name}");
        }
        assert_eq!(schema.types_at(&FieldPath::parse("in").unwrap()), Some(TypeSet::INT | TypeSet::NULL));
    }

    #[test]
    fn int_widens_to_float_and_other_mixes_become_json_text() {
        let schema = schema_of(&[
            r#"{"num": 1, "si": "a", "os": {"a": 1}, "bi": true, "as": [1], "big": 1}"#,
            r#"{"num": 2.5, "si": 2, "os": "x", "bi": 1, "as": "y", "big": 18446744073709551615}"#,
        ]);
        assert_eq!(data_type(&schema, "num"), DataType::Float64);
        // u64 beyond i64::MAX counts as a float.
        assert_eq!(data_type(&schema, "big"), DataType::Float64);
        for name in ["si", "os", "bi", "as"] {
            let field = field(&schema, name).unwrap();
            assert_eq!(field.data_type(), &DataType::Utf8, "{name}");
            assert!(is_json_text(&field), "{name}");
        }
        // The object side of a mixed path is still addressable.
        assert_eq!(data_type(&schema, "os.a"), DataType::Int64);
    }

    #[test]
    fn nested_objects_become_structs_with_children_in_first_seen_order() {
        let schema = schema_of(&[
            r#"{"actor": {"login": "ada", "id": 1}, "id": "e1"}"#,
            r#"{"id": "e2", "actor": {"id": 2, "url": "u", "org": {"name": "o"}}}"#,
        ]);
        let expected = DataType::Struct(Fields::from(vec![
            Field::new("login", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
            Field::new("url", DataType::Utf8, true),
            Field::new("org", DataType::Struct(Fields::from(vec![Field::new("name", DataType::Utf8, true)])), true),
        ]));
        assert_eq!(data_type(&schema, "actor"), expected);
        assert_eq!(field(&schema, "actor.org.name").unwrap().name(), "actor.org.name");
        assert_eq!(data_type(&schema, "actor.org.name"), DataType::Utf8);
        assert!(field(&schema, "actor.missing").is_none());
        assert!(field(&schema, "actor.login.deeper").is_none());

        let arrow = schema.arrow_schema();
        let names: Vec<&str> = arrow.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["actor", "id"]);
        assert_eq!(arrow.field(0).data_type(), &expected);
    }

    #[test]
    fn arrays_become_lists_of_the_union_of_their_items() {
        let schema = schema_of(&[
            r#"{"ints": [1, 2], "mixed": [1, "a"], "empty": [], "objs": [{"a": 1}, {"b": true}], "nested": [[1.5]]}"#,
            r#"{"ints": [], "empty": [], "objs": [], "nested": [[], [2]]}"#,
        ]);
        let list = |item: Field| DataType::List(Arc::new(item));
        assert_eq!(data_type(&schema, "ints"), list(Field::new("item", DataType::Int64, true)));
        assert_eq!(data_type(&schema, "empty"), list(Field::new("item", DataType::Utf8, true)));
        assert_eq!(
            data_type(&schema, "nested"),
            list(Field::new("item", list(Field::new("item", DataType::Float64, true)), true))
        );
        assert_eq!(
            data_type(&schema, "objs"),
            list(Field::new(
                "item",
                DataType::Struct(Fields::from(vec![
                    Field::new("a", DataType::Int64, true),
                    Field::new("b", DataType::Boolean, true),
                ])),
                true,
            ))
        );
        let DataType::List(item) = data_type(&schema, "mixed") else { panic!("not a list") };
        assert_eq!(item.data_type(), &DataType::Utf8);
        assert!(is_json_text(&item));
        // Paths through arrays are not addressable.
        assert!(field(&schema, "objs.a").is_none());
    }

    #[test]
    fn invalid_records_are_ignored_and_leave_no_trace() {
        let mut schema = InferredSchema::new();
        assert!(!schema.observe(br#"{"a": 1, "b": "#));
        assert!(!schema.observe(br#"{"a": 1} x"#));
        assert!(!schema.observe(b"\xff"));
        assert!(!schema.observe(b"{\"a\": \"\xff\"}"));
        assert!(!schema.observe(b"{\"a\": 1,}"));
        assert!(!schema.observe(b"{\"a\": 01}"));
        assert!(!schema.observe(b""));
        assert_eq!(schema.record_count(), 0);
        assert!(schema.arrow_schema().fields().is_empty());
        assert!(schema.observe(b"{\"a\": 1}\n"));
        assert_eq!(schema.record_count(), 1);
    }

    #[test]
    fn valid_json_serde_json_cannot_represent_is_still_observed() {
        let schema = schema_of(&[
            r#"{"a": 1, "huge": 1e400, "s": "\ud800 lone", "t": "\udc00", "ok": "\ud83d\ude00", "n": -1e400}"#,
            r#"{"long": 1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000, "z": true}"#,
            r#"{"\udbff": 1, "after": [1e999, 2]}"#,
        ]);
        assert_eq!(schema.record_count(), 3);
        assert_eq!(data_type(&schema, "a"), DataType::Int64);
        assert_eq!(data_type(&schema, "huge"), DataType::Float64);
        assert_eq!(data_type(&schema, "n"), DataType::Float64);
        assert_eq!(data_type(&schema, "long"), DataType::Float64);
        assert_eq!(data_type(&schema, "z"), DataType::Boolean);
        for name in ["s", "t", "ok"] {
            assert_eq!(data_type(&schema, name), DataType::Utf8, "{name}");
        }
        assert_eq!(data_type(&schema, "\"\u{fffd}\""), DataType::Int64);
        assert_eq!(data_type(&schema, "after"), DataType::List(Arc::new(Field::new("item", DataType::Float64, true))));
    }

    #[test]
    fn replacing_unrepresentable_tokens_keeps_everything_else_byte_for_byte() {
        let text = r#"{"k\"\\": "\ud83d\ude00 \u00e9 \n", "n": [-0.5e3, 12, 1e400], "d": "\udfff\ud800"}"#;
        let replaced = String::from_utf8(replace_unrepresentable(text.as_bytes())).unwrap();
        assert_eq!(replaced, r#"{"k\"\\": "\ud83d\ude00 \u00e9 \n", "n": [-0.5e3, 12, 1.0], "d": "\ufffd\ufffd"}"#);
    }

    #[test]
    fn json_test_suite_accepts_valid_rejects_invalid_and_never_panics() {
        let cases = crate::schema::json_test_suite();
        eprintln!("{} JSONTestSuite cases", cases.len());
        for (name, bytes) in &cases {
            let mut schema = InferredSchema::new();
            let observed = schema.observe(bytes);
            if name.starts_with("y_") {
                assert!(observed, "{name} should be accepted");
            } else if name.starts_with("n_") {
                assert!(!observed, "{name} should be rejected");
                assert_eq!(schema.record_count(), 0);
                assert_eq!(
                    serde_json::to_string(&schema).unwrap(),
                    serde_json::to_string(&InferredSchema::new()).unwrap()
                );
            }
        }
    }

    #[test]
    fn containers_nested_beyond_the_depth_limit_become_json_text() {
        let depth = 100_000;
        let deep = format!("{{\"d\": {}{}, \"x\": 1}}", "[".repeat(depth), "]".repeat(depth));
        let mut schema = InferredSchema::new();
        assert!(schema.observe(deep.as_bytes()));
        assert_eq!(data_type(&schema, "x"), DataType::Int64);
        let mut field = field(&schema, "d").unwrap();
        let mut levels = 1;
        while let DataType::List(item) = field.data_type().clone() {
            field = item.as_ref().clone();
            levels += 1;
        }
        assert_eq!(levels, MAX_INFERRED_DEPTH);
        assert!(is_json_text(&field));

        let objects = format!("{}1{}", "{\"o\":".repeat(depth), "}".repeat(depth));
        assert!(schema.observe(objects.as_bytes()));
        let mixed = format!("{}1{}", "{\"m\":[".repeat(depth), "]}".repeat(depth));
        assert!(schema.observe(mixed.as_bytes()));
        let path = FieldPath::from_segments(vec!["o"; MAX_INFERRED_DEPTH]).unwrap();
        assert!(is_json_text(&schema.arrow_field(&path).unwrap()));

        // The deepest tree inference builds survives a serde_json round trip.
        let text = serde_json::to_string(&schema).unwrap();
        let back: InferredSchema = serde_json::from_str(&text).unwrap();
        assert_eq!(back.arrow_schema(), schema.arrow_schema());
    }

    #[test]
    fn serde_round_trip_preserves_types_order_and_count() {
        let schema = schema_of(&[
            r#"{"z": 1, "a": {"y": [1, {"k": "v"}], "b": null}, "m": "s"}"#,
            r#"{"m": 2, "a": {"c": 1.5}}"#,
        ]);
        let text = serde_json::to_string(&schema).unwrap();
        let back: InferredSchema = serde_json::from_str(&text).unwrap();
        assert_eq!(back.record_count(), 2);
        assert_eq!(back.arrow_schema(), schema.arrow_schema());
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }

    #[test]
    fn deserializing_repeated_or_unpaired_keys_merges_instead_of_corrupting() {
        let text = r#"{"record_count": 1, "root": {"types": 32, "keys": ["a", "a", "b"],
            "children": [{"types": 4}, {"types": 8}]}}"#;
        let schema: InferredSchema = serde_json::from_str(text).unwrap();
        assert_eq!(schema.types_at(&FieldPath::parse("a").unwrap()), Some(TypeSet::INT | TypeSet::FLOAT));
        assert_eq!(schema.types_at(&FieldPath::parse("b").unwrap()), None);
        assert_eq!(schema.arrow_schema().fields().len(), 1);
    }

    #[test]
    fn merge_equals_observing_the_union_of_records() {
        let left = [r#"{"a": 1, "o": {"x": "s"}, "l": [1]}"#, r#"{"b": true}"#];
        let right = [r#"{"a": 2.5, "o": {"y": null, "x": 1}, "l": ["t"], "c": []}"#];
        let mut merged = schema_of(&left);
        merged.merge(&schema_of(&right));
        let all: Vec<&str> = left.iter().chain(&right).copied().collect();
        let union = schema_of(&all);
        assert_eq!(merged.record_count(), 3);
        assert_eq!(merged.arrow_schema(), union.arrow_schema());
        assert_eq!(serde_json::to_string(&merged).unwrap(), serde_json::to_string(&union).unwrap());
    }

    #[test]
    fn wide_objects_keep_first_seen_order_past_the_hashed_lookup_threshold() {
        let keys: Vec<String> = (0..50).map(|i| format!("k{}", (i * 7) % 50)).collect();
        let record = format!("{{{}}}", keys.iter().map(|k| format!("\"{k}\": 1")).collect::<Vec<_>>().join(","));
        let mut schema = schema_of(&[&record]);
        let reversed =
            format!("{{{}}}", keys.iter().rev().map(|k| format!("\"{k}\": \"s\"")).collect::<Vec<_>>().join(","));
        assert!(schema.observe(reversed.as_bytes()));
        let names: Vec<String> = schema.arrow_schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, keys);
        assert!(schema.arrow_schema().fields().iter().all(|f| is_json_text(f)));
    }

    #[test]
    fn columns_reports_unknown_paths() {
        let schema = schema_of(&[r#"{"a": {"b": 1}}"#]);
        let paths = [FieldPath::parse("a.b").unwrap(), FieldPath::parse("a.c").unwrap()];
        match schema.columns(&paths) {
            Err(Error::UnknownColumn { column }) => assert_eq!(column, "a.c"),
            other => panic!("{other:?}"),
        }
        assert_eq!(schema.columns(&paths[..1]).unwrap()[0].1.data_type(), &DataType::Int64);
    }

    /// JSON text with the tokens where parsers differ: big and tiny numbers, escapes,
    /// repeated keys, nesting.
    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            prop::sample::select(vec![
                "null",
                "true",
                "false",
                "0",
                "-0",
                "1.0",
                "-2.5e-3",
                "1E2",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "-9223372036854775809",
                "18446744073709551616",
                "123456789012345678901234567890",
                "1e400",
                "-1e400",
                "1e-400",
                r#""""#,
                r#""abc""#,
                r#""\u00e9\n\"""#,
                r#""\ud83d\ude00""#,
                r#""\ud800""#,
                r#""{[""#,
                // Past the first bytes `find_byte` checks in registers, with and without escapes.
                r#""a string longer than sixteen bytes""#,
                r#""a string longer than sixteen bytes \" with an escaped quote""#,
            ])
            .prop_map(str::to_owned),
            any::<i64>().prop_map(|v| v.to_string()),
        ];
        leaf.prop_recursive(8, 64, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec((prop::sample::select(vec!["a", "b", "c", "\\u0061", "\\ud800", "a key longer than sixteen bytes"]), inner), 0..5)
                    .prop_map(|entries| {
                        let entries: Vec<String> = entries.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
                        format!("{{{}}}", entries.join(", "))
                    }),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_validated_path_infers_what_observe_infers(records in prop::collection::vec(json_text(), 1..8)) {
            let mut shipped = InferredSchema::new();
            let mut validated = InferredSchema::new();
            for record in records.iter().filter(|r| is_valid_json(r.as_bytes())) {
                let padded = format!(" \n{record}\t ");
                prop_assert!(shipped.observe(padded.as_bytes()));
                prop_assert!(validated.observe_validated(padded.as_bytes()));
                prop_assert_eq!(
                    serde_json::to_string(&validated).unwrap(),
                    serde_json::to_string(&shipped).unwrap(),
                    "{}", record
                );
            }
        }
    }

    #[test]
    fn find_byte_finds_the_first_occurrence_at_every_offset_and_length() {
        for len in 0..80usize {
            for from in 0..=len {
                for quote in [None, Some(from), Some(len.saturating_sub(1)), Some((from + len) / 2)] {
                    let mut text = vec![b'x'; len];
                    if let Some(q) = quote.filter(|&q| q < len && q >= from) {
                        text[q] = b'"';
                        // A second one later must not win.
                        if q + 3 < len {
                            text[q + 3] = b'"';
                        }
                    }
                    let naive = text[from..].iter().position(|&b| b == b'"').map(|i| from + i);
                    assert_eq!(find_byte(&text, from, b'"'), naive, "len {len}, from {from}, quote {quote:?}");
                }
            }
        }
        assert_eq!(find_byte(b"abc", 4, b'"'), None);
    }

    #[test]
    fn the_validated_path_agrees_on_edge_cases() {
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        let deep_object = format!("{}{{\"s\": \"}}]\\\"\"}}{}", r#"{"a":"#.repeat(40), "}".repeat(40));
        for record in [
            r#"{"a": -0, "b": 1E400, "c": 9223372036854775808, "d": -9223372036854775808, "e": 12345678901234567890123}"#,
            r#"{"k\u0061y": 1, "key": "x", "a": {"a": {"a": [1, "x", null, [], {}]}}}"#,
            r#"{"a": 1, "a": "two", "b": [[1.5], ["x"]], "é": true, "": false}"#,
            r#"[{"x": 1}, {"y": [true]}]"#,
            r#""top-level string with \" and \\""#,
            "  {  }  ",
            &deep,
            &deep_object,
        ] {
            assert!(is_valid_json(record.as_bytes()), "{record}");
            let mut shipped = InferredSchema::new();
            let mut validated = InferredSchema::new();
            assert!(shipped.observe(record.as_bytes()));
            assert!(validated.observe_validated(record.as_bytes()));
            assert_eq!(serde_json::to_string(&validated).unwrap(), serde_json::to_string(&shipped).unwrap(), "{record}");
        }
    }

    #[test]
    fn the_validated_path_agrees_on_github_events() {
        let Some(data) = crate::parser::test_support::github_events_text() else { return };
        let mut shipped = InferredSchema::new();
        let mut validated = InferredSchema::new();
        for line in data.lines().filter(|l| !l.trim().is_empty()).take(3000) {
            assert!(shipped.observe(line.as_bytes()));
            assert!(validated.observe_validated(line.as_bytes()));
        }
        assert_eq!(serde_json::to_string(&validated).unwrap(), serde_json::to_string(&shipped).unwrap());
    }

    proptest! {
        #[test]
        fn sonic_and_serde_json_paths_infer_the_same_tree(records in prop::collection::vec(json_text(), 1..8)) {
            let mut shipped = InferredSchema::new();
            let mut serde_only = InferredSchema::new();
            for record in &records {
                let mut alone = InferredSchema::new();
                if alone.observe_with_sonic(record.as_bytes()) {
                    let mut reference = InferredSchema::new();
                    prop_assert!(reference.observe_with_serde_json(record.as_bytes()));
                    prop_assert_eq!(
                        serde_json::to_string(&alone).unwrap(),
                        serde_json::to_string(&reference).unwrap(),
                        "{}", record
                    );
                }
                prop_assert!(shipped.observe(record.as_bytes()), "{}", record);
                prop_assert!(serde_only.observe_with_serde_json(record.as_bytes()));
            }
            prop_assert_eq!(serde_json::to_string(&shipped.root).unwrap(), serde_json::to_string(&serde_only.root).unwrap());
        }
    }

    /// Test-only alternatives to [`merge_record`], for the measurement below.
    fn merge_serde_value(node: &mut Node, value: &serde_json::Value) {
        use serde_json::Value;
        let types = match value {
            Value::Null => TypeSet::NULL,
            Value::Bool(_) => TypeSet::BOOL,
            Value::Number(n) if n.is_i64() => TypeSet::INT,
            Value::Number(_) => TypeSet::FLOAT,
            Value::String(_) => TypeSet::STRING,
            Value::Array(items) => {
                let node_items = node.items.get_or_insert_with(Box::default);
                for item in items {
                    merge_serde_value(node_items, item);
                }
                TypeSet::ARRAY
            }
            Value::Object(map) => {
                for (i, (key, child)) in map.iter().enumerate() {
                    let position = node.child_position(key, i);
                    merge_serde_value(&mut node.children[position], child);
                }
                TypeSet::OBJECT
            }
        };
        node.types.insert(types);
    }

    /// Measures inference on an NDJSON file of GitHub events (e.g. `githubComplexTypeEvents_data.json`
    /// from the Maven Central jar `org.apache.pinot:pinot-tools:0.11.0`):
    /// `SHOAL_GITHUB_EVENTS=… cargo test --release -p shoal-core --lib observe_throughput -- --ignored --nocapture`
    #[test]
    #[ignore = "measurement; needs SHOAL_GITHUB_EVENTS"]
    fn observe_throughput_on_github_events() {
        let Ok(path) = std::env::var("SHOAL_GITHUB_EVENTS") else { return };
        let data = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = data.lines().filter(|l| !l.trim().is_empty()).collect();
        let bytes: usize = lines.iter().map(|l| l.len()).sum();
        let measure = |name: &str, run: &mut dyn FnMut() -> InferredSchema| {
            let mut best = f64::MAX;
            let mut schema = InferredSchema::new();
            for _ in 0..5 {
                let start = std::time::Instant::now();
                schema = run();
                best = best.min(start.elapsed().as_secs_f64());
            }
            println!(
                "{name:<40} {:>6.0} MB/s {:>9.0} records/s ({} top-level fields)",
                bytes as f64 / best / 1e6,
                lines.len() as f64 / best,
                schema.arrow_schema().fields().len()
            );
            schema
        };
        println!("{} records, {} bytes", lines.len(), bytes);
        let reference = measure("observe (as shipped)", &mut || {
            let mut schema = InferredSchema::new();
            for line in &lines {
                assert!(schema.observe(line.as_bytes()));
            }
            schema
        });
        measure("observe_validated (one pass, log records)", &mut || {
            let mut schema = InferredSchema::new();
            for line in &lines {
                assert!(schema.observe_validated(line.as_bytes()));
            }
            schema
        });
        measure("sonic path only (sonic_rs::Value + walk)", &mut || {
            let mut schema = InferredSchema::new();
            for line in &lines {
                assert!(schema.observe_with_sonic(line.as_bytes()));
            }
            schema
        });
        let via_serde_path = measure("serde_json path only (validate + stream)", &mut || {
            let mut schema = InferredSchema::new();
            for line in &lines {
                assert!(schema.observe_with_serde_json(line.as_bytes()));
            }
            schema
        });
        measure("  of which streaming merge", &mut || {
            let mut schema = InferredSchema::new();
            for line in &lines {
                merge_record(&mut schema.root, line.as_bytes()).unwrap();
            }
            schema
        });
        measure("  of which validation (IgnoredAny)", &mut || {
            for line in &lines {
                assert!(is_valid_json(line.as_bytes()));
            }
            InferredSchema::new()
        });
        let via_serde = measure("serde_json::Value + walk", &mut || {
            let mut schema = InferredSchema::new();
            for line in &lines {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                merge_serde_value(&mut schema.root, &value);
            }
            schema
        });
        // Same types (child order may differ: serde_json::Value sorts keys).
        let types = |s: &InferredSchema| {
            let mut fields: Vec<String> = s.arrow_schema().fields().iter().map(|f| f.name().clone()).collect();
            fields.sort();
            fields
        };
        assert_eq!(types(&via_serde), types(&reference));
        let json = |s: &InferredSchema| serde_json::to_string(&s.root).unwrap();
        assert_eq!(json(&via_serde_path), json(&reference));
    }

    fn path(text: &str) -> FieldPath {
        FieldPath::parse(text).unwrap()
    }

    /// The field limit keeps the shallowest fields, marks the nodes it cut, and afterwards
    /// every way of observing or merging parses past new keys without adding them.
    #[test]
    fn the_field_limit_keeps_the_shallowest_fields_and_stops_new_keys() {
        let mut schema = InferredSchema::new();
        assert!(schema.observe(br#"{"id": 1, "a": {"x": 1, "y": {"deep": 1}}, "list": [{"k": 1}], "b": 2}"#));
        // Depth 0: id, a, list, b (4); depth 1: a.x, a.y, list's items (3); depth 2:
        // a.y.deep, items.k (2). A limit of 8 keeps depths 0 and 1 and the first of depth 2.
        assert_eq!(schema.field_count(), 9);
        assert!(schema.limit_fields(8));
        assert_eq!(schema.field_count(), 8);
        assert!(schema.arrow_field(&path("a.y.deep")).is_some());
        assert!(schema.types_at(&path("list")).is_some());
        assert!(!schema.limit_fields(8), "within the limit: nothing more to cut");

        // The schema is frozen: new keys and items are parsed past and not added, by every
        // path, while the types of the fields kept still widen.
        let record = br#"{"id": "2", "a": {"x": 3, "y": {"deep": 2, "new": {"n": 1}}}, "list": [{"k": 1, "z": [1]}], "c": 5}"#;
        let before = serde_json::to_string(&schema).unwrap();
        for observe in [InferredSchema::observe as fn(&mut InferredSchema, &[u8]) -> bool, InferredSchema::observe_validated] {
            let mut copy: InferredSchema = serde_json::from_str(&before).unwrap();
            assert!(observe(&mut copy, record));
            assert_eq!(copy.record_count(), 2);
            assert!(copy.types_at(&path("a.y.new")).is_none());
            assert!(copy.types_at(&path("c")).is_none());
            assert_eq!(copy.field_count(), 8);
            assert_eq!(copy.types_at(&path("id")), Some(TypeSet::INT | TypeSet::STRING));
        }
        let mut fresh = InferredSchema::new();
        assert!(fresh.observe(record));
        let mut merged: InferredSchema = serde_json::from_str(&before).unwrap();
        merged.merge(&fresh);
        assert!(merged.types_at(&path("a.y.new")).is_none());
        assert_eq!(merged.field_count(), 8);

        // A column the limit dropped is named as such; one no record had stays unknown.
        match schema.columns(&[path("a.y.new")]) {
            Err(Error::ColumnNotInferred { column, under, limit }) => {
                assert_eq!((column.as_str(), under.as_str(), limit), ("a.y.new", "`a.y`", MAX_SCHEMA_FIELDS));
            }
            other => panic!("{other:?}"),
        }
        let mut unlimited = InferredSchema::new();
        assert!(unlimited.observe(br#"{"a": 1}"#));
        assert!(matches!(unlimited.columns(&[path("nope")]), Err(Error::UnknownColumn { .. })));
    }

    /// A root past the limit keeps its first keys; the cut survives a checkpoint's serde.
    #[test]
    fn a_wide_root_keeps_its_first_keys_through_serde() {
        let mut schema = InferredSchema::new();
        for i in 0..50 {
            assert!(schema.observe_validated(format!(r#"{{"k{i}": {i}, "v": {{"n{i}": 1}}}}"#).as_bytes()));
        }
        assert_eq!(schema.field_count(), 101);
        assert!(schema.limit_fields(20));
        let fields: Vec<String> = schema.arrow_schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(fields.len(), 20);
        assert_eq!(fields[..3], ["k0", "v", "k1"]);
        let copy: InferredSchema = serde_json::from_str(&serde_json::to_string(&schema).unwrap()).unwrap();
        let mut copy = copy;
        assert!(copy.observe_validated(br#"{"k999": 1}"#));
        assert_eq!(copy.field_count(), 20);
        assert!(matches!(
            copy.columns(&[path("k999")]),
            Err(Error::ColumnNotInferred { ref under, .. }) if under == "the record"
        ));
    }
}
