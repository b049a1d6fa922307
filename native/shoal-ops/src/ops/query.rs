//! Queries: a command's plan (`GetFlightInfo`), split into endpoints whose tickets carry
//! their part of it, and a ticket's scan (`DoGet`): rows, aggregates or groups.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde_json::json;
use shoal_core::psf::expr::{parse_expr_within, MAX_EXPR_BYTES, MAX_RENDERED_EXPR_BYTES};
use shoal_core::psf::Expr;
use shoal_core::scan::{address_field, ADDRESS_COLUMN, json_output_schema, Aggregate, ScanPlan, ScanRequest, ScanStats};
use shoal_core::table::TableStats;
use shoal_core::{FieldPath, LogAddress};

use crate::catalog::{Catalog, TableEntry};
use crate::error::{ErrorClass, OpsError};
use crate::protocol::{
    parse_body, AggregateSpec, IfTruncated, OutputFormat, QueryCommand, TicketBody, TICKET_VERSION,
};

/// A command's filter: at most `max_bytes` of text ([`MAX_EXPR_BYTES`] for what a client
/// wrote, [`MAX_RENDERED_EXPR_BYTES`] for text the daemon rendered).
fn parse_filter(filter: Option<&str>, max_bytes: usize) -> Result<Option<Expr>, OpsError> {
    filter
        .filter(|f| !f.trim().is_empty())
        .map(|f| parse_expr_within(f, max_bytes).map_err(|e| OpsError::from_engine(&e)))
        .transpose()
}

/// The filters of recent plans, by their normalised text (a plan's `filter`), so that a
/// ticket's `DoGet` takes the tree its `GetFlightInfo` parsed instead of parsing the text
/// again (2–10 µs for a typical filter against ~0.1–0.3 µs for the copy). The text →
/// tree mapping is pure, so entries never go stale; a ticket whose filter is not here
/// (another daemon's, an evicted one) is parsed as before.
struct FilterMemo {
    trees: std::sync::Mutex<std::collections::HashMap<String, Expr>>,
}

impl FilterMemo {
    /// Entries held at most; the memo is emptied when full (plans are re-parsed, once).
    const MAX_ENTRIES: usize = 1024;
    /// Longer filters are not kept (the memo stays within ~4 MiB of text).
    const MAX_TEXT_BYTES: usize = 4096;

    fn remember(&self, filter: &Expr) {
        let text = filter.to_string();
        if text.len() > Self::MAX_TEXT_BYTES {
            return;
        }
        let mut trees = self.trees.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if trees.len() >= Self::MAX_ENTRIES && !trees.contains_key(&text) {
            trees.clear();
        }
        trees.entry(text).or_insert_with(|| filter.clone());
    }

    /// The tree of a plan's normalised filter text: remembered, else parsed.
    fn tree(&self, text: Option<&str>) -> Result<Option<Expr>, OpsError> {
        if let Some(tree) = text.and_then(|t| self.trees.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(t).cloned()) {
            return Ok(Some(tree));
        }
        // A ticket's filter is a plan's normalised text (longer than the client's, at times).
        parse_filter(text, MAX_RENDERED_EXPR_BYTES)
    }
}

static FILTER_MEMO: std::sync::LazyLock<FilterMemo> = std::sync::LazyLock::new(|| FilterMemo { trees: std::sync::Mutex::default() });

fn parse_columns(columns: &[String]) -> Result<Vec<FieldPath>, OpsError> {
    columns.iter().map(|c| FieldPath::parse(c).map_err(|e| OpsError::from_engine(&e))).collect()
}

fn parse_aggregates(aggregates: &[AggregateSpec]) -> Result<Vec<Aggregate>, OpsError> {
    aggregates.iter().map(AggregateSpec::to_aggregate).collect()
}

fn plan_json(plan: &ScanPlan) -> serde_json::Value {
    serde_json::to_value(plan).unwrap_or_default()
}

/// One endpoint of a planned query: its ticket and the plan of its log range.
#[derive(Debug, Clone)]
pub struct PlannedEndpoint {
    /// The ticket (JSON, [`TicketBody`]) that [`open_ticket`] reads.
    pub ticket: Vec<u8>,
    /// The plan of this endpoint's log range (`ScanPlan` as JSON).
    pub plan: serde_json::Value,
}

