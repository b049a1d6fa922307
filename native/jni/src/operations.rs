//! The embedded operations, in plain Rust (the JNI glue in `lib.rs` only converts
//! arguments and results): each maps one Flight call onto [`shoal_ops::ops`].

use std::ops::ControlFlow;
use std::sync::mpsc::{self, Receiver};

use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{Array, RecordBatch, RecordBatchReader, StructArray};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use serde_json::json;
use shoal_ops::ops::{self, TicketScan};
use shoal_ops::protocol::BatchMetadata;

use crate::engines::{self, Failure};

/// Batches a scan thread may run ahead of the reader.
const SCAN_AHEAD_BATCHES: usize = 4;

/// `DoAction`: the JSON result text of action `name` with JSON `body`.
///
/// # Errors
/// As [`ops::run_action`]; `CLOSED` for a closed handle.
pub fn action(handle: u64, name: &str, body: &str) -> Result<String, Failure> {
    let catalog = engines::catalog(handle)?;
    Ok(ops::run_action(&catalog, name, body.as_bytes())?.to_string())
}

/// `ListFlights` as JSON text: `[{"table", "records", "bytes", "stats"}]`.
///
/// # Errors
/// `CLOSED` for a closed handle.
pub fn list_tables(handle: u64) -> Result<String, Failure> {
    let catalog = engines::catalog(handle)?;
    let tables: Vec<_> = ops::list_tables(&catalog)
        .into_iter()
        .map(|t| json!({"table": t.name, "records": t.stats.records, "bytes": t.stats.payload_bytes, "stats": t.stats}))
        .collect();
    Ok(serde_json::Value::Array(tables).to_string())
}

fn export_schema(schema: &arrow_schema::Schema, out: *mut FFI_ArrowSchema) -> Result<(), Failure> {
    let ffi = FFI_ArrowSchema::try_from(schema).map_err(|e| {
        Failure::new(
            "INTERNAL",
            format!("cannot export the schema through the C Data Interface: {e}"),
        )
    })?;
    // SAFETY: `out` points to a caller-allocated ArrowSchema (see the callers' contracts);
    // writing without dropping its old (released, zeroed) content is what the C Data
    // Interface's producer does.
    unsafe { std::ptr::write(out, ffi) };
    Ok(())
}

/// `GetSchema`: exports `table`'s schema into the `ArrowSchema` at `out`.
///
/// # Safety
/// `out` must point to a writable, released (empty) `ArrowSchema`.
///
/// # Errors
/// `NOT_FOUND` for an unknown table; `CLOSED` for a closed handle.
pub unsafe fn get_schema(
    handle: u64,
    table: &str,
    out: *mut FFI_ArrowSchema,
) -> Result<(), Failure> {
    let catalog = engines::catalog(handle)?;
    export_schema(&ops::table_schema(&catalog, table)?, out)
}

/// `GetFlightInfo`: plans `command` (the protocol's query command JSON), exports the
/// result schema into the `ArrowSchema` at `out`, and returns
/// `{"total_records", "metadata", "endpoints": [{"ticket", "plan"}]}` as JSON text.
///
/// # Safety
/// As [`get_schema`].
///
/// # Errors
/// As [`ops::plan_query`]; `CLOSED` for a closed handle.
pub unsafe fn get_flight_info(
    handle: u64,
    command: &str,
    out: *mut FFI_ArrowSchema,
) -> Result<String, Failure> {
    let catalog = engines::catalog(handle)?;
    let planned = ops::plan_query(&catalog, command.as_bytes())?;
    let endpoints = planned
        .endpoints
        .iter()
        .map(|e| {
            let ticket = String::from_utf8(e.ticket.clone())
                .map_err(|_| Failure::new("INTERNAL", "a ticket is not UTF-8"))?;
            Ok(json!({"ticket": ticket, "plan": e.plan}))
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    export_schema(&planned.schema, out)?;
    Ok(json!({"total_records": planned.total_records, "metadata": planned.metadata, "endpoints": endpoints}).to_string())
}

/// The batches of one scan, as an Arrow [`RecordBatchReader`] fed by the scan's thread.
struct ScanReader {
    schema: SchemaRef,
    batches: Receiver<Result<RecordBatch, ArrowError>>,
}

impl Iterator for ScanReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.batches.recv().ok()
    }
}

