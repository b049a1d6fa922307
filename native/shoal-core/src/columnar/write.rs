//! Writing one columnar file: the records of a run of flushed pages, parsed once into a
//! column per path and JSON scalar type, plus `_address`, encoded as Parquet.

use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use super::layout::{FileLayout, PathColumns, ScalarType, LAYOUT_METADATA_KEY};
use super::{ColumnarCodec, ColumnarConfig};
use crate::error::{Error, Result};
use crate::parser::{FieldSet, OnDemandParser, ValueSink};
use crate::path::FieldPath;
use crate::schema::{InferredSchema, TypeSet};
use crate::value::FieldValue;

/// The typed columns of one path while a file is built.
#[derive(Default)]
struct PathBuilder {
    bools: Option<BooleanBuilder>,
    ints: Option<Int64Builder>,
    floats: Option<Float64Builder>,
    strings: Option<StringBuilder>,
}

impl PathBuilder {
    /// Appends `value` at row `row` (earlier rows without a value become nulls).
    fn append(&mut self, row: usize, value: &FieldValue<'_>) {
        match value {
            FieldValue::Bool(b) => {
                let builder = self.bools.get_or_insert_with(BooleanBuilder::new);
                builder.append_nulls(row - builder.len());
                builder.append_value(*b);
            }
            FieldValue::Int(i) => {
                let builder = self.ints.get_or_insert_with(Int64Builder::new);
                builder.append_nulls(row - builder.len());
                builder.append_value(*i);
            }
            FieldValue::Float(f) => {
                let builder = self.floats.get_or_insert_with(Float64Builder::new);
                builder.append_nulls(row - builder.len());
                builder.append_value(*f);
            }
            FieldValue::Str(s) => {
                let builder = self.strings.get_or_insert_with(StringBuilder::new);
                builder.append_nulls(row - builder.len());
                builder.append_value(s);
            }
            // Containers are not stored (the path is opaque by its inferred types).
            FieldValue::Object(_) | FieldValue::Array(_) | FieldValue::Missing | FieldValue::Null => {}
        }
    }

    /// The finished columns (`rows` long), by [`ScalarType::ALL`] order.
    fn finish(&mut self, rows: usize) -> [Option<ArrayRef>; 4] {
        let bools = self.bools.as_mut().map(|b| {
            b.append_nulls(rows - b.len());
            Arc::new(b.finish()) as ArrayRef
        });
        let ints = self.ints.as_mut().map(|b| {
            b.append_nulls(rows - b.len());
            Arc::new(b.finish()) as ArrayRef
        });
        let floats = self.floats.as_mut().map(|b| {
            b.append_nulls(rows - b.len());
            Arc::new(b.finish()) as ArrayRef
        });
        let strings = self.strings.as_mut().map(|b| {
            b.append_nulls(rows - b.len());
            Arc::new(b.finish()) as ArrayRef
        });
        [bools, ints, floats, strings]
    }
}

/// The values one record's pass found, in the order found (at most one per field).
impl<'a> ValueSink<'a> for Vec<(usize, FieldValue<'a>)> {
    #[inline]
    fn put(&mut self, field: usize, value: FieldValue<'a>) {
        self.push((field, value));
    }
}

/// What [`write_file`] produced.
pub(crate) struct WrittenFile {
    /// The Parquet file's bytes.
    pub bytes: Vec<u8>,
    /// Bytes of JSON (record payloads) it covers.
    pub json_bytes: u64,
    /// Time spent inferring the schema, shredding the records into columns and encoding
    /// the Parquet file (for the compactor's log).
    pub phases: [std::time::Duration; 3],
}

