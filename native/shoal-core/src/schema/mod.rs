//! The table's inferred schema and the Arrow batches built against it.
//!
//! - [`InferredSchema`] is the union of the JSON types seen at every path, kept as a tree
//!   the way AsterixDB's tuple compactor does (Alkowaileet et al., "An LSM-based Tuple
//!   Compaction Framework for Apache AsterixDB", VLDB 2019): each node holds the set of
//!   JSON types seen at its path ([`TypeSet`]), an object node its children in first-seen
//!   order, an array node one `items` node for all its elements. Flushing pages feed it
//!   records ([`InferredSchema::observe`]), per-thread or per-shard schemas are combined
//!   with [`InferredSchema::merge`], and checkpoints store it with serde. It maps to the
//!   Arrow schema that `GetSchema` and Spark see ([`InferredSchema::arrow_schema`]).
//! - [`BatchBuilder`] turns scanned fields (the parser's values, or raw JSON text) into an Arrow
//!   [`RecordBatch`](arrow_array::RecordBatch) of those columns, coercing what does not
//!   fit a column's type to null (or, in text columns, to its JSON text) instead of
//!   failing.
//!
//! Type mapping (all fields nullable; `null` mixes with anything):
//!
//! | types seen at a path | Arrow type |
//! |---|---|
//! | only `null` | `Utf8` |
//! | bool | `Boolean` |
//! | int | `Int64` |
//! | float, or int and float | `Float64` |
//! | string | `Utf8` |
//! | object | `Struct` of the children |
//! | array | `List` of the items' type (`List<Utf8>` when only empty arrays were seen) |
//! | any other mix | `Utf8` holding JSON text, field metadata [`JSON_TEXT_METADATA_KEY`]` = "true"` |
//!
//! # Example
//! ```
//! use shoal_core::schema::{BatchBuilder, InferredSchema};
//! use shoal_core::FieldPath;
//!
//! let mut schema = InferredSchema::new();
//! assert!(schema.observe(br#"{"id": 1, "actor": {"login": "ada"}}"#));
//! assert!(schema.observe(br#"{"id": "x2", "actor": {"login": "bob"}}"#));
//!
//! let columns: Vec<_> = ["id", "actor.login"]
//!     .iter()
//!     .map(|text| {
//!         let path = FieldPath::parse(text).unwrap();
//!         let field = schema.arrow_field(&path).unwrap();
//!         (path, field)
//!     })
//!     .collect();
//! let mut builder = BatchBuilder::new(&columns);
//! builder.append_row(&[Some("1"), Some(r#""ada""#)]);
//! builder.append_row(&[Some(r#""x2""#), None]);
//! let batch = builder.finish().unwrap();
//! assert_eq!(batch.num_rows(), 2);
//! assert_eq!(batch.schema().field(1).name(), "actor.login");
//! ```

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{self, DeserializeSeed, Visitor};
use serde::{Deserializer, Serialize, Serializer};

mod arrow_batch;
mod infer;
mod tail;

pub use arrow_batch::BatchBuilder;
pub use infer::{InferredSchema, TypeSet, MAX_INFERRED_DEPTH, MAX_SCHEMA_FIELDS, SCHEMA_RESERVED_BYTES};
pub(crate) use infer::validated::Cursor;
pub(crate) use tail::TailSchema;

/// Metadata key set (to `"true"`) on a `Utf8` field whose values are JSON text because
/// the path holds values of incompatible types (e.g. strings and numbers).
pub const JSON_TEXT_METADATA_KEY: &str = "shoal.json_text";

/// A nullable `Utf8` field named `name` marked as holding JSON text.
#[must_use]
pub fn json_text_field(name: impl Into<String>) -> arrow_schema::Field {
    arrow_schema::Field::new(name, arrow_schema::DataType::Utf8, true)
        .with_metadata(HashMap::from([(JSON_TEXT_METADATA_KEY.to_owned(), "true".to_owned())]))
}

/// True when `field` is marked as holding JSON text ([`JSON_TEXT_METADATA_KEY`]).
#[must_use]
pub fn is_json_text(field: &arrow_schema::Field) -> bool {
    field.metadata().get(JSON_TEXT_METADATA_KEY).is_some_and(|v| v == "true")
}

/// `field` with it and every field nested in it (struct children, list items) nullable.
#[must_use]
pub fn nullable_field(field: &arrow_schema::Field) -> arrow_schema::Field {
    use arrow_schema::DataType;
    let data_type = match field.data_type() {
        DataType::Struct(children) => DataType::Struct(children.iter().map(|c| nullable_field(c)).collect()),
        DataType::List(item) => DataType::List(std::sync::Arc::new(nullable_field(item))),
        other => other.clone(),
    };
    field.clone().with_data_type(data_type).with_nullable(true)
}

