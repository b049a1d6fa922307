//! Ingestion of a DoPut batch (its `json` column and optional `op` column), as a writer's
//! exactly-once batch or staged into a transaction, and its acknowledgement once durable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::{Array, BinaryArray, LargeBinaryArray, LargeStringArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema};
use serde_json::json;
use shoal_core::keys::RecordOp;
use shoal_core::session::WriterBatch;
use shoal_core::table::DurabilityPolicy;
use shoal_core::LogAddress;

use crate::catalog::TableEntry;
use crate::error::OpsError;
use crate::protocol::BatchMetadata;

/// Checks a DoPut stream's schema up front: a `json` column of a string or binary type.
pub fn check_put_schema(schema: &Schema) -> Result<(), OpsError> {
    match schema.field_with_name("json").map(|f| f.data_type()) {
        Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary) => Ok(()),
        Ok(other) => Err(OpsError::invalid_argument(format!(
            "the \"json\" column must be Utf8, LargeUtf8, Binary or LargeBinary, got {other}"
        ))),
        Err(_) => Err(OpsError::invalid_argument(crate::protocol::bounded(format!(
            "DoPut batches need a column named \"json\" (Utf8, LargeUtf8, Binary or LargeBinary), one JSON record per row; got columns {:?}",
            schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>()
        )))),
    }
}

/// The optional `op` column of a DoPut batch (keyed tables, [`RecordOp`]): Utf8 or
/// LargeUtf8, `upsert` (also for a null row), `delete` or `merge` per record; empty
/// without the column (every record an upsert).
///
/// # Errors
/// `INVALID_ARGUMENT` for another type or an unknown op, naming the row.
fn record_ops(batch: &RecordBatch) -> Result<Vec<RecordOp>, OpsError> {
    let Some(column) = batch.column_by_name("op") else { return Ok(Vec::new()) };
    let parse = |i: usize, text: Option<&str>| {
        text.map_or(Ok(RecordOp::Upsert), RecordOp::parse)
            .map_err(|e| OpsError::invalid_argument(format!("row {i} of the \"op\" column: {}", crate::protocol::bounded(e))))
    };
    match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().iter().enumerate().map(|(i, t)| parse(i, t)).collect(),
        DataType::LargeUtf8 => column.as_string::<i64>().iter().enumerate().map(|(i, t)| parse(i, t)).collect(),
        other => Err(OpsError::invalid_argument(format!("the \"op\" column must be Utf8 or LargeUtf8 (upsert, delete, merge), got {other}"))),
    }
}

fn json_records(batch: &RecordBatch) -> Result<Vec<&[u8]>, OpsError> {
    check_put_schema(&batch.schema())?;
    let Some(column) = batch.column_by_name("json") else { return Err(OpsError::internal("checked \"json\" column vanished")) };
    let null_error = |i: usize| OpsError::invalid_argument(format!("row {i} of the \"json\" column is null"));
    macro_rules! rows {
        ($array:ty) => {{
            let array = column.as_any().downcast_ref::<$array>().ok_or_else(|| OpsError::internal("column type mismatch"))?;
            (0..array.len())
                .map(|i| if array.is_null(i) { Err(null_error(i)) } else { Ok(<[u8] as AsRef<[u8]>>::as_ref(array.value(i).as_ref())) })
                .collect()
        }};
    }
    match column.data_type() {
        DataType::Utf8 => rows!(StringArray),
        DataType::LargeUtf8 => rows!(LargeStringArray),
        DataType::Binary => rows!(BinaryArray),
        _ => rows!(LargeBinaryArray),
    }
}

/// An ingested (or staged) batch on its way to its acknowledgement ([`acknowledge`]).
pub struct Ingested {
    entry: Arc<TableEntry>,
    /// The PutResult metadata, without `durable_address`.
    metadata: serde_json::Value,
    /// The log address the batch is durable at (`None`: nothing to wait for).
    durable_at: Option<LogAddress>,
    /// The records' addresses, withdrawn if the batch cannot be made durable; empty for
    /// a writer batch (its serial is taken: a resend is skipped, so its records stay).
    addresses: Vec<LogAddress>,
}