/// A planned query: what `GetFlightInfo` answers.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    /// The result schema (requested columns, or one column per aggregate).
    pub schema: Schema,
    /// The endpoints, which tile the plan's log range (read them in parallel).
    pub endpoints: Vec<PlannedEndpoint>,
    /// Estimated records (for aggregates: the number of endpoints, one row each).
    pub total_records: i64,
    /// The whole plan: `{"table", "from", "to", "plan", "exact", "exact_note"}`.
    pub metadata: serde_json::Value,
}

/// A query command checked against its table and planned once.
struct PreparedQuery {
    entry: Arc<TableEntry>,
    command: QueryCommand,
    request: ScanRequest,
    aggregates: Vec<Aggregate>,
    /// `group_by`: the hash aggregation the scan's rows go through.
    grouping: Option<GroupedScan>,
    /// The typed columns of a scan of rows (`None`: JSON output, or aggregates).
    output: Option<OutputColumns>,
    /// Null columns among the output (`unknown_columns_null`).
    placement: Option<Placement>,
    schema: SchemaRef,
    plan: ScanPlan,
    /// The address the answer is complete up to ([`answer_until`]).
    until: LogAddress,
    /// The part of the asked range that retention or truncation dropped ([`truncated_range`]).
    truncated: Option<(LogAddress, LogAddress)>,
}

/// The typed output columns of a scan: each requested path and its Arrow field.
type OutputColumns = Vec<(FieldPath, Field)>;

/// The output of a scan of rows in `format`: the typed columns `columns` resolve to in
/// the inferred schema (`None` for JSON output), and the result schema — resolved once,
/// so that the schema announced and the batches agree even if inference widens a type
/// meanwhile.
/// A grouped aggregation (`group_by`): the scan of the keys' and arguments' columns and
/// the hash aggregation ([`crate::sql::Grouping`], the one SQL's `GROUP BY` uses) that
/// folds its rows next to the data, in the daemon.
#[derive(Clone)]
struct GroupedScan {
    grouping: crate::sql::Grouping,
    /// The scan's columns: the keys, then the aggregates' arguments (each once).
    columns: OutputColumns,
    /// The scan's schema (the grouping's input).
    input: SchemaRef,
    /// The answer's schema: the keys' columns, then one per aggregate.
    schema: SchemaRef,
}

impl GroupedScan {
    /// The grouped scan of `group_by` and `aggregates` over `table`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a bad path, an unknown column, a key that cannot be grouped
    /// or an aggregate that does not apply to its column.
    fn new(table: &shoal_core::table::Table, group_by: &[String], aggregates: &[AggregateSpec]) -> Result<Self, OpsError> {
        use crate::sql::{AggregateCall, Grouping};
        let keys = parse_columns(group_by)?;
        let mut paths: Vec<FieldPath> = keys.clone();
        let mut calls = Vec::with_capacity(aggregates.len());
        for spec in aggregates {
            let aggregate = spec.to_aggregate()?;
            if let Some(column) = &aggregate.column {
                if !paths.contains(column) {
                    paths.push(column.clone());
                }
            }
            calls.push(AggregateCall { function: aggregate.function.into(), column: aggregate.column.as_ref().map(ToString::to_string) });
        }
        let (output, input, _) = rows_output(table, OutputFormat::Arrow, &paths, false, false)?;
        let grouping = Grouping { keys: keys.iter().map(ToString::to_string).collect(), aggregates: calls };
        let schema = crate::sql::Grouper::new(&grouping, &input)?.schema(); // checks keys and aggregates now
        Ok(Self { grouping, columns: output.unwrap_or_default(), input, schema })
    }

    /// The paths the scan reads (its request's `columns`).
    fn paths(&self) -> Vec<FieldPath> {
        self.columns.iter().map(|(path, _)| path.clone()).collect()
    }

