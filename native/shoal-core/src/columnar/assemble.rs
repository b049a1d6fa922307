//! Output columns taken whole from a file's columns, one row group at a time: the arrays
//! a raw scan's row-by-row conversion (`crate::schema::BatchBuilder`) would build from the
//! same records, made from the decoded leaf columns instead of from each record's text.
//!
//! A scalar output column takes its path's column of its own type (the values of other
//! types are null in that conversion too; a `Float64` column also takes the path's
//! integers); a `Struct` column is rebuilt from its children's columns and the column
//! marking where the path holds an object ([`PathColumns::object`](super::layout::PathColumns)),
//! a `List` column from the path's list column (arrays of scalars, `PathColumns::list`):
//! TellStore's scans read only the columns a query needs, and the shredded file keeps
//! nested values as their leaves (the AsterixDB tuple compactor, VLDB 2019 §3.2). A column
//! the file cannot give this way ([`Assembly::plan`] is `None`: a struct child of JSON
//! text over numbers, arrays of objects, a struct below which a path is opaque) is made
//! from the values row by row or from the raw records, as before.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::builder::StringBuilder;
use arrow_array::{new_null_array, Array, ArrayRef, Float64Array, ListArray, StructArray};
use arrow_schema::{DataType, FieldRef, Fields};

use super::layout::{FileLayout, ListItems, Resolved, ScalarType};
use super::shred::as_floats;
use crate::error::{Error, Result};

/// How one output column (or struct child) is made from a file's leaf columns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Assembly {
    /// Null in every row: the file holds no value of the column's kind at the path.
    Null(DataType),
    /// The leaf column as it is (`Boolean`, `Int64`, `Utf8`).
    Leaf(usize),
    /// A `Float64` column: the path's floats (finite ones; others null) and its integers
    /// converted (`i64 as f64`, rounding to nearest as parsing their text does).
    Float {
        /// The path's `Int64` leaf.
        ints: Option<usize>,
        /// The path's `Float64` leaf.
        floats: Option<usize>,
    },
    /// A top-level `Utf8` column of a path with several types (JSON text): strings'
    /// content, and the JSON text of numbers and booleans as the row-by-row builder writes
    /// a parsed value's (integers in decimal, floats in their shortest form).
    Text([Option<usize>; 4]),
    /// A list from the path's list column, its items converted to the output's item type.
    List {
        /// The output's item field.
        item: FieldRef,
        /// The path's list column.
        leaf: usize,
        /// How the stored items become the output's.
        items: ItemConversion,
    },
    /// A struct: null where the `present` leaf is null, its children made the same way.
    Struct {
        /// The output's struct fields.
        fields: Fields,
        /// The leaf marking the rows where the path holds an object.
        present: usize,
        /// One per field, in order.
        children: Vec<Assembly>,
    },
}

/// How a list column's stored items become the output's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemConversion {
    /// As stored.
    AsIs,
    /// `Int64` items as `Float64`.
    IntsToFloats,
    /// `Float64` items, the non-finite ones null.
    FiniteOnly,
    /// Every item null (none of the stored items is of the output's kind).
    Null,
}

impl ItemConversion {
    /// How items stored as `stored` become items of `data_type` as the row-by-row
    /// conversion makes them (a leaf takes the item's JSON text); `None` when they cannot
    /// (JSON text of non-strings, integers among floats for an `Int64` list, a cast type).
    fn of(stored: ListItems, data_type: &DataType) -> Option<ItemConversion> {
        use ItemConversion::{AsIs, FiniteOnly, IntsToFloats, Null};
        Some(match (data_type, stored) {
            (_, ListItems::Null) => Null,
            (DataType::Boolean, ListItems::Bool) | (DataType::Int64, ListItems::Int) | (DataType::Utf8, ListItems::String) => AsIs,
            (DataType::Float64, ListItems::Int) => IntsToFloats,
            (DataType::Float64, ListItems::Float | ListItems::Number) => FiniteOnly,
            (DataType::Int64, ListItems::Number) | (DataType::Utf8, _) => return None,
            (DataType::Boolean | DataType::Int64 | DataType::Float64 | DataType::Struct(_) | DataType::List(_), _) => Null,
            _ => return None,
        })
    }
}

