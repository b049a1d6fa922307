//! The Arrow Flight service: tables, ingestion (`DoPut`), planning (`GetFlightInfo`),
//! scans (`DoGet`) and actions, over shoal-core.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest,
    HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use futures::stream;
use futures::{StreamExt, TryStreamExt};
use tonic::{Request, Response, Status, Streaming};

use shoal_ops::catalog::{Catalog, TableEntry};
use shoal_ops::ops::{self, TicketScan, ACTIONS};
use shoal_ops::protocol::BatchMetadata;

use crate::auth::{Authenticator, Credentials};
use crate::limits::{self, Admission, AdmissionLimits, Caller, Stop};
use crate::cluster::reads::TicketRoute;
use crate::cluster::Cluster;
use crate::route::{Route, Router};
use crate::put::{self, PutBatch, Places, PIPELINE_DEPTH};
use crate::rpc::{blocking, planned_info, status, stream_rows, BoxedStream};
use crate::flight_sql::{self, ShoalSqlService};


/// How long an ingesting stream waits for a place among the running ones before it is
/// refused with `RESOURCE_EXHAUSTED`.
const PUT_WAIT: Duration = Duration::from_secs(30);

/// The bounds on running calls and stalled streams ([`crate::limits`]; the settings of the
/// same names in `ServerConfig`).
#[derive(Debug, Clone)]
pub struct StreamLimits {
    /// Scans (`DoGet`) running at once; one connection runs at most half of them.
    pub max_concurrent_scans: usize,
    /// Ingesting streams (`DoPut` streams with a batch in flight) at once; one connection at
    /// most half of them.
    pub max_concurrent_puts: usize,
    /// How long a scan waits for a place before `RESOURCE_EXHAUSTED`.
    pub scan_wait: Duration,
    /// How long a stream may send (`DoPut`) or read (`DoGet`, `DoPut`'s results) nothing
    /// before it is ended with `DEADLINE_EXCEEDED`; zero: never.
    pub stream_idle: Duration,
}

impl StreamLimits {
    fn idle(&self) -> Option<Duration> {
        (!self.stream_idle.is_zero()).then_some(self.stream_idle)
    }
}

/// The Flight service.
pub struct ShoalFlightService {
    catalog: Arc<Catalog>,
    auth: Arc<Authenticator>,
    scans: Arc<Admission>,
    puts: Arc<Admission>,
    /// Arrow Flight SQL on the same port: commands, tickets and actions of Flight SQL
    /// are handed to it (`flight_sql.rs`).
    sql: ShoalSqlService,
    /// Where a request's table lives: here, or sharded over the nodes of this daemon's
    /// cluster (whose plans, reads, writes and actions go through `cluster/`).
    router: Router,
    /// The tables' remote store: an action that changes a table answers once the store
    /// holds the change ([`crate::remote::SYNCED_ACTIONS`]).
    remote: Option<Arc<crate::remote::RemoteStore>>,
}

impl ShoalFlightService {
    /// A service over `catalog`; `auth` answers handshakes with basic credentials (the
    /// interceptor built from the same authenticator checks every call). `limits`: how many
    /// scans (`DoGet`) and ingesting streams (`DoPut`) run at once, how long a call waits for
    /// a place, and how long a stream may send or read nothing ([`StreamLimits`]).
    pub fn new(catalog: Arc<Catalog>, auth: Arc<Authenticator>, limits: &StreamLimits) -> Self {
        let idle = limits.idle();
        let share = |limit: usize| (limit / 2).max(1);
        let scans = AdmissionLimits {
            limit: limits.max_concurrent_scans,
            per_connection: share(limits.max_concurrent_scans),
            wait: limits.scan_wait,
            idle,
        };
        let puts = AdmissionLimits { limit: limits.max_concurrent_puts, per_connection: share(limits.max_concurrent_puts), wait: PUT_WAIT, idle };
        let scans = Arc::new(Admission::new(&scans, "scans (DoGet)", "max_concurrent_scans", "scan_wait_timeout_ms"));
        let puts = Arc::new(Admission::new(&puts, "ingesting streams (DoPut)", "max_concurrent_puts", "30 s"));
        let sql = ShoalSqlService::new(Arc::clone(&catalog), Arc::clone(&scans), Arc::clone(&puts));
        Self { catalog, auth, scans, puts, sql, router: Router::default(), remote: None }
    }