    /// Runs the scan of `plan`'s ranges and groups its rows: one row per group.
    fn run(&self, entry: &TableEntry, request: &ScanRequest, plan: &ScanPlan) -> Result<RecordBatch, OpsError> {
        let started = Instant::now();
        let mut grouper = crate::sql::Grouper::new(&self.grouping, &self.input)?;
        let mut failed = None;
        let stats = entry
            .table
            .scan_columns(request, plan, &self.columns, &mut |batch| {
                Ok(match grouper.push(&batch) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        failed = Some(e);
                        ControlFlow::Break(())
                    }
                })
            })
            .map_err(|e| OpsError::from_engine(&e))?;
        if let Some(error) = failed {
            return Err(error);
        }
        record_scan_metrics(entry, plan, &stats, started);
        grouper.finish()
    }
}

fn rows_output(
    table: &shoal_core::table::Table,
    format: OutputFormat,
    columns: &[FieldPath],
    with_address: bool,
    unknown_null: bool,
) -> Result<(Option<OutputColumns>, SchemaRef, Option<Placement>), OpsError> {
    let mut placement = None;
    let (output, mut fields) = match format {
        OutputFormat::Json => (None, json_output_schema().fields().iter().map(|f| f.as_ref().clone()).collect::<Vec<Field>>()),
        OutputFormat::Arrow if unknown_null && !columns.is_empty() => {
            // Each path on its own: one no record has had yet is a Null column.
            let mut output = Vec::new();
            let mut fields = Vec::new();
            let mut places = Vec::new();
            for path in columns {
                match table.output_columns(std::slice::from_ref(path)) {
                    Ok(mut known) => {
                        let (path, field) = known.remove(0);
                        places.push(Some(output.len()));
                        fields.push(field.clone());
                        output.push((path, field));
                    }
                    Err(shoal_core::Error::UnknownColumn { .. }) => {
                        places.push(None);
                        fields.push(Field::new(path.to_string(), DataType::Null, true));
                    }
                    Err(e) => return Err(OpsError::from_engine(&e)),
                }
            }
            if places.contains(&None) {
                if with_address {
                    places.push(Some(output.len()));
                }
                placement = Some(places);
            }
            (Some(output), fields)
        }
        OutputFormat::Arrow => {
            let output = table.output_columns(columns).map_err(|e| OpsError::from_engine(&e))?;
            let fields = output.iter().map(|(_, f)| f.clone()).collect();
            (Some(output), fields)
        }
    };
    if with_address {
        if fields.iter().any(|f| f.name() == ADDRESS_COLUMN) {
            return Err(OpsError::invalid_argument(format!(
                "\"with_address\": the result already has a column named {ADDRESS_COLUMN:?} (name the columns to leave it out)"
            )));
        }
        fields.push(address_field());
    }
    Ok((output, Arc::new(Schema::new(fields)), placement))
}

/// Where each column of a scan's answer comes from: the scan's batch column, or `None` for
/// a path no record has had yet (a Null column; `unknown_columns_null`).
type Placement = Vec<Option<usize>>;

/// The part `[from, to)` of a query's asked range that is gone (below the table's begin
/// address, above the first address a record can have), when it asked for a
/// `from_address`.
///
/// # Errors
/// `OUT_OF_RANGE` naming the range when the command says `if_truncated: error`.
fn truncated_range(table: &shoal_core::table::Table, command: &QueryCommand) -> Result<Option<(LogAddress, LogAddress)>, OpsError> {
    let Some(asked) = command.from_address else { return Ok(None) };
    let begin = table.begin_address();
    if asked >= begin || begin <= LogAddress::FIRST {
        return Ok(None);
    }
    let gone = (asked.max(LogAddress::FIRST), begin);
    if command.if_truncated == IfTruncated::Error {
        return Err(OpsError::new(
            ErrorClass::OutOfRange,
            format!(
                "table {:?}: the records in [{}, {}) were dropped (retention or truncate); the log begins at {}: \
                 resume from there (\"if_truncated\": \"skip\") or from a newer offset",
                command.table, gone.0, gone.1, begin
            ),
        ));
    }
    Ok(Some(gone))
}

