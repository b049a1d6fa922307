//! Writing one columnar file: the records of a run of flushed pages, shredded in one pass
//! each into a column per path and JSON scalar type (`shred.rs`), plus `_address`, encoded
//! as Parquet.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use super::layout::{FileLayout, InstantStatistics, ListColumn, PathColumns, ScalarType, INSTANTS_METADATA_KEY, LAYOUT_METADATA_KEY};
use super::shred::{ShreddedPath, Shredder};
use super::{ColumnarCodec, ColumnarConfig};
use crate::error::{Error, Result};
use crate::path::FieldPath;
use crate::schema::TypeSet;
use crate::LogAddress;

/// What [`write_file`] produced.
pub(crate) struct WrittenFile {
    /// The Parquet file's bytes.
    pub bytes: Vec<u8>,
    /// Bytes of JSON (record payloads) it covers.
    pub json_bytes: u64,
    /// Time spent shredding the records into columns (schema inference included) and
    /// encoding them as Parquet (for the compactor's log).
    pub phases: [std::time::Duration; 2],
}

/// Builds the columnar file of `records` (log address, payload; ascending addresses,
/// each a valid JSON record of the log): one pass per record infers the schema and hands
/// each value to its path's column (`shred.rs`; only the paths a record holds are
/// touched), with the values a scan of the raw record extracts.
///
/// # Errors
/// [`Error::Columnar`] when Parquet encoding fails.
pub(crate) fn write_file(
    records: &[(LogAddress, &[u8])],
    config: &ColumnarConfig,
) -> Result<WrittenFile> {
    let t0 = std::time::Instant::now();
    let mut shredder = Shredder::new(max_file_paths(records.len()), records.len());
    for (_, payload) in records {
        // A record of the log was validated when ingested; one that does not parse now
        // (it cannot) keeps an empty row, and scans re-read nothing from it.
        shredder.shred(payload);
    }
    let rows = records.len();
    let (paths, root_cut) = shredder.finish()?;
    let t1 = std::time::Instant::now();
    // Every path goes into the layout, with the columns of the scalar types it held; a
    // container's value is not stored (the path is opaque), but a path of objects only has
    // the column of the rows where it holds one (a struct of its children). Paths below a container too
    // deep to infer, or below an object that lost keys to the bound on paths, are read
    // from the raw records.
    let deep = if root_cut { vec![Vec::new()] } else { Vec::new() };
    let mut layout = FileLayout { address_column: 0, paths: Vec::with_capacity(paths.len()), deep };
    let mut schema_fields = vec![Field::new("_address", DataType::UInt64, false)];
    let addresses: Vec<u64> = records.iter().map(|(a, _)| a.get()).collect();
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(addresses))];
    for ShreddedPath { segments, types, cut, columns, objects, list } in paths {
        if types.contains(TypeSet::TOO_DEEP) || cut {
            layout.deep.push(segments.clone());
        }
        let Ok(path) = FieldPath::from_segments(segments) else { continue };
        let opaque = types.contains(TypeSet::OBJECT) || types.contains(TypeSet::ARRAY);
        let typed = columns.iter().filter(|c| c.is_some()).count();
        let mut entry = PathColumns { path: path.segments().to_vec(), columns: [None; 4], opaque, object: None, list: None };
        for (ty, column) in ScalarType::ALL.into_iter().zip(columns) {
            let Some(column) = column else { continue };
            let name = if typed == 1 { path.to_string() } else { format!("{path}:{}", ty.name()) };
            entry.columns[ty.slot()] = Some(arrays.len());
            schema_fields.push(Field::new(name, column.data_type().clone(), true));
            arrays.push(column);
        }
        if let Some(objects) = objects {
            entry.object = Some(arrays.len());
            schema_fields.push(Field::new(format!("{path}:object"), DataType::Boolean, true));
            arrays.push(objects);
        }
        if let Some((array, items)) = list {
            entry.list = Some(ListColumn { leaf: arrays.len(), items });
            schema_fields.push(Field::new(format!("{path}:list"), array.data_type().clone(), true));
            arrays.push(array);
        }
        layout.paths.push(entry);
    }
    let per_group = row_group_rows(rows, config.row_group_rows);
    // The instants the string columns name, per row group (`TIMESTAMP` comparisons prune by them).
    let mut instants = InstantStatistics { row_groups: rows.div_ceil(per_group).max(1), ..InstantStatistics::default() };
    for entry in &layout.paths {
        let Some(leaf) = entry.columns[ScalarType::String.slot()] else { continue };
        if let Some(strings) = arrays[leaf].as_any().downcast_ref::<arrow_array::StringArray>() {
            instants.add(leaf, strings, per_group);
        }
    }
    let schema = Arc::new(Schema::new(schema_fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    let layout_json = serde_json::to_string(&layout).map_err(|e| columnar_error("encoding the layout", e))?;
    let instants_json = serde_json::to_string(&instants).map_err(|e| columnar_error("encoding the instants", e))?;
    let compression = match config.codec {
        ColumnarCodec::Zstd => Compression::ZSTD(ZstdLevel::try_new(1).map_err(|e| columnar_error("zstd level", e))?),
        ColumnarCodec::Lz4 => Compression::LZ4_RAW,
        ColumnarCodec::None => Compression::UNCOMPRESSED,
    };
    let properties = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(per_group))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(super::PAGE_ROWS)
        .set_key_value_metadata(Some(vec![
            KeyValue::new(LAYOUT_METADATA_KEY.to_owned(), layout_json),
            KeyValue::new(INSTANTS_METADATA_KEY.to_owned(), instants_json),
        ]))
        .build();
    let mut writer =
        ArrowWriter::try_new(Vec::new(), schema, Some(properties)).map_err(|e| columnar_error("starting a Parquet file", e))?;
    writer.write(&batch).map_err(|e| columnar_error("encoding a Parquet file", e))?;
    let bytes = writer.into_inner().map_err(|e| columnar_error("finishing a Parquet file", e))?;
    let json_bytes = records.iter().map(|(_, p)| p.len() as u64).sum();
    Ok(WrittenFile { bytes, json_bytes, phases: [t1 - t0, t1.elapsed()] })
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
    use crate::LogAddress;

    #[test]
    fn a_file_of_records_with_ever_new_keys_keeps_the_first_paths_and_marks_the_cut_node() {
        use crate::columnar::layout::{FileLayout, Resolved, LAYOUT_METADATA_KEY};
        use crate::path::FieldPath;
        let texts: Vec<String> = (0..3000).map(|i| format!(r#"{{"id": {i}, "m": {{"a{i}": 1, "b{i}": 2, "c{i}": 3, "d{i}": 4}}}}"#)).collect();
        let records: Vec<(LogAddress, &[u8])> = texts.iter().enumerate().map(|(i, t)| (LogAddress::new(i as u64 * 64), t.as_bytes())).collect();
        let written = super::write_file(&records, &super::ColumnarConfig::default()).unwrap();
        let metadata = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(bytes::Bytes::from(written.bytes)).unwrap(),
        )
        .clone();
        let layout_json = metadata.file_metadata().key_value_metadata().unwrap().iter().find(|kv| kv.key == LAYOUT_METADATA_KEY).unwrap().value.clone().unwrap();
        let layout: FileLayout = serde_json::from_str(&layout_json).unwrap();
        assert!(layout.paths.len() <= max_file_paths(3000), "{} paths", layout.paths.len());
        assert_eq!(layout.deep, vec![vec!["m".to_owned()]]);
        assert!(matches!(layout.resolve(&FieldPath::parse("id").unwrap()), Resolved::Columns([_, Some(_), _, _])));
        // A key under `m` kept from its first value on has its column; one left out (or
        // never seen) is read from the raw records, never "missing".
        assert!(matches!(layout.resolve(&FieldPath::parse("m.a0").unwrap()), Resolved::Columns([_, Some(_), _, _])));
        for key in ["m.d2999", "m.zzz"] {
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
