//! The compactor's one pass per record: the schema of a file's records is inferred and
//! their values are shredded into columns in the same walk over each record's bytes (the
//! AsterixDB tuple compactor infers the schema while it writes, Alkowaileet et al., VLDB
//! 2019 §3; TellStore keeps the scan side columnar, VLDB 2017 §4).
//!
//! A tree of the object keys seen so far (a node per path, its children in first-seen
//! order) carries, per path, the JSON types seen there and one column builder per scalar
//! type. The values are the ones a scan of the raw record extracts (the On-Demand
//! parser's semantics, `crate::parser::OnDemandParser`): the first of duplicate keys wins
//! (a later occurrence is skipped whole), strings are unescaped (lone surrogates become
//! U+FFFD), integers that fit an `i64` are `Int`, other numbers `Float` (±infinity beyond
//! `f64`), containers are not stored as values (their paths are opaque). Objects deeper
//! than [`MAX_INFERRED_DEPTH`] are skipped and marked too deep, as inference does.
//!
//! A path that held only arrays (and nulls) whose items are scalars of one type (or
//! numbers) and nulls also gets a `List` column of them.
//!
//! A path that held only objects (and nulls) also gets a column marking the rows whose
//! value is an object, from which a scan rebuilds the value as a struct out of its
//! children's columns (`crate::columnar::assemble`) — unless one of its objects held a
//! lone UTF-16 surrogate escape or a container too deep to infer, whose struct a raw
//! record's conversion (`serde_json`, which refuses lone surrogates and nesting beyond
//! 128 levels) would not give the same way.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, ListArray};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};

use super::dense::{self, Cell, Columns, Scalar};
use super::layout::{ListItems, ScalarType};

use crate::error::{Error, Result};
use crate::parser::{number_value, unescape_into};
use crate::schema::{Cursor, KeyIndex, TypeSet, MAX_INFERRED_DEPTH};
use crate::value::FieldValue;

/// A `Float64` array of `len` values: `floats` where it is valid, else `ints` converted
/// (`i64 as f64`, rounding to nearest as parsing the integer's text does), else null —
/// a path's integer and float columns (at most one valid in a row) as one number column.
pub(crate) fn as_floats(ints: Option<&ArrayRef>, floats: Option<&ArrayRef>, len: usize) -> ArrayRef {
    use arrow_array::cast::AsArray;
    match (ints, floats) {
        (None, Some(floats)) => Arc::clone(floats),
        (None, None) => arrow_array::new_null_array(&arrow_schema::DataType::Float64, len),
        (Some(ints), floats) => {
            let ints = ints.as_primitive::<arrow_array::types::Int64Type>();
            let floats = floats.map(|a| a.as_primitive::<arrow_array::types::Float64Type>());
            #[allow(clippy::cast_precision_loss)]
            let merged: arrow_array::Float64Array = (0..len)
                .map(|row| match floats.filter(|f| f.is_valid(row)) {
                    Some(f) => Some(f.value(row)),
                    None => ints.is_valid(row).then(|| ints.value(row) as f64),
                })
                .collect();
            Arc::new(merged)
        }
    }
}

/// One path of the tree.
#[derive(Default)]
struct Node {
    /// The JSON types seen at the path.
    types: TypeSet,
    /// The keys of the children, in first-seen order (the schema's own key lookup).
    keys: KeyIndex,
    /// The node ids of the children (`children[i]` is under the `i`-th key).
    children: Vec<usize>,
    /// A key was not added here because the file's bound on paths was reached: the
    /// node's contents are not all in the file.
    cut: bool,
    /// An object or array at the path held a lone surrogate escape or a container too
    /// deep to infer: its values are not rebuilt from columns.
    lossy: bool,
    /// The JSON types of its arrays' items (`NULL` for null items); `OBJECT` or `ARRAY`
    /// when an item was a container (the arrays are not kept as lists then).
    item_types: TypeSet,
    /// The record generation in which the node was last entered (the first of duplicate
    /// keys wins).
    seen: u32,
    /// The path's columns so far (`dense.rs`: values written at their rows).
    columns: Option<Columns>,
    /// The rows whose value is an array of scalars kept as a list, ascending.
    arrays: Vec<u32>,
    /// The items of its arrays of scalars, in order, each with its row (nulls too).
    items: Vec<Cell>,
    /// Its items' strings, one after the other.
    item_strings: String,
}