/// The address a query's answer is complete up to (its range's end, at most): every
/// complete record ([`Table::complete_until`](shoal_core::table::Table::complete_until)),
/// or only the durable ones (`durable_only`).
fn answer_until(table: &shoal_core::table::Table, command: &QueryCommand) -> Result<LogAddress, OpsError> {
    let until = if command.durable_only {
        if !table.has_storage() {
            return Err(OpsError::new(
                ErrorClass::FailedPrecondition,
                "\"durable_only\": the table is in memory (the daemon runs --in-memory): nothing is ever durable",
            ));
        }
        table.durable_address().min(table.complete_until())
    } else {
        table.complete_until()
    };
    Ok(command.to_address.unwrap_or(LogAddress::MAX).min(until))
}

/// Checks a query command and plans it: maps the filter onto the table's PSFs
/// (FishStore §7.1) and resolves the result schema.
fn prepare_query(catalog: &Catalog, command: QueryCommand, what: &str, filter_bytes: usize) -> Result<PreparedQuery, OpsError> {
    let entry = catalog.get(&command.table)?;
    let table = &entry.table;
    let filter = parse_filter(command.filter.as_deref(), filter_bytes)?;
    let columns = parse_columns(&command.columns)?;
    let aggregates = parse_aggregates(&command.aggregates)?;
    let aggregating = !aggregates.is_empty() || !command.group_by.is_empty();
    if aggregating
        && (!command.columns.is_empty() || command.limit.is_some() || command.output == OutputFormat::Json || command.with_address)
    {
        return Err(OpsError::invalid_argument(format!(
            "{what}: \"aggregates\" cannot be combined with \"columns\", \"limit\", \"with_address\" or \"output\": \"json\" \
             (the result is one row of aggregates)"
        )));
    }
    if command.partial && !aggregating {
        return Err(OpsError::invalid_argument(format!("{what}: \"partial\" applies to \"aggregates\" and \"group_by\" only")));
    }
    if command.partial && aggregates.iter().any(|a| a.function == shoal_core::scan::AggregateFunction::Avg) {
        return Err(OpsError::invalid_argument(format!(
            "{what}: \"avg\" cannot be a partial aggregate (partials are merged: ask for \"sum\" and \"count\" instead)"
        )));
    }
    if command.output == OutputFormat::Json && !command.columns.is_empty() {
        return Err(OpsError::invalid_argument(format!(
            "{what}: \"columns\" cannot be combined with \"output\": \"json\" (the whole record is returned as ingested)"
        )));
    }
    let grouping = if command.group_by.is_empty() { None } else { Some(GroupedScan::new(table, &command.group_by, &command.aggregates)?) };
    let mut placement = None;
    let (output, schema) = if let Some(grouped) = &grouping {
        (None, Arc::clone(&grouped.schema))
    } else if aggregates.is_empty() {
        let (output, schema, found) = rows_output(table, command.output, &columns, command.with_address, command.unknown_columns_null)?;
        placement = found;
        (output, schema)
    } else {
        (None, Arc::new(table.aggregate_schema(&aggregates).map_err(|e| OpsError::from_engine(&e))?))
    };
    let until = answer_until(table, &command)?;
    let truncated = truncated_range(table, &command)?;
    // A grouped scan reads the keys' and arguments' columns.
    let columns = grouping.as_ref().map_or(columns, GroupedScan::paths);
    let request = ScanRequest {
        filter,
        columns,
        from_address: command.from_address.unwrap_or(LogAddress::ZERO),
        to_address: until,
        limit: command.limit,
        batch_rows: catalog.config().batch_rows,
        with_address: command.with_address,
        ..ScanRequest::default()
    };
    let plan = table.plan(&request);
    Ok(PreparedQuery { entry, command, request, aggregates, grouping, output, placement, schema, plan, until, truncated })
}