    /// The service with the tables' remote store.
    #[must_use]
    pub fn with_remote(mut self, remote: Arc<crate::remote::RemoteStore>) -> Self {
        self.sql.set_remote(Arc::clone(&remote));
        self.remote = Some(remote);
        self
    }

    /// The service as a node of `cluster`.
    #[must_use]
    pub fn with_cluster(mut self, cluster: Arc<Cluster>) -> Self {
        self.sql.set_cluster(Arc::clone(&cluster));
        self.router = Router::new(Some(cluster));
        self
    }

    /// Who makes `request` ([`Caller`]): a node of this daemon's cluster when it carries the
    /// cluster's secret, else a client at its peer address.
    fn caller<T>(&self, request: &Request<T>) -> Caller {
        self.router.caller(request)
    }
}

/// The table a JSON query command names (`None`: not a JSON object with a `table`).
fn command_table(command: &[u8]) -> Option<(String, serde_json::Map<String, serde_json::Value>)> {
    match serde_json::from_slice::<serde_json::Value>(command) {
        Ok(serde_json::Value::Object(body)) => Some((body.get("table")?.as_str()?.to_owned(), body)),
        _ => None,
    }
}

/// True when a `create_table` body asks for shards.
fn has_sharding(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|b| b.get("shards").is_some() || b.get("shard_key").is_some())
}

/// The `cluster` action of a daemon that is no node of a cluster.
fn no_cluster() -> serde_json::Value {
    serde_json::json!({"node_id": null, "nodes": [], "tables": []})
}

fn table_from_descriptor(descriptor: &FlightDescriptor) -> Result<String, Status> {
    match descriptor.path.as_slice() {
        [table] => Ok(table.clone()),
        _ => Err(Status::invalid_argument(shoal_ops::protocol::bounded(format!(
            "the descriptor must be a path of exactly one element (the table name), got {:?}",
            descriptor.path
        )))),
    }
}

/// Whether the caller of a call is still there. Tonic drops a handler's future when its
/// client disconnects or its deadline passes; the [`CallerGuard`] held by that future then
/// marks the call abandoned, and blocking work that waits (durability) stops.
#[derive(Clone)]
struct CallerAlive(Arc<AtomicBool>);

