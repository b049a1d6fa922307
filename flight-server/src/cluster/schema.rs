//! One schema for a sharded table: each shard infers its own from the records it holds, so a
//! path can be `Int64` on one shard and JSON text on another. The table's schema merges them
//! by the inference's own rules (`docs/protocol.md`, `GetSchema`): equal types stay, `Int64`
//! with `Float64` is `Float64`, structs and lists merge field by field, any other mix is
//! `Utf8` holding JSON text (`shoal.json_text`); and every shard's batches are conformed to
//! it ([`conform`]) before a reader sees them, so that the answer has one type per column —
//! what one daemon holding every record would answer.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, ListArray, RecordBatch, RecordBatchOptions, StringArray, StructArray};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use shoal_core::schema::{is_json_text, json_text_field as json_text, nullable_field as normalize};

/// The schemas merged by field name, in order of first appearance; every field nullable,
/// nested ones too (a shard may lack a path another has).
#[must_use]
pub fn merge_schemas(schemas: &[Schema]) -> Schema {
    let mut fields: Vec<Field> = Vec::new();
    for schema in schemas {
        for field in schema.fields() {
            match fields.iter_mut().find(|f| f.name() == field.name()) {
                Some(existing) => *existing = merge_fields(existing, field),
                None => fields.push(normalize(field)),
            }
        }
    }
    Schema::new(fields)
}

fn merge_fields(a: &Field, b: &Field) -> Field {
    let name = a.name();
    let merged = match (a.data_type(), b.data_type()) {
        (DataType::Null, _) => return normalize(b).with_name(name),
        (_, DataType::Null) => return normalize(a),
        (DataType::Struct(x), DataType::Struct(y)) => {
            DataType::Struct(merge_schemas(&[Schema::new(x.clone()), Schema::new(y.clone())]).fields().clone())
        }
        (DataType::List(x), DataType::List(y)) => DataType::List(Arc::new(merge_fields(x, y))),
        (x, y) if x == y && is_json_text(a) == is_json_text(b) => return normalize(a),
        (DataType::Int64, DataType::Float64) | (DataType::Float64, DataType::Int64) => DataType::Float64,
        _ => return json_text(name),
    };
    Field::new(name, merged, true)
}

/// True when batches of `schema` need no conforming to `merged` beyond nullability.
#[must_use]
pub fn fits(schema: &Schema, merged: &Schema) -> bool {
    merge_schemas(std::slice::from_ref(schema)) == *merged
}

/// `batch` in `schema`: its columns by name, each conformed to the merged field (casts,
/// struct children by name, list items, JSON text of values whose type the merge widened
/// to it), null where the batch has no such column.
///
/// # Errors
/// A conversion Arrow cannot make.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    let source = batch.schema();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|to| match source.index_of(to.name()) {
            Ok(i) => conform_array(batch.column(i), source.field(i), to),
            Err(_) => Ok(new_null_array(to.data_type(), batch.num_rows())),
        })
        .collect::<Result<_, _>>()?;
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())))
}