/// Plans a query command (`GetFlightInfo`'s `cmd`, a JSON [`QueryCommand`]) once, and
/// splits the plan into at most `max_endpoints` (default: the config's
/// `endpoints_per_query`) endpoints whose tickets carry their part of the plan. A query
/// with a `limit` has one endpoint, which reads its ranges in order and stops at the
/// limit: the endpoints of a FlightInfo together return at most `limit` rows.
///
/// # Errors
/// `INVALID_ARGUMENT` for a malformed command, filter, column or aggregate; `NOT_FOUND`
/// for an unknown table.
pub fn plan_query(catalog: &Catalog, command: &[u8]) -> Result<PlannedQuery, OpsError> {
    plan_query_within(catalog, command, MAX_EXPR_BYTES)
}

/// As [`plan_query`], its filter held to `filter_bytes`: [`MAX_EXPR_BYTES`] for a
/// client's command, [`MAX_RENDERED_EXPR_BYTES`] for one a node of the cluster sent on
/// (the coordinator held the client's text to [`MAX_EXPR_BYTES`]; a SQL statement's
/// condition is rendered, and may be longer).
///
/// # Errors
/// As [`plan_query`].
pub fn plan_query_within(catalog: &Catalog, command: &[u8], filter_bytes: usize) -> Result<PlannedQuery, OpsError> {
    let command: QueryCommand = parse_body("GetFlightInfo command", command)?;
    plan_command(catalog, command, filter_bytes)
}

/// As [`plan_query`], for a command the daemon built from a client's SQL statement (held to
/// [`MAX_EXPR_BYTES`] as the client sent it): its filter is the normalised text of the
/// statement's condition, which may be longer, and is held to [`MAX_RENDERED_EXPR_BYTES`].
///
/// # Errors
/// As [`plan_query`].
pub fn plan_rendered_query(catalog: &Catalog, command: QueryCommand) -> Result<PlannedQuery, OpsError> {
    plan_command(catalog, command, MAX_RENDERED_EXPR_BYTES)
}

fn plan_command(catalog: &Catalog, command: QueryCommand, filter_bytes: usize) -> Result<PlannedQuery, OpsError> {
    let query = prepare_query(catalog, command, "GetFlightInfo command", filter_bytes)?;
    if let Some(filter) = &query.request.filter {
        // The endpoints' tickets carry this filter's normalised text: their DoGet finds
        // the tree here.
        FILTER_MEMO.remember(filter);
    }
    let table = &query.entry.table;
    let (from, to) = query.plan.bounds().unwrap_or_else(|| {
        let begin = query.request.from_address.max(table.begin_address());
        (begin, begin)
    });
    // A limit, or final aggregates: one endpoint, so that what every endpoint returns
    // together is the answer (at most `limit` rows; one row of aggregates).
    let aggregating = !query.aggregates.is_empty() || query.grouping.is_some();
    let parts = if query.command.limit.is_some() || (aggregating && !query.command.partial) {
        1
    } else {
        query.command.max_endpoints.unwrap_or(catalog.config().endpoints_per_query)
    };
    let mut endpoints = Vec::new();
    for part in table.split_plan(&query.plan, parts, query.request.filter.as_ref()) {
        let plan = plan_json(&part);
        let ticket = TicketBody {
            v: TICKET_VERSION,
            table: query.command.table.clone(),
            columns: query.command.columns.clone(),
            limit: query.command.limit,
            aggregates: query.command.aggregates.clone(),
            group_by: query.command.group_by.clone(),
            output: query.command.output,
            with_address: query.command.with_address,
            unknown_columns_null: query.command.unknown_columns_null,
            plan: part,
        };
        let ticket = serde_json::to_vec(&ticket).map_err(|e| OpsError::internal(e.to_string()))?;
        endpoints.push(PlannedEndpoint { ticket, plan });
    }
    let stats = table.stats();
    let span = stats.tail_address.bytes_since(stats.begin_address).max(1);
    #[allow(clippy::cast_possible_wrap)]
    let estimate = if !aggregating {
        (u128::from(stats.records) * u128::from(to.bytes_since(from)) / u128::from(span)) as i64
    } else {
        endpoints.len() as i64
    };
    #[allow(clippy::cast_possible_wrap)]
    let total_records = query.command.limit.map_or(estimate, |l| estimate.min(l as i64));
    let mut metadata = json!({
        "table": query.command.table,
        "from": from,
        "to": to,
        "plan": plan_json(&query.plan),
        "exact": true,
        "exact_note": "the server evaluates the whole filter on every record it returns",
        "complete_until": query.until.max(from),
    });
    if let Some((from, to)) = query.truncated {
        metadata["truncated"] = json!({"from": from, "to": to});
    }
    Ok(PlannedQuery { schema: query.schema.as_ref().clone(), endpoints, total_records, metadata })
}