impl CallerAlive {
    fn new() -> (Self, CallerGuard) {
        let alive = Arc::new(AtomicBool::new(true));
        (Self(Arc::clone(&alive)), CallerGuard(alive))
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Held by the future that awaits a call's blocking work; marks the call abandoned when
/// dropped (normally after the work ended, when nothing asks any more).
struct CallerGuard(Arc<AtomicBool>);

impl Drop for CallerGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn json_result(value: &serde_json::Value) -> arrow_flight::Result {
    arrow_flight::Result { body: value.to_string().into() }
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
        for listing in ops::list_tables(&self.catalog) {
            // A sharded table is listed once, by its own name (below); its shards' tables
            // here stay readable by name but are not listed.
            if self.router.is_shard_table(&listing.name) {
                continue;
            }
            let info = FlightInfo::new()
                .try_with_schema(&listing.schema)
                .map_err(|e| Status::internal(e.to_string()))?
                .with_descriptor(FlightDescriptor::new_path(vec![listing.name.clone()]))
                .with_total_records(i64::try_from(listing.stats.keys.as_ref().map_or(listing.stats.records, |k| k.live)).unwrap_or(i64::MAX))
                .with_total_bytes(i64::try_from(listing.stats.payload_bytes).unwrap_or(i64::MAX))
                .with_app_metadata(serde_json::to_string(&listing.stats).unwrap_or_default());
            infos.push(Ok(info));
        }
        if let Some(cluster) = self.router.cluster() {
            let tables = cluster.map().all();
            let entries = futures::future::join_all(tables.iter().map(|table| cluster.list_entry(&self.catalog, table))).await;
            infos.extend(entries.into_iter().map(Ok));
        }
        Ok(Response::new(Box::pin(stream::iter(infos))))
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        if flight_sql::is_flight_sql(&request.get_ref().cmd) {
            return FlightService::get_flight_info(&self.sql, request).await;
        }
        let caller = self.caller(&request);
        let descriptor = request.into_inner();
        if let Some((table, body)) = self.router.cluster().and_then(|_| command_table(&descriptor.cmd)) {
            if let Route::Sharded(cluster, sharded) = self.router.route(&table) {
                // The shards' nodes take the filter as a node's (the longer limit).
                caller.check_filter("GetFlightInfo command", &body)?;
                return cluster.plan(&self.catalog, &sharded, body, descriptor).await.map(Response::new);
            }
        }
        let catalog = Arc::clone(&self.catalog);
        let command = descriptor.cmd.clone();
        let planned = blocking(move || ops::plan_query_within(&catalog, &command, caller.filter_bytes())).await?;
        let endpoints = planned.endpoints.into_iter().map(|e| (e.ticket, e.plan.to_string()));
        planned_info(&planned.schema, endpoints, descriptor, planned.total_records, planned.metadata.to_string()).map(Response::new)
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        let info = self.get_flight_info(request).await?.into_inner();
        Ok(Response::new(PollInfo::new().with_info(info)))
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        if flight_sql::is_flight_sql(&request.get_ref().cmd) {
            return self.sql.command_schema(&request.get_ref().cmd).await.map(Response::new);
        }
        let table = table_from_descriptor(request.get_ref())?;
        let schema = if let Route::Sharded(cluster, sharded) = self.router.route(&table) {
            cluster.schema(&self.catalog, &sharded).await?
        } else {
            let catalog = Arc::clone(&self.catalog);
            blocking(move || ops::table_schema(&catalog, &table)).await?
        };
        let options = IpcWriteOptions::default();
        let result: SchemaResult = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: arrow_schema::ArrowError| Status::internal(e.to_string()))?;
        Ok(Response::new(result))
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        if flight_sql::is_flight_sql(&request.get_ref().ticket) {
            return FlightService::do_get(&self.sql, request).await;
        }
        let catalog = Arc::clone(&self.catalog);
        let caller = self.caller(&request);
        let ticket = request.into_inner().ticket;
        if let Some(cluster) = self.router.cluster() {
            let scans = self.scans.for_caller(caller);
            match cluster.route_ticket(&ticket) {
                TicketRoute::Local => {}
                TicketRoute::Forward { node, table, shard } => return cluster.forward_get(node, &table, shard, ticket.to_vec()).await.map(Response::new),
                TicketRoute::FanIn(fan_in) => return cluster.fan_in(&catalog, &scans, *fan_in).map(Response::new),
                TicketRoute::Conform(ticket) => return cluster.read_conformed(&catalog, &scans, *ticket).await.map(Response::new),
                TicketRoute::OneCall(table, command) => return cluster.one_call(&catalog, &scans, &table, command).await.map(Response::new),
            }
        }
        let permit = self.scans.enter(caller).await?;
        let scan = match blocking(move || ops::open_ticket(&catalog, &ticket)).await? {
            TicketScan::Aggregates(batch) => {
                drop(permit);
                let schema = batch.schema();
                let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(stream::iter([Ok(batch)]));
                return Ok(Response::new(Box::pin(stream.map_err(Status::from))));
            }
            TicketScan::Rows(scan) => scan,
        };
        let schema = scan.schema();
        let stream = stream_rows(permit, scan, None);
        Ok(Response::new(Box::pin(FlightDataEncoderBuilder::new().with_schema(schema).build(stream).map_err(Status::from))))
    }

    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        // The put pipeline (crate::put): this task decodes FlightData into batches, the
        // pipeline ingests and acknowledges them in order, a second task answers each with
        // its PutResult.
        // The first message's descriptor says what the stream is: a path [table] (shoal's
        // ingestion) or a Flight SQL command (bulk ingest, parameters of a prepared statement).
        let caller = self.caller(&request);
        let idle = self.puts.idle(caller);
        let mut messages = request.into_inner().peekable();
        let first = Pin::new(&mut messages).peek();
        let first = match idle {
            Some(idle) => tokio::time::timeout(idle, first).await.map_err(|_| limits::silent("DoPut", idle))?,
            None => first.await,
        };
        let descriptor = match first {
            Some(Ok(first)) => first.flight_descriptor.clone(),
            _ => None,
        };
        if let Some(command) = descriptor.as_ref().map(|d| d.cmd.clone()).filter(|cmd| flight_sql::is_flight_sql(cmd)) {
            return self.sql.do_put_command(&command, messages, caller).await;
        }
        if let Some(Route::Sharded(cluster, sharded)) = descriptor.as_ref().and_then(|d| d.path.first()).map(|table| self.router.route(table)) {
            let permit = self.puts.enter(caller).await?;
            return Ok(Response::new(cluster.put(&self.catalog, sharded, limits::idle_guarded(messages, idle, "DoPut"), permit)));
        }
        // A shard's own table that moved to another node (a writer routing by key with an
        // old shard map): say where it is.
        if let Some((cluster, name)) = self.router.cluster().zip(descriptor.as_ref().and_then(|d| d.path.first())) {
            if let Some((table, shard)) = cluster.map().shard_of_table(name).filter(|(t, s)| t.node_of(*s) != cluster.node_id()) {
                if self.catalog.get(name).is_err() {
                    let node = table.node_of(shard);
                    return Err(Status::failed_precondition(format!(
                        "table {name:?} (shard {shard} of {:?}) is held by node {node} ({}) since it moved: write it there, or write {:?} through any node",
                        table.name,
                        cluster.location(node),
                        table.name
                    )));
                }
            }
        }
        let catalog = Arc::clone(&self.catalog);
        let mut places = Places::new(&self.puts, caller);
        let mut decoder = FlightDataDecoder::new(limits::idle_guarded(messages, idle, "DoPut").map_err(FlightError::from));
        let (outlet, results) = limits::outlet::<Result<PutResult, Status>>(PIPELINE_DEPTH, idle, "DoPut", Err);
        let (work_sender, work) = tokio::sync::mpsc::channel::<Result<PutBatch, Status>>(PIPELINE_DEPTH);
        // A client that went away closes the stream of results: durability waits stop.
        let mut answers = put::ingest_in_order(work, outlet.gone_check());
        tokio::spawn(async move {
            while let Some(answer) = answers.recv().await {
                let result = answer.map(|metadata| PutResult { app_metadata: metadata.to_string().into() });
                let failed = result.is_err();
                match outlet.send(result).await {
                    Ok(()) if !failed => {}
                    Err(Stop::Stalled) => return outlet.stall(),
                    Ok(()) | Err(Stop::Gone) => return outlet.finish(),
                }
            }
            // Every batch the client sent was answered.
            outlet.finish();
        });
        tokio::spawn(async move {
            let mut entry: Option<Arc<TableEntry>> = None;
            let mut number = 0usize;
            while let Some(message) = decoder.next().await {
                let item: Result<Option<(RecordBatch, BatchMetadata)>, Status> = (|| {
                    let message = message.map_err(Status::from)?;
                    if entry.is_none() {
                        let descriptor = message.inner.flight_descriptor.as_ref().ok_or_else(|| {
                            Status::invalid_argument("the first DoPut message must carry a descriptor with path [table]")
                        })?;
                        entry = Some(catalog.get(&table_from_descriptor(descriptor)?).map_err(status)?);
                    }
                    match message.payload {
                        DecodedPayload::RecordBatch(batch) => Ok(Some((batch, BatchMetadata::parse(&message.inner.app_metadata).map_err(status)?))),
                        DecodedPayload::Schema(schema) => ops::check_put_schema(&schema).map(|()| None).map_err(status),
                        DecodedPayload::None => Ok(None),
                    }
                })();
                let item = match (item, &entry) {
                    (Ok(None), _) => continue,
                    (Ok(Some((batch, metadata))), Some(entry)) => places.for_batch().await.map(|place| {
                        number += 1;
                        PutBatch { entry: Arc::clone(entry), batch, metadata, number: number - 1, place: Some(place) }
                    }),
                    (Ok(Some(_)), None) => Err(Status::internal("a DoPut batch before its table")),
                    (Err(status), _) => Err(status),
                };
                let failed = item.is_err();
                if work_sender.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(results)))
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        if flight_sql::is_flight_sql_action(&request.get_ref().r#type) {
            return FlightService::do_action(&self.sql, request).await;
        }
        if crate::cluster::is_node_action(&request.get_ref().r#type)
            && !self.router.cluster().is_some_and(|cluster| cluster.is_node(request.metadata()))
        {
            metrics::counter!("shoal_cluster_refused_node_calls_total").increment(1);
            return Err(Status::permission_denied(format!(
                "{} is a call between the nodes of a cluster: it needs the cluster's secret (cluster.secret), which this call did not carry{}",
                request.get_ref().r#type,
                if self.router.cluster().is_some() { "" } else { " (and this daemon is no node of a cluster)" }
            )));
        }
        let caller = self.caller(&request);
        let from_node = self.router.cluster().is_some_and(|cluster| cluster.is_node(request.metadata()));
        let action = request.into_inner();
        match self.router.cluster() {
            Some(cluster) => {
                if let Ok(serde_json::Value::Object(body)) = serde_json::from_slice(&action.body) {
                    // A sharded table's or another node's action: the nodes take its filter
                    // as a node's (the longer limit).
                    caller.check_filter(&action.r#type, &body)?;
                }
                if let Some(answer) = cluster.action(&self.catalog, &action.r#type, &action.body, from_node).await? {
                    return Ok(Response::new(Box::pin(stream::iter([Ok(json_result(&answer))]))));
                }
            }
            None if action.r#type == "cluster" => return Ok(Response::new(Box::pin(stream::iter([Ok(json_result(&no_cluster()))])))),
            None if action.r#type == "create_table" && has_sharding(&action.body) => {
                return Err(Status::invalid_argument(
                    "create_table: \"shards\" and \"shard_key\" need a cluster: this daemon is no node of one (list the nodes in its config's [cluster] nodes, or SHOAL_CLUSTER_NODES)",
                ));
            }
            None => {}
        }
        let catalog = Arc::clone(&self.catalog);
        let (alive, _guard) = CallerAlive::new();
        let synced = self
            .remote
            .as_ref()
            .and_then(|remote| crate::remote::synced_table(&self.catalog, &action.r#type, &action.body).map(|table| (Arc::clone(remote), table)));
        let result = blocking(move || {
            let call = ops::ActionCall { keep_waiting: &|| alive.get(), filter_bytes: caller.filter_bytes() };
            ops::run_action_with(&catalog, &action.r#type, &action.body, call)
        })
        .await?;
        if let Some((remote, table)) = synced {
            remote.sync_table(&self.catalog, &table).await?;
        }
        Ok(Response::new(Box::pin(stream::iter([Ok(json_result(&result))]))))
    }

    async fn list_actions(&self, _request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        let tables = ACTIONS.iter().map(|a| (a.name, a.description));
        let cluster = crate::cluster::ACTIONS
            .iter()
            .map(|a| (a.name, a.description))
            .chain(std::iter::once(crate::cluster::moves::MOVE_SHARD))
            .chain(crate::cluster::moves::NODE_ACTIONS.iter().copied());
        let actions = tables.chain(cluster).chain(flight_sql::ACTIONS.iter().copied()).map(|(name, description)| {
            Ok(ActionType { r#type: name.to_owned(), description: description.to_owned() })
        });
        Ok(Response::new(Box::pin(stream::iter(actions.collect::<Vec<_>>()))))
    }

    async fn do_exchange(&self, _request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("DoExchange is not part of the shoal protocol; use DoPut to ingest and DoGet to read"))
    }
}

