//! The Arrow Flight service: tables, ingestion (`DoPut`), planning (`GetFlightInfo`),
//! scans (`DoGet`) and actions, over shoal-core.

use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, BinaryArray, LargeBinaryArray, LargeStringArray, RecordBatch, StringArray};
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest,
    HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::{DataType, Field, Schema};
use futures::stream;
use futures::{StreamExt, TryStreamExt};
use serde_json::json;
use shoal_core::psf::{parse_expr, Expr};
use shoal_core::scan::{Aggregate, ScanPlan, ScanRequest, ScanStats};
use shoal_core::session::WriterBatch;
use shoal_core::table::{DurabilityPolicy, Table};
use shoal_core::FieldPath;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{Authenticator, Credentials};
use crate::catalog::{Catalog, TableEntry};
use crate::protocol::{
    parse_body, status_from_engine, AggregateSpec, BatchMetadata, CreateTable, MakeDurable, Truncate, TransactionRef, WriterRef, DeregisterPsf, QueryCommand, RegisterPsf, TableRef, TicketBody,
    TICKET_VERSION,
};

/// The actions `DoAction` understands, with their descriptions (for `ListActions`).
pub const ACTIONS: &[(&str, &str)] = &[
    ("create_table", r#"{"name", "on_invalid_json"?: "reject"|"skip", "memory_budget_bytes"?, "page_size_bits"?, "index_size_bits"?, "if_not_exists"?} → {"created": bool}"#),
    ("drop_table", r#"{"name"} → {"dropped": true}"#),
    ("register_psf", r#"{"table", "name", "kind": "projection"|"predicate"|"range"|"composite", "field"|"expr"|"fields", "boundaries"?} → PSF with safe register address"#),
    ("deregister_psf", r#"{"table", "name"} → PSF with safe deregister address"#),
    ("list_psfs", r#"{"table"} → [PSF]"#),
    ("stats", r#"{"table"} → counters and log addresses"#),
    ("truncate", r#"{"table", "before_address" | "keep_bytes" | "older_than_secs"} → drops the head of the log (whole segment files); {"begin_address", "segments_deleted", "bytes_deleted"}"#),
    ("make_durable", r#"{"table", "address"?} → waits until everything below address (default: the tail) is durable, without closing the open page; {"durable_address"}"#),
    ("writer_status", r#"{"table", "writer"} → {"last_serial", "last_durable_serial", "durable_address"}"#),
    ("begin_transaction", r#"{"table", "transaction"} → opens a transaction; DoPut batches with app_metadata {"transaction"} are staged in it"#),
    ("prepare_transaction", r#"{"table", "transaction"} → syncs its staged records"#),
    ("commit_transaction", r#"{"table", "transaction"} → ingests its staged records exactly once, durably; idempotent"#),
    ("abort_transaction", r#"{"table", "transaction"} → drops its staged records; idempotent"#),
    ("list_transactions", r#"{"table"} → [{"transaction", "state", "records"}]"#),
    ("checkpoint", r#"{"table"} → flushes the log and saves the inferred schema; {"flushed_until_address"}"#),
];

/// Batches of one DoPut stream that may wait between decoding and ingestion, and
/// acknowledgements that may wait to be sent: enough to keep both stages busy, small
/// enough to bound the memory a stream holds (batches are typically a few MB).
const PUT_PIPELINE_DEPTH: usize = 4;

/// The Flight service.
pub struct ShoalFlightService {
    catalog: Arc<Catalog>,
    auth: Arc<Authenticator>,
}

impl ShoalFlightService {
    /// A service over `catalog`; `auth` answers handshakes with basic credentials (the
    /// interceptor built from the same authenticator checks every call).
    pub fn new(catalog: Arc<Catalog>, auth: Arc<Authenticator>) -> Self {
        Self { catalog, auth }
    }
}

type BoxedStream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

fn table_from_descriptor(descriptor: &FlightDescriptor) -> Result<String, Status> {
    match descriptor.path.as_slice() {
        [table] => Ok(table.clone()),
        _ => Err(Status::invalid_argument(format!(
            "the descriptor must be a path of exactly one element (the table name), got {:?}",
            descriptor.path
        ))),
    }
}

fn parse_filter(filter: Option<&str>) -> Result<Option<Expr>, Status> {
    filter
        .filter(|f| !f.trim().is_empty())
        .map(|f| parse_expr(f).map_err(|e| status_from_engine(&e)))
        .transpose()
}

fn parse_columns(columns: &[String]) -> Result<Vec<FieldPath>, Status> {
    columns.iter().map(|c| FieldPath::parse(c).map_err(|e| status_from_engine(&e))).collect()
}

fn parse_aggregates(aggregates: &[AggregateSpec]) -> Result<Vec<Aggregate>, Status> {
    aggregates.iter().map(AggregateSpec::to_aggregate).collect()
}

/// Runs blocking engine work off the async runtime.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, Status> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Status::internal(format!("engine task failed: {e}")))?
}

fn json_result(value: &serde_json::Value) -> arrow_flight::Result {
    arrow_flight::Result { body: value.to_string().into() }
}

fn psf_json(psf: &shoal_core::psf::Psf) -> serde_json::Value {
    let (register, deregister) = (psf.safe_register_address(), psf.safe_deregister_address());
    let spec = serde_json::to_value(psf.kind.to_spec()).unwrap_or_default();
    json!({
        "id": psf.id,
        "name": psf.name,
        "definition": spec,
        "active": psf.is_active(),
        "safe_register_address": (register != shoal_core::psf::NOT_YET).then_some(register),
        "safe_deregister_address": (deregister != shoal_core::psf::NOT_YET).then_some(deregister),
        "key_pointers": psf.key_pointer_count(),
    })
}

/// Splits `[from, to)` into at most `parts` ranges that start at page boundaries.
fn split_range(table: &Table, from: u64, to: u64, parts: usize) -> Vec<(u64, u64)> {
    if from >= to {
        return vec![(from, to)];
    }
    let log = table.log();
    let first = log.page_of(from);
    let last = log.page_of(to - 1);
    let pages = last - first + 1;
    let parts = (parts.max(1) as u64).min(pages);
    (0..parts)
        .map(|i| {
            let start_page = first + pages * i / parts;
            let end_page = first + pages * (i + 1) / parts;
            let start = if i == 0 { from } else { log.page_start(start_page) };
            let end = if i + 1 == parts { to } else { log.page_start(end_page) };
            (start, end)
        })
        .collect()
}

/// The log ranges of a query's endpoints (at most about `parts`): each run of adjacent
/// index-scan ranges is one endpoint — a chain walk cannot be split by address without
/// every part walking the chains down from their heads again — and the full-scan ranges
/// share the other endpoints, split at page boundaries in proportion to their sizes.
/// The plan's ranges tile `[from, to)`, so the endpoints do too.
fn endpoint_ranges(table: &Table, plan: &ScanPlan, from: u64, to: u64, parts: usize) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64, bool)> = plan
        .index_scans
        .iter()
        .map(|s| (s.from, s.to, true))
        .chain(plan.full_scans.iter().map(|r| (r.from, r.to, false)))
        .filter(|(f, t, _)| f < t)
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64, bool)> = Vec::new();
    for range in ranges {
        match merged.last_mut() {
            Some(last) if last.2 && range.2 && last.1 == range.0 => last.1 = range.1,
            _ => merged.push(range),
        }
    }
    let index_groups = merged.iter().filter(|r| r.2).count();
    let full_total: u64 = merged.iter().filter(|r| !r.2).map(|r| r.1 - r.0).sum();
    let budget = parts.max(1).saturating_sub(index_groups).max(1) as u128;
    let mut endpoints = Vec::new();
    for (start, end, index) in merged {
        if index {
            endpoints.push((start, end));
        } else {
            let share = (budget * u128::from(end - start)).div_ceil(u128::from(full_total.max(1))).max(1);
            endpoints.extend(split_range(table, start, end, usize::try_from(share).unwrap_or(1)));
        }
    }
    if endpoints.is_empty() {
        endpoints.push((from, to));
    }
    endpoints
}

fn plan_json(plan: &ScanPlan) -> serde_json::Value {
    serde_json::to_value(plan).unwrap_or_default()
}

impl ShoalFlightService {
    fn flight_info(&self, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
        let command: QueryCommand = parse_body("GetFlightInfo command", &descriptor.cmd)?;
        let entry = self.catalog.get(&command.table)?;
        let table = &entry.table;
        let filter = parse_filter(command.filter.as_deref())?;
        let columns = parse_columns(&command.columns)?;
        let aggregates = parse_aggregates(&command.aggregates)?;
        let schema = if aggregates.is_empty() {
            let output = table.output_columns(&columns).map_err(|e| status_from_engine(&e))?;
            Schema::new(output.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>())
        } else if !command.columns.is_empty() || command.limit.is_some() {
            return Err(Status::invalid_argument(
                "GetFlightInfo command: \"aggregates\" cannot be combined with \"columns\" or \"limit\" \
                 (the result is one row of aggregates per endpoint)",
            ));
        } else {
            table.aggregate_schema(&aggregates).map_err(|e| status_from_engine(&e))?
        };
        let request = ScanRequest {
            filter: filter.clone(),
            columns: columns.clone(),
            from_address: command.from_address.unwrap_or(0),
            to_address: command.to_address.unwrap_or(u64::MAX),
            limit: command.limit,
            ..ScanRequest::default()
        };
        let plan = table.plan(&request);
        let (from, to) = plan_bounds(&plan, table, &request);
        let parts = command.max_endpoints.unwrap_or(self.catalog.config().endpoints_per_query);
        let mut endpoints = Vec::new();
        for (part_from, part_to) in endpoint_ranges(table, &plan, from, to, parts) {
            let ticket = TicketBody {
                v: TICKET_VERSION,
                table: command.table.clone(),
                filter: filter.as_ref().map(ToString::to_string),
                columns: command.columns.clone(),
                limit: command.limit,
                from: part_from,
                to: part_to,
                aggregates: command.aggregates.clone(),
            };
            let part_plan = table.plan(&ScanRequest { from_address: part_from, to_address: part_to, ..request.clone() });
            let ticket = serde_json::to_vec(&ticket).map_err(|e| Status::internal(e.to_string()))?;
            endpoints.push(FlightEndpoint::new().with_ticket(Ticket::new(ticket)).with_app_metadata(plan_json(&part_plan).to_string()));
        }
        let stats = table.stats();
        let span = stats.tail_address.saturating_sub(stats.begin_address).max(1);
        #[allow(clippy::cast_possible_wrap)]
        let estimate = if aggregates.is_empty() {
            (u128::from(stats.records) * u128::from(to.saturating_sub(from)) / u128::from(span)) as i64
        } else {
            endpoints.len() as i64
        };
        let metadata = json!({
            "table": command.table,
            "from": from,
            "to": to,
            "plan": plan_json(&plan),
            "exact": true,
            "exact_note": "the server evaluates the whole filter on every record it returns",
        });
        FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))
            .map(|info| {
                info.with_descriptor(descriptor)
                    .with_endpoints(endpoints)
                    .with_total_records(command.limit.map_or(estimate, |l| estimate.min(l as i64)))
                    .with_total_bytes(-1)
                    .with_app_metadata(metadata.to_string())
            })
    }
}

fn plan_bounds(plan: &ScanPlan, table: &Table, request: &ScanRequest) -> (u64, u64) {
    let ranges = plan.index_scans.iter().map(|s| (s.from, s.to)).chain(plan.full_scans.iter().map(|r| (r.from, r.to)));
    let (mut from, mut to) = (u64::MAX, 0);
    for (f, t) in ranges {
        from = from.min(f);
        to = to.max(t);
    }
    if from > to {
        let begin = request.from_address.max(table.log().begin_address());
        return (begin, begin);
    }
    (from, to)
}

/// Checks a DoPut stream's schema up front: a `json` column of a string or binary type.
fn check_put_schema(schema: &Schema) -> Result<(), Status> {
    match schema.field_with_name("json").map(|f| f.data_type()) {
        Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary) => Ok(()),
        Ok(other) => Err(Status::invalid_argument(format!(
            "the \"json\" column must be Utf8, LargeUtf8, Binary or LargeBinary, got {other}"
        ))),
        Err(_) => Err(Status::invalid_argument(format!(
            "DoPut batches need a column named \"json\" (Utf8, LargeUtf8, Binary or LargeBinary), one JSON record per row; got columns {:?}",
            schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>()
        ))),
    }
}

fn json_records(batch: &RecordBatch) -> Result<Vec<&[u8]>, Status> {
    check_put_schema(&batch.schema())?;
    let Some(column) = batch.column_by_name("json") else { return Err(Status::internal("checked \"json\" column vanished")) };
    let null_error = |i: usize| Status::invalid_argument(format!("row {i} of the \"json\" column is null"));
    macro_rules! rows {
        ($array:ty) => {{
            let array = column.as_any().downcast_ref::<$array>().ok_or_else(|| Status::internal("column type mismatch"))?;
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

#[tonic::async_trait]
impl FlightService for ShoalFlightService {
    type HandshakeStream = BoxedStream<HandshakeResponse>;
    type ListFlightsStream = BoxedStream<FlightInfo>;
    type DoGetStream = BoxedStream<FlightData>;
    type DoPutStream = BoxedStream<PutResult>;
    type DoActionStream = BoxedStream<arrow_flight::Result>;
    type ListActionsStream = BoxedStream<ActionType>;
    type DoExchangeStream = BoxedStream<FlightData>;

    async fn handshake(&self, request: Request<Streaming<HandshakeRequest>>) -> Result<Response<Self::HandshakeStream>, Status> {
        // The interceptor has checked the credentials; basic ones are answered with a
        // session token in the `authorization` response header (Flight's basic-token flow).
        let credentials = self.auth.check(request.metadata())?;
        let response = HandshakeResponse { protocol_version: 0, payload: bytes::Bytes::new() };
        let mut response = Response::new(Box::pin(stream::iter([Ok(response)])) as Self::HandshakeStream);
        if credentials == Credentials::Basic {
            let token = self.auth.issue_token()?;
            let value = format!("Bearer {token}").parse().map_err(|_| Status::internal("session token is not ASCII"))?;
            response.metadata_mut().insert("authorization", value);
        }
        Ok(response)
    }

    async fn list_flights(&self, _request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        let mut infos = Vec::new();
        for entry in self.catalog.list() {
            let stats = entry.table.stats();
            let schema = entry.table.schema().arrow_schema();
            let info = FlightInfo::new()
                .try_with_schema(&schema)
                .map_err(|e| Status::internal(e.to_string()))?
                .with_descriptor(FlightDescriptor::new_path(vec![entry.name.clone()]))
                .with_total_records(i64::try_from(stats.records).unwrap_or(i64::MAX))
                .with_total_bytes(i64::try_from(stats.payload_bytes).unwrap_or(i64::MAX))
                .with_app_metadata(serde_json::to_string(&stats).unwrap_or_default());
            infos.push(Ok(info));
        }
        Ok(Response::new(Box::pin(stream::iter(infos))))
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let descriptor = request.into_inner();
        let service = Self { catalog: Arc::clone(&self.catalog), auth: Arc::clone(&self.auth) };
        let info = blocking(move || service.flight_info(descriptor)).await?;
        Ok(Response::new(info))
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        let info = self.get_flight_info(request).await?.into_inner();
        Ok(Response::new(PollInfo::new().with_info(info)))
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        let table = table_from_descriptor(request.get_ref())?;
        let entry = self.catalog.get(&table)?;
        let schema = blocking(move || Ok(entry.table.schema().arrow_schema())).await?;
        let options = IpcWriteOptions::default();
        let result: SchemaResult = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: arrow_schema::ArrowError| Status::internal(e.to_string()))?;
        Ok(Response::new(result))
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let ticket: TicketBody = parse_body("DoGet ticket", &request.get_ref().ticket)?;
        if ticket.v != TICKET_VERSION {
            return Err(Status::invalid_argument(format!("unsupported ticket version {} (this server speaks {TICKET_VERSION})", ticket.v)));
        }
        let entry = self.catalog.get(&ticket.table)?;
        let filter = parse_filter(ticket.filter.as_deref())?;
        let columns = parse_columns(&ticket.columns)?;
        let aggregates = parse_aggregates(&ticket.aggregates)?;
        let request = ScanRequest {
            filter,
            columns,
            from_address: ticket.from,
            to_address: ticket.to,
            limit: ticket.limit,
            batch_rows: self.catalog.config().batch_rows,
        };
        if !aggregates.is_empty() {
            let batch = blocking(move || run_aggregate(&entry, &request, &aggregates)).await?;
            let schema = batch.schema();
            let batches = stream::iter([Ok(batch)]);
            let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from);
            return Ok(Response::new(Box::pin(stream)));
        }
        // Resolve the columns once: the announced schema and the scanned batches agree
        // even if schema inference widens a type while the scan runs.
        let output = entry.table.output_columns(&request.columns).map_err(|e| status_from_engine(&e))?;
        let schema = Arc::new(Schema::new(output.iter().map(|(_, f)| f.clone()).collect::<Vec<Field>>()));
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
        tokio::task::spawn_blocking(move || run_scan(&entry, &request, &output, &sender));
        let batches = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        // Three stages, so that receiving and decoding batch n+1 and waiting for batch
        // n-1 to become durable overlap with ingesting batch n: this task decodes
        // FlightData into record batches; a blocking worker ingests them in order; an
        // acknowledger waits for durability (per the table's policy) and answers each
        // batch with its PutResult. A failure of any stage travels through the same
        // ordered queues, so the client sees the results of every batch before it, then
        // the error, and nothing after it.
        let catalog = Arc::clone(&self.catalog);
        let mut decoder = FlightDataDecoder::new(request.into_inner().map_err(FlightError::from));
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<PutResult, Status>>(PUT_PIPELINE_DEPTH);
        let (work_sender, mut work) = tokio::sync::mpsc::channel::<Result<PutWork, Status>>(PUT_PIPELINE_DEPTH);
        let (ack_sender, mut acks) = tokio::sync::mpsc::channel::<Result<Ingested, Status>>(PUT_PIPELINE_DEPTH);
        tokio::task::spawn_blocking(move || {
            let mut number = 0usize;
            while let Some(item) = work.blocking_recv() {
                let result = item.and_then(|w| ingest_batch(&w.entry, &w.batch, &w.metadata, number));
                number += 1;
                let failed = result.is_err();
                if ack_sender.blocking_send(result).is_err() || failed {
                    return;
                }
            }
        });
        tokio::task::spawn_blocking(move || {
            while let Some(item) = acks.blocking_recv() {
                let result = item.and_then(acknowledge);
                let failed = result.is_err();
                if sender.blocking_send(result).is_err() || failed {
                    return;
                }
            }
        });
        tokio::spawn(async move {
            let mut entry: Option<Arc<TableEntry>> = None;
            while let Some(message) = decoder.next().await {
                let item: Result<Option<PutWork>, Status> = (|| {
                    let message = message.map_err(Status::from)?;
                    if entry.is_none() {
                        let descriptor = message.inner.flight_descriptor.as_ref().ok_or_else(|| {
                            Status::invalid_argument("the first DoPut message must carry a descriptor with path [table]")
                        })?;
                        entry = Some(catalog.get(&table_from_descriptor(descriptor)?)?);
                    }
                    match (message.payload, &entry) {
                        (DecodedPayload::RecordBatch(batch), Some(entry)) => Ok(Some(PutWork {
                            entry: Arc::clone(entry),
                            batch,
                            metadata: BatchMetadata::parse(&message.inner.app_metadata)?,
                        })),
                        (DecodedPayload::Schema(schema), _) => check_put_schema(&schema).map(|()| None),
                        _ => Ok(None),
                    }
                })();
                let item = match item {
                    Ok(None) => continue,
                    Ok(Some(work)) => Ok(work),
                    Err(status) => Err(status),
                };
                let failed = item.is_err();
                if work_sender.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))))
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        let catalog = Arc::clone(&self.catalog);
        let result = blocking(move || run_action(&catalog, &action)).await?;
        Ok(Response::new(Box::pin(stream::iter([Ok(json_result(&result))]))))
    }

    async fn list_actions(&self, _request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        let actions = ACTIONS.iter().map(|(name, description)| {
            Ok(ActionType { r#type: (*name).to_owned(), description: (*description).to_owned() })
        });
        Ok(Response::new(Box::pin(stream::iter(actions.collect::<Vec<_>>()))))
    }

    async fn do_exchange(&self, _request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("DoExchange is not part of the shoal protocol; use DoPut to ingest and DoGet to read"))
    }
}

fn record_scan_metrics(entry: &TableEntry, plan: &ScanPlan, stats: &ScanStats, started: Instant) {
    let kind = if plan.index_scans.is_empty() { "full" } else { "index" };
    metrics::counter!("shoal_scans_total", "table" => entry.name.clone(), "kind" => kind).increment(1);
    metrics::counter!("shoal_scan_records_returned_total", "table" => entry.name.clone()).increment(stats.records_returned);
    metrics::histogram!("shoal_scan_seconds", "table" => entry.name.clone()).record(started.elapsed().as_secs_f64());
    tracing::debug!(table = %entry.name, ?stats, elapsed_ms = started.elapsed().as_millis(), "scan done");
}

fn run_scan(
    entry: &TableEntry,
    request: &ScanRequest,
    columns: &[(FieldPath, Field)],
    sender: &tokio::sync::mpsc::Sender<Result<RecordBatch, FlightError>>,
) {
    let started = Instant::now();
    let plan = entry.table.plan(request);
    let result = entry.table.scan_columns(request, &plan, columns, &mut |batch| {
        Ok(if sender.blocking_send(Ok(batch)).is_ok() { ControlFlow::Continue(()) } else { ControlFlow::Break(()) })
    });
    match result {
        Ok(stats) => record_scan_metrics(entry, &plan, &stats, started),
        Err(e) => {
            let _ = sender.blocking_send(Err(FlightError::Tonic(Box::new(status_from_engine(&e)))));
        }
    }
}

/// Computes one endpoint's partial aggregates.
fn run_aggregate(entry: &TableEntry, request: &ScanRequest, aggregates: &[Aggregate]) -> Result<RecordBatch, Status> {
    let started = Instant::now();
    let plan = entry.table.plan(request);
    let (batch, stats) =
        entry.table.aggregate_with_plan(request, &plan, aggregates).map_err(|e| status_from_engine(&e))?;
    record_scan_metrics(entry, &plan, &stats, started);
    Ok(batch)
}

/// One decoded DoPut batch on its way to ingestion.
struct PutWork {
    entry: Arc<TableEntry>,
    batch: RecordBatch,
    metadata: BatchMetadata,
}

/// An ingested (or staged) batch on its way to its acknowledgement.
struct Ingested {
    entry: Arc<TableEntry>,
    /// The PutResult metadata, without `durable_address`.
    metadata: serde_json::Value,
    /// The log address the batch is durable at (`None`: nothing to wait for).
    durable_at: Option<u64>,
}

fn ingest_batch(entry: &Arc<TableEntry>, batch: &RecordBatch, metadata: &BatchMetadata, number: usize) -> Result<Ingested, Status> {
    let records = json_records(batch)?;
    let with_context = |status: Status| {
        Status::new(status.code(), format!("table {:?}, DoPut batch {number}: {}", entry.name, status.message()))
    };
    if let Some(transaction) = &metadata.transaction {
        let (staged, skipped) = entry.transactions.stage(&entry.table, transaction, &records).map_err(with_context)?;
        let metadata = json!({
            "batch": number,
            "transaction": transaction,
            "staged": staged,
            "records": 0,
            "skipped": skipped.len(),
            "skipped_examples": skipped.iter().take(10).map(|(i, m)| json!({"row": i, "error": m})).collect::<Vec<_>>(),
        });
        return Ok(Ingested { entry: Arc::clone(entry), metadata, durable_at: None });
    }
    let started = Instant::now();
    let result = match (&metadata.writer, metadata.serial) {
        (Some(writer), Some(serial)) => entry.table.ingest_as(WriterBatch { writer, serial }, &records),
        _ => entry.table.ingest(&records),
    };
    let report = result.map_err(|e| with_context(status_from_engine(&e)))?;
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
    let durable_at = if report.duplicate { entry.table.log().tail_address() } else { report.end_address };
    Ok(Ingested { entry: Arc::clone(entry), metadata: reply, durable_at: Some(durable_at) })
}

/// Waits, under the `group_commit` and `fsync` policies, until the batch is durable;
/// then builds its PutResult with the table's durable address.
fn acknowledge(ingested: Ingested) -> Result<PutResult, Status> {
    let Ingested { entry, mut metadata, durable_at } = ingested;
    let table = &entry.table;
    if let Some(address) = durable_at.filter(|_| table.config().durability != DurabilityPolicy::None) {
        table.wait_durable(address, Duration::from_secs(60)).map_err(|e| {
            let status = status_from_engine(&e);
            Status::new(status.code(), format!("table {:?}: the batch was ingested but is not durable: {}", entry.name, status.message()))
        })?;
    }
    metadata["durable_address"] = json!(table.durable_address());
    Ok(PutResult { app_metadata: metadata.to_string().into() })
}

fn run_action(catalog: &Catalog, action: &Action) -> Result<serde_json::Value, Status> {
    let body = &action.body;
    match action.r#type.as_str() {
        "create_table" => {
            let request: CreateTable = parse_body("create_table", body)?;
            let created = catalog.create(&request)?;
            Ok(json!({"created": created, "name": request.name}))
        }
        "drop_table" => {
            let request: TableRef = parse_body("drop_table", body)?;
            catalog.drop_table(&request.table)?;
            Ok(json!({"dropped": true, "name": request.table}))
        }
        "register_psf" => {
            let request: RegisterPsf = parse_body("register_psf", body)?;
            let entry = catalog.get(&request.table)?;
            let psf = entry.table.register_psf(&request.name, &request.spec).map_err(|e| status_from_engine(&e))?;
            tracing::info!(table = %request.table, psf = %psf.name, address = psf.safe_register_address(), "PSF registered");
            Ok(psf_json(&psf))
        }
        "deregister_psf" => {
            let request: DeregisterPsf = parse_body("deregister_psf", body)?;
            let entry = catalog.get(&request.table)?;
            let psf = entry.table.deregister_psf(&request.name).map_err(|e| status_from_engine(&e))?;
            Ok(psf_json(&psf))
        }
        "list_psfs" => {
            let request: TableRef = parse_body("list_psfs", body)?;
            let entry = catalog.get(&request.table)?;
            Ok(serde_json::Value::Array(entry.table.psfs().all().iter().map(|p| psf_json(p)).collect()))
        }
        "stats" => {
            let request: TableRef = parse_body("stats", body)?;
            let entry = catalog.get(&request.table)?;
            let mut stats = serde_json::to_value(entry.table.stats()).unwrap_or_default();
            stats["table"] = json!(request.table);
            stats["psfs"] = json!(entry.table.psfs().all().len());
            Ok(stats)
        }
        "truncate" => {
            let request: Truncate = parse_body("truncate", body)?;
            let rule = request.rule()?;
            let entry = catalog.get(&request.table)?;
            let report = entry.table.truncate(rule).map_err(|e| status_from_engine(&e))?;
            let mut answer = serde_json::to_value(&report).unwrap_or_default();
            answer["table"] = json!(request.table);
            Ok(answer)
        }
        "make_durable" => {
            let request: MakeDurable = parse_body("make_durable", body)?;
            let entry = catalog.get(&request.table)?;
            if !entry.table.log().has_storage() {
                return Err(Status::failed_precondition(format!(
                    "table {:?} is in memory (the daemon runs --in-memory): nothing can be made durable",
                    request.table
                )));
            }
            let address = request.address.unwrap_or_else(|| entry.table.log().tail_address());
            let durable = entry.table.wait_durable(address, Duration::from_secs(60)).map_err(|e| status_from_engine(&e))?;
            Ok(json!({"table": request.table, "durable_address": durable}))
        }
        "writer_status" => {
            let request: WriterRef = parse_body("writer_status", body)?;
            let entry = catalog.get(&request.table)?;
            let status = entry.table.writer_status(&request.writer);
            Ok(json!({
                "table": request.table,
                "writer": status.writer,
                "last_serial": status.last_serial,
                "last_durable_serial": status.last_durable_serial,
                "durable_address": entry.table.durable_address(),
            }))
        }
        "begin_transaction" | "prepare_transaction" | "commit_transaction" | "abort_transaction" => {
            let name = action.r#type.as_str();
            let request: TransactionRef = parse_body(name, body)?;
            let entry = catalog.get(&request.table)?;
            let transactions = &entry.transactions;
            let info = match name {
                "begin_transaction" => transactions.begin(&request.transaction),
                "prepare_transaction" => transactions.prepare(&request.transaction),
                "commit_transaction" => transactions.commit(&entry.table, &request.transaction),
                _ => transactions.abort(&request.transaction),
            }?;
            tracing::debug!(table = %request.table, transaction = %request.transaction, state = ?info.state, "{name}");
            Ok(serde_json::to_value(&info).unwrap_or_default())
        }
        "list_transactions" => {
            let request: TableRef = parse_body("list_transactions", body)?;
            let entry = catalog.get(&request.table)?;
            Ok(serde_json::to_value(entry.transactions.list()).unwrap_or_default())
        }
        "checkpoint" => {
            let request: TableRef = parse_body("checkpoint", body)?;
            let entry = catalog.get(&request.table)?;
            let state = entry.table.checkpoint().map_err(|e| status_from_engine(&e))?;
            Ok(json!({
                "table": request.table,
                "flushed_until_address": state.log_end_address,
                "schema_observed_until": state.schema_observed_until,
                "index_checkpoint": state.index,
            }))
        }
        other => Err(Status::invalid_argument(format!(
            "unknown action {other:?}; known actions: {}",
            ACTIONS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ))),
    }
}