/// Object keys in first-seen order with a lookup by name: a linear scan while there are
/// few keys, a hash map (foldhash) beyond that. Lookups compare bytes, so callers holding
/// a key as raw bytes (a log record's text) need not check its UTF-8 first.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyIndex {
    keys: Vec<String>,
    /// Filled only once `keys` outgrows [`KeyIndex::LINEAR_LIMIT`].
    map: HashMap<Box<[u8]>, usize, foldhash::fast::RandomState>,
}

impl KeyIndex {
    /// Up to this many keys, a lookup compares them one by one.
    const LINEAR_LIMIT: usize = 12;

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The position of `key`. `hint` is where the key is expected (records of a stream
    /// tend to repeat the key order), checked first.
    pub(crate) fn find(&self, key: &str, hint: usize) -> Option<usize> {
        self.find_bytes(key.as_bytes(), hint)
    }

    /// [`find`](Self::find) for a key given as bytes (which need not be UTF-8: such a
    /// key is never found).
    pub(crate) fn find_bytes(&self, key: &[u8], hint: usize) -> Option<usize> {
        if self.keys.get(hint).is_some_and(|k| short_eq(k.as_bytes(), key)) {
            return Some(hint);
        }
        if self.keys.len() <= Self::LINEAR_LIMIT {
            self.keys.iter().position(|k| short_eq(k.as_bytes(), key))
        } else {
            self.map.get(key).copied()
        }
    }

    /// Keeps the first `len` keys.
    pub(crate) fn truncate(&mut self, len: usize) {
        if len >= self.keys.len() {
            return;
        }
        self.keys.truncate(len);
        if self.keys.len() > Self::LINEAR_LIMIT {
            self.map.retain(|_, position| *position < len);
        } else {
            self.map = HashMap::default();
        }
    }

    /// Appends `key`, which must be absent; returns its position.
    pub(crate) fn push(&mut self, key: &str) -> usize {
        let position = self.keys.len();
        self.keys.push(key.to_owned());
        if self.keys.len() > Self::LINEAR_LIMIT {
            if self.map.is_empty() {
                self.map = self.keys.iter().enumerate().map(|(i, k)| (Box::from(k.as_bytes()), i)).collect();
            } else {
                self.map.insert(Box::from(key.as_bytes()), position);
            }
        }
        position
    }
}

/// `a == b`, without a call to `memcmp` for keys of up to 16 bytes (most object keys):
/// shorter than 8 bytes byte by byte, else two overlapping 8-byte loads from each end.
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    if n > 16 {
        return a == b;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
}

impl<S: AsRef<str>> FromIterator<S> for KeyIndex {
    /// Collects keys, dropping repeats (the first position wins).
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut index = KeyIndex::default();
        for key in iter {
            if index.find(key.as_ref(), index.len()).is_none() {
                index.push(key.as_ref());
            }
        }
        index
    }
}

impl Serialize for KeyIndex {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.keys.serialize(serializer)
    }
}

/// Deserializes an object key, borrowing it from the input when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// The JSONTestSuite parsing cases (name, bytes), from `$JSON_TEST_SUITE` or the shared
/// data folder next to the repository; empty when neither exists.
#[cfg(test)]
pub(crate) fn json_test_suite() -> Vec<(String, Vec<u8>)> {
    let dir = std::env::var_os("JSON_TEST_SUITE").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/JSONTestSuite"),
        std::path::PathBuf::from,
    );
    let Ok(entries) = std::fs::read_dir(dir.join("test_parsing")) else { return Vec::new() };
    let mut cases: Vec<(String, Vec<u8>)> = entries
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            Some((path.file_name()?.to_string_lossy().into_owned(), std::fs::read(&path).ok()?))
        })
        .collect();
    cases.sort();
    cases
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn key_index_finds_keys_before_and_after_switching_to_a_hash_map() {
        let mut index = KeyIndex::default();
        for i in 0..40 {
            let key = format!("k{i}");
            assert_eq!(index.find(&key, 0), None);
            assert_eq!(index.push(&key), i);
            for j in 0..=i {
                assert_eq!(index.find(&format!("k{j}"), 3), Some(j), "after {i} keys");
            }
        }
        assert_eq!(index.find("absent", 100), None);
    }

    #[test]
    fn short_eq_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=base.len() {
            let a = &base[..n];
            assert!(short_eq(a, a), "{n}");
            assert!(!short_eq(a, &base[..n.saturating_sub(1)]) || n == 0, "{n}: shorter");
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!short_eq(a, &b), "{n} bytes, differing at {at}");
            }
        }
    }

    #[test]
    fn key_index_collected_from_repeated_keys_keeps_the_first_position() {
        let index: KeyIndex = ["a", "b", "a", "c"].into_iter().collect();
        assert_eq!(index.keys(), ["a", "b", "c"]);
        assert_eq!(index.find("c", 0), Some(2));
    }
}