impl Assembly {
    /// How an output column of `data_type` at the path `segments` is made from `layout`'s
    /// columns, or `None` when it cannot be: a path whose value is opaque (an array, a mix
    /// of objects and other values, contents not all in the file), a `Utf8` struct child of
    /// a path that also held numbers or booleans (a raw record's conversion keeps their
    /// JSON text as written, which the file does not hold), or a type other than
    /// `Boolean`, `Int64`, `Float64`, `Utf8`, `Struct` and `List` at a path with values.
    pub(crate) fn plan(layout: &FileLayout, segments: &[String], data_type: &DataType) -> Option<Assembly> {
        Assembly::plan_at(layout, &mut segments.to_vec(), data_type, true)
    }

    /// [`plan`](Self::plan) for the column (`top`) or a struct child; `segments` is
    /// restored before returning.
    fn plan_at(layout: &FileLayout, segments: &mut Vec<String>, data_type: &DataType, top: bool) -> Option<Assembly> {
        let columns = match layout.resolve_segments(segments) {
            Resolved::Columns(columns) => *columns,
            Resolved::Opaque => {
                if let DataType::List(item) = data_type {
                    let list = layout.list_column(segments)?;
                    let items = ItemConversion::of(list.items, item.data_type())?;
                    return Some(Assembly::List { item: Arc::clone(item), leaf: list.leaf, items });
                }
                let DataType::Struct(fields) = data_type else { return None };
                let present = layout.object_column(segments)?;
                let mut children = Vec::with_capacity(fields.len());
                for field in fields {
                    segments.push(field.name().clone());
                    let child = Assembly::plan_at(layout, segments, field.data_type(), false);
                    segments.pop();
                    children.push(child?);
                }
                return Some(Assembly::Struct { fields: fields.clone(), present, children });
            }
        };
        let column = |ty: ScalarType| columns[ty.slot()];
        let leaf_or_null = |leaf: Option<usize>| Some(leaf.map_or_else(|| Assembly::Null(data_type.clone()), Assembly::Leaf));
        match data_type {
            DataType::Boolean => leaf_or_null(column(ScalarType::Bool)),
            DataType::Int64 => leaf_or_null(column(ScalarType::Int)),
            DataType::Float64 => match (column(ScalarType::Int), column(ScalarType::Float)) {
                (None, None) => Some(Assembly::Null(DataType::Float64)),
                (ints, floats) => Some(Assembly::Float { ints, floats }),
            },
            DataType::Utf8 if column(ScalarType::Bool).or(column(ScalarType::Int)).or(column(ScalarType::Float)).is_none() => {
                leaf_or_null(column(ScalarType::String))
            }
            DataType::Utf8 if top => Some(Assembly::Text(columns)),
            // Only scalars here, never an object or array: null in every row.
            DataType::Struct(_) | DataType::List(_) => Some(Assembly::Null(data_type.clone())),
            _ if columns.iter().all(Option::is_none) => Some(Assembly::Null(data_type.clone())),
            _ => None,
        }
    }

    /// Adds the leaf columns it reads to `out`.
    pub(crate) fn leaves(&self, out: &mut Vec<usize>) {
        match self {
            Assembly::Null(_) => {}
            Assembly::Leaf(leaf) => out.push(*leaf),
            Assembly::Float { ints, floats } => out.extend(ints.iter().chain(floats)),
            Assembly::Text(columns) => out.extend(columns.iter().flatten()),
            Assembly::List { leaf, .. } => out.push(*leaf),
            Assembly::Struct { present, children, .. } => {
                out.push(*present);
                children.iter().for_each(|child| child.leaves(out));
            }
        }
    }