fn conform_array(array: &ArrayRef, from: &Field, to: &Field) -> Result<ArrayRef, ArrowError> {
    if from.data_type() == to.data_type() && is_json_text(from) == is_json_text(to) {
        return Ok(Arc::clone(array));
    }
    if from.data_type() == &DataType::Null {
        return Ok(new_null_array(to.data_type(), array.len()));
    }
    if is_json_text(to) {
        // JSON text columns hold a string's content and any other value's JSON text.
        return match from.data_type() {
            DataType::Utf8 => Ok(Arc::clone(array)),
            DataType::Struct(_) | DataType::List(_) => as_json_text(array),
            _ => arrow_cast::cast(array, &DataType::Utf8),
        };
    }
    match (array.data_type(), to.data_type()) {
        (DataType::Struct(from_fields), DataType::Struct(to_fields)) => {
            let structs = array.as_struct();
            let children = to_fields
                .iter()
                .map(|child| match from_fields.iter().position(|f| f.name() == child.name()) {
                    Some(i) => conform_array(structs.column(i), &from_fields[i], child),
                    None => Ok(new_null_array(child.data_type(), array.len())),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(StructArray::try_new(to_fields.clone(), children, structs.nulls().cloned())?))
        }
        (DataType::List(from_item), DataType::List(to_item)) => {
            let lists = array.as_list::<i32>();
            let values = conform_array(lists.values(), from_item, to_item)?;
            Ok(Arc::new(ListArray::try_new(Arc::clone(to_item), lists.offsets().clone(), values, lists.nulls().cloned())?))
        }
        (_, target) => arrow_cast::cast(array, target),
    }
}

/// Each value's JSON text (arrow-json's encoding of one column), null for nulls.
fn as_json_text(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let field: FieldRef = Arc::new(Field::new("v", array.data_type().clone(), true));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(Fields::from(vec![field]))), vec![Arc::clone(array)])?;
    let mut writer = arrow_json::LineDelimitedWriter::new(Vec::new());
    writer.write(&batch)?;
    writer.finish()?;
    let bytes = writer.into_inner();
    let mut texts = Vec::with_capacity(array.len());
    for (row, line) in bytes.split(|&b| b == b'\n').take(array.len()).enumerate() {
        if array.is_null(row) {
            texts.push(None);
            continue;
        }
        let object: serde_json::Value = serde_json::from_slice(line).map_err(|e| ArrowError::JsonError(e.to_string()))?;
        texts.push(object.get("v").map(ToString::to_string));
    }
    Ok(Arc::new(StringArray::from(texts)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array};

    fn strings(array: &ArrayRef) -> Vec<Option<String>> {
        array.as_string::<i32>().iter().map(|s| s.map(str::to_owned)).collect()
    }

    /// The merge follows the inference: ints with floats are floats, other mixes JSON text,
    /// structs field by field; the batches of each shard then read as the merged schema.
    #[test]
    fn shards_schemas_merge_as_inference_widens_and_batches_conform() {
        let line = |t: DataType| Field::new("line", t, true);
        let comment = |t: DataType| Field::new("comment", DataType::Struct(Fields::from(vec![line(t), Field::new("x", DataType::Int64, true)])), true);
        let a = Schema::new(vec![Field::new("n", DataType::Int64, false), comment(DataType::Int64), Field::new("s", DataType::Utf8, true)]);
        let b = Schema::new(vec![Field::new("n", DataType::Float64, true), comment(DataType::Utf8), Field::new("s", DataType::Int64, true)]);
        let merged = merge_schemas(&[a.clone(), b]);
        assert_eq!(merged.field(0).data_type(), &DataType::Float64);
        let DataType::Struct(children) = merged.field(1).data_type() else { panic!("{merged:?}") };
        assert!(is_json_text(&children[0]), "{children:?}");
        assert!(is_json_text(merged.field(2)));

        let structs = StructArray::try_new(
            match comment(DataType::Int64).data_type() {
                DataType::Struct(f) => f.clone(),
                _ => unreachable!(),
            },
            vec![Arc::new(Int64Array::from(vec![Some(7), None])), Arc::new(Int64Array::from(vec![Some(1), Some(2)]))],
            None,
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(a),
            vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(structs), Arc::new(StringArray::from(vec![Some("abc"), None]))],
        )
        .unwrap();
        let conformed = conform(&batch, &Arc::new(merged)).unwrap();
        assert_eq!(conformed.column(0).as_any().downcast_ref::<Float64Array>().unwrap().values().to_vec(), vec![1.0, 2.0]);
        assert_eq!(strings(conformed.column(1).as_struct().column(0)), vec![Some("7".to_owned()), None]);
        assert_eq!(strings(conformed.column(2)), vec![Some("abc".to_owned()), None]);
        let nested = as_json_text(&(Arc::new(batch.column(1).as_struct().clone()) as ArrayRef)).unwrap();
        assert_eq!(strings(&nested), vec![Some(r#"{"line":7,"x":1}"#.to_owned()), Some(r#"{"x":2}"#.to_owned())]);
    }
}