fn record_scan_metrics(entry: &TableEntry, plan: &ScanPlan, stats: &ScanStats, started: Instant) {
    let kind = if !plan.index_scans.is_empty() {
        "index"
    } else if !plan.columnar_scans.is_empty() {
        "columnar"
    } else {
        "full"
    };
    metrics::counter!("shoal_scans_total", "table" => entry.name.clone(), "kind" => kind).increment(1);
    metrics::counter!("shoal_scan_records_returned_total", "table" => entry.name.clone()).increment(stats.records_returned);
    metrics::counter!("shoal_scan_record_bytes_total", "table" => entry.name.clone(), "kind" => kind).increment(stats.record_bytes);
    for (parser, records) in [("simdjson", stats.full_scan_parsed.simdjson), ("on_demand", stats.full_scan_parsed.on_demand)] {
        if records > 0 {
            metrics::counter!("shoal_full_scan_parsed_records_total", "table" => entry.name.clone(), "parser" => parser).increment(records);
        }
    }
    metrics::histogram!("shoal_scan_seconds", "table" => entry.name.clone()).record(started.elapsed().as_secs_f64());
    tracing::debug!(table = %entry.name, ?stats, elapsed_ms = started.elapsed().as_millis(), "scan done");
}

/// What a ticket reads: aggregates (computed), or a scan of rows.
pub enum TicketScan {
    /// The endpoint's aggregates (already computed): one row, or one per group with
    /// `group_by`; partial when the query asked for partials.
    Aggregates(RecordBatch),
    /// A scan of the endpoint's log range, run by [`RowScan::run`] (boxed: it carries
    /// the plan and the request).
    Rows(Box<RowScan>),
}

/// A scan of one endpoint's log range (or of a whole one-call query), ready to run.
pub struct RowScan {
    entry: Arc<TableEntry>,
    request: ScanRequest,
    plan: ScanPlan,
    /// The typed columns; `None`: the records' JSON bytes.
    output: Option<OutputColumns>,
    /// Null columns among the output (`unknown_columns_null`).
    placement: Option<Placement>,
    schema: SchemaRef,
}

impl RowScan {
    /// The schema of every batch [`RowScan::run`] emits (resolved once, so that it and
    /// the batches agree even if schema inference widens a type while the scan runs).
    #[must_use]
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Runs the scan with the plan it was opened with, handing each batch (at most the
    /// config's `batch_rows` rows) to `emit`, which may stop it by returning `Break`.
    ///
    /// # Errors
    /// The engine's scan errors (e.g. a page that cannot be read), as statuses.
    pub fn run(&self, emit: &mut dyn FnMut(RecordBatch) -> ControlFlow<()>) -> Result<(), OpsError> {
        let started = Instant::now();
        let table = &self.entry.table;
        let mut sink = |batch: RecordBatch| match &self.placement {
            None => Ok(emit(batch)),
            Some(places) => {
                let rows = batch.num_rows();
                let columns = places
                    .iter()
                    .map(|place| place.map_or_else(|| arrow_array::new_null_array(&DataType::Null, rows), |i| Arc::clone(batch.column(i))))
                    .collect();
                let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
                let batch = RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)
                    .map_err(shoal_core::Error::Arrow)?;
                Ok(emit(batch))
            }
        };
        let stats = match &self.output {
            Some(columns) => table.scan_columns(&self.request, &self.plan, columns, &mut sink),
            None => table.scan_json(&self.request, &self.plan, &mut sink),
        }
        .map_err(|e| OpsError::from_engine(&e))?;
        record_scan_metrics(&self.entry, &self.plan, &stats, started);
        Ok(())
    }
}