/// Builds the columnar file of `records` (log address, payload; ascending addresses,
/// each a valid JSON record of the log): the schema inferred in one pass, then one trusted
/// pass of the On-Demand parser per record whose values go straight to their columns
/// (only the paths a record holds are touched), so that every value in the file is exactly
/// what a scan of the raw record would extract.
///
/// # Errors
/// [`Error::Columnar`] when Parquet encoding fails.
pub(crate) fn write_file(
    records: &[(u64, &[u8])],
    parser: &mut OnDemandParser,
    config: &ColumnarConfig,
) -> Result<WrittenFile> {
    let t0 = std::time::Instant::now();
    let mut schema = InferredSchema::new();
    for (_, payload) in records {
        schema.observe_validated(payload);
    }
    let mut deep = Vec::new();
    let max_paths = max_file_paths(records.len());
    if schema.field_count() > max_paths {
        // Records with ever new keys (objects used as maps, or a hostile client): every
        // column is as long as the file, so the paths are bounded. The shallowest are kept
        // (`limit_fields`); a node that lost children is listed as not inferred, so that
        // every path below it reads the raw records instead of answering "missing".
        let all = schema.paths();
        schema.limit_fields(max_paths);
        let kept: std::collections::HashSet<Vec<String>> = schema.paths().into_iter().map(|(path, _)| path).collect();
        let mut cut_under: Vec<Vec<String>> = all
            .into_iter()
            .filter(|(path, _)| !kept.contains(path))
            .map(|(mut path, _)| {
                path.pop();
                path
            })
            .filter(|parent| parent.is_empty() || kept.contains(parent))
            .collect();
        cut_under.sort();
        cut_under.dedup();
        tracing::debug!(max_paths, nodes = cut_under.len(), "columnar file: paths beyond the bound are read from the log");
        deep.extend(cut_under);
    }
    // Every path goes into the layout; only those that held a scalar are extracted (a
    // container's value is not stored: the path is opaque, decided by its inferred types,
    // so the parser never hands out, or checks, the text of whole objects).
    let mut fields = FieldSet::new();
    let mut entries: Vec<(FieldPath, bool, Option<usize>)> = Vec::new();
    for (path, types) in schema.paths() {
        if types.contains(TypeSet::TOO_DEEP) {
            deep.push(path.clone());
        }
        let Ok(path) = FieldPath::from_segments(path) else { continue };
        let opaque = types.contains(TypeSet::OBJECT) || types.contains(TypeSet::ARRAY);
        let scalar = [TypeSet::BOOL, TypeSet::INT, TypeSet::FLOAT, TypeSet::STRING].into_iter().any(|t| types.contains(t));
        let field = scalar.then(|| fields.insert(&path));
        entries.push((path, opaque, field));
    }
    let t1 = std::time::Instant::now();
    let mut builders: Vec<PathBuilder> = (0..fields.len()).map(|_| PathBuilder::default()).collect();
    let mut found: Vec<(usize, FieldValue<'_>)> = Vec::new();
    let mut row = 0usize;
    parser.set_fields(&fields);
    for (_, payload) in records {
        // One pass per record; its values are kept until the record parsed to its end. A
        // record of the log was validated when ingested; one that does not parse now (it
        // cannot) keeps an empty row, and scans re-read nothing from it.
        found.clear();
        if parser.visit_trusted(payload, &mut found).is_ok() {
            for (field, value) in found.drain(..) {
                builders[field].append(row, &value);
            }
        }
        row += 1;
    }
    let rows = row;
    let t2 = std::time::Instant::now();

    let mut schema_fields = vec![Field::new("_address", DataType::UInt64, false)];
    let addresses: Vec<u64> = records.iter().map(|(a, _)| *a).collect();
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(addresses))];
    let mut layout = FileLayout { address_column: 0, paths: Vec::with_capacity(entries.len()), deep };
    for (path, opaque, field) in entries {
        let columns = field.map_or([None, None, None, None], |field| builders[field].finish(rows));
        let typed = columns.iter().filter(|c| c.is_some()).count();
        let mut entry = PathColumns { path: path.segments().to_vec(), columns: [None; 4], opaque };
        for (ty, column) in ScalarType::ALL.into_iter().zip(columns) {
            let Some(column) = column else { continue };
            let name = if typed == 1 { path.to_string() } else { format!("{path}:{}", ty.name()) };
            entry.columns[ty.slot()] = Some(arrays.len());
            schema_fields.push(Field::new(name, column.data_type().clone(), true));
            arrays.push(column);
        }
        layout.paths.push(entry);
    }
    let schema = Arc::new(Schema::new(schema_fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    let layout_json = serde_json::to_string(&layout).map_err(|e| columnar_error("encoding the layout", e))?;
    let compression = match config.codec {
        ColumnarCodec::Zstd => Compression::ZSTD(ZstdLevel::try_new(1).map_err(|e| columnar_error("zstd level", e))?),
        ColumnarCodec::Lz4 => Compression::LZ4_RAW,
        ColumnarCodec::None => Compression::UNCOMPRESSED,
    };
    let properties = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(row_group_rows(rows, config.row_group_rows)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_key_value_metadata(Some(vec![KeyValue::new(LAYOUT_METADATA_KEY.to_owned(), layout_json)]))
        .build();
    let mut writer =
        ArrowWriter::try_new(Vec::new(), schema, Some(properties)).map_err(|e| columnar_error("starting a Parquet file", e))?;
    writer.write(&batch).map_err(|e| columnar_error("encoding a Parquet file", e))?;
    let bytes = writer.into_inner().map_err(|e| columnar_error("finishing a Parquet file", e))?;
    let json_bytes = records.iter().map(|(_, p)| p.len() as u64).sum();
    Ok(WrittenFile { bytes, json_bytes, phases: [t1 - t0, t2 - t1, t2.elapsed()] })
}

/// Cells (rows × paths) one file's columns may hold while it is built: every column is as
/// long as the file, each cell 1–16 bytes in its builder. 64 Mi cells: GitHub events take
/// ~23 Mi per 64 MiB file (690 paths × 33,000 rows).
const MAX_FILE_CELLS: usize = 64 << 20;

/// The paths a file of `rows` rows keeps as columns at most: [`MAX_FILE_CELLS`] over the
/// rows, at least 64 and at most the schema's own field limit.
fn max_file_paths(rows: usize) -> usize {
    (MAX_FILE_CELLS / rows.max(1)).clamp(64, crate::schema::MAX_SCHEMA_FIELDS)
}

/// Rows per row group for a file of `rows` rows: at most `limit`, in groups of equal size
/// (a file of 2.01 × `limit` rows gets three groups of 0.67 × `limit`, not a third group of a
/// few rows: every column chunk costs a column writer and a codec context, ~40 µs with zstd).
fn row_group_rows(rows: usize, limit: usize) -> usize {
    let limit = limit.max(1);
    rows.div_ceil(rows.div_ceil(limit).max(1)).max(1)
}

pub(crate) fn columnar_error(what: &str, error: impl std::fmt::Display) -> Error {
    Error::Columnar(format!("{what}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::{max_file_paths, row_group_rows};

    #[test]
    fn a_file_of_records_with_ever_new_keys_keeps_the_shallow_paths_and_marks_the_cut_node() {
        use crate::columnar::layout::{FileLayout, Resolved, LAYOUT_METADATA_KEY};
        use crate::path::FieldPath;
        let texts: Vec<String> = (0..3000).map(|i| format!(r#"{{"id": {i}, "m": {{"a{i}": 1, "b{i}": 2, "c{i}": 3, "d{i}": 4}}}}"#)).collect();
        let records: Vec<(u64, &[u8])> = texts.iter().enumerate().map(|(i, t)| (i as u64 * 64, t.as_bytes())).collect();
        let written = super::write_file(&records, &mut crate::parser::OnDemandParser::new(), &super::ColumnarConfig::default()).unwrap();
        let metadata = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(bytes::Bytes::from(written.bytes)).unwrap(),
        )
        .clone();
        let layout_json = metadata.file_metadata().key_value_metadata().unwrap().iter().find(|kv| kv.key == LAYOUT_METADATA_KEY).unwrap().value.clone().unwrap();
        let layout: FileLayout = serde_json::from_str(&layout_json).unwrap();
        assert!(layout.paths.len() <= max_file_paths(3000), "{} paths", layout.paths.len());
        assert_eq!(layout.deep, vec![vec!["m".to_owned()]]);
        assert!(matches!(layout.resolve(&FieldPath::parse("id").unwrap()), Resolved::Columns([_, Some(_), _, _])));
        // Kept or cut, a key under `m` is read from the raw records, never "missing".
        for key in ["m.a0", "m.d2999", "m.zzz"] {
            assert_eq!(layout.resolve(&FieldPath::parse(key).unwrap()), Resolved::Opaque, "{key}");
        }
    }

    #[test]
    fn paths_per_file_shrink_with_its_rows() {
        assert_eq!(max_file_paths(0), crate::schema::MAX_SCHEMA_FIELDS);
        assert_eq!(max_file_paths(33_000), 2_033);
        assert_eq!(max_file_paths(10_000_000), 64);
    }

    #[test]
    fn row_groups_are_even_and_within_the_limit() {
        assert_eq!(row_group_rows(0, 16_384), 1);
        assert_eq!(row_group_rows(10, 16_384), 10);
        assert_eq!(row_group_rows(16_384, 16_384), 16_384);
        assert_eq!(row_group_rows(16_385, 16_384), 8_193);
        assert_eq!(row_group_rows(32_882, 16_384), 10_961);
        assert_eq!(row_group_rows(5, 0), 1);
        for rows in [1usize, 999, 16_383, 16_385, 49_152, 100_000] {
            let per = row_group_rows(rows, 16_384);
            assert!(per <= 16_384 && rows.div_ceil(per) == rows.div_ceil(16_384), "{rows} rows, {per} per group");
        }
    }
}