/// A path of the finished tree, parents before children, children in first-seen order.
pub(crate) struct ShreddedPath {
    /// The object keys from the record's root.
    pub segments: Vec<String>,
    /// The JSON types seen there.
    pub types: TypeSet,
    /// Keys under it were left out by the bound on paths ([`Shredder::new`]).
    pub cut: bool,
    /// Its columns (`rows` long) in `ScalarType::ALL` order; `None` for a type it never
    /// held.
    pub columns: [Option<ArrayRef>; 4],
    /// When it held only objects (and nulls), none of them in a lossy record: a `Boolean`
    /// column (`rows` long), `true` in the rows whose value is an object, null elsewhere.
    pub objects: Option<ArrayRef>,
    /// When it held only arrays (and nulls) of scalars and nulls of one type (or integers
    /// and floats), none of them lossy: a `List` column (`rows` long) of the items, null
    /// where the value is not an array, and what its items are.
    pub list: Option<(ArrayRef, ListItems)>,
}

/// Infers the schema of a run of records and shreds them into columns, one pass each.
pub(crate) struct Shredder {
    /// Node 0 is the record itself.
    nodes: Vec<Node>,
    /// Paths (nodes below the root) kept at most.
    max_paths: usize,
    generation: u32,
    key_buf: String,
    /// The record being shredded holds a lone surrogate escape somewhere (see
    /// [`Node::lossy`]).
    record_lossy: bool,
    /// Containers too deep to infer met so far (an object that saw the count change holds
    /// one).
    too_deep: u64,
    /// Records shredded so far (rows).
    rows: u32,
    /// Rows the file has (the length of every column).
    len: usize,
    /// The record's strings that held escapes, unescaped, one after the other.
    scratch: String,
    /// The values of the record being shredded (node, with [`ITEM`] for an array's item),
    /// kept until it parsed to its end.
    pending: Vec<(usize, Scalar)>,
}

impl Shredder {
    /// A shredder of `rows` records that keeps at most `max_paths` paths: keys first seen
    /// after that are skipped (their values stay in the raw records) and their parent is
    /// marked cut.
    pub(crate) fn new(max_paths: usize, rows: usize) -> Self {
        Self {
            nodes: vec![Node::default()],
            max_paths,
            generation: 0,
            key_buf: String::new(),
            record_lossy: false,
            too_deep: 0,
            rows: 0,
            len: rows,
            scratch: String::new(),
            pending: Vec::new(),
        }
    }

