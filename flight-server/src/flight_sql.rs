//! Arrow Flight SQL on the daemon's Flight port (`docs/sql.md`), beside shoal's own JSON
//! commands: ADBC, the Flight SQL JDBC driver and the tools built on them read shoal with
//! no shoal-specific code.
//!
//! [`ShoalFlightService`](crate::service::ShoalFlightService) hands Flight SQL's commands
//! (protobuf `Any` messages of `arrow.flight.protocol.sql`), tickets and actions to
//! [`ShoalSqlService`]; arrow-flight's [`FlightSqlService`] decodes them. A statement is
//! parsed by [`shoal_ops::sql`] into the same query command a JSON client sends, planned by
//! the same planner (PSFs, columnar and full scans), and its result shaped (sort, offset,
//! names) at the endpoint that scans it.
//!
//! Nothing is held on the server between calls: a prepared statement's handle is its text
//! and its bound parameters (JSON), and the tickets of a statement's endpoints carry the
//! plan of their range (shoal's ticket) with the shape of the result.

use std::sync::{Arc, LazyLock};

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    Command, CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandStatementIngest, CommandStatementQuery,
    DoPutPreparedStatementResult, DoPutUpdateResult, Nullable, ProstMessageExt, Searchable, SqlInfo, SqlNullOrdering,
    SqlSupportedCaseSensitivity, SqlSupportedTransaction, TableExistsOption, TableNotExistOption, TicketStatementQuery,
    XdbcDataType,
};
use arrow_flight::{FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, PutResult, SchemaAsIpc, SchemaResult, Ticket};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::stream::{self, Peekable};
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shoal_core::psf::Literal;
use shoal_ops::catalog::Catalog;
use shoal_ops::ops::{self, TicketScan};
use shoal_ops::protocol::{BatchMetadata, CreateTable};
use shoal_ops::sql::{self, Parameters, ResultShape, Shaper, SqlStatement, CATALOG_NAME, SCHEMA_NAME};
use shoal_ops::OpsError;
use tonic::{Request, Response, Status, Streaming};

use crate::cluster::reads::{BatchStream, Endpoints, TicketRoute};
use crate::cluster::{Cluster, ShardedTable};
use crate::limits::{Admission, Caller};
use crate::put::{self, Places, PutBatch, PIPELINE_DEPTH};
use crate::route::{Route, Router};
use crate::rpc::{blocking, planned_info, status, stream_rows, BoxedStream};

/// The Flight SQL actions the service answers (beside shoal's own, in `ListActions`).
pub(crate) const ACTIONS: &[(&str, &str)] = &[
    (
        "CreatePreparedStatement",
        "Flight SQL: checks a SELECT and answers its result schema and a handle (the statement itself; nothing is held on the server)",
    ),
    ("ClosePreparedStatement", "Flight SQL: closes a prepared statement (nothing to free)"),
];

/// The type URLs of Flight SQL's messages start with this.
const SQL_TYPE_PREFIX: &str = "type.googleapis.com/arrow.flight.protocol.sql.";

/// Whether a command or ticket is a Flight SQL message (a protobuf `Any` of
/// `arrow.flight.protocol.sql`), not one of shoal's JSON commands or tickets.
pub(crate) fn is_flight_sql(bytes: &[u8]) -> bool {
    // An encoded `Any` starts with its type URL's tag (0x0A); shoal's JSON starts with `{`
    // (or white space).
    bytes.first() == Some(&0x0A) && Any::decode(bytes).is_ok_and(|any| any.type_url.starts_with(SQL_TYPE_PREFIX))
}

/// Whether an action is one of Flight SQL's (its names are CamelCase; shoal's are not).
pub(crate) fn is_flight_sql_action(kind: &str) -> bool {
    ACTIONS.iter().any(|(name, _)| *name == kind) || UNANSWERED_ACTIONS.contains(&kind)
}

/// Flight SQL's other actions: handed to Flight SQL's service too, which refuses them
/// (`UNIMPLEMENTED`); `ListActions` does not list them.
const UNANSWERED_ACTIONS: &[&str] =
    &["CreatePreparedSubstraitPlan", "BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint", "CancelQuery"];

/// What `GetSqlInfo` answers: the server, and the SQL it accepts (`docs/sql.md`).
static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "shoal");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    info.append(SqlInfo::FlightSqlServerReadOnly, false);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(SqlInfo::FlightSqlServerTransaction, SqlSupportedTransaction::None as i32);
    info.append(SqlInfo::FlightSqlServerCancel, false);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    info.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, false);
    info.append(SqlInfo::SqlDdlTable, false);
    info.append(SqlInfo::SqlIdentifierCase, SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(SqlInfo::SqlQuotedIdentifierCase, SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32);
    info.append(SqlInfo::SqlAllTablesAreSelectable, true);
    info.append(SqlInfo::SqlNullOrdering, SqlNullOrdering::SqlNullsSortedHigh as i32);
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    info.append(SqlInfo::SqlNullPlusNullIsNull, true);
    info.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    info.append(SqlInfo::SqlSupportsLikeEscapeClause, true);
    info.append(SqlInfo::SqlSchemaTerm, "schema");
    info.append(SqlInfo::SqlCatalogTerm, "catalog");
    info.append(SqlInfo::SqlProcedureTerm, "procedure");
    info.append(SqlInfo::SqlCatalogAtStart, true);
    info.append(SqlInfo::SqlSelectForUpdateSupported, false);
    info.append(SqlInfo::SqlStoredProceduresSupported, false);
    info.append(SqlInfo::SqlCorrelatedSubqueriesSupported, false);
    info.append(SqlInfo::SqlTransactionsSupported, false);
    info.build().expect("the SqlInfo values have their documented types")
});

/// What `GetXdbcTypeInfo` answers (JDBC's `getTypeInfo`): the scalar types of inferred
/// schemas — `BIGINT` (`Int64`), `DOUBLE` (`Float64`), `VARCHAR` (`Utf8`, also JSON text of
/// mixed types) and `BOOLEAN`. Structs and lists are not SQL types a client can name.
static XDBC_TYPES: LazyLock<XdbcTypeInfoData> = LazyLock::new(|| {
    let mut types = XdbcTypeInfoDataBuilder::new();
    for (name, data_type, size, searchable) in [
        ("BIGINT", XdbcDataType::XdbcBigint, Some(19), Searchable::Basic),
        ("DOUBLE", XdbcDataType::XdbcDouble, Some(15), Searchable::Basic),
        ("VARCHAR", XdbcDataType::XdbcVarchar, None, Searchable::Full),
        ("BOOLEAN", XdbcDataType::XdbcBit, Some(1), Searchable::Basic),
    ] {
        types.append(XdbcTypeInfo {
            type_name: name.into(),
            data_type,
            column_size: size,
            literal_prefix: (name == "VARCHAR").then(|| "'".into()),
            literal_suffix: (name == "VARCHAR").then(|| "'".into()),
            nullable: Nullable::NullabilityNullable,
            case_sensitive: name == "VARCHAR",
            searchable,
            unsigned_attribute: matches!(name, "BIGINT" | "DOUBLE").then_some(false),
            local_type_name: Some(name.into()),
            sql_data_type: data_type,
            num_prec_radix: matches!(name, "BIGINT" | "DOUBLE").then_some(10),
            ..XdbcTypeInfo::default()
        });
    }
    types.build().expect("the type rows have their documented shapes")
});