/// Opens a `DoGet` ticket: either one that [`plan_query`] issued (its plan is checked,
/// not made again), or a query command itself (the same JSON as `GetFlightInfo`'s): then
/// the whole query is planned and answered in this one call, aggregates as one row.
/// Computes aggregates (blocking) or prepares the scan of rows.
///
/// # Errors
/// `INVALID_ARGUMENT` for a malformed ticket or command, one of another version, or a
/// plan that does not fit the table (tampered, or stale after a PSF was deregistered);
/// `NOT_FOUND` for a table dropped since planning; engine errors as statuses.
pub fn open_ticket(catalog: &Catalog, ticket: &[u8]) -> Result<TicketScan, OpsError> {
    let body: serde_json::Map<String, serde_json::Value> = parse_body("DoGet ticket", ticket)?;
    if !body.contains_key("v") {
        let command: QueryCommand = serde_json::from_value(serde_json::Value::Object(body))
            .map_err(|e| OpsError::invalid_argument(crate::protocol::bounded(format!("DoGet ticket (a query command): {e}"))))?;
        // Tickets are held to the rendered limit: a planned ticket's filter is normalised
        // text, and a Flight SQL statement's one-call ticket carries its rendered condition.
        let query = prepare_query(catalog, command, "DoGet query command", MAX_RENDERED_EXPR_BYTES)?;
        if let Some(grouped) = &query.grouping {
            return grouped.run(&query.entry, &query.request, &query.plan).map(TicketScan::Aggregates);
        }
        if !query.aggregates.is_empty() {
            return run_aggregate(&query.entry, &query.request, &query.plan, &query.aggregates).map(TicketScan::Aggregates);
        }
        return Ok(TicketScan::Rows(Box::new(RowScan {
            schema: query.schema,
            entry: query.entry,
            request: query.request,
            plan: query.plan,
            output: query.output,
            placement: query.placement,
        })));
    }
    let ticket: TicketBody = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|e| OpsError::invalid_argument(crate::protocol::bounded(format!("DoGet ticket: {e}"))))?;
    if ticket.v != TICKET_VERSION {
        return Err(OpsError::invalid_argument(format!(
            "unsupported ticket version {} (this server speaks {TICKET_VERSION}); plan the query again",
            ticket.v
        )));
    }
    let entry = catalog.get(&ticket.table)?;
    let plan = entry.table.check_plan(&ticket.plan).map_err(|e| OpsError::from_engine(&e))?;
    let request = ScanRequest {
        filter: FILTER_MEMO.tree(plan.filter.as_deref())?,
        columns: parse_columns(&ticket.columns)?,
        limit: ticket.limit,
        batch_rows: catalog.config().batch_rows,
        with_address: ticket.with_address,
        ..ScanRequest::default()
    };
    if !ticket.group_by.is_empty() {
        let grouped = GroupedScan::new(&entry.table, &ticket.group_by, &ticket.aggregates)?;
        let request = ScanRequest { columns: grouped.paths(), ..request };
        return grouped.run(&entry, &request, &plan).map(TicketScan::Aggregates);
    }
    let aggregates = parse_aggregates(&ticket.aggregates)?;
    if !aggregates.is_empty() {
        return run_aggregate(&entry, &request, &plan, &aggregates).map(TicketScan::Aggregates);
    }
    let (output, schema, placement) = rows_output(&entry.table, ticket.output, &request.columns, ticket.with_address, ticket.unknown_columns_null)?;
    Ok(TicketScan::Rows(Box::new(RowScan { entry, request, plan, output, placement, schema })))
}

/// Computes the aggregates of `plan`'s ranges.
fn run_aggregate(entry: &TableEntry, request: &ScanRequest, plan: &ScanPlan, aggregates: &[Aggregate]) -> Result<RecordBatch, OpsError> {
    let started = Instant::now();
    let (batch, stats) =
        entry.table.aggregate_with_plan(request, plan, aggregates).map_err(|e| OpsError::from_engine(&e))?;
    record_scan_metrics(entry, plan, &stats, started);
    Ok(batch)
}

