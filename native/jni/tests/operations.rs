//! The embedded operations without a JVM: the same calls the natives make, with the C
//! Data Interface structs on the Rust side.

use std::sync::Arc;

use arrow_array::ffi::{to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema};
use serde_json::Value;
use shoal_jni::engines;
use shoal_jni::operations;

fn records(from: i64, to: i64) -> RecordBatch {
    let rows: Vec<String> = (from..to)
        .map(|i| {
            format!(
                r#"{{"id": {i}, "kind": "k{}", "actor": {{"id": {}}}}}"#,
                i % 3,
                i % 10
            )
        })
        .collect();
    let schema = Arc::new(Schema::new(vec![Field::new("json", DataType::Utf8, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(rows))]).unwrap()
}

/// Exports `batch` as a producer would (a struct array) and imports it as `doPut` does.
fn round_trip_ffi(batch: &RecordBatch) -> RecordBatch {
    let data = StructArray::from(batch.clone()).into_data();
    let (mut array, mut schema): (FFI_ArrowArray, FFI_ArrowSchema) = to_ffi(&data).unwrap();
    unsafe { operations::import_batch(&raw mut array, &raw mut schema) }.unwrap()
}

fn put(handle: u64, table: &str, from: i64, to: i64) -> Value {
    let batch = round_trip_ffi(&records(from, to));
    serde_json::from_str(&operations::do_put(handle, table, &batch, None).unwrap()).unwrap()
}

fn plan(handle: u64, command: &str) -> (Schema, Value) {
    let mut schema = FFI_ArrowSchema::empty();
    let info = unsafe { operations::get_flight_info(handle, command, &raw mut schema) }.unwrap();
    (
        Schema::try_from(&schema).unwrap(),
        serde_json::from_str(&info).unwrap(),
    )
}

fn read(handle: u64, ticket: &str) -> Vec<RecordBatch> {
    let mut stream = FFI_ArrowArrayStream::empty();
    unsafe { operations::do_get(handle, ticket.as_bytes(), &raw mut stream) }.unwrap();
    let reader = unsafe { RecordBatchStreamReader::from_raw(&raw mut stream) }.unwrap();
    reader.collect::<Result<Vec<_>, _>>().unwrap()
}

fn ids(handle: u64, command: &str) -> Vec<i64> {
    let (_, info) = plan(handle, command);
    let mut ids = Vec::new();
    for endpoint in info["endpoints"].as_array().unwrap() {
        for batch in read(handle, endpoint["ticket"].as_str().unwrap()) {
            let column = batch
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .clone();
            ids.extend(column.iter().flatten());
        }
    }
    ids.sort_unstable();
    ids
}

#[test]
fn ingest_register_plan_and_scan_like_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let handle = engines::open(dir.path(), Some(r#"{"checkpoint_interval_secs": 0}"#)).unwrap();
    operations::action(handle, "create_table", r#"{"name": "events"}"#).unwrap();
    let first = put(handle, "events", 0, 500);
    assert_eq!(first["records"], 500);
    operations::action(
        handle,
        "register_psf",
        // No backfill: the plan must need full scans below the PSF's register address (a
        // background backfill that finished before the plan made this test fail at random).
        r#"{"table": "events", "name": "kind", "kind": "projection", "field": "kind", "backfill": false}"#,
    )
    .unwrap();
    put(handle, "events", 500, 1000);

    let command = r#"{"table": "events", "filter": "kind = 'k1'", "columns": ["id"]}"#;
    let (schema, info) = plan(handle, command);
    assert_eq!(schema.fields().len(), 1);
    let whole = &info["metadata"]["plan"];
    assert!(
        !whole["index_scans"].as_array().unwrap().is_empty(),
        "{info}"
    );
    assert!(
        !whole["full_scans"].as_array().unwrap().is_empty(),
        "{info}"
    );
    assert_eq!(
        ids(handle, command),
        (0..1000).filter(|i| i % 3 == 1).collect::<Vec<_>>()
    );

    let count =
        r#"{"table": "events", "filter": "actor.id = 7", "aggregates": [{"function": "count"}]}"#;
    let (_, info) = plan(handle, count);
    let mut total = 0;
    for endpoint in info["endpoints"].as_array().unwrap() {
        for batch in read(handle, endpoint["ticket"].as_str().unwrap()) {
            total += batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0);
        }
    }
    assert_eq!(total, 100);
    let tables: Value = serde_json::from_str(&operations::list_tables(handle).unwrap()).unwrap();
    assert_eq!(tables[0]["table"], "events");
    assert_eq!(tables[0]["records"], 1000);
    engines::close(handle);
}

#[test]
fn handles_share_an_engine_and_closed_handles_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let a = engines::open(dir.path(), None).unwrap();
    let b = engines::open(dir.path(), None).unwrap();
    operations::action(a, "create_table", r#"{"name": "t"}"#).unwrap();
    put(b, "t", 0, 10);
    engines::close(a);
    engines::close(a);
    assert_eq!(
        operations::action(a, "stats", r#"{"table": "t"}"#)
            .unwrap_err()
            .code,
        "CLOSED"
    );
    let stats: Value =
        serde_json::from_str(&operations::action(b, "stats", r#"{"table": "t"}"#).unwrap())
            .unwrap();
    assert_eq!(stats["records"], 10);
    engines::close(b);
    assert_eq!(
        engines::catalog(12345).err().map(|f| f.code),
        Some("CLOSED")
    );

    // Reopened: the data was flushed and checkpointed at the last close.
    let c = engines::open(dir.path(), None).unwrap();
    assert_eq!(
        ids(c, r#"{"table": "t", "columns": ["id"]}"#),
        (0..10).collect::<Vec<_>>()
    );
    engines::close(c);
}

/// Threads that open and close the same directory over and over (as the writers and
/// committers of a failing Flink job do): an open that comes while the last handle's
/// close is still flushing waits for it, instead of finding the directory locked as if
/// another process held it. Every record put is there at the end.
#[test]
fn reopening_while_the_last_handle_closes_waits_instead_of_finding_the_directory_locked() {
    let dir = tempfile::tempdir().unwrap();
    let setup = engines::open(dir.path(), None).unwrap();
    operations::action(setup, "create_table", r#"{"name": "t"}"#).unwrap();
    engines::close(setup);
    let path = dir.path().to_path_buf();
    let workers: Vec<_> = (0..3i64)
        .map(|worker| {
            let path = path.clone();
            std::thread::spawn(move || {
                for round in 0..15i64 {
                    let handle = engines::open(&path, None)
                        .unwrap_or_else(|f| panic!("worker {worker}, round {round}: {}: {}", f.code, f.message));
                    let first = (worker * 15 + round) * 10;
                    put(handle, "t", first, first + 10);
                    engines::close(handle);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let handle = engines::open(dir.path(), None).unwrap();
    assert_eq!(ids(handle, r#"{"table": "t", "columns": ["id"]}"#), (0..450).collect::<Vec<_>>());
    engines::close(handle);
}

#[test]
fn errors_carry_the_protocol_codes() {
    let dir = tempfile::tempdir().unwrap();
    let handle = engines::open(dir.path(), None).unwrap();
    let code = |r: Result<String, engines::Failure>| r.unwrap_err().code;
    assert_eq!(
        code(operations::action(handle, "stats", r#"{"table": "nope"}"#)),
        "NOT_FOUND"
    );
    assert_eq!(
        code(operations::action(handle, "stats", r#"{"table": 5}"#)),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        code(operations::action(handle, "no_such_action", "{}")),
        "INVALID_ARGUMENT"
    );
    operations::action(handle, "create_table", r#"{"name": "t"}"#).unwrap();
    assert_eq!(
        code(operations::action(
            handle,
            "create_table",
            r#"{"name": "t"}"#
        )),
        "ALREADY_EXISTS"
    );
    let mut schema = FFI_ArrowSchema::empty();
    let bad_filter = unsafe {
        operations::get_flight_info(
            handle,
            r#"{"table": "t", "filter": "id = = 3"}"#,
            &raw mut schema,
        )
    };
    assert_eq!(bad_filter.unwrap_err().code, "INVALID_ARGUMENT");
    let mut stream = FFI_ArrowArrayStream::empty();
    let bad_ticket = unsafe { operations::do_get(handle, b"not a ticket", &raw mut stream) };
    assert_eq!(bad_ticket.unwrap_err().code, "INVALID_ARGUMENT");
    let bad_json = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("json", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec![
            r#"{"id": 1}"#,
            "{not json",
        ]))],
    )
    .unwrap();
    let failure = operations::do_put(handle, "t", &bad_json, None).unwrap_err();
    assert_eq!(failure.code, "INVALID_ARGUMENT");
    assert!(failure.message.contains("record 1"), "{}", failure.message);
    let wrong_column = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("body", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["{}"]))],
    )
    .unwrap();
    assert_eq!(
        operations::do_put(handle, "t", &wrong_column, None)
            .unwrap_err()
            .code,
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        engines::open(dir.path(), Some(r#"{"no_such_key": 1}"#))
            .unwrap_err()
            .code,
        "INVALID_ARGUMENT"
    );
    engines::close(handle);
}

#[test]
fn options_are_the_engines_settings_and_daemon_settings_are_refused_by_name() {
    let config = engines::parse_options(Some(r#"{"batch_rows": 100, "columnar": {"idle_ms": 5}}"#)).unwrap();
    assert_eq!(config.batch_rows, 100);
    assert_eq!(config.columnar.idle_ms, 5);
    for key in ["listen", "tls_cert", "max_concurrent_scans", "auth_token"] {
        let failure = engines::parse_options(Some(&format!(r#"{{"{key}": "x"}}"#))).unwrap_err();
        assert_eq!(failure.code, "INVALID_ARGUMENT");
        assert!(failure.message.contains(&format!("{key:?} is a setting of the daemon's Flight service")), "{}", failure.message);
    }
    let failure = engines::parse_options(Some(r#"{"batch_row": 1}"#)).unwrap_err();
    assert!(failure.message.contains("unknown field `batch_row`"), "{}", failure.message);
    let failure = engines::parse_options(Some(r#"{"batch_rows": 0}"#)).unwrap_err();
    assert!(failure.message.contains("batch_rows = 0 is out of range"), "{}", failure.message);
}