/// A prepared statement's handle, or the handle inside a statement ticket (JSON).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Handle {
    /// A statement and its bound parameters (prepared statements; `EXPLAIN`).
    Statement {
        sql: String,
        #[serde(default)]
        parameters: Vec<Value>,
    },
    /// One endpoint of a planned statement: shoal's ticket (the plan of its range) and the
    /// shape of the result.
    Scan { ticket: Value, shape: ResultShape },
    /// The answer of an update statement sent as a query (run when it was planned): the rows
    /// it changed.
    Updated { rows_affected: i64 },
}

impl Handle {
    fn encode(&self) -> Result<bytes::Bytes, Status> {
        serde_json::to_vec(self).map(Into::into).map_err(|e| Status::internal(format!("encoding a handle: {e}")))
    }

    fn decode(bytes: &[u8], what: &str) -> Result<Self, Status> {
        serde_json::from_slice(bytes).map_err(|e| {
            Status::invalid_argument(shoal_ops::protocol::bounded(format!(
                "{what} is not one that this server issued ({e}); prepare or plan the statement again"
            )))
        })
    }

    fn statement(sql: String, parameters: &[Literal]) -> Self {
        Handle::Statement { sql, parameters: parameters.iter().map(literal_json).collect() }
    }
}

fn literal_json(literal: &Literal) -> Value {
    match literal {
        Literal::Null => Value::Null,
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Int(i) => Value::from(*i),
        Literal::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Literal::Str(s) => Value::String(s.clone()),
        Literal::Timestamp(t) => serde_json::json!({ "timestamp_us": t }),
    }
}

fn json_literal(value: &Value) -> Result<Literal, Status> {
    Ok(match value {
        Value::Null => Literal::Null,
        Value::Bool(b) => Literal::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Literal::Int(i),
            None => Literal::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Literal::Str(s.clone()),
        Value::Object(o) if o.len() == 1 && o.get("timestamp_us").is_some_and(Value::is_i64) => {
            Literal::Timestamp(o["timestamp_us"].as_i64().unwrap_or_default())
        }
        _ => return Err(Status::invalid_argument("a prepared statement's handle holds a parameter that is not a scalar")),
    })
}

/// The result of `EXPLAIN`: one row per step of the plan.
/// The answer of an update statement sent as a query: one row, `rows_affected` (Int64).
fn updated_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("rows_affected", DataType::Int64, false)]))
}

fn explain_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("plan_step", DataType::Utf8, false), Field::new("detail", DataType::Utf8, false)]))
}

/// The rows of `EXPLAIN` from a planned query's metadata (`docs/protocol.md`): the table
/// and range, the filter, each index, columnar and full scan, the planner's reason.
fn explain_rows(planned: &ops::PlannedQuery) -> Result<RecordBatch, OpsError> {
    let mut rows = Vec::new();
    plan_rows(&planned.metadata, &mut rows);
    rows.push(("endpoints".into(), planned.endpoints.len().to_string()));
    explain_batch(rows)
}