/// A table as `ListFlights` lists it.
pub struct TableListing {
    /// Its name.
    pub name: String,
    /// Its counters and log addresses.
    pub stats: TableStats,
    /// Its schema (declared, else inferred so far).
    pub schema: Schema,
}

/// Every table, by name, with its counters and schema.
#[must_use]
pub fn list_tables(catalog: &Catalog) -> Vec<TableListing> {
    catalog
        .list()
        .into_iter()
        .map(|entry| TableListing { name: entry.name.clone(), stats: entry.table.stats(), schema: entry.table.schema().arrow_schema() })
        .collect()
}

/// The schema of `table` (`GetSchema`): declared, else inferred so far; nested objects
/// as structs.
///
/// # Errors
/// `NOT_FOUND` for an unknown table.
pub fn table_schema(catalog: &Catalog, table: &str) -> Result<Schema, OpsError> {
    Ok(catalog.get(table)?.table.schema().arrow_schema())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::ingest::{acknowledge, ingest_batch};
    use arrow_array::StringArray;
    use shoal_core::psf::parse_expr;

    #[test]
    fn a_planned_filter_is_remembered_under_the_text_its_tickets_carry() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::config::EngineConfig { data_dir: dir.path().to_path_buf(), in_memory: true, memory_budget_bytes: 4 << 20, ..Default::default() };
        let catalog = Catalog::open(config).unwrap();
        let create: crate::protocol::CreateTable = serde_json::from_str(r#"{"name": "memo", "page_size_bits": 16}"#).unwrap();
        catalog.create(&create).unwrap();
        let entry = catalog.get("memo").unwrap();
        let records = StringArray::from(vec![r#"{"a": {"b": 2}, "c": "xy", "d": 3}"#]);
        let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![Field::new("json", DataType::Utf8, false)])), vec![Arc::new(records)]).unwrap();
        acknowledge(ingest_batch(&entry, &batch, &crate::protocol::BatchMetadata::default(), 0).unwrap()).unwrap();
        // Written oddly, so that the plan's normalised text differs from it.
        let command = br#"{"table": "memo", "filter": "(a.b  >  1)  and  c like 'x%' OR d IN (1,2)"}"#;
        let planned = plan_query(&catalog, command).unwrap();
        assert!(!planned.endpoints.is_empty());
        for endpoint in &planned.endpoints {
            let ticket: TicketBody = serde_json::from_slice(&endpoint.ticket).unwrap();
            let text = ticket.plan.filter.as_deref().expect("the plan carries the filter");
            let remembered = FILTER_MEMO.trees.lock().unwrap().get(text).cloned();
            assert_eq!(remembered.as_ref(), parse_filter(Some(text), MAX_EXPR_BYTES).unwrap().as_ref(), "{text}");
            assert!(remembered.is_some(), "{text} is remembered");
            assert!(matches!(open_ticket(&catalog, &endpoint.ticket).unwrap(), TicketScan::Rows(_)));
        }
    }

    #[test]
    fn the_memo_stays_bounded_and_parses_what_it_does_not_hold() {
        let memo = FilterMemo { trees: std::sync::Mutex::default() };
        for i in 0..FilterMemo::MAX_ENTRIES + 10 {
            memo.remember(&parse_expr(&format!("n = {i}")).unwrap());
            assert!(memo.trees.lock().unwrap().len() <= FilterMemo::MAX_ENTRIES);
        }
        let long = format!("s = '{}'", "x".repeat(FilterMemo::MAX_TEXT_BYTES));
        memo.remember(&parse_expr(&long).unwrap());
        assert!(!memo.trees.lock().unwrap().contains_key(&parse_expr(&long).unwrap().to_string()));
        // Not remembered: parsed; remembered: the same tree.
        assert_eq!(memo.tree(Some("n = 0")).unwrap(), Some(parse_expr("n = 0").unwrap()));
        assert_eq!(memo.tree(Some(&long)).unwrap(), Some(parse_expr(&long).unwrap()));
        assert_eq!(memo.tree(None).unwrap(), None);
        assert!(memo.tree(Some("n = ")).is_err(), "a bad filter is still an error");
    }
}
