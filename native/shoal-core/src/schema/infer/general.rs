//! The general ways of observing a record: a `sonic_rs` document walked into the tree
//! (records with few brackets), or `serde_json` streamed into it without a document (any
//! other valid JSON, after a validation pass), with the tokens `serde_json` cannot represent
//! replaced. Both give the same tree as the validated cursor (`validated.rs`).

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{KeySeed, Node, TypeSet, MAX_INFERRED_DEPTH, NO_CHILD};

/// Merges one JSON value into a node while it is parsed, without building a document.
pub(super) struct Observe<'a> {
    node: &'a mut Node,
    /// Nesting depth of the value (the record is 0).
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Observe<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Observe<'_> {
    fn mark<E>(self, types: TypeSet) -> Result<(), E> {
        self.node.types.insert(types);
        Ok(())
    }
}

impl<'de> Visitor<'de> for Observe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.mark(TypeSet::BOOL)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.mark(TypeSet::INT)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        // Beyond i64 an Int64 column cannot hold it; Float64 can, approximately.
        self.mark(if i64::try_from(v).is_ok() { TypeSet::INT } else { TypeSet::FLOAT })
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.mark(TypeSet::FLOAT)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.mark(TypeSet::STRING)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.mark(TypeSet::NULL)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.mark(TypeSet::NULL)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.node.types.insert(TypeSet::ARRAY);
        if self.depth >= MAX_INFERRED_DEPTH {
            self.node.types.insert(TypeSet::TOO_DEEP);
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        if self.node.truncated && self.node.items.is_none() {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        let items = self.node.items.get_or_insert_with(Box::default);
        while seq.next_element_seed(Observe { node: &mut *items, depth: self.depth + 1 })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let node = self.node;
        node.types.insert(TypeSet::OBJECT);
        if self.depth >= MAX_INFERRED_DEPTH {
            node.types.insert(TypeSet::TOO_DEEP);
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        let mut hint = 0;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let position = node.child_position(&key, hint);
            if position != NO_CHILD {
                hint = position + 1;
            }
            match node.children.get_mut(position) {
                Some(child) => map.next_value_seed(Observe { node: child, depth: self.depth + 1 })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Records with at most this many `{` and `[` bytes (a bound on their nesting depth) take
/// the sonic-rs path of [`InferredSchema::observe`]. sonic-rs's document parser recurses
/// once per nesting level with no limit; on a 2 MiB thread stack it was measured to
/// overflow at 64 levels in an unoptimised build and beyond 3,000 in an optimised one.
/// (GitHub events: median 7, 99th percentile 114, largest 730.)
pub(super) const SONIC_MAX_BRACKETS: usize = if cfg!(debug_assertions) { 16 } else { 1000 };

/// Number of `{` and `[` bytes in `text`, strings included.
pub(super) fn open_brackets(text: &[u8]) -> usize {
    text.iter().map(|&b| usize::from(b == b'{' || b == b'[')).sum()
}

/// Merges a parsed value at nesting depth `depth` into `node`; the same result as
/// [`Observe`] on its text.
pub(super) fn merge_sonic_value(node: &mut Node, value: &sonic_rs::Value, depth: usize) {
    use sonic_rs::{JsonContainerTrait, JsonType, JsonValueTrait};
    let types = match value.get_type() {
        JsonType::Null => TypeSet::NULL,
        JsonType::Boolean => TypeSet::BOOL,
        // Integers beyond i64 (u64 or larger) count as floats, as in `Observe`.
        JsonType::Number if value.is_i64() => TypeSet::INT,
        JsonType::Number => TypeSet::FLOAT,
        JsonType::String => TypeSet::STRING,
        JsonType::Array if depth >= MAX_INFERRED_DEPTH => TypeSet::ARRAY | TypeSet::TOO_DEEP,
        JsonType::Object if depth >= MAX_INFERRED_DEPTH => TypeSet::OBJECT | TypeSet::TOO_DEEP,
        JsonType::Array => {
            if !(node.truncated && node.items.is_none()) {
                let items = node.items.get_or_insert_with(Box::default);
                for item in value.as_array().into_iter().flat_map(|a| a.iter()) {
                    merge_sonic_value(items, item, depth + 1);
                }
            }
            TypeSet::ARRAY
        }
        JsonType::Object => {
            for (i, (key, child)) in value.as_object().into_iter().flat_map(|o| o.iter()).enumerate() {
                let position = node.child_position(key, i);
                if let Some(child_node) = node.children.get_mut(position) {
                    merge_sonic_value(child_node, child, depth + 1);
                }
            }
            TypeSet::OBJECT
        }
    };
    node.types.insert(types);
}

/// Streams `record` into `root`. Valid JSON fails only on tokens `serde_json` cannot
/// represent: containers deeper than [`MAX_INFERRED_DEPTH`] are skipped, so its
/// recursion limit (128) is never reached.
pub(super) fn merge_record(root: &mut Node, record: &[u8]) -> serde_json::Result<()> {
    let mut deserializer = serde_json::Deserializer::from_slice(record);
    Observe { node: root, depth: 0 }.deserialize(&mut deserializer)
}

/// A copy of the valid JSON `text` in which numbers that overflow an `f64` become `1.0`
/// and lone UTF-16 surrogate escapes become `\ufffd`: the same JSON types, all of them
/// representable by `serde_json`.
pub(super) fn replace_unrepresentable(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&byte) = text.get(i) {
        match byte {
            b'"' => {
                out.push(byte);
                i += 1;
                while let Some(&c) = text.get(i) {
                    if c == b'"' {
                        break;
                    }
                    if c == b'\\' && text.get(i + 1) == Some(&b'u') {
                        let unit = hex_escape(text, i);
                        let is_lead = unit.is_some_and(|u| (0xD800..0xDC00).contains(&u));
                        let is_trail = |u: Option<u32>| u.is_some_and(|u| (0xDC00..0xE000).contains(&u));
                        if is_lead && is_trail(hex_escape(text, i + 6)) {
                            out.extend_from_slice(text.get(i..i + 12).unwrap_or_default());
                            i += 12;
                        } else if is_lead || is_trail(unit) {
                            out.extend_from_slice(b"\\ufffd");
                            i += 6;
                        } else {
                            out.extend_from_slice(text.get(i..i + 2).unwrap_or_default());
                            i += 2;
                        }
                    } else if c == b'\\' {
                        out.extend_from_slice(text.get(i..i + 2).unwrap_or_default());
                        i += 2;
                    } else {
                        out.push(c);
                        i += 1;
                    }
                }
                if i < text.len() {
                    out.push(b'"');
                    i += 1;
                }
            }
            b'-' | b'0'..=b'9' => {
                let len = text
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                let token = text.get(i..i + len).unwrap_or_default();
                let finite =
                    std::str::from_utf8(token).ok().and_then(|t| t.parse::<f64>().ok()).is_some_and(f64::is_finite);
                out.extend_from_slice(if finite { token } else { b"1.0" });
                i += len;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// The code unit of the `\uXXXX` escape starting at `text[at]`, if there is one.
pub(super) fn hex_escape(text: &[u8], at: usize) -> Option<u32> {
    let escape = text.get(at..at + 6)?;
    if escape.get(..2)? != b"\\u" {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(escape.get(2..)?).ok()?, 16).ok()
}

/// Full validation of one JSON text (iterative: no depth limit, no allocation per value).
/// UTF-8 is checked up front because `serde_json` skips strings it ignores unchecked.
pub(super) fn is_valid_json(text: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(text) else { return false };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    IgnoredAny::deserialize(&mut deserializer).is_ok() && deserializer.end().is_ok()
}