/// Ingests one DoPut batch (a `json` column of Utf8, LargeUtf8, Binary or LargeBinary,
/// one record per row) into `entry`'s table, as writer `{"writer","serial"}` batch
/// (exactly once) or staged into a transaction if `metadata` says so. `number` is the
/// batch's position in its stream, for messages.
///
/// # Errors
/// `INVALID_ARGUMENT` for a batch without a usable `json` column or with null rows, a
/// record the table rejects (`on_invalid_json = reject`) naming its row; engine errors.
pub fn ingest_batch(entry: &Arc<TableEntry>, batch: &RecordBatch, metadata: &BatchMetadata, number: usize) -> Result<Ingested, OpsError> {
    let records = json_records(batch)?;
    let with_context = |error: OpsError| error.context(format_args!("table {:?}, DoPut batch {number}", entry.name));
    entry.check_memory_for_ingest(records.iter().map(|r| r.len()).sum()).map_err(with_context)?;
    let ops = record_ops(batch).map_err(with_context)?;
    if let Some(transaction) = &metadata.transaction {
        // Held until the records are staged: a hand-over uploads them, or refuses them.
        let writing = entry.table.hold_writable().map_err(|e| OpsError::from_engine(&e)).map_err(with_context)?;
        let (staged, skipped) = entry.transactions.stage(&entry.table, transaction, &records, &ops).map_err(with_context)?;
        let metadata = json!({
            "batch": number,
            "transaction": transaction,
            "staged": staged,
            "records": 0,
            "skipped": skipped.len(),
            "skipped_examples": skipped.iter().take(10).map(|(i, m)| json!({"row": i, "error": m})).collect::<Vec<_>>(),
        });
        drop(writing);
        return Ok(Ingested { entry: Arc::clone(entry), metadata, durable_at: None, addresses: Vec::new() });
    }
    let started = Instant::now();
    let result = match (&metadata.writer, metadata.serial) {
        (Some(writer), Some(serial)) => entry.table.ingest_ops_as(WriterBatch { writer, serial }, &records, &ops),
        _ => entry.table.ingest_ops(&records, &ops),
    };
    let report = result.map_err(|e| with_context(OpsError::from_engine(&e)))?;
    metrics::counter!("shoal_ingested_records_total", "table" => entry.name.clone()).increment(report.records as u64);
    metrics::counter!("shoal_ingested_bytes_total", "table" => entry.name.clone()).increment(report.payload_bytes as u64);
    metrics::counter!("shoal_skipped_records_total", "table" => entry.name.clone()).increment(report.skipped as u64);
    metrics::histogram!("shoal_ingest_batch_seconds", "table" => entry.name.clone()).record(started.elapsed().as_secs_f64());
    let mut reply = json!({
        "batch": number,
        "records": report.records,
        "skipped": report.skipped,
        "skipped_examples": report.skipped_examples.iter().map(|(i, m)| json!({"row": i, "error": m})).collect::<Vec<_>>(),
        "first_address": report.first_address,
        "last_address": report.last_address,
        "end_address": report.end_address,
    });
    if let (Some(writer), Some(serial)) = (&metadata.writer, metadata.serial) {
        reply["writer"] = json!(writer);
        reply["serial"] = json!(serial);
        reply["duplicate"] = json!(report.duplicate);
    }
    // A duplicate was ingested earlier: it is durable once everything so far is.
    let durable_at = if report.duplicate { entry.table.tail_address() } else { report.end_address };
    let addresses = if metadata.writer.is_some() { Vec::new() } else { report.addresses };
    Ok(Ingested { entry: Arc::clone(entry), metadata: reply, durable_at: Some(durable_at), addresses })
}

/// Waits, under the `group_commit` and `fsync` policies, until the batch is durable;
/// then returns its PutResult metadata (JSON), with the table's durable address.
///
/// # Errors
/// When the batch does not become durable within 60 s (e.g. the device fails).
pub fn acknowledge(ingested: Ingested) -> Result<serde_json::Value, OpsError> {
    acknowledge_while(ingested, &|| true)
}

/// As [`acknowledge`], but stops waiting (`CANCELLED`) as soon as `keep_waiting` says
/// no: the client that sent the batch went away.
///
/// # Errors
/// As [`acknowledge`].
pub fn acknowledge_while(ingested: Ingested, keep_waiting: &dyn Fn() -> bool) -> Result<serde_json::Value, OpsError> {
    let Ingested { entry, mut metadata, durable_at, addresses } = ingested;
    let table = &entry.table;
    if let Some(address) = durable_at {
        wait_acknowledgeable(table, address, keep_waiting).map_err(|e| {
            let status = OpsError::from_engine(&e);
            if matches!(e, shoal_core::Error::Cancelled(_)) {
                return status;
            }
            // Not acknowledged, so not visible: a resend must not duplicate it.
            let withdrawal = table.withdraw(&addresses);
            let lasting = withdrawal.not_lasting.map_or_else(String::new, |why| {
                format!(" (but those already on the device come back after a restart: the list of withdrawn records failed: {why})")
            });
            status.context(format_args!(
                "table {:?}: the batch could not be made durable ({} of its records withdrawn{lasting}; resend it, \
                 with a writer serial for exactly once)",
                entry.name, withdrawal.records
            ))
        })?;
    }
    metadata["durable_address"] = json!(table.durable_address());
    Ok(metadata)
}

/// Waits until writes ending at `address` may be acknowledged under the table's
/// durability policy: at once under `none`; once `address` is durable under
/// `group_commit` and `fsync` (at most 60 s; `CANCELLED` as soon as `keep_waiting` says no).
///
/// # Errors
/// As `Table::wait_durable_while`.
pub(super) fn wait_acknowledgeable(table: &shoal_core::table::Table, address: LogAddress, keep_waiting: &dyn Fn() -> bool) -> Result<(), shoal_core::Error> {
    if address > LogAddress::ZERO && table.config().durability != DurabilityPolicy::None {
        table.wait_durable_while(address, Duration::from_secs(60), keep_waiting)?;
    }
    Ok(())
}