/// The rows of `EXPLAIN` of a sharded table's statement from its plan's metadata: the
/// table and its shards, then each shard's plan (as one daemon's, after a `shard` row
/// naming it and its node).
fn sharded_explain_rows(metadata: &Value, endpoints: usize) -> Result<RecordBatch, OpsError> {
    let shards = metadata["shards"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut rows: Vec<(String, String)> = vec![
        ("table".into(), metadata["table"].as_str().unwrap_or_default().to_owned()),
        ("shards".into(), format!("{} planned, {} pruned by the shard key", shards.len(), metadata["pruned_shards"])),
    ];
    for shard in shards {
        rows.push(("shard".into(), format!("{} ({}) on node {} at {}", shard["shard"], text(&shard["table"]), shard["node"], text(&shard["location"]))));
        plan_rows(&shard["plan"], &mut rows);
    }
    rows.push(("endpoints".into(), endpoints.to_string()));
    explain_batch(rows)
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// One daemon's plan (its `GetFlightInfo` metadata) as `EXPLAIN` rows.
fn plan_rows(metadata: &Value, rows: &mut Vec<(String, String)>) {
    let plan = &metadata["plan"];
    rows.push(("table".into(), text(&metadata["table"])));
    rows.push(("range".into(), format!("[{}, {})", metadata["from"], metadata["to"])));
    rows.push(("filter".into(), plan["filter"].as_str().unwrap_or("(none: every record)").to_owned()));
    for (key, step) in [("index_scans", "index_scan"), ("columnar_scans", "columnar_scan"), ("full_scans", "full_scan")] {
        for scan in plan[key].as_array().into_iter().flatten() {
            rows.push((step.into(), scan.to_string()));
        }
    }
    if let Some(groups) = plan.get("columnar_row_groups") {
        rows.push(("columnar_row_groups".into(), format!("{} row groups, {} skipped by their statistics", groups["total"], groups["skipped"])));
    }
    rows.push(("reason".into(), text(&plan["reason"])));
}

fn explain_batch(rows: Vec<(String, String)>) -> Result<RecordBatch, OpsError> {
    let (steps, details): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
    RecordBatch::try_new(
        explain_schema(),
        vec![Arc::new(StringArray::from(steps)) as ArrayRef, Arc::new(StringArray::from(details))],
    )
    .map_err(|e| OpsError::internal(format!("building the EXPLAIN rows: {e}")))
}

/// A statement planned for `GetFlightInfo`: its result schema and its endpoints' tickets.
struct PlannedStatement {
    schema: SchemaRef,
    /// Each endpoint's ticket and the plan of its range (JSON).
    endpoints: Vec<(Vec<u8>, String)>,
    total_records: i64,
    metadata: String,
}

fn statement_ticket(handle: &Handle) -> Result<Vec<u8>, Status> {
    Ok(TicketStatementQuery { statement_handle: handle.encode()? }.as_any().encode_to_vec())
}

/// Parses and plans a statement with its parameters. A `SELECT` is planned once, and each
/// endpoint's ticket carries its part of the plan and the result's shape; `EXPLAIN` has
/// one endpoint, which plans the query again to answer the plan's rows.
fn plan_statement(catalog: &Catalog, text: String, parameters: &[Literal]) -> Result<PlannedStatement, Status> {
    let statement = sql::parse_sql(&text, Parameters::Bound(parameters)).map_err(status)?;
    let planned = ops::plan_rendered_query(catalog, statement.command.clone()).map_err(status)?;
    let metadata = planned.metadata.to_string();
    if statement.explain {
        let ticket = statement_ticket(&Handle::statement(text, parameters))?;
        return Ok(PlannedStatement { schema: explain_schema(), endpoints: vec![(ticket, metadata.clone())], total_records: -1, metadata });
    }
    let shaper = Shaper::new(&statement.shape, &Arc::new(planned.schema.clone())).map_err(status)?;
    let mut endpoints = Vec::with_capacity(planned.endpoints.len());
    for endpoint in &planned.endpoints {
        let ticket: Value = serde_json::from_slice(&endpoint.ticket).map_err(|e| Status::internal(e.to_string()))?;
        let handle = Handle::Scan { ticket, shape: statement.shape.clone() };
        endpoints.push((statement_ticket(&handle)?, endpoint.plan.to_string()));
    }
    let total_records = statement_total(&statement, planned.total_records);
    Ok(PlannedStatement { schema: shaper.schema(), endpoints, total_records, metadata })
}

/// The result schema of a statement with the parameters bound so far (none bound: each
/// placeholder as NULL, as when it is prepared): planned, not run.
fn statement_schema(catalog: &Catalog, text: &str, parameters: &[Literal]) -> Result<SchemaRef, OpsError> {
    let statement = if parameters.is_empty() { sql::parse_unbound(text)? } else { sql::parse_sql(text, Parameters::Bound(parameters))? };
    if statement.explain {
        return Ok(explain_schema());
    }
    let planned = ops::plan_rendered_query(catalog, statement.command)?;
    Ok(Shaper::new(&statement.shape, &Arc::new(planned.schema))?.schema())
}

fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let message: IpcMessage = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: arrow_schema::ArrowError| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(message.0)
}

/// A `FlightInfo` of one endpoint whose ticket is `ticket`.
fn single_endpoint_info(schema: &Schema, ticket: Vec<u8>, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// One batch as a `DoGet` stream.
fn batch_stream(schema: SchemaRef, batch: Result<RecordBatch, FlightError>) -> Response<BoxedStream<FlightData>> {
    let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(stream::iter([batch])).map_err(Status::from);
    Response::new(Box::pin(stream))
}

fn put_result(app_metadata: Vec<u8>) -> Response<BoxedStream<PutResult>> {
    Response::new(Box::pin(stream::iter([Ok(PutResult { app_metadata: app_metadata.into() })])))
}

/// The Flight SQL side of the service (see the module's documentation).
pub struct ShoalSqlService {
    catalog: Arc<Catalog>,
    scans: Arc<Admission>,
    puts: Arc<Admission>,
    /// Where a statement's table lives: here, or sharded over the nodes of this daemon's
    /// cluster (statements naming it are planned over its shards, `cluster/reads.rs`).
    router: Router,
    /// The tables' remote store: a bulk ingest that creates or replaces its table goes on
    /// once the store holds the change (as `create_table` answers then).
    remote: Option<Arc<crate::remote::RemoteStore>>,
}

impl ShoalSqlService {
    pub(crate) fn new(catalog: Arc<Catalog>, scans: Arc<Admission>, puts: Arc<Admission>) -> Self {
        Self { catalog, scans, puts, router: Router::default(), remote: None }
    }

    /// Bulk ingest that creates or replaces its table waits for `remote` to hold the change.
    pub(crate) fn set_remote(&mut self, remote: Arc<crate::remote::RemoteStore>) {
        self.remote = Some(remote);
    }

    /// Statements naming a sharded table of `cluster` are planned and run over its shards.
    pub(crate) fn set_cluster(&mut self, cluster: Arc<Cluster>) {
        self.router = Router::new(Some(cluster));
    }

    /// The cluster and the sharded table `table`, when it is one ([`Router::route`]).
    fn sharded(&self, table: &str) -> Option<(Arc<Cluster>, Arc<ShardedTable>)> {
        match self.router.route(table) {
            Route::Sharded(cluster, sharded) => Some((cluster, sharded)),
            Route::Local => None,
        }
    }

    async fn statement_info(&self, text: String, parameters: Vec<Literal>, descriptor: FlightDescriptor, caller: Caller) -> Result<Response<FlightInfo>, Status> {
        if sql::is_update(&text) && parameters.is_empty() {
            // DB-API's `cursor.execute("DELETE …")` sends it as a query: run it as the update
            // it is, and answer one row, the rows it changed.
            let rows_affected = self.update(text, caller).await?;
            let ticket = statement_ticket(&Handle::Updated { rows_affected })?;
            return single_endpoint_info(&updated_schema(), ticket, descriptor);
        }
        if self.router.cluster().is_some() {
            let statement = sql::parse_sql(&text, Parameters::Bound(&parameters)).map_err(status)?;
            if let Some((cluster, table)) = self.sharded(&statement.command.table) {
                return self.sharded_statement_info(&cluster, &table, text, &parameters, statement, descriptor).await.map(Response::new);
            }
        }
        let catalog = Arc::clone(&self.catalog);
        let planned = tokio::task::spawn_blocking(move || plan_statement(&catalog, text, &parameters))
            .await
            .map_err(|e| Status::internal(format!("planning task failed: {e}")))??;
        planned_info(&planned.schema, planned.endpoints.into_iter(), descriptor, planned.total_records, planned.metadata).map(Response::new)
    }

    /// Plans a statement over the shards of the sharded `table`:
    /// a statement whose result needs no one place (no sort, offset or `GROUP BY`) gets
    /// every shard's endpoints at their nodes' locations, each answering the table's merged
    /// schema shaped by the statement; one with a limit or aggregates gets one fan-in
    /// endpoint (exact limit, merged aggregates); one whose result must be whole gets one
    /// fan-in endpoint that this node shapes (sorts, groups, skips). `EXPLAIN` answers the
    /// plan of every shard.
    ///
    /// # Errors
    /// As [`Cluster::plan`]; `INVALID_ARGUMENT` for a shape the result cannot take.
    async fn sharded_statement_info(
        &self,
        cluster: &Arc<Cluster>,
        table: &ShardedTable,
        text: String,
        parameters: &[Literal],
        statement: SqlStatement,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let info = cluster.plan_with(&self.catalog, table, command_body(&statement)?, descriptor.clone(), sharded_endpoints(&statement)).await?;
        let metadata = String::from_utf8_lossy(&info.app_metadata).into_owned();
        if statement.explain {
            let ticket = statement_ticket(&Handle::statement(text, parameters))?;
            return planned_info(&explain_schema(), std::iter::once((ticket, metadata.clone())), descriptor, -1, metadata);
        }
        let schema = Arc::new(info.clone().try_decode_schema().map_err(|e| Status::internal(format!("the sharded plan has no schema: {e}")))?);
        let shaper = Shaper::new(&statement.shape, &schema).map_err(status)?;
        let mut endpoints = Vec::with_capacity(info.endpoint.len());
        for endpoint in info.endpoint {
            let ticket = endpoint.ticket.map(|t| t.ticket).unwrap_or_default();
            let ticket: Value = serde_json::from_slice(&ticket).map_err(|e| Status::internal(format!("a shard's ticket is not JSON: {e}")))?;
            let handle = Handle::Scan { ticket, shape: statement.shape.clone() };
            endpoints.push(FlightEndpoint { ticket: Some(Ticket::new(statement_ticket(&handle)?)), ..endpoint });
        }
        let total_records = statement_total(&statement, info.total_records);
        let info = planned_info(&shaper.schema(), std::iter::empty(), descriptor, total_records, metadata)?;
        Ok(info.with_endpoints(endpoints))
    }

    /// Runs a whole statement naming the sharded `table` in one call: `EXPLAIN`'s rows, or
    /// the statement read as one fan-in and shaped here.
    async fn run_sharded_statement(&self, cluster: &Arc<Cluster>, table: &ShardedTable, statement: SqlStatement, caller: Caller) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let command = command_body(&statement)?;
        if statement.explain {
            let descriptor = FlightDescriptor::new_path(vec![table.name.clone()]);
            let info = cluster.plan_with(&self.catalog, table, command, descriptor, sharded_endpoints(&statement)).await?;
            let metadata: Value = serde_json::from_slice(&info.app_metadata).unwrap_or(Value::Null);
            return Ok(batch_stream(explain_schema(), sharded_explain_rows(&metadata, info.endpoint.len()).map_err(|e| FlightError::Tonic(Box::new(status(e))))));
        }
        let (schema, batches) = cluster.one_call_batches(&self.catalog, &self.scans.for_caller(caller), table, command).await?;
        shaped(&schema, batches, &statement.shape)
    }

    /// The result schema of a statement (see [`statement_schema`]), over the shards when it
    /// names a sharded table.
    async fn result_schema(&self, text: String, parameters: Vec<Literal>) -> Result<SchemaRef, Status> {
        if self.router.cluster().is_some() {
            let statement = if parameters.is_empty() { sql::parse_unbound(&text) } else { sql::parse_sql(&text, Parameters::Bound(&parameters)) };
            let statement = statement.map_err(status)?;
            if let Some((cluster, table)) = self.sharded(&statement.command.table) {
                if statement.explain {
                    return Ok(explain_schema());
                }
                let descriptor = FlightDescriptor::new_path(vec![table.name.clone()]);
                let info = cluster.plan_with(&self.catalog, &table, command_body(&statement)?, descriptor, sharded_endpoints(&statement)).await?;
                let schema = Arc::new(info.try_decode_schema().map_err(|e| Status::internal(format!("the sharded plan has no schema: {e}")))?);
                return Ok(Shaper::new(&statement.shape, &schema).map_err(status)?.schema());
            }
        }
        let catalog = Arc::clone(&self.catalog);
        blocking(move || statement_schema(&catalog, &text, &parameters)).await
    }

    /// The parameter schema of a statement ([`sql::parameter_schema`]), typed by the
    /// merged schema of a sharded table's shards when it names one.
    async fn parameter_schema(&self, text: String) -> Result<Schema, Status> {
        if self.router.cluster().is_some() {
            let Some((name, fields)) = sql::parameter_fields(&text).map_err(status)? else { return Ok(Schema::empty()) };
            if let Some((cluster, table)) = self.sharded(&name) {
                let schema = cluster.schema(&self.catalog, &table).await?;
                return Ok(sql::parameter_types(fields.iter().map(|path| path.as_ref().and_then(|p| path_type(&schema, p.segments())))));
            }
        }
        let catalog = Arc::clone(&self.catalog);
        blocking(move || sql::parameter_schema(&catalog, &text)).await
    }

    /// `GetSchema` of a Flight SQL command (ADBC's `execute_schema`, JDBC's result set
    /// metadata before execution): a statement's or prepared statement's result schema
    /// (checked and planned as `CreatePreparedStatement` does, placeholders not yet bound
    /// as NULL), or a metadata command's fixed schema.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a command that does not decode, a statement that does not
    /// parse or plan, one in a transaction, or a command without a result (updates,
    /// ingest, tickets); `NOT_FOUND` for an unknown table; `UNIMPLEMENTED` for the
    /// metadata commands shoal does not answer (foreign keys, Substrait plans), as
    /// `GetFlightInfo`.
    pub(crate) async fn command_schema(&self, command: &[u8]) -> Result<SchemaResult, Status> {
        let any = Any::decode(command).map_err(|e| Status::invalid_argument(format!("a Flight SQL command that does not decode: {e}")))?;
        let command = Command::try_from(any).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let statement = |text: String, parameters: Vec<Value>| async move {
            let parameters = parameters.iter().map(json_literal).collect::<Result<Vec<_>, _>>()?;
            self.result_schema(text, parameters).await
        };
        let schema = match command {
            Command::CommandStatementQuery(query) if query.transaction_id.is_some() => {
                return Err(Status::invalid_argument("transactions are not supported"))
            }
            Command::CommandStatementQuery(query) => statement(query.query, Vec::new()).await?,
            Command::CommandPreparedStatementQuery(query) => match Handle::decode(&query.prepared_statement_handle, "the prepared statement handle")? {
                Handle::Statement { sql: text, parameters } => statement(text, parameters).await?,
                Handle::Scan { .. } | Handle::Updated { .. } => return Err(Status::invalid_argument("the prepared statement handle is a ticket's, not a prepared statement's")),
            },
            Command::CommandGetCatalogs(query) => query.into_builder().schema(),
            Command::CommandGetDbSchemas(query) => query.into_builder().schema(),
            Command::CommandGetTables(query) => query.into_builder().schema(),
            Command::CommandGetTableTypes(query) => query.into_builder().schema(),
            Command::CommandGetSqlInfo(query) => query.into_builder(&SQL_INFO).schema(),
            Command::CommandGetXdbcTypeInfo(query) => query.into_builder(&XDBC_TYPES).schema(),
            Command::CommandGetPrimaryKeys(_) => primary_keys_schema(),
            other @ (Command::CommandGetExportedKeys(_)
            | Command::CommandGetImportedKeys(_)
            | Command::CommandGetCrossReference(_)
            | Command::CommandStatementSubstraitPlan(_)) => {
                return Err(Status::unimplemented(format!("GetSchema of {} is not implemented", other.type_url())))
            }
            other => return Err(Status::invalid_argument(format!("GetSchema does not take the Flight SQL command {}: it has no result set", other.type_url()))),
        };
        let options = IpcWriteOptions::default();
        SchemaAsIpc::new(&schema, &options).try_into().map_err(|e: arrow_schema::ArrowError| Status::internal(format!("encoding a schema: {e}")))
    }

    /// Runs a statement handle: an endpoint's scan, shaped; or a whole statement in this
    /// one call (`EXPLAIN`, or a prepared statement read without `GetFlightInfo`).
    /// `caller`: who asks (one connection holds at most half the scan places).
    async fn run_handle(&self, handle: Handle, caller: Caller) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let (ticket, shape) = match handle {
            Handle::Updated { rows_affected } => {
                let schema = updated_schema();
                let column: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![rows_affected]));
                let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).map_err(FlightError::Arrow);
                return Ok(batch_stream(schema, batch));
            }
            Handle::Scan { ticket, shape } => (serde_json::to_vec(&ticket).map_err(|e| Status::internal(e.to_string()))?, shape),
            Handle::Statement { sql: text, parameters } => {
                let parameters = parameters.iter().map(json_literal).collect::<Result<Vec<_>, _>>()?;
                let statement = sql::parse_sql(&text, Parameters::Bound(&parameters)).map_err(status)?;
                if let Some((cluster, table)) = self.sharded(&statement.command.table) {
                    return self.run_sharded_statement(&cluster, &table, statement, caller).await;
                }
                if statement.explain {
                    let catalog = Arc::clone(&self.catalog);
                    let command = statement.command;
                    let rows = blocking(move || ops::plan_rendered_query(&catalog, command).and_then(|p| explain_rows(&p))).await?;
                    return Ok(batch_stream(explain_schema(), Ok(rows)));
                }
                let command = serde_json::to_vec(&statement.command).map_err(|e| Status::internal(e.to_string()))?;
                (command, statement.shape)
            }
        };
        if let Some(cluster) = self.router.cluster() {
            match cluster.route_ticket(&ticket) {
                TicketRoute::Local => {}
                TicketRoute::Forward { node, table, shard } => {
                    // A shard another node holds: that node scans and shapes it.
                    let ticket: Value = serde_json::from_slice(&ticket).map_err(|e| Status::internal(e.to_string()))?;
                    let forwarded = statement_ticket(&Handle::Scan { ticket, shape })?;
                    return cluster.forward_get(node, &table, shard, forwarded).await.map(Response::new);
                }
                TicketRoute::FanIn(fan_in) => {
                    let (schema, batches) = cluster.fan_in_batches(&self.catalog, &self.scans.for_caller(caller), *fan_in)?;
                    return shaped(&schema, batches, &shape);
                }
                TicketRoute::Conform(part) => {
                    let (schema, batches) = cluster.conformed_batches(&self.catalog, &self.scans.for_caller(caller), *part).await?;
                    return shaped(&schema, batches, &shape);
                }
                TicketRoute::OneCall(table, command) => {
                    let (schema, batches) = cluster.one_call_batches(&self.catalog, &self.scans.for_caller(caller), &table, command).await?;
                    return shaped(&schema, batches, &shape);
                }
            }
        }
        let permit = self.scans.enter(caller).await?;
        let catalog = Arc::clone(&self.catalog);
        match blocking(move || ops::open_ticket(&catalog, &ticket)).await? {
            TicketScan::Aggregates(batch) => {
                drop(permit);
                let mut shaper = Shaper::new(&shape, &batch.schema()).map_err(status)?;
                let first = shaper.push(batch).map_err(status)?;
                let row = match first {
                    Some(row) => row,
                    None => shaper.finish().map_err(status)?.unwrap_or_else(|| RecordBatch::new_empty(shaper.schema())),
                };
                Ok(batch_stream(shaper.schema(), Ok(row)))
            }
            TicketScan::Rows(scan) => {
                let shaper = Shaper::new(&shape, &scan.schema()).map_err(status)?;
                let schema = shaper.schema();
                let batches = stream_rows(permit, scan, Some(shaper));
                Ok(Response::new(Box::pin(FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from))))
            }
        }
    }

    /// A `DoPut` whose descriptor is a Flight SQL command: bulk ingest, or the parameters of
    /// a prepared statement.
    pub(crate) async fn do_put_command(
        &self,
        command: &[u8],
        messages: Peekable<Streaming<FlightData>>,
        caller: Caller,
    ) -> Result<Response<BoxedStream<PutResult>>, Status> {
        let any = Any::decode(command).map_err(|e| Status::invalid_argument(format!("a Flight SQL command that does not decode: {e}")))?;
        let command = Command::try_from(any).map_err(|e| Status::invalid_argument(e.to_string()))?;
        match command {
            Command::CommandStatementIngest(ingest) => {
                let record_count = self.ingest(ingest, messages, caller).await?;
                Ok(put_result(DoPutUpdateResult { record_count }.encode_to_vec()))
            }
            Command::CommandPreparedStatementQuery(query) => {
                let handle = self.bind_parameters(&query.prepared_statement_handle, messages).await?;
                Ok(put_result(DoPutPreparedStatementResult { prepared_statement_handle: Some(handle) }.encode_to_vec()))
            }
            Command::CommandStatementUpdate(update) => {
                if update.transaction_id.is_some() {
                    return Err(Status::invalid_argument("transactions are not supported"));
                }
                let record_count = self.update(update.query, caller).await?;
                Ok(put_result(DoPutUpdateResult { record_count }.encode_to_vec()))
            }
            Command::CommandPreparedStatementUpdate(update) => {
                // Only a DELETE without parameters is prepared as an update (see
                // `do_action_create_prepared_statement`); the parameter stream is empty.
                let Handle::Statement { sql: text, .. } = Handle::decode(&update.prepared_statement_handle, "the prepared statement handle")? else {
                    return Err(Status::invalid_argument("the prepared statement handle is a ticket's, not a prepared statement's"));
                };
                let record_count = self.update(text, caller).await?;
                Ok(put_result(DoPutUpdateResult { record_count }.encode_to_vec()))
            }
            other => Err(Status::invalid_argument(format!("DoPut does not take the Flight SQL command {}", other.type_url()))),
        }
    }

    /// An update statement: an `INSERT` ([`Self::insert`]) or a `DELETE` ([`Self::delete`]);
    /// returns the rows it wrote or deleted.
    async fn update(&self, text: String, caller: Caller) -> Result<i64, Status> {
        if sql::is_insert(&text) {
            return self.insert(text, caller).await;
        }
        self.delete(text).await
    }

    /// `INSERT INTO <table> [(<columns>)] VALUES (…), …` or `INSERT INTO <table> SELECT …`
    /// ([`sql::parse_sql_insert`]): its records (the query's rows, each a JSON object of its
    /// columns) written as bulk ingest into the existing table (a keyed table
    /// upserts them; a sharded one routes them by shard key), acknowledged as a `DoPut` is
    /// (durable when the table's durability says so); returns the records written.
    async fn insert(&self, text: String, caller: Caller) -> Result<i64, Status> {
        let insert = blocking(move || sql::parse_sql_insert(&text)).await?;
        let command = CommandStatementIngest {
            table: insert.table,
            table_definition_options: Some(arrow_flight::sql::TableDefinitionOptions {
                if_not_exist: TableNotExistOption::Fail as i32,
                if_exists: TableExistsOption::Append as i32,
            }),
            ..CommandStatementIngest::default()
        };
        if let Some(select) = insert.select {
            // The query's rows as they would stream to a client, written as bulk ingest
            // writes any batch (`json_batch`: one JSON object per row).
            let rows = self.run_handle(Handle::statement(select, &[]), caller).await?.into_inner();
            return self.ingest(command, rows, caller).await;
        }
        let schema = Arc::new(Schema::new(vec![Field::new("json", DataType::Utf8, false)]));
        let column: ArrayRef = Arc::new(StringArray::from(insert.records));
        let batch = RecordBatch::try_new(schema, vec![column]).map_err(|e| Status::internal(e.to_string()))?;
        let data = FlightDataEncoderBuilder::new().build(futures::stream::iter([Ok(batch)])).map_err(Status::from);
        self.ingest(command, data, caller).await
    }

    /// `DELETE FROM <table> [WHERE …]` ([`sql::parse_sql_delete`]): the `delete` action on
    /// a keyed table; returns the rows deleted.
    async fn delete(&self, text: String) -> Result<i64, Status> {
        if self.router.cluster().is_some() {
            let delete = sql::parse_sql_delete(&text, sql::Parameters::Bound(&[])).map_err(status)?;
            if let Some((cluster, table)) = self.sharded(&delete.table) {
                // On every shard; the answer holds each shard's.
                let body = serde_json::json!({"table": table.name, "filter": delete.filter});
                let answer = cluster.action(&self.catalog, "delete", body.to_string().as_bytes(), false).await?.unwrap_or_default();
                let shards = answer["shards"].as_array().map(Vec::as_slice).unwrap_or_default();
                return Ok(shards.iter().filter_map(|a| a["deleted"].as_i64()).sum());
            }
        }
        let catalog = Arc::clone(&self.catalog);
        tokio::task::spawn_blocking(move || {
            let delete = sql::parse_sql_delete(&text, sql::Parameters::Bound(&[])).map_err(status)?;
            let body = serde_json::json!({"table": delete.table, "filter": delete.filter});
            // The statement was held to the client's limit; its rendered condition may be longer.
            let call = ops::ActionCall { filter_bytes: shoal_core::psf::expr::MAX_RENDERED_EXPR_BYTES, ..ops::ActionCall::CLIENT };
            let answer = ops::run_action_with(&catalog, "delete", body.to_string().as_bytes(), call).map_err(status)?;
            Ok::<_, Status>(answer["deleted"].as_i64().unwrap_or(0))
        })
        .await
        .map_err(|e| Status::internal(format!("delete task failed: {e}")))?
    }

    /// Binds one row of parameters to a prepared statement: the new handle carries them.
    async fn bind_parameters(&self, handle: &[u8], messages: Peekable<Streaming<FlightData>>) -> Result<bytes::Bytes, Status> {
        let Handle::Statement { sql: text, .. } = Handle::decode(handle, "the prepared statement handle")? else {
            return Err(Status::invalid_argument("the prepared statement handle is a ticket's, not a prepared statement's"));
        };
        let batches: Vec<RecordBatch> =
            FlightRecordBatchStream::new_from_flight_data(messages.map_err(FlightError::from)).try_collect().await.map_err(Status::from)?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let parameters = match batches.iter().find(|b| b.num_rows() > 0) {
            None => Vec::new(),
            Some(_) if rows > 1 => {
                return Err(Status::invalid_argument(format!(
                    "{rows} rows of parameters were bound; a query takes one row (several rows are for updates, which shoal does not have)"
                )))
            }
            Some(batch) => batch
                .columns()
                .iter()
                .enumerate()
                .map(|(i, column)| sql::parameter_literal(column.as_ref(), 0, i + 1).map_err(status))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let expected = sql::count_placeholders(&text).map_err(status)?;
        if parameters.len() != expected && !parameters.is_empty() {
            return Err(Status::invalid_argument(format!(
                "{} parameters were bound; the statement has {expected} placeholders",
                parameters.len()
            )));
        }
        Handle::statement(text, &parameters).encode()
    }

    /// Bulk ingest (`CommandStatementIngest`, ADBC's `adbc_ingest`): creates, replaces or
    /// appends to the table as the options say, then ingests each batch like a `DoPut`
    /// (a batch whose only column is a string column `json` holds JSON records; any other
    /// batch's rows become JSON objects, one key per column), acknowledged per the
    /// table's durability. Answers the number of records written.
    /// A place among the ingesting streams is held per batch (from its arrival to its
    /// acknowledgement; one connection holds at most half of them), and a stream that sends
    /// nothing for `stream_idle_timeout_secs` is ended.
    async fn ingest(
        &self,
        ingest: CommandStatementIngest,
        messages: impl futures::Stream<Item = Result<FlightData, Status>> + Send + 'static,
        caller: Caller,
    ) -> Result<i64, Status> {
        if ingest.temporary {
            return Err(Status::invalid_argument("bulk ingest into a temporary table is not supported"));
        }
        if ingest.transaction_id.is_some() {
            return Err(Status::invalid_argument("bulk ingest within a transaction is not supported"));
        }
        if ingest.catalog.as_deref().is_some_and(|c| c != CATALOG_NAME) || ingest.schema.as_deref().is_some_and(|s| s != SCHEMA_NAME) {
            return Err(Status::not_found(format!(
                "bulk ingest: tables live in catalog {CATALOG_NAME:?}, schema {SCHEMA_NAME:?}; got {:?}.{:?}",
                ingest.catalog, ingest.schema
            )));
        }
        let options = ingest.table_definition_options.unwrap_or_default();
        let messages = crate::limits::idle_guarded(messages, self.puts.idle(caller), "DoPut");
        if let Some((cluster, table)) = self.sharded(&ingest.table) {
            let permit = self.puts.enter(caller).await?;
            return self.ingest_sharded(&cluster, table, options.if_exists, messages, permit).await;
        }
        let catalog = Arc::clone(&self.catalog);
        let table = ingest.table.clone();
        let (entry, made) = blocking(move || prepare_ingest_table(&catalog, &table, options.if_not_exist, options.if_exists)).await?;
        if let Some(remote) = self.remote.as_ref().filter(|_| made) {
            // As `create_table` and `drop_table` answer: once the store holds the table.
            remote.sync_table(&self.catalog, &ingest.table).await?;
        }
        // The put pipeline (crate::put), fed each batch as DoPut's `json` column.
        let mut places = Places::new(&self.puts, caller);
        let (work_sender, work) = tokio::sync::mpsc::channel::<Result<PutBatch, Status>>(PIPELINE_DEPTH);
        let mut answers = put::ingest_in_order(work, || false);
        tokio::spawn(async move {
            let mut batches = FlightRecordBatchStream::new_from_flight_data(messages.map_err(FlightError::from));
            let mut number = 0usize;
            while let Some(batch) = batches.next().await {
                let item = match batch.map_err(Status::from) {
                    Ok(batch) => match blocking(move || json_batch(&batch)).await {
                        Ok(batch) => places.for_batch().await.map(|place| PutBatch {
                            entry: Arc::clone(&entry),
                            batch,
                            metadata: BatchMetadata::default(),
                            number,
                            place: Some(place),
                        }),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                number += 1;
                let failed = item.is_err();
                if work_sender.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        let mut records = 0i64;
        while let Some(answer) = answers.recv().await {
            records += answer?["records"].as_i64().unwrap_or(0);
        }
        Ok(records)
    }
}

impl ShoalSqlService {
    /// Bulk ingest into the sharded `table`: each batch's records as DoPut's `json` column,
    /// routed by their shard key through this node ([`Cluster::put`]). The table exists, so
    /// mode `create` fails; `replace` is refused (a sharded table is dropped and created
    /// with `drop_table` / `create_table`).
    async fn ingest_sharded(
        &self,
        cluster: &Arc<Cluster>,
        table: Arc<ShardedTable>,
        if_exists: i32,
        messages: impl futures::Stream<Item = Result<FlightData, Status>> + Send + 'static,
        permit: crate::limits::Place,
    ) -> Result<i64, Status> {
        match TableExistsOption::try_from(if_exists).unwrap_or(TableExistsOption::Unspecified) {
            TableExistsOption::Fail => {
                return Err(Status::already_exists(format!("bulk ingest: the sharded table {:?} exists (mode create; use append)", table.name)))
            }
            TableExistsOption::Replace => {
                return Err(Status::invalid_argument(format!(
                    "bulk ingest: mode replace of the sharded table {:?}: drop_table and create_table it (with its shards), then append",
                    table.name
                )))
            }
            TableExistsOption::Append | TableExistsOption::Unspecified => {}
        }
        let batches = FlightRecordBatchStream::new_from_flight_data(messages.map_err(FlightError::from))
            .map(|batch| batch.and_then(|batch| json_batch(&batch).map_err(|e| FlightError::Tonic(Box::new(status(e))))));
        let data = FlightDataEncoderBuilder::new().build(batches).map_err(Status::from);
        let mut answers = cluster.put(&self.catalog, table, data, permit);
        let mut records = 0i64;
        while let Some(answer) = answers.next().await {
            let answer: Value = serde_json::from_slice(&answer?.app_metadata).unwrap_or_default();
            records += answer["records"].as_i64().unwrap_or(0);
        }
        Ok(records)
    }
}

/// The table a bulk ingest writes: created, replaced or taken as it is, per ADBC's modes
/// (`create`: create or fail; `append`: fail if missing; `replace`: drop and create;
/// `create_append`: create if missing). Unspecified options create a missing table and
/// append to an existing one. Also says whether the table was made (created or replaced).
fn prepare_ingest_table(
    catalog: &Catalog,
    table: &str,
    if_not_exist: i32,
    if_exists: i32,
) -> Result<(Arc<shoal_ops::catalog::TableEntry>, bool), OpsError> {
    let exists = catalog.get(table).is_ok();
    let create = || {
        let request: CreateTable = serde_json::from_value(serde_json::json!({ "name": table }))
            .map_err(|e| OpsError::internal(format!("create_table body: {e}")))?;
        catalog.create(&request).map(|_| ())
    };
    if exists {
        match TableExistsOption::try_from(if_exists).unwrap_or(TableExistsOption::Unspecified) {
            TableExistsOption::Fail => {
                return Err(OpsError::new(
                    shoal_ops::ErrorClass::AlreadyExists,
                    format!("bulk ingest: table {table:?} exists (mode create; use append or replace)"),
                ))
            }
            TableExistsOption::Replace => {
                catalog.drop_table(table)?;
                create()?;
                return Ok((catalog.get(table)?, true));
            }
            TableExistsOption::Append | TableExistsOption::Unspecified => {}
        }
        Ok((catalog.get(table)?, false))
    } else {
        match TableNotExistOption::try_from(if_not_exist).unwrap_or(TableNotExistOption::Unspecified) {
            TableNotExistOption::Fail => {
                return Err(OpsError::new(
                    shoal_ops::ErrorClass::NotFound,
                    format!("bulk ingest: no table {table:?} (mode append; use create or create_append)"),
                ))
            }
            TableNotExistOption::Create | TableNotExistOption::Unspecified => create()?,
        }
        Ok((catalog.get(table)?, true))
    }
}

/// A batch of bulk ingest as DoPut's `json` column: a batch whose only column is a string
/// or binary column named `json` as it is; any other batch with each row written as a
/// JSON object (arrow-json; nulls left out, so a null is a missing key).
fn json_batch(batch: &RecordBatch) -> Result<RecordBatch, OpsError> {
    let schema = batch.schema();
    if schema.fields().len() == 1 && schema.field(0).name() == "json" && ops::check_put_schema(&schema).is_ok() {
        return Ok(batch.clone());
    }
    let mut text = Vec::new();
    {
        let mut writer = arrow_json::LineDelimitedWriter::new(&mut text);
        writer.write(batch).map_err(|e| OpsError::invalid_argument(format!("bulk ingest: a batch has no JSON form: {e}")))?;
        writer.finish().map_err(|e| OpsError::internal(e.to_string()))?;
    }
    let text = String::from_utf8(text).map_err(|e| OpsError::internal(e.to_string()))?;
    // arrow-json escapes newlines inside strings: each line is one row.
    let rows: StringArray = text.lines().map(Some).collect();
    let json = Arc::new(Schema::new(vec![Field::new("json", DataType::Utf8, false)]));
    RecordBatch::try_new(json, vec![Arc::new(rows)]).map_err(|e| OpsError::internal(e.to_string()))
}

#[tonic::async_trait]
impl FlightSqlService for ShoalSqlService {
    type FlightService = ShoalSqlService;

    async fn get_flight_info_statement(&self, query: CommandStatementQuery, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        if query.transaction_id.is_some() {
            return Err(Status::invalid_argument("transactions are not supported"));
        }
        let caller = self.router.caller(&request);
        self.statement_info(query.query, Vec::new(), request.into_inner(), caller).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        match Handle::decode(&query.prepared_statement_handle, "the prepared statement handle")? {
            Handle::Statement { sql: text, parameters } => {
                let parameters = parameters.iter().map(json_literal).collect::<Result<Vec<_>, _>>()?;
                let caller = self.router.caller(&request);
                self.statement_info(text, parameters, request.into_inner(), caller).await
            }
            Handle::Scan { .. } | Handle::Updated { .. } => Err(Status::invalid_argument("the prepared statement handle is a ticket's, not a prepared statement's")),
        }
    }

    async fn get_flight_info_catalogs(&self, query: CommandGetCatalogs, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        single_endpoint_info(&schema, query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn get_flight_info_schemas(&self, query: CommandGetDbSchemas, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        single_endpoint_info(&schema, query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn get_flight_info_tables(&self, query: CommandGetTables, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        single_endpoint_info(&schema, query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn get_flight_info_table_types(&self, query: CommandGetTableTypes, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        single_endpoint_info(&schema, query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn get_flight_info_sql_info(&self, query: CommandGetSqlInfo, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&SQL_INFO).schema();
        single_endpoint_info(&schema, query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn get_flight_info_primary_keys(&self, query: CommandGetPrimaryKeys, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        single_endpoint_info(&primary_keys_schema(), query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder(&XDBC_TYPES).schema();
        single_endpoint_info(&schema, query.as_any().encode_to_vec(), request.into_inner())
    }

    async fn do_get_xdbc_type_info(&self, query: CommandGetXdbcTypeInfo, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let builder = query.into_builder(&XDBC_TYPES);
        let schema = builder.schema();
        Ok(batch_stream(schema, builder.build()))
    }

    async fn do_get_statement(&self, ticket: TicketStatementQuery, request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        self.run_handle(Handle::decode(&ticket.statement_handle, "the statement ticket")?, self.router.caller(&request)).await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<BoxedStream<FlightData>>, Status> {
        self.run_handle(Handle::decode(&query.prepared_statement_handle, "the prepared statement handle")?, self.router.caller(&request)).await
    }

    async fn do_get_catalogs(&self, query: CommandGetCatalogs, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG_NAME);
        let schema = builder.schema();
        Ok(batch_stream(schema, builder.build()))
    }

    async fn do_get_schemas(&self, query: CommandGetDbSchemas, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG_NAME, SCHEMA_NAME);
        let schema = builder.schema();
        Ok(batch_stream(schema, builder.build()))
    }

    async fn do_get_tables(&self, query: CommandGetTables, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let include_schema = query.include_schema;
        let mut builder = query.into_builder();
        let catalog = Arc::clone(&self.catalog);
        let listings = tokio::task::spawn_blocking(move || ops::list_tables(&catalog))
            .await
            .map_err(|e| Status::internal(format!("listing tables: {e}")))?;
        for listing in listings {
            if self.router.is_shard_table(&listing.name) {
                continue; // a shard's own table: listed as its sharded table
            }
            builder.append(CATALOG_NAME, SCHEMA_NAME, &listing.name, "TABLE", &listing.schema).map_err(|e| Status::internal(e.to_string()))?;
        }
        if let Some(cluster) = self.router.cluster() {
            // Each sharded table once, with its merged schema when asked for (none when a
            // shard is out of reach: a listing does not fail because one node is down).
            let tables = cluster.map().all();
            let schemas = futures::future::join_all(tables.iter().map(|table| async move {
                if !include_schema {
                    return Ok(Ok(Schema::empty()));
                }
                tokio::time::timeout(crate::cluster::reads::LIST_TIMEOUT, cluster.schema(&self.catalog, table)).await
            }))
            .await;
            for (table, schema) in tables.iter().zip(schemas) {
                let schema = schema.ok().and_then(Result::ok).unwrap_or_else(Schema::empty);
                builder.append(CATALOG_NAME, SCHEMA_NAME, &table.name, "TABLE", &schema).map_err(|e| Status::internal(e.to_string()))?;
            }
        }
        let schema = builder.schema();
        Ok(batch_stream(schema, builder.build()))
    }

    async fn do_get_table_types(&self, query: CommandGetTableTypes, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        let schema = builder.schema();
        Ok(batch_stream(schema, builder.build()))
    }

    async fn do_get_sql_info(&self, query: CommandGetSqlInfo, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        let builder = query.into_builder(&SQL_INFO);
        let schema = builder.schema();
        Ok(batch_stream(schema, builder.build()))
    }

    async fn do_get_primary_keys(&self, query: CommandGetPrimaryKeys, _request: Request<Ticket>) -> Result<Response<BoxedStream<FlightData>>, Status> {
        // A keyed table's key fields (dotted paths), in key order; none for an append-only
        // table, another catalog or schema, or a table that does not exist.
        let here = query.catalog.as_deref().is_none_or(|c| c == CATALOG_NAME) && query.db_schema.as_deref().is_none_or(|s| s == SCHEMA_NAME);
        let key: Vec<String> = match self.catalog.get(&query.table) {
            Ok(entry) if here => entry.table.config().primary_key.iter().map(ToString::to_string).collect(),
            // A sharded table's key is in its definition (a path or a list of paths).
            _ if here => self.sharded(&query.table).map_or_else(Vec::new, |(_, table)| match table.options.get("primary_key") {
                Some(Value::String(path)) => vec![path.clone()],
                Some(Value::Array(paths)) => paths.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                _ => Vec::new(),
            }),
            _ => Vec::new(),
        };
        let schema = primary_keys_schema();
        let count = key.len();
        let columns: Vec<arrow_array::ArrayRef> = vec![
            Arc::new(arrow_array::StringArray::from(vec![Some(CATALOG_NAME); count])),
            Arc::new(arrow_array::StringArray::from(vec![Some(SCHEMA_NAME); count])),
            Arc::new(arrow_array::StringArray::from(vec![query.table.as_str(); count])),
            Arc::new(arrow_array::StringArray::from(key)),
            Arc::new(arrow_array::StringArray::from(vec![Some(shoal_core::keys::PRIMARY_KEY_PSF); count])),
            Arc::new(arrow_array::Int32Array::from_iter_values((1..=i32::try_from(count).unwrap_or(i32::MAX)).take(count))),
        ];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns).map_err(FlightError::from);
        Ok(batch_stream(schema, batch))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        if query.transaction_id.is_some() {
            return Err(Status::invalid_argument("transactions are not supported"));
        }
        let text = query.query;
        if let Some(prepared) = prepared_delete(&text)? {
            return Ok(prepared);
        }
        // Checked and planned now, with NULL for each placeholder, for the result schema:
        // a statement that cannot run fails here, naming what is wrong.
        let schema = self.result_schema(text.clone(), Vec::new()).await?;
        let parameters = self.parameter_schema(text.clone()).await?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: Handle::statement(text, &[]).encode()?,
            dataset_schema: schema_bytes(&schema)?,
            parameter_schema: if parameters.fields().is_empty() { bytes::Bytes::new() } else { schema_bytes(&parameters)? },
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        Ok(())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// A `DELETE` or `INSERT` prepared as an update statement (the JDBC driver prepares every
/// statement, and runs one whose result schema is empty as an update): checked now, run by
/// `CommandPreparedStatementUpdate`. `None` when `text` is neither.
///
/// # Errors
/// `INVALID_ARGUMENT` for a `DELETE` that does not parse, or that has parameters (put the
/// values in the statement).
fn prepared_delete(text: &str) -> Result<Option<ActionCreatePreparedStatementResult>, Status> {
    if !sql::is_update(text) {
        return Ok(None);
    }
    if sql::count_placeholders(text).map_err(status)? > 0 {
        return Err(Status::invalid_argument("a DELETE or INSERT with parameters cannot be prepared: put the values in the statement"));
    }
    if sql::is_insert(text) {
        sql::parse_sql_insert(text).map_err(status)?;
    } else {
        sql::parse_sql_delete(text, Parameters::Bound(&[])).map_err(status)?;
    }
    Ok(Some(ActionCreatePreparedStatementResult {
        prepared_statement_handle: Handle::statement(text.to_owned(), &[]).encode()?,
        dataset_schema: bytes::Bytes::new(),
        parameter_schema: bytes::Bytes::new(),
    }))
}

/// A statement's query command as the JSON body of a query.
fn command_body(statement: &SqlStatement) -> Result<serde_json::Map<String, Value>, Status> {
    match serde_json::to_value(&statement.command) {
        Ok(Value::Object(body)) => Ok(body),
        Ok(_) => Err(Status::internal("a query command is not a JSON object")),
        Err(e) => Err(Status::internal(format!("encoding a query command: {e}"))),
    }
}

/// How a statement over a sharded table is planned: one fan-in endpoint when its result
/// must be whole in one place (sorted, offset, grouped) to be shaped; otherwise the shards'
/// endpoints, each in the table's merged schema (a limit or aggregates make it one fan-in
/// endpoint anyway).
fn sharded_endpoints(statement: &SqlStatement) -> Endpoints {
    if statement.shape.needs_whole_result() { Endpoints::OneStream } else { Endpoints::Conformed }
}

/// The records a statement answers, estimated from its plan's `planned` records: one row
/// for aggregates, at most the limit.
fn statement_total(statement: &SqlStatement, planned: i64) -> i64 {
    if statement.command.aggregates.is_empty() {
        let limit = statement.shape.limit.and_then(|l| i64::try_from(l).ok()).unwrap_or(i64::MAX);
        planned.min(limit)
    } else {
        1
    }
}

/// The type of the field at `segments` in `schema` (through structs by name).
fn path_type(schema: &Schema, segments: &[String]) -> Option<DataType> {
    let (first, rest) = segments.split_first()?;
    let mut field = schema.field_with_name(first).ok()?;
    for segment in rest {
        let DataType::Struct(children) = field.data_type() else { return None };
        field = children.iter().find(|f| f.name() == segment)?;
    }
    Some(field.data_type().clone())
}

/// `batches` of `input` shaped by `shape` (sort, offset, limit, grouping, names) as a
/// `DoGet` stream; the input stops being read once the shape needs no more rows.
///
/// # Errors
/// `INVALID_ARGUMENT` when the shape names a column `input` lacks.
fn shaped(input: &SchemaRef, mut batches: BatchStream, shape: &ResultShape) -> Result<Response<BoxedStream<FlightData>>, Status> {
    let mut shaper = Shaper::new(shape, input).map_err(status)?;
    let schema = shaper.schema();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
    let failed = |e: OpsError| FlightError::Tonic(Box::new(status(e)));
    tokio::spawn(async move {
        while let Some(item) = batches.next().await {
            match item.and_then(|batch| shaper.push(batch).map_err(failed)) {
                Ok(Some(batch)) => {
                    if sender.send(Ok(batch)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    let _ = sender.send(Err(error)).await;
                    return;
                }
            }
            if shaper.is_done() {
                break;
            }
        }
        drop(batches);
        match shaper.finish() {
            Ok(Some(last)) => {
                let _ = sender.send(Ok(last)).await;
            }
            Ok(None) => {}
            Err(error) => {
                let _ = sender.send(Err(failed(error))).await;
            }
        }
    });
    let batches = tokio_stream::wrappers::ReceiverStream::new(receiver);
    Ok(Response::new(Box::pin(FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from))))
}

/// `GetPrimaryKeys`' result schema (Flight SQL's `CommandGetPrimaryKeys`).
fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}