    /// The column for a row group of `rows` rows whose leaf columns `column` gives.
    ///
    /// # Errors
    /// [`Error::Columnar`] when a leaf it reads was not given or has another length or type
    /// than the file's layout says.
    pub(crate) fn build<'a>(&self, column: &dyn Fn(usize) -> Option<&'a ArrayRef>, rows: usize) -> Result<ArrayRef> {
        let leaf = |index: usize| -> Result<&'a ArrayRef> {
            column(index)
                .filter(|array| array.len() == rows)
                .ok_or_else(|| Error::Columnar(format!("leaf column {index} was not read for {rows} rows")))
        };
        Ok(match self {
            Assembly::Null(data_type) => new_null_array(data_type, rows),
            Assembly::Leaf(index) => Arc::clone(leaf(*index)?),
            Assembly::Float { ints, floats } => {
                // (Integers are finite as floats: the merge keeps what `finite_only` drops.)
                finite_only(as_floats(ints.map(leaf).transpose()?, floats.map(leaf).transpose()?, rows))
            }
            Assembly::Text(columns) => {
                let [bools, ints, floats, strings] = columns.map(|c| c.map(leaf).transpose());
                let (bools, ints, floats, strings) = (bools?, ints?, floats?, strings?);
                let bools = bools.map(|a| a.as_boolean());
                let ints = ints.map(|a| a.as_primitive::<Int64Type>());
                let floats = floats.map(|a| a.as_primitive::<Float64Type>());
                let strings = strings.map(|a| a.as_string::<i32>());
                let mut text = StringBuilder::new();
                let mut buffer = String::new();
                for row in 0..rows {
                    buffer.clear();
                    if let Some(s) = strings.filter(|s| s.is_valid(row)) {
                        text.append_value(s.value(row));
                        continue;
                    }
                    if let Some(b) = bools.filter(|b| b.is_valid(row)) {
                        buffer.push_str(if b.value(row) { "true" } else { "false" });
                    } else if let Some(i) = ints.filter(|i| i.is_valid(row)) {
                        buffer.push_str(&i.value(row).to_string());
                    } else if let Some(f) = floats.filter(|f| f.is_valid(row) && f.value(row).is_finite()) {
                        buffer.push_str(&serde_json::to_string(&f.value(row)).unwrap_or_default());
                    } else {
                        text.append_null();
                        continue;
                    }
                    text.append_value(&buffer);
                }
                Arc::new(text.finish())
            }
            Assembly::List { item, leaf: index, items } => {
                let list = leaf(*index)?.as_list_opt::<i32>().ok_or_else(|| Error::Columnar(format!("leaf column {index} is not a list")))?;
                let (_, offsets, values, nulls) = list.clone().into_parts();
                let values = match items {
                    ItemConversion::AsIs => values,
                    ItemConversion::IntsToFloats => as_floats(Some(&values), None, values.len()),
                    ItemConversion::FiniteOnly => finite_only(values),
                    ItemConversion::Null => new_null_array(item.data_type(), values.len()),
                };
                Arc::new(
                    ListArray::try_new(Arc::clone(item), offsets, values, nulls)
                        .map_err(|e| Error::Columnar(format!("rebuilding a list column: {e}")))?,
                )
            }
            Assembly::Struct { fields, present, children } => {
                let nulls = leaf(*present)?.logical_nulls();
                let arrays = children.iter().map(|child| child.build(column, rows)).collect::<Result<Vec<_>>>()?;
                Arc::new(
                    StructArray::try_new_with_length(fields.clone(), arrays, nulls, rows)
                        .map_err(|e| Error::Columnar(format!("rebuilding a struct column: {e}")))?,
                )
            }
        })
    }
}