    /// Shreds `record` (a log record's payload: valid JSON) as the next row (rows from 0,
    /// one per call). Returns false when the record is not what a validated record must
    /// be (it cannot happen), or is beyond the rows announced: its row stays empty.
    pub(crate) fn shred(&mut self, record: &[u8]) -> bool {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.nodes.iter_mut().for_each(|n| n.seen = 0);
            self.generation = 1;
        }
        let row = self.rows;
        if row as usize >= self.len {
            return false;
        }
        self.rows += 1;
        // UTF-8 is checked once for the whole record (values are then slices of it at
        // quote and delimiter positions, which are character boundaries).
        let Ok(text) = std::str::from_utf8(record) else { return false };
        self.record_lossy = has_lone_surrogate(record);
        let mut pending = std::mem::take(&mut self.pending);
        pending.clear();
        self.scratch.clear();
        let mut cursor = Cursor::new(record);
        let parsed = self.value(0, text, &mut cursor, 0, &mut pending).is_some() && {
            cursor.skip_whitespace();
            cursor.at == record.len()
        };
        if parsed {
            // The values go to their paths' columns, at their row, while the record is in the
            // cache.
            let len = self.len;
            for &(node, value) in &pending {
                let text = match value {
                    Scalar::Text { from, len } => text.get(from as usize..(from + len) as usize).unwrap_or_default(),
                    Scalar::Unescaped { from, len } => self.scratch.get(from as usize..(from + len) as usize).unwrap_or_default(),
                    _ => "",
                };
                let value = match value {
                    Scalar::Text { len, .. } | Scalar::Unescaped { len, .. } => Scalar::Str { len },
                    value => value,
                };
                let n = &mut self.nodes[node & !ITEM];
                if node & ITEM != 0 {
                    n.item_strings.push_str(text);
                    n.items.push(Cell { row, value });
                } else if value == Scalar::Array {
                    n.arrays.push(row);
                } else {
                    n.columns.get_or_insert_with(|| Columns::new(len)).set(row as usize, value, text);
                }
            }
        }
        self.pending = pending;
        parsed
    }

    /// Every path with its types and its columns (as long as the rows announced to
    /// [`Shredder::new`]), and whether keys at the top level were left out by the bound on
    /// paths.
    ///
    /// # Errors
    /// [`Error::Columnar`] when a column's strings exceed 32-bit offsets
    /// ([`Columns::finish`]).
    pub(crate) fn finish(mut self) -> Result<(Vec<ShreddedPath>, bool)> {
        let rows = self.len;
        let mut out = Vec::with_capacity(self.nodes.len() - 1);
        let mut stack: Vec<(usize, Vec<String>)> = vec![(0, Vec::new())];
        while let Some((node, segments)) = stack.pop() {
            // Children pushed in reverse, so that they come out in first-seen order.
            let children: Vec<(usize, Vec<String>)> = self.nodes[node]
                .keys
                .keys()
                .iter()
                .zip(&self.nodes[node].children)
                .map(|(key, &child)| {
                    let mut path = segments.clone();
                    path.push(key.clone());
                    (child, path)
                })
                .collect();
            if node != 0 {
                let n = &mut self.nodes[node];
                let only_objects = n.types.without(TypeSet::NULL) == TypeSet::OBJECT;
                let built = n.columns.take().unwrap_or_else(|| Columns::new(rows)).finish(only_objects && !n.lossy)?;
                let only_arrays = n.types.without(TypeSet::NULL) == TypeSet::ARRAY;
                let (arrays, items, item_strings) = (std::mem::take(&mut n.arrays), std::mem::take(&mut n.items), std::mem::take(&mut n.item_strings));
                let list = match ListItems::of(n.item_types) {
                    Some(kind) if only_arrays && !n.lossy => list_column(&arrays, &items, &item_strings, rows, kind.stored())?.map(|list| (list, kind)),
                    _ => None,
                };
                out.push(ShreddedPath { segments, types: n.types, cut: n.cut, columns: built.columns, objects: built.objects, list });
            }
            stack.extend(children.into_iter().rev());
        }
        Ok((out, self.nodes[0].cut))
    }

    /// The value at the cursor over `text`, for `node` at nesting depth `depth`.
    fn value<'t>(
        &mut self,
        node: usize,
        text: &'t str,
        cursor: &mut Cursor<'t>,
        depth: usize,
        pending: &mut Vec<(usize, Scalar)>,
    ) -> Option<()> {
        let first = cursor.next_byte()?;
        let start = cursor.at - 1;
        let (types, value) = match first {
            b'{' | b'[' if depth >= MAX_INFERRED_DEPTH => {
                cursor.skip_container()?;
                self.too_deep += 1;
                (if first == b'{' { TypeSet::OBJECT } else { TypeSet::ARRAY } | TypeSet::TOO_DEEP, None)
            }
            b'{' => {
                let too_deep = self.too_deep;
                self.object(node, text, cursor, depth, pending)?;
                // An object holding a lone surrogate escape (a key or any value inside) or a
                // container too deep to infer is not rebuilt as a struct from columns.
                if self.too_deep != too_deep || (self.record_lossy && has_lone_surrogate(text.as_bytes().get(start..cursor.at)?)) {
                    self.nodes[node].lossy = true;
                }
                (TypeSet::OBJECT, Some(Scalar::Object))
            }
            b'[' => {
                let too_deep = self.too_deep;
                self.array(node, text, cursor, pending)?;
                if self.too_deep != too_deep || (self.record_lossy && has_lone_surrogate(text.as_bytes().get(start..cursor.at)?)) {
                    self.nodes[node].lossy = true;
                }
                (TypeSet::ARRAY, None)
            }
            _ => scalar(first, start, text, cursor, &mut self.scratch)?,
        };
        self.nodes[node].types.insert(types);
        // (A top-level scalar is a record, not a path: nothing to store.)
        if let Some(value) = value.filter(|_| node != 0) {
            pending.push((node, value));
        }
        Some(())
    }

    /// An array whose `[` was consumed, for `node`: its items are kept as the row's list
    /// when they are scalars or nulls; at the first container item the rest is skipped
    /// and the path's arrays are not kept as lists.
    fn array<'t>(
        &mut self,
        node: usize,
        text: &'t str,
        cursor: &mut Cursor<'t>,
        pending: &mut Vec<(usize, Scalar)>,
    ) -> Option<()> {
        let listable = node != 0 && !self.nodes[node].item_types.contains(TypeSet::OBJECT) && !self.nodes[node].item_types.contains(TypeSet::ARRAY);
        if !listable {
            return cursor.skip_container();
        }
        let marker = pending.len();
        pending.push((node, Scalar::Array));
        cursor.skip_whitespace();
        if text.as_bytes().get(cursor.at) == Some(&b']') {
            cursor.at += 1;
            return Some(());
        }
        loop {
            let first = cursor.next_byte()?;
            let start = cursor.at - 1;
            if matches!(first, b'{' | b'[') {
                // Not an array of scalars: none of the path's arrays is kept as a list.
                self.nodes[node].item_types.insert(if first == b'{' { TypeSet::OBJECT } else { TypeSet::ARRAY });
                pending.truncate(marker);
                // The rest skipped forwards (the cursor's escape search only moves forwards).
                cursor.skip_container()?;
                loop {
                    match cursor.next_byte()? {
                        b',' => skip_value(cursor)?,
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            let (types, value) = scalar(first, start, text, cursor, &mut self.scratch)?;
            self.nodes[node].item_types.insert(types);
            pending.push((node | ITEM, value.unwrap_or(Scalar::Null)));
            match cursor.next_byte()? {
                b',' => {}
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// An object whose `{` was consumed, for `node` at depth `depth`.
    fn object<'t>(
        &mut self,
        node: usize,
        text: &'t str,
        cursor: &mut Cursor<'t>,
        depth: usize,
        pending: &mut Vec<(usize, Scalar)>,
    ) -> Option<()> {
        cursor.skip_whitespace();
        if text.as_bytes().get(cursor.at) == Some(&b'}') {
            cursor.at += 1;
            return Some(());
        }
        // Where the next key is expected: after the previous one (the keys of later
        // records mostly come in the order first seen, some of them missing).
        let mut hint = 0;
        loop {
            if cursor.next_byte()? != b'"' {
                return None;
            }
            let start = cursor.at;
            let plain = cursor.string()?.is_some();
            let key = text.get(start..cursor.at - 1)?;
            if cursor.next_byte()? != b':' {
                return None;
            }
            let child = if plain {
                self.child(node, key, &mut hint)
            } else {
                let mut unescaped = std::mem::take(&mut self.key_buf);
                unescaped.clear();
                unescape_into(key, &mut unescaped);
                let child = self.child(node, &unescaped, &mut hint);
                self.key_buf = unescaped;
                child
            };
            match child {
                Some(child) if self.nodes[child].seen != self.generation => {
                    self.nodes[child].seen = self.generation;
                    self.value(child, text, cursor, depth + 1, pending)?;
                }
                // A later occurrence of a duplicate key, or a key beyond the bound.
                _ => skip_value(cursor)?,
            }
            match cursor.next_byte()? {
                b',' => {}
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// The child of `node` under `key`, made if new (`None` beyond the bound on paths);
    /// `hint` is the position tried first, left after the one found.
    fn child(&mut self, node: usize, key: &str, hint: &mut usize) -> Option<usize> {
        let position = match self.nodes[node].keys.find(key, *hint) {
            Some(position) => position,
            None if self.nodes.len() > self.max_paths => {
                self.nodes[node].cut = true;
                return None;
            }
            None => {
                let id = self.nodes.len();
                self.nodes.push(Node::default());
                let parent = &mut self.nodes[node];
                parent.children.push(id);
                parent.keys.push(key)
            }
        };
        *hint = position + 1;
        Some(self.nodes[node].children[position])
    }
}

/// Marks a pending value as an item of its node's array (node ids stay far below it).
const ITEM: usize = 1 << (usize::BITS - 1);

/// A scalar whose first byte `first` (at `start` in `text`) was consumed: its type and
/// value (`None` for null), with the On-Demand parser's semantics (strings unescaped — into
/// `scratch` when they hold escapes —, integers in `i64` range `Int`, other numbers `Float`);
/// `None` when it is not a scalar.
fn scalar(first: u8, start: usize, text: &str, cursor: &mut Cursor<'_>, scratch: &mut String) -> Option<(TypeSet, Option<Scalar>)> {
    Some(match first {
        b'"' => {
            let plain = cursor.string()?;
            let (from, to) = (start + 1, cursor.at - 1);
            let value = if plain.is_some() {
                Scalar::Text { from: u32::try_from(from).ok()?, len: u32::try_from(to - from).ok()? }
            } else {
                let at = u32::try_from(scratch.len()).ok()?;
                unescape_into(text.get(from..to)?, scratch);
                Scalar::Unescaped { from: at, len: u32::try_from(scratch.len()).ok()? - at }
            };
            (TypeSet::STRING, Some(value))
        }
        b't' => {
            cursor.literal(b"rue")?;
            (TypeSet::BOOL, Some(Scalar::Bool(true)))
        }
        b'f' => {
            cursor.literal(b"alse")?;
            (TypeSet::BOOL, Some(Scalar::Bool(false)))
        }
        b'n' => {
            cursor.literal(b"ull")?;
            (TypeSet::NULL, None)
        }
        b'-' | b'0'..=b'9' => {
            cursor.number()?;
            let raw = text.get(start..cursor.at)?;
            let integer = !raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
            match number_value(raw, integer)? {
                FieldValue::Int(i) => (TypeSet::INT, Some(Scalar::Int(i))),
                FieldValue::Float(f) => (TypeSet::FLOAT, Some(Scalar::Float(f))),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The `List` column (`rows` long) of a path's arrays: a list in each row of `arrays`
/// (ascending), its items (`items`, in order with their rows; `strings` their strings one
/// after the other) of type `ty` (`None`: every item null, stored as null `Boolean`s;
/// integers among `Float` items as floats), null in the other rows; `None` when no item
/// of type `ty` was kept (its record did not shred) or the items do not fit 32-bit
/// offsets (the path's arrays are then read from the raw records).
///
/// # Errors
/// [`Error::Columnar`] when building the items fails.
fn list_column(arrays: &[u32], items: &[Cell], strings: &str, rows: usize, ty: Option<ScalarType>) -> Result<Option<ArrayRef>> {
    let Ok(count) = i32::try_from(items.len()) else { return Ok(None) };
    let mut offsets = vec![0i32; rows + 1];
    let mut valid = vec![false; rows];
    let (mut next_row, mut consumed) = (0usize, 0usize);
    for &array_row in arrays {
        let row = array_row as usize;
        if row < next_row || row >= rows {
            continue;
        }
        offsets[next_row + 1..=row].fill(consumed as i32);
        while items.get(consumed).is_some_and(|item| item.row == array_row) {
            consumed += 1;
        }
        offsets[row + 1] = consumed as i32;
        valid[row] = true;
        next_row = row + 1;
    }
    offsets[next_row + 1..].fill(count);
    let mut columns = dense::build(items.iter().enumerate(), items.len(), strings)?.columns;
    let values = match ty {
        Some(ty) => match columns[ty.slot()].take() {
            Some(column) => column,
            None => return Ok(None),
        },
        None => arrow_array::new_null_array(&arrow_schema::DataType::Boolean, items.len()),
    };
    // Ints and floats together: the ints as floats (rounded to nearest, as parsing the
    // integer's text is).
    let values = match (ty, columns[ScalarType::Int.slot()].take()) {
        (Some(ScalarType::Float), Some(ints)) => as_floats(Some(&ints), Some(&values), items.len()),
        _ => values,
    };
    let field = Arc::new(arrow_schema::Field::new("item", values.data_type().clone(), true));
    let nulls = Some(NullBuffer::from(valid)).filter(|n| n.null_count() > 0);
    ListArray::try_new(field, OffsetBuffer::new(ScalarBuffer::from(offsets)), values, nulls)
        .map(|list| Some(Arc::new(list) as ArrayRef))
        .map_err(|e| Error::Columnar(format!("building a list column: {e}")))
}

/// True when `text` (valid JSON) holds a `\u` escape of a lone UTF-16 surrogate: a high
/// one (`D800`–`DBFF`) not followed at once by a low one (`DC00`–`DFFF`), or a low one
/// without a high one before it. The log accepts them (the parsers make them U+FFFD);
/// `serde_json`, which converts struct values of raw records, refuses the whole value.
fn has_lone_surrogate(text: &[u8]) -> bool {
    // The UTF-16 unit of the `\uXXXX` escape whose hex digits start at `at`.
    let unit = |at: usize| text.get(at..at + 4).and_then(|hex| std::str::from_utf8(hex).ok()).and_then(|hex| u16::from_str_radix(hex, 16).ok());
    let mut at = 0;
    while let Some(found) = text.get(at..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        let i = at + found;
        at = i + 2;
        if text.get(i + 1) != Some(&b'u') {
            continue;
        }
        at = i + 6;
        match unit(i + 2) {
            Some(0xD800..=0xDBFF) => {
                let low = if text.get(at..at + 2) == Some(b"\\u") { unit(at + 2) } else { None };
                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                    return true;
                }
                at += 6;
            }
            Some(0xDC00..=0xDFFF) => return true,
            _ => {}
        }
    }
    false
}

/// Skips one value at the cursor.
fn skip_value(cursor: &mut Cursor<'_>) -> Option<()> {
    match cursor.next_byte()? {
        b'{' | b'[' => cursor.skip_container(),
        b'"' => cursor.string().map(drop),
        b't' => cursor.literal(b"rue"),
        b'f' => cursor.literal(b"alse"),
        b'n' => cursor.literal(b"ull"),
        b'-' | b'0'..=b'9' => cursor.number().map(drop),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::borrow::Cow;
    use std::collections::HashSet;

    use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, StringArray};
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::parser::test_support::{arb_json, owned};
    use crate::parser::{FieldSet, OnDemandParser, ParsedBatch, RecordParser};
    use crate::path::FieldPath;

    /// The value row `row` of a path's columns holds (at most one is non-null).
    fn column_value(columns: &[Option<ArrayRef>; 4], row: usize) -> Option<FieldValue<'static>> {
        let mut found = Vec::new();
        for (slot, column) in columns.iter().enumerate() {
            let Some(column) = column else { continue };
            if column.is_null(row) {
                continue;
            }
            found.push(match slot {
                0 => FieldValue::Bool(column.as_any().downcast_ref::<BooleanArray>().unwrap().value(row)),
                1 => FieldValue::Int(column.as_any().downcast_ref::<Int64Array>().unwrap().value(row)),
                2 => FieldValue::Float(column.as_any().downcast_ref::<Float64Array>().unwrap().value(row)),
                _ => FieldValue::Str(Cow::Owned(column.as_any().downcast_ref::<StringArray>().unwrap().value(row).to_owned())),
            });
        }
        assert!(found.len() <= 1, "row {row} has a value in several columns: {found:?}");
        found.pop()
    }

    /// What a column holds for an extracted value: scalars, else nothing.
    fn scalar(value: &FieldValue<'_>) -> Option<FieldValue<'static>> {
        match value {
            FieldValue::Bool(_) | FieldValue::Int(_) | FieldValue::Float(_) | FieldValue::Str(_) => Some(owned(value)),
            _ => None,
        }
    }

    /// Every object-key path of `value` (not into arrays), as serde_json sees it.
    fn key_paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if let Value::Object(map) = value {
            for (key, child) in map {
                prefix.push(key.clone());
                out.push(prefix.clone());
                key_paths(child, prefix, out);
                prefix.pop();
            }
        }
    }

    /// Shreds `records` and checks every path's column, row by row, against what the
    /// On-Demand parser extracts for the path; a path the shredder does not list (and that
    /// is not below a container too deep to infer) must hold no scalar in any record.
    fn check(records: &[String]) {
        let mut shredder = Shredder::new(100_000, records.len());
        for record in records {
            assert!(shredder.shred(record.as_bytes()), "{record}");
        }
        let (paths, cut) = shredder.finish().unwrap();
        assert!(!cut);
        let listed: Vec<(usize, FieldPath)> =
            paths.iter().enumerate().filter_map(|(i, p)| Some((i, FieldPath::from_segments(p.segments.clone()).ok()?))).collect();
        let mut fields = FieldSet::new();
        for (_, path) in &listed {
            fields.insert(path);
        }
        let known: HashSet<Vec<String>> = paths.iter().map(|p| p.segments.clone()).collect();
        // Below a container too deep to infer the file answers from the raw records.
        let deep: Vec<&Vec<String>> = paths.iter().filter(|p| p.types.contains(TypeSet::TOO_DEEP)).map(|p| &p.segments).collect();
        let mut unlisted = Vec::new();
        for record in records {
            let mut all = Vec::new();
            // (serde_json refuses lone surrogates, which the log accepts.)
            if let Ok(value) = serde_json::from_str(record) {
                key_paths(&value, &mut Vec::new(), &mut all);
            }
            for path in all.into_iter().filter(|p| !known.contains(p) && !deep.iter().any(|d| p.starts_with(d))) {
                if let Ok(path) = FieldPath::from_segments(path) {
                    unlisted.push(fields.insert(&path));
                }
            }
        }
        let mut out = ParsedBatch::default();
        let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
        OnDemandParser::new().parse_batch(&refs, &fields, &mut out);
        for (row, record) in records.iter().enumerate() {
            let values = out.record(row).unwrap();
            for (field, (i, path)) in listed.iter().enumerate() {
                assert_eq!(column_value(&paths[*i].columns, row), scalar(&values[field]), "row {row}, path {path}: {record}");
            }
            for &field in &unlisted {
                assert_eq!(scalar(&values[field]), None, "row {row}, unlisted path #{field}: {record}");
            }
        }
    }

    #[test]
    fn hand_made_records_shred_to_what_the_parser_extracts() {
        let deep = format!("{}1{}", r#"{"d":"#.repeat(40), "}".repeat(40));
        let records: Vec<String> = [
            r#"{"a": 1, "b": "x", "c": true, "d": null, "e": 1.5}"#,
            r#"{"a": "1", "b": 2, "c": {"x": 1}, "e": [1, 2]}"#,
            r#"{"a": 1, "a": "dup", "o": {"x": 1}, "o": {"y": 2}}"#,
            r#"{"k\"ey": 1, "\u00e9": "\u00e9\ud83d\ude00", "lone": "\ud800", "esc": "a\\b\n"}"#,
            r#"{"n": -0, "big": 18446744073709551615, "huge": 1e400, "neg": -1e400, "small": -9223372036854775808}"#,
            r#"  { "sp" : [ ] , "o2" : { } , "s" : "" }  "#,
            r#"[1, 2, {"a": 1}]"#,
            r#""just a string""#,
            r#"{"x": {"y": {"z": [{"a": 1}], "w": false}}}"#,
            r#"{"l": ["x\"y", "n", {"b": 1}], "c": 2, "m": [1, 2.5, null], "e": []}"#,
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([deep])
        .collect();
        check(&records);
    }

    #[test]
    fn github_events_shred_to_what_the_parser_extracts() {
        let Some(text) = crate::parser::test_support::github_events_text() else { return };
        let records: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).take(3000).map(str::to_owned).collect();
        check(&records);
    }

    #[test]
    fn a_record_that_does_not_shred_leaves_its_row_empty_and_the_others_whole() {
        let records = [
            r#"{"s": "a\"b", "l": ["x", "y\n"], "n": 1}"#,
            r#"{"s": "lost", "l": ["lost\t"], "n": 2, "t": "#,
            r#"{"s": "c", "l": ["z"], "n": 3}"#,
        ];
        let mut shredder = Shredder::new(1_000, records.len());
        let shredded: Vec<bool> = records.iter().map(|r| shredder.shred(r.as_bytes())).collect();
        assert_eq!(shredded, [true, false, true]);
        let (paths, _) = shredder.finish().unwrap();
        let path = |name: &str| paths.iter().find(|p| p.segments == [name]).unwrap();
        let strings: Vec<Option<&str>> = path("s").columns[3].as_ref().unwrap().as_any().downcast_ref::<StringArray>().unwrap().iter().collect();
        assert_eq!(strings, [Some("a\"b"), None, Some("c")]);
        let ints: Vec<Option<i64>> = path("n").columns[1].as_ref().unwrap().as_any().downcast_ref::<Int64Array>().unwrap().iter().collect();
        assert_eq!(ints, [Some(1), None, Some(3)]);
        let (list, _) = path("l").list.clone().unwrap();
        let list = list.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!((list.is_valid(0), list.is_valid(1), list.is_valid(2)), (true, false, true));
        let items: Vec<Option<&str>> = list.values().as_any().downcast_ref::<StringArray>().unwrap().iter().collect();
        assert_eq!(items, [Some("x"), Some("y\n"), Some("z")]);
        assert_eq!(list.value_offsets(), [0, 2, 2, 3]);
    }

    #[test]
    fn keys_beyond_the_bound_mark_their_parent_cut() {
        let mut shredder = Shredder::new(3, 3);
        for record in [r#"{"a": 1, "m": {"k1": 1}}"#, r#"{"a": 2, "m": {"k2": 2, "k3": 3}}"#, r#"{"z": 1}"#] {
            assert!(shredder.shred(record.as_bytes()));
        }
        let (paths, root_cut) = shredder.finish().unwrap();
        let listed: Vec<(String, bool)> = paths.iter().map(|p| (p.segments.join("."), p.cut)).collect();
        assert_eq!(listed, [("a".to_owned(), false), ("m".to_owned(), true), ("m.k1".to_owned(), false)]);
        assert!(root_cut, "`z` came after the bound");
    }

    #[test]
    fn lone_surrogate_escapes_are_found_and_pairs_and_escaped_backslashes_are_not() {
        for (text, lone) in [
            (r#"{"a": "plain", "b": "\n\"\\"}"#, false),
            (r#"{"a": "\u00e9\ud83d\ude00"}"#, false),
            (r#"{"a": "\\ud800"}"#, false),
            (r#"{"a": "\ud800"}"#, true),
            (r#"{"a": "\ud800x"}"#, true),
            (r#"{"a": "\ud800\n"}"#, true),
            (r#"{"a": "\ud800\u0041"}"#, true),
            (r#"{"a": "\ud800\ud800\udc00"}"#, true),
            (r#"{"a": "\udc00"}"#, true),
            (r#"{"\uDBFF": 1}"#, true),
            (r#"{"a": "\uDBFF\uDFFF"}"#, false),
        ] {
            assert_eq!(has_lone_surrogate(text.as_bytes()), lone, "{text}");
        }
    }

    #[test]
    fn paths_of_objects_only_mark_the_rows_holding_one_unless_lossy() {
        let records: [&str; 4] = [
            r#"{"o": {"a": 1}, "m": 1, "l": {"s": "x"}, "d": {"x": 1}}"#,
            r#"{"o": null, "m": {"x": 1}, "l": {"s": "\ud800"}}"#,
            &format!(r#"{{"d": {{"x": {}1{}}}}}"#, r#"{"e":"#.repeat(40), "}".repeat(40)),
            r#"{"o": {}, "l": {"s": "\ud83d\ude00"}}"#,
        ];
        let mut shredder = Shredder::new(1_000, records.len());
        for record in &records {
            assert!(shredder.shred(record.as_bytes()));
        }
        let (paths, _) = shredder.finish().unwrap();
        let objects = |name: &str| {
            let path = paths.iter().find(|p| p.segments == [name]).unwrap();
            path.objects.as_ref().map(|a| (0..a.len()).map(|row| a.is_valid(row)).collect::<Vec<_>>())
        };
        assert_eq!(objects("o"), Some(vec![true, false, false, true]));
        assert_eq!(objects("m"), None, "a number and an object");
        assert_eq!(objects("l"), None, "a lone surrogate in one of its objects");
        assert_eq!(objects("d"), None, "a container too deep to infer in one of its objects");
    }

    #[test]
    fn paths_of_arrays_of_scalars_get_list_columns() {
        let records = [
            r#"{"l": [1, 2.5, null], "s": ["a"], "o": [1], "m": [1]}"#,
            r#"{"l": [], "s": ["b", 1], "o": [{"a": 1}], "m": 2}"#,
            r#"{"l": null, "e": [null, null]}"#,
            r#"{"e": []}"#,
        ];
        let mut shredder = Shredder::new(1_000, records.len());
        for record in &records {
            assert!(shredder.shred(record.as_bytes()));
        }
        let (paths, _) = shredder.finish().unwrap();
        let list = |name: &str| paths.iter().find(|p| p.segments == [name]).unwrap().list.clone();
        let (l, items) = list("l").unwrap();
        assert_eq!(items, ListItems::Number);
        let l = l.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!((l.is_valid(0), l.is_valid(1), l.is_valid(2), l.is_valid(3)), (true, true, false, false));
        assert_eq!(l.value_offsets(), [0, 3, 3, 3, 3]);
        let values: Vec<Option<f64>> = l.values().as_any().downcast_ref::<Float64Array>().unwrap().iter().collect();
        assert_eq!(values, [Some(1.0), Some(2.5), None]);
        assert_eq!(list("e").map(|(_, items)| items), Some(ListItems::Null));
        assert!(list("s").is_none(), "strings and a number");
        assert!(list("o").is_none(), "an object item");
        assert!(list("m").is_none(), "an array and a number");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn shredded_values_are_what_the_parser_extracts(values in prop::collection::vec(arb_json(), 1..12)) {
            let records: Vec<String> = values.iter().map(|v| serde_json::to_string(v).unwrap()).collect();
            check(&records);
        }
    }
}