impl RecordBatchReader for ScanReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// `DoGet`: opens `ticket` and exports its batches as the `ArrowArrayStream` at `out`. A
/// row scan runs on its own thread, at most a few batches ahead of the reader; releasing
/// the stream early stops it. A scan error ends the stream with an error whose message
/// starts with its code (`NOT_FOUND: ...`).
///
/// # Safety
/// `out` must point to a writable, released (empty) `ArrowArrayStream`.
///
/// # Errors
/// As [`ops::open_ticket`]; `CLOSED` for a closed handle.
pub unsafe fn do_get(
    handle: u64,
    ticket: &[u8],
    out: *mut FFI_ArrowArrayStream,
) -> Result<(), Failure> {
    let catalog = engines::catalog(handle)?;
    let reader: Box<dyn RecordBatchReader + Send> = match ops::open_ticket(&catalog, ticket)? {
        TicketScan::Aggregates(batch) => {
            let schema = batch.schema();
            Box::new(arrow_array::RecordBatchIterator::new([Ok(batch)], schema))
        }
        TicketScan::Rows(scan) => {
            let schema = scan.schema();
            let (sender, batches) = mpsc::sync_channel(SCAN_AHEAD_BATCHES);
            std::thread::Builder::new()
                .name("shoal-embedded-scan".into())
                .spawn(move || {
                    // A panic of the scan must end the stream with an error: a dropped sender
                    // alone reads as the end of the answer (a follower would skip the rest).
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        scan.run(&mut |batch| {
                            if sender.send(Ok(batch)).is_ok() {
                                ControlFlow::Continue(())
                            } else {
                                ControlFlow::Break(())
                            }
                        })
                    }));
                    let failure = match result {
                        Ok(Ok(())) => return,
                        Ok(Err(error)) => Failure::from(error),
                        Err(panic) => Failure::new("PANIC", format!("the native engine panicked in a scan: {}", crate::panic_text(panic.as_ref()))),
                    };
                    let _ = sender.send(Err(ArrowError::ExternalError(
                        format!("{}: {}", failure.code, failure.message).into(),
                    )));
                })
                .map_err(|e| {
                    Failure::new("INTERNAL", format!("cannot start the scan thread: {e}"))
                })?;
            Box::new(ScanReader { schema, batches })
        }
    };
    // SAFETY: `out` points to a caller-allocated, released ArrowArrayStream.
    unsafe { std::ptr::write(out, FFI_ArrowArrayStream::new(reader)) };
    Ok(())
}

/// Imports a batch exported through the C Data Interface (a struct array and its schema),
/// taking it over: the structs at the addresses are left released.
///
/// # Safety
/// `array` and `schema` must point to an `ArrowArray` and `ArrowSchema` filled by a
/// producer (e.g. Arrow Java's `Data.exportVectorSchemaRoot`).
///
/// # Errors
/// `INVALID_ARGUMENT` when the data is not a valid struct array.
pub unsafe fn import_batch(
    array: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
) -> Result<RecordBatch, Failure> {
    // SAFETY: per this function's contract; from_raw moves the structs out.
    let (array, schema) = unsafe {
        (
            FFI_ArrowArray::from_raw(array),
            FFI_ArrowSchema::from_raw(schema),
        )
    };
    let invalid = |e: ArrowError| {
        Failure::new(
            "INVALID_ARGUMENT",
            format!("the batch is not valid Arrow data: {e}"),
        )
    };
    // SAFETY: the array was produced for this schema.
    let data = unsafe { from_ffi(array, &schema) }.map_err(invalid)?;
    if !matches!(data.data_type(), DataType::Struct(_)) {
        return Err(Failure::new(
            "INVALID_ARGUMENT",
            format!(
                "the batch must be exported as a struct array (a VectorSchemaRoot), got {}",
                data.data_type()
            ),
        ));
    }
    data.validate_full().map_err(invalid)?;
    let array = StructArray::from(data);
    if array.null_count() > 0 {
        return Err(Failure::new(
            "INVALID_ARGUMENT",
            "the exported batch has null rows at the top level",
        ));
    }
    Ok(RecordBatch::from(&array))
}

/// `DoPut` of one batch into `table`: ingests (or stages, for `{"transaction"}`) the rows
/// of its `json` column, waits for durability per the table's policy, and returns the
/// PutResult metadata as JSON text.
///
/// # Errors
/// As [`ops::ingest_batch`] and [`ops::acknowledge`]; `NOT_FOUND` for an unknown table;
/// `INVALID_ARGUMENT` for malformed metadata; `CLOSED` for a closed handle.
pub fn do_put(
    handle: u64,
    table: &str,
    batch: &RecordBatch,
    metadata: Option<&str>,
) -> Result<String, Failure> {
    let catalog = engines::catalog(handle)?;
    let entry = catalog.get(table)?;
    let metadata = BatchMetadata::parse(metadata.unwrap_or_default().as_bytes())?;
    ops::check_put_schema(&batch.schema())?;
    let ingested = ops::ingest_batch(&entry, batch, &metadata, 0)?;
    Ok(ops::acknowledge(ingested)?.to_string())
}
