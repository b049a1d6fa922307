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
use crate::parser::{FieldSet, ParsedBatch, RecordParser};
use crate::path::FieldPath;
use crate::schema::{InferredSchema, TypeSet};
use crate::value::FieldValue;

/// Records parsed per parser call while a file is built (bounds the parsed values held
/// at once: records × paths).
const PARSE_BATCH: usize = 512;

/// The typed columns of one path while a file is built.
#[derive(Default)]
struct PathBuilder {
    bools: Option<BooleanBuilder>,
    ints: Option<Int64Builder>,
    floats: Option<Float64Builder>,
    strings: Option<StringBuilder>,
    opaque: bool,
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
            FieldValue::Object(_) | FieldValue::Array(_) => self.opaque = true,
            FieldValue::Missing | FieldValue::Null => {}
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

/// What [`write_file`] produced.
pub(crate) struct WrittenFile {
    /// The Parquet file's bytes.
    pub bytes: Vec<u8>,
    /// Bytes of JSON (record payloads) it covers.
    pub json_bytes: u64,
}

/// Builds the columnar file of `records` (log address, payload; ascending addresses,
/// each a valid JSON record of the log) with `parser`'s trusted pass, so that every value
/// in the file is exactly what a scan of the raw record would extract.
///
/// # Errors
/// [`Error::Columnar`] when Parquet encoding fails.
pub(crate) fn write_file(
    records: &[(u64, &[u8])],
    parser: &mut dyn RecordParser,
    config: &ColumnarConfig,
) -> Result<WrittenFile> {
    let mut schema = InferredSchema::new();
    for (_, payload) in records {
        schema.observe_validated(payload);
    }
    let paths = schema.paths();
    let mut fields = FieldSet::new();
    let mut deep = Vec::new();
    for (path, types) in &paths {
        if types.contains(TypeSet::TOO_DEEP) {
            deep.push(path.clone());
        }
        if let Ok(path) = FieldPath::from_segments(path.iter().cloned()) {
            fields.insert(&path);
        }
    }
    let mut builders: Vec<PathBuilder> = (0..fields.len()).map(|_| PathBuilder::default()).collect();
    let mut parsed = ParsedBatch::default();
    let mut row = 0usize;
    for chunk in records.chunks(PARSE_BATCH) {
        let payloads: Vec<&[u8]> = chunk.iter().map(|(_, p)| *p).collect();
        parsed.reset(fields.len());
        parser.parse_trusted_batch(&payloads, &fields, &mut parsed);
        for i in 0..payloads.len() {
            // A record of the log was validated when ingested; one that does not parse
            // now (it cannot) keeps an empty row, and scans re-read nothing from it.
            if let Ok(values) = parsed.record(i) {
                for (builder, value) in builders.iter_mut().zip(values) {
                    builder.append(row, value);
                }
            }
            row += 1;
        }
    }
    let rows = row;

    let mut schema_fields = vec![Field::new("_address", DataType::UInt64, false)];
    let addresses: Vec<u64> = records.iter().map(|(a, _)| *a).collect();
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(addresses))];
    let mut layout = FileLayout { address_column: 0, paths: Vec::with_capacity(fields.len()), deep };
    for (path, builder) in fields.paths().iter().zip(&mut builders) {
        let columns = builder.finish(rows);
        let typed = columns.iter().filter(|c| c.is_some()).count();
        let mut entry = PathColumns { path: path.segments().to_vec(), columns: [None; 4], opaque: builder.opaque };
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
        .set_max_row_group_row_count(Some(config.row_group_rows.max(1)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_key_value_metadata(Some(vec![KeyValue::new(LAYOUT_METADATA_KEY.to_owned(), layout_json)]))
        .build();
    let mut writer =
        ArrowWriter::try_new(Vec::new(), schema, Some(properties)).map_err(|e| columnar_error("starting a Parquet file", e))?;
    writer.write(&batch).map_err(|e| columnar_error("encoding a Parquet file", e))?;
    let bytes = writer.into_inner().map_err(|e| columnar_error("finishing a Parquet file", e))?;
    let json_bytes = records.iter().map(|(_, p)| p.len() as u64).sum();
    Ok(WrittenFile { bytes, json_bytes })
}

pub(crate) fn columnar_error(what: &str, error: impl std::fmt::Display) -> Error {
    Error::Columnar(format!("{what}: {error}"))
}