/// A `Float64` column with its non-finite values (numbers beyond ±1.8e308, which parsers
/// give as ±infinity) null, as the row-by-row builder makes them.
pub(crate) fn finite_only(array: ArrayRef) -> ArrayRef {
    let floats = array.as_primitive::<Float64Type>();
    if floats.iter().flatten().all(f64::is_finite) {
        return array;
    }
    let finite: Float64Array = floats.iter().map(|v| v.filter(|f| f.is_finite())).collect();
    Arc::new(finite)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use arrow_schema::Field;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use proptest::prelude::*;

    use super::*;
    use crate::columnar::layout::LAYOUT_METADATA_KEY;
    use crate::parser::test_support::{arb_json, arb_key};
    use crate::parser::{FieldSet, OnDemandParser, RecordParser};
    use crate::path::FieldPath;
    use crate::schema::{BatchBuilder, InferredSchema};
    use crate::LogAddress;

    /// Compacts `texts` into a file, and checks every path of their inferred schema: each
    /// column the file can give whole is the column a raw scan builds row by row from the
    /// parser's values. Returns how many columns were given whole.
    fn check(texts: &[String]) -> usize {
        let mut schema = InferredSchema::new();
        for text in texts {
            assert!(schema.observe(text.as_bytes()), "{text}");
        }
        let columns: Vec<(FieldPath, Field)> = schema
            .paths()
            .into_iter()
            .filter_map(|(segments, _)| FieldPath::from_segments(segments).ok())
            .filter_map(|path| schema.arrow_field(&path).map(|field| (path, field)))
            .collect();
        // What a raw scan outputs.
        let mut fields = FieldSet::new();
        let ids: Vec<usize> = columns.iter().map(|(path, _)| fields.insert(path)).collect();
        let refs: Vec<&[u8]> = texts.iter().map(String::as_bytes).collect();
        let mut parsed = crate::parser::ParsedBatch::default();
        OnDemandParser::new().parse_batch(&refs, &fields, &mut parsed);
        let mut builder = BatchBuilder::new(&columns);
        for row in 0..texts.len() {
            let values = parsed.record(row).unwrap();
            builder.append_values(ids.iter().map(|&id| &values[id]));
        }
        let expected = builder.finish().unwrap();
        // The file's columns.
        let records: Vec<(LogAddress, &[u8])> =
            refs.iter().enumerate().map(|(i, r)| (LogAddress::new(64 + 64 * i as u64), *r)).collect();
        let written = crate::columnar::write::write_file(&records, &crate::columnar::ColumnarConfig::default()).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(written.bytes)).unwrap();
        let layout_json = reader.metadata().file_metadata().key_value_metadata().unwrap().iter().find(|kv| kv.key == LAYOUT_METADATA_KEY).unwrap().value.clone().unwrap();
        let layout: FileLayout = serde_json::from_str(&layout_json).unwrap();
        let batches: Vec<arrow_array::RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        let file = arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap();
        let mut whole = 0;
        for (i, (path, field)) in columns.iter().enumerate() {
            let Some(assembly) = Assembly::plan(&layout, path.segments(), field.data_type()) else { continue };
            let built = assembly.build(&|leaf| Some(file.column(leaf)), texts.len()).unwrap();
            assert_eq!(&built.to_data(), &expected.column(i).to_data(), "column {path} ({assembly:?}) of {texts:?}");
            whole += 1;
        }
        whole
    }

    #[test]
    fn hand_made_structs_are_the_raw_scans() {
        let texts: Vec<String> = [
            r#"{"o": {"a": 1, "b": "x", "c": true, "d": null, "e": 1.5, "in": {"k": 2}}, "t": 1}"#,
            r#"{"o": {"a": 2.25, "a": "dup", "b": "\u00e9\n", "in": {}}, "t": "one"}"#,
            r#"{"o": null, "t": 2.5}"#,
            r#"{"o": {}, "t": true}"#,
            r#"{"x": 1}"#,
            r#"{"o": {"e": 18446744073709551616, "in": null, "big": 1e400}, "t": 1e400}"#,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        // The eight paths below `o`, `t` (JSON text), `x`; not `o`, whose `a` is JSON text
        // (inference saw the duplicate key's string too) of numbers, whose text as
        // written the file does not hold.
        assert_eq!(check(&texts), 10);
    }

    #[test]
    fn github_events_structs_are_the_raw_scans() {
        let Some(text) = crate::parser::test_support::github_events_text() else { return };
        let texts: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).take(2_000).map(str::to_owned).collect();
        assert!(check(&texts) > 100);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn columns_given_whole_are_the_raw_scans(
            records in prop::collection::vec(prop::collection::btree_map(arb_key(), arb_json(), 0..6), 1..16)
        ) {
            let texts: Vec<String> = records.iter().map(|r| serde_json::to_string(r).unwrap()).collect();
            check(&texts);
        }
    }
}
