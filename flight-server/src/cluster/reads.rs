//! Reads of a sharded table: `GetFlightInfo` on any node plans
//! every shard on the node that holds it and answers every shard's endpoints, each with
//! the **location** of that node (Flight's own mechanism: a client reads each endpoint
//! there, in parallel). Any node also serves any shard's ticket (it forwards the stream),
//! so a client that ignores locations still gets every row, one hop slower.
//!
//! A `limit` stays exact: the plan is one endpoint whose ticket reads the shards in turn
//! until the limit ("fan-in"). Final aggregates are one fan-in endpoint too, which asks
//! every shard for partial aggregates (`avg` as `sum` and `count`) and merges them
//! ([`shoal_ops::merge`]); `"partial": true` answers each shard's partial rows as
//! endpoints of their own (what Spark's pushdown merges). A one-call query (a `DoGet`
//! whose ticket is the command) of a sharded table is planned here and read as a fan-in.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Location, Ticket};
use arrow_schema::{Schema, SchemaRef};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use futures::future::join_all;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tonic::Status;

use shoal_ops::catalog::Catalog;
use shoal_ops::ops::{self, TicketScan};
use shoal_ops::protocol::AggregateSpec;

use super::schema::{conform, fits, merge_schemas};
use super::{Cluster, ShardedTable, PEER_CALL_TIMEOUT};
use crate::limits::CallerAdmission;
use crate::rpc::{blocking, planned_info, stream_rows, BoxedStream};

/// How long `ListFlights` waits for a sharded table's shards (schema and stats).
pub const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Shards a fan-in reads at once: each holds a scan place (`max_concurrent_scans`) on its
/// node while it is read, so a table of many shards per node is read this many at a time.
const FAN_IN_SHARDS_AT_ONCE: usize = 8;

/// A ticket that reads the shards' tickets in turn, up to `limit` rows in all, or merges
/// their partial aggregates.
#[derive(Debug, Serialize, Deserialize)]
struct FanIn {
    table: String,
    limit: Option<usize>,
    /// The parts are partial aggregates to merge into the answer.
    #[serde(default)]
    merge: Option<Merge>,
    /// The answer's schema (Arrow IPC, base64): every shard's batches are cast to it.
    schema: String,
    parts: Vec<FanInPart>,
}

/// How a fan-in merges partial aggregates: `keys` group columns, then `aggregates`.
#[derive(Debug, Serialize, Deserialize)]
struct Merge {
    keys: usize,
    aggregates: Vec<AggregateSpec>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FanInPart {
    shard: usize,
    node: usize,
    /// The shard's ticket (base64).
    ticket: String,
}

/// A stream of record batches (a fan-in's, a conformed shard's).
pub(crate) type BatchStream = futures::stream::BoxStream<'static, Result<RecordBatch, FlightError>>;

/// How a sharded query's endpoints are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoints {
    /// Each shard's own endpoints at its node's location (a limit or final aggregates:
    /// one fan-in endpoint); an endpoint is conformed to the merged schema only where its
    /// shard's schema differs from it.
    PerShard,
    /// As `PerShard`, but every shard endpoint answers the merged schema exactly
    /// (nullability too): Flight SQL clients check that every endpoint's schema is the
    /// statement's.
    Conformed,
    /// One fan-in endpoint whatever the query (a one-call query; a SQL statement whose
    /// result must be whole in one place: sorted, offset or grouped).
    OneStream,
}

/// `batches` of `schema` as a `DoGet` stream.
fn encode(schema: SchemaRef, batches: BatchStream) -> BoxedStream<FlightData> {
    Box::pin(FlightDataEncoderBuilder::new().with_schema(schema).build(batches).map_err(Status::from))
}

/// Where a `DoGet` ticket is served.
pub enum TicketRoute {
    /// By this node's tables (an ordinary ticket, or a shard this node holds).
    Local,
    /// By node `node`, which holds the ticket's shard: the stream is forwarded.
    Forward { node: usize, table: String, shard: usize },
    /// A fan-in ticket of a sharded query with a limit or final aggregates.
    FanIn(Box<FanInTicket>),
    /// One shard's ticket, its batches conformed to the table's merged schema.
    Conform(Box<ConformTicket>),
    /// A query command naming a sharded table (a one-call query).
    OneCall(Arc<ShardedTable>, Map<String, Value>),
}

/// A parsed fan-in ticket.
pub struct FanInTicket(FanIn);

/// A parsed conform ticket: one shard's ticket read in the table's merged schema.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConformTicket {
    table: String,
    /// The merged schema (Arrow IPC, base64).
    schema: String,
    part: FanInPart,
}

impl Cluster {
    /// Plans `command` (a query command naming the sharded `table`) on every shard.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for `from_address` / `to_address` (log addresses are per shard:
    /// query a shard's table for them); a shard's error naming shard and node
    /// (`UNAVAILABLE` when its node cannot be reached).
    pub async fn plan(&self, catalog: &Arc<Catalog>, table: &ShardedTable, command: Map<String, Value>, descriptor: FlightDescriptor) -> Result<FlightInfo, Status> {
        self.plan_with(catalog, table, command, descriptor, Endpoints::PerShard).await
    }

    /// Plans and reads a one-call query of the sharded `table`: one stream.
    ///
    /// # Errors
    /// As [`Self::plan`].
    pub(crate) async fn one_call(self: &Arc<Self>, catalog: &Arc<Catalog>, scans: &CallerAdmission, table: &ShardedTable, command: Map<String, Value>) -> Result<BoxedStream<FlightData>, Status> {
        let (schema, batches) = self.one_call_batches(catalog, scans, table, command).await?;
        Ok(encode(schema, batches))
    }

    /// The batches of a one-call query of the sharded `table` (one fan-in), with their
    /// schema.
    ///
    /// # Errors
    /// As [`Self::plan`].
    pub(crate) async fn one_call_batches(
        self: &Arc<Self>,
        catalog: &Arc<Catalog>,
        scans: &CallerAdmission,
        table: &ShardedTable,
        command: Map<String, Value>,
    ) -> Result<(SchemaRef, BatchStream), Status> {
        let info = self.plan_with(catalog, table, command, FlightDescriptor::new_path(vec![table.name.clone()]), Endpoints::OneStream).await?;
        let ticket = info.endpoint.first().and_then(|e| e.ticket.as_ref()).map(|t| t.ticket.clone()).unwrap_or_default();
        match self.route_ticket(&ticket) {
            TicketRoute::FanIn(fan_in) => self.fan_in_batches(catalog, scans, *fan_in),
            _ => Err(Status::internal("a one-call query of a sharded table was not planned as a fan-in")),
        }
    }

    /// [`Self::plan`], its endpoints shaped as `endpoints` says.
    pub(crate) async fn plan_with(
        &self,
        catalog: &Arc<Catalog>,
        table: &ShardedTable,
        command: Map<String, Value>,
        descriptor: FlightDescriptor,
        endpoints: Endpoints,
    ) -> Result<FlightInfo, Status> {
        let one_stream = endpoints == Endpoints::OneStream;
        // Log ranges are per shard: `{"<shard table>": address, ...}` (a follower of the
        // sharded table reads the shards it names, each in its own range).
        let mut ranges: [Option<Map<String, Value>>; 2] = [None, None];
        for (key, range) in ["from_address", "to_address"].into_iter().zip(&mut ranges) {
            match command.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(per_shard))
                    if per_shard.iter().all(|(name, address)| {
                        address.is_u64() && self.map.shard_of_table(name).is_some_and(|(t, _)| t.name == table.name)
                    }) =>
                {
                    *range = Some(per_shard.clone());
                }
                Some(_) => {
                    return Err(Status::invalid_argument(format!(
                        "GetFlightInfo command: {key:?} on the sharded table {:?}: log addresses are per shard; give them \
                         per shard ({{\"{}\": <address>, ...}}), or query a shard's own table to read by address",
                        table.name,
                        table.shard_table(0)
                    )));
                }
            }
        }
        let [from_ranges, to_ranges] = ranges;
        let specs: Vec<AggregateSpec> = match command.get("aggregates") {
            None | Some(Value::Null) => Vec::new(),
            Some(value) => serde_json::from_value(value.clone()).map_err(|e| Status::invalid_argument(format!("GetFlightInfo command: \"aggregates\": {e}")))?,
        };
        let keys = command.get("group_by").and_then(Value::as_array).map_or(0, Vec::len);
        let aggregating = !specs.is_empty() || keys > 0;
        let merging = aggregating && command.get("partial").and_then(Value::as_bool) != Some(true);
        let limit = command.get("limit").and_then(Value::as_u64);
        let fan_in = one_stream || limit.is_some() || merging;
        // Partition pruning: a filter that pins the shard key reads only the shards it names.
        let mut planned: Vec<usize> = table.prune(command.get("filter").and_then(Value::as_str)).unwrap_or_else(|| (0..table.shards).collect());
        if let Some(from) = &from_ranges {
            planned.retain(|&shard| from.contains_key(&table.shard_table(shard)));
            if planned.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "GetFlightInfo command: \"from_address\" names no shard of {:?} to read (its shards are {}, …)",
                    table.name,
                    table.shard_table(0)
                )));
            }
        }
        // Each shard's command: its table and, when given per shard, its range.
        let for_shard = |mut command: Map<String, Value>, shard: usize| {
            let name = table.shard_table(shard);
            for (key, ranges) in [("from_address", &from_ranges), ("to_address", &to_ranges)] {
                if let Some(ranges) = ranges {
                    command.insert(key.into(), ranges.get(&name).cloned().unwrap_or(Value::Null));
                }
            }
            command.insert("table".into(), json!(name));
            command
        };
        let mut shard_command = command.clone();
        if !fan_in {
            // About as many endpoints in all as one daemon would give, at least one per shard.
            let total = command.get("max_endpoints").and_then(Value::as_u64).unwrap_or(catalog.config().endpoints_per_query as u64);
            shard_command.insert("max_endpoints".into(), json!(total.div_ceil(planned.len() as u64).max(1)));
        }
        // A shard that never saw a requested path answers it as a Null column: another
        // shard may hold it (the merged schema says whether any does).
        shard_command.insert("unknown_columns_null".into(), json!(true));
        if merging {
            shard_command.insert("partial".into(), json!(true));
            shard_command.insert("aggregates".into(), json!(shoal_ops::merge::partial_aggregates(&specs)));
        }
        // The answer's schema when merging: what one shard answers to the command itself.
        let final_schema = async {
            if !merging {
                return Ok(None);
            }
            let first = planned[0];
            let command = for_shard(command.clone(), first);
            let node = table.node_of(first);
            let plan = self.plan_shard(catalog, node, command).await.map_err(|e| self.peer_error(&table.name, Some(first), node, &e))?;
            plan.try_decode_schema().map(Some).map_err(|e| Status::internal(format!("a shard's plan has no schema: {e}")))
        };
        let plans = join_all(planned.iter().map(|&shard| {
            let command = for_shard(shard_command.clone(), shard);
            let node = table.node_of(shard);
            async move { self.plan_shard(catalog, node, command).await.map_err(|e| self.peer_error(&table.name, Some(shard), node, &e)) }
        }))
        .await;
        let plans = super::all_or_report(&table.name, "GetFlightInfo", plans)?;
        let final_schema = final_schema.await?;
        let mut schemas = Vec::with_capacity(plans.len());
        for plan in &plans {
            schemas.push(plan.clone().try_decode_schema().map_err(|e| Status::internal(format!("a shard's plan has no schema: {e}")))?);
        }
        let schema = final_schema.unwrap_or_else(|| merge_schemas(&schemas));
        if let Some(unknown) = schema.fields().iter().find(|f| f.data_type() == &arrow_schema::DataType::Null) {
            return Err(Status::invalid_argument(format!(
                "unknown column {:?}: no record of the sharded table {:?} seen so far has this path",
                unknown.name(),
                table.name
            )));
        }
        let encoded_schema = {
            let options = arrow_ipc::writer::IpcWriteOptions::default();
            let encoded: arrow_flight::SchemaResult =
                arrow_flight::SchemaAsIpc::new(&schema, &options).try_into().map_err(|e: arrow_schema::ArrowError| Status::internal(e.to_string()))?;
            STANDARD.encode(&encoded.schema)
        };
        let mut shards = Vec::with_capacity(plans.len());
        let conform_all = endpoints == Endpoints::Conformed;
        let mut endpoints = Vec::new();
        let mut parts = Vec::new();
        let mut total_records = 0i64;
        let mut exact = true;
        for ((i, plan), &shard) in plans.into_iter().enumerate().zip(&planned) {
            let node = table.node_of(shard);
            let metadata: Value = serde_json::from_slice(&plan.app_metadata).unwrap_or(Value::Null);
            exact &= metadata.get("exact").and_then(Value::as_bool).unwrap_or(false);
            total_records = total_records.saturating_add(plan.total_records.max(0));
            shards.push(json!({"shard": shard, "table": table.shard_table(shard), "node": node, "location": self.location(node), "plan": metadata}));
            for mut endpoint in plan.endpoint {
                if fan_in {
                    let ticket = endpoint.ticket.map(|t| t.ticket).unwrap_or_default();
                    parts.push(FanInPart { shard, node, ticket: STANDARD.encode(ticket) });
                    continue;
                }
                if endpoint.location.is_empty() {
                    endpoint.location.push(Location { uri: self.location(node).to_owned() });
                }
                if conform_all || !fits(&schemas[i], &schema) {
                    // This shard's columns differ in type from the table's (or every
                    // endpoint must answer the table's schema exactly): its node serves the
                    // ticket conformed to the merged schema.
                    let ticket = endpoint.ticket.take().map(|t| t.ticket).unwrap_or_default();
                    let part = FanInPart { shard, node, ticket: STANDARD.encode(ticket) };
                    let conform = json!({"conform": {"table": table.name, "schema": encoded_schema, "part": part}});
                    endpoint.ticket = Some(Ticket::new(serde_json::to_vec(&conform).map_err(|e| Status::internal(e.to_string()))?));
                }
                endpoints.push(endpoint);
            }
        }
        if fan_in {
            if let Some(limit) = limit {
                total_records = total_records.min(i64::try_from(limit).unwrap_or(i64::MAX));
            }
            if merging {
                total_records = if keys == 0 { 1 } else { -1 };
            }
            let merge = merging.then_some(Merge { keys, aggregates: specs });
            let limit = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
            let fan_in = FanIn { table: table.name.clone(), limit, merge, schema: encoded_schema, parts };
            let ticket = serde_json::to_vec(&json!({ "fan_in": fan_in })).map_err(|e| Status::internal(e.to_string()))?;
            endpoints = vec![FlightEndpoint::new().with_ticket(Ticket::new(ticket)).with_app_metadata(format!("{{\"fan_in\": {}}}", planned.len()))];
        }
        let metadata = json!({
            "table": table.name,
            "sharded": true,
            "exact": exact,
            "exact_note": "every shard's server evaluates the whole filter on every record it returns",
            "shards": shards,
            "pruned_shards": table.shards - planned.len(),
        });
        let info = planned_info(&schema, std::iter::empty(), descriptor, total_records, metadata.to_string())?;
        Ok(info.with_endpoints(endpoints))
    }

    /// The plan of one shard's command, by the node holding it.
    async fn plan_shard(&self, catalog: &Arc<Catalog>, node: usize, command: Map<String, Value>) -> Result<FlightInfo, Status> {
        let bytes = Value::Object(command).to_string().into_bytes();
        if node == self.me {
            let catalog = Arc::clone(catalog);
            let descriptor = FlightDescriptor::new_cmd(bytes.clone());
            // As a node's command: the caller of the plan held a client's filter to its limit.
            let planned = blocking(move || ops::plan_query_within(&catalog, &bytes, shoal_core::psf::expr::MAX_RENDERED_EXPR_BYTES)).await?;
            let endpoints = planned.endpoints.into_iter().map(|e| (e.ticket, e.plan.to_string()));
            return planned_info(&planned.schema, endpoints, descriptor, planned.total_records, planned.metadata.to_string());
        }
        let mut client = self.peer(node)?;
        Ok(client.get_flight_info(self.request(FlightDescriptor::new_cmd(bytes), Some(PEER_CALL_TIMEOUT))).await?.into_inner())
    }

    /// The schema of the sharded `table`: the shards' schemas merged by field name
    /// (`Schema::try_merge`; the first shard's where they conflict).
    ///
    /// # Errors
    /// A shard's error, naming shard and node.
    pub async fn schema(&self, catalog: &Arc<Catalog>, table: &ShardedTable) -> Result<Schema, Status> {
        let schemas = join_all((0..table.shards).map(|shard| {
            let node = table.node_of(shard);
            let name = table.shard_table(shard);
            async move {
                let result = if node == self.me {
                    let catalog = Arc::clone(catalog);
                    blocking(move || ops::table_schema(&catalog, &name)).await
                } else {
                    async {
                        let mut client = self.peer(node)?;
                        let answer = client.get_schema(self.request(FlightDescriptor::new_path(vec![name]), Some(PEER_CALL_TIMEOUT))).await?.into_inner();
                        Schema::try_from(&answer).map_err(|e| Status::internal(format!("node {node} sent a schema that cannot be read: {e}")))
                    }
                    .await
                };
                result.map_err(|e| self.peer_error(&table.name, Some(shard), node, &e))
            }
        }))
        .await;
        let schemas = super::all_or_report(&table.name, "GetSchema", schemas)?;
        Ok(merge_schemas(&schemas))
    }

    /// The `ListFlights` entry of a sharded table: its merged schema, its records and
    /// payload bytes summed over the shards (`stats`), and in `app_metadata` the merged
    /// stats with `"sharded": true`. A shard that cannot be reached, or not within
    /// [`LIST_TIMEOUT`], leaves the schema empty, the totals unknown (-1) and its error in
    /// `app_metadata`'s `"error"`: a listing does not fail, nor wait long, because one node
    /// is down (a query of the table fails).
    pub async fn list_entry(&self, catalog: &Arc<Catalog>, table: &ShardedTable) -> FlightInfo {
        let descriptor = FlightDescriptor::new_path(vec![table.name.clone()]);
        let stats_body = json!({"table": table.name}).to_string();
        let both = async { futures::join!(self.schema(catalog, table), self.action(catalog, "stats", stats_body.as_bytes(), false)) };
        let listed = match tokio::time::timeout(LIST_TIMEOUT, both).await {
            Ok((schema, stats)) => schema.and_then(|schema| Ok((schema, stats?.unwrap_or_default()))),
            Err(_) => Err(Status::deadline_exceeded(format!("table {:?}: not every shard answered within {LIST_TIMEOUT:?}", table.name))),
        };
        let total = |stats: &Value, key: &str| stats[key].as_i64().unwrap_or(-1);
        match listed {
            Ok((schema, mut stats)) => {
                stats["sharded"] = json!(true);
                let info = FlightInfo::new().with_descriptor(descriptor.clone());
                let info = info.try_with_schema(&schema).unwrap_or_else(|_| FlightInfo::new().with_descriptor(descriptor));
                // Rows a query returns: a keyed table's live keys, as one daemon lists it.
                let records = stats["keys"]["live"].as_i64().unwrap_or_else(|| total(&stats, "records"));
                info.with_total_records(records).with_total_bytes(total(&stats, "payload_bytes")).with_app_metadata(stats.to_string())
            }
            Err(e) => FlightInfo::new()
                .with_descriptor(descriptor)
                .with_total_records(-1)
                .with_total_bytes(-1)
                .with_app_metadata(json!({"sharded": true, "error": e.message()}).to_string()),
        }
    }

    /// Where a `DoGet` ticket is served: here, by the node holding its shard, or as a
    /// fan-in over the shards.
    #[must_use]
    pub fn route_ticket(&self, ticket: &[u8]) -> TicketRoute {
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(ticket) else { return TicketRoute::Local };
        if let Some(conform) = body.get("conform") {
            return match serde_json::from_value::<ConformTicket>(conform.clone()) {
                Ok(ticket) => TicketRoute::Conform(Box::new(ticket)),
                Err(_) => TicketRoute::Local,
            };
        }
        if let Some(fan_in) = body.get("fan_in") {
            return match serde_json::from_value::<FanIn>(fan_in.clone()) {
                Ok(fan_in) => TicketRoute::FanIn(Box::new(FanInTicket(fan_in))),
                Err(_) => TicketRoute::Local, // the local reader reports the malformed ticket
            };
        }
        let Some(name) = body.get("table").and_then(Value::as_str) else { return TicketRoute::Local };
        if !body.contains_key("v") {
            if let Some(table) = self.map.get(name) {
                return TicketRoute::OneCall(table, body);
            }
        }
        match self.map.shard_of_table(name) {
            Some((table, shard)) if table.node_of(shard) != self.me => TicketRoute::Forward { node: table.node_of(shard), table: table.name.clone(), shard },
            _ => TicketRoute::Local,
        }
    }

    /// The stream of `ticket` read from node `node` (a shard of `table` it holds).
    ///
    /// # Errors
    /// The node's error, naming shard and node.
    pub async fn forward_get(&self, node: usize, table: &str, shard: usize, ticket: Vec<u8>) -> Result<BoxedStream<FlightData>, Status> {
        let mut client = self.peer(node)?;
        let stream = client
            .do_get(self.request(Ticket::new(ticket), None))
            .await
            .map_err(|e| self.peer_error(table, Some(shard), node, &e))?
            .into_inner();
        let (table, location) = (table.to_owned(), self.location(node).to_owned());
        Ok(Box::pin(stream.map_err(move |e| {
            Status::unavailable(format!("table {table:?}, shard {shard} on node {node} ({location}): the stream broke: {}", e.message()))
        })))
    }

    /// Reads a fan-in ticket (this node's shards directly, the others' from their nodes),
    /// every batch cast to the answer's schema: with a limit, each shard's ticket in turn
    /// until `limit` rows (exact, and no shard scans once it is reached); without, every
    /// shard's at once, batches as they come; partial aggregates, every shard's at once,
    /// merged.
    ///
    /// # Errors
    /// A malformed ticket (`INVALID_ARGUMENT`); the first shard's error, as the stream's
    /// last item.
    pub(crate) fn fan_in(self: &Arc<Self>, catalog: &Arc<Catalog>, scans: &CallerAdmission, ticket: FanInTicket) -> Result<BoxedStream<FlightData>, Status> {
        let (schema, batches) = self.fan_in_batches(catalog, scans, ticket)?;
        Ok(encode(schema, batches))
    }

    /// [`Self::fan_in`]'s batches, with their schema (the answer's).
    ///
    /// # Errors
    /// As [`Self::fan_in`].
    pub(crate) fn fan_in_batches(self: &Arc<Self>, catalog: &Arc<Catalog>, scans: &CallerAdmission, ticket: FanInTicket) -> Result<(SchemaRef, BatchStream), Status> {
        let FanInTicket(fan_in) = ticket;
        let schema = decode_schema(&fan_in.schema)?;
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
        let (cluster, catalog, scans, target) = (Arc::clone(self), Arc::clone(catalog), scans.clone(), Arc::clone(&schema));
        if let Some(merge) = fan_in.merge {
            let stream = async move {
                // Every shard computes its partials at once (each scans its own records);
                // merged in shard order.
                let reads: Vec<futures::future::BoxFuture<'static, Result<Vec<RecordBatch>, Status>>> = fan_in
                    .parts
                    .into_iter()
                    .map(|part| {
                        let (cluster, catalog, scans, table) = (Arc::clone(&cluster), Arc::clone(&catalog), scans.clone(), fan_in.table.clone());
                        let read: futures::future::BoxFuture<'static, Result<Vec<RecordBatch>, Status>> = Box::pin(async move {
                            let stream = cluster.part_stream(&catalog, &scans, &table, &part).await?;
                            stream.try_collect::<Vec<_>>().await.map_err(Status::from)
                        });
                        read
                    })
                    .collect();
                let parts: Vec<Result<Vec<RecordBatch>, Status>> = futures::stream::iter(reads).buffered(FAN_IN_SHARDS_AT_ONCE).collect().await;
                let mut partials = Vec::new();
                for part in parts {
                    partials.extend(part?);
                }
                shoal_ops::merge::merge_partials(merge.keys, &merge.aggregates, &partials, &target).map_err(crate::rpc::status)
            };
            let batches = futures::stream::once(stream).map_err(|status| FlightError::Tonic(Box::new(status)));
            return Ok((schema, batches.boxed()));
        }
        if fan_in.limit.is_none() {
            // No limit: every shard's stream at once (the shards scan in parallel), batches
            // as they come.
            tokio::spawn(async move {
                let at_once = Arc::new(tokio::sync::Semaphore::new(FAN_IN_SHARDS_AT_ONCE));
                let mut reads = tokio::task::JoinSet::new();
                for part in fan_in.parts {
                    let (cluster, catalog, scans, table) = (Arc::clone(&cluster), Arc::clone(&catalog), scans.clone(), fan_in.table.clone());
                    let (sender, target, at_once) = (sender.clone(), Arc::clone(&target), Arc::clone(&at_once));
                    reads.spawn(async move {
                        let Ok(_turn) = at_once.acquire_owned().await else { return };
                        cluster.send_part(&catalog, &scans, &table, &part, &target, &sender, None).await;
                    });
                }
                // The stream ends once every shard's read has.
                drop(sender);
                while reads.join_next().await.is_some() {}
            });
            return Ok((schema, tokio_stream::wrappers::ReceiverStream::new(receiver).boxed()));
        }
        tokio::spawn(async move {
            let mut left = fan_in.limit.unwrap_or(usize::MAX);
            for part in &fan_in.parts {
                if left == 0 || !cluster.send_part(&catalog, &scans, &fan_in.table, part, &target, &sender, Some(&mut left)).await {
                    break;
                }
            }
        });
        Ok((schema, tokio_stream::wrappers::ReceiverStream::new(receiver).boxed()))
    }

    /// Sends one fan-in part's batches down `sender`, each conformed to `target`; with
    /// `left`, at most that many rows in all (counted down; the part's read stops at 0).
    /// False when the fan-in must stop: an error was sent, or its reader went away.
    #[allow(clippy::too_many_arguments)]
    async fn send_part(
        &self,
        catalog: &Arc<Catalog>,
        scans: &CallerAdmission,
        table: &str,
        part: &FanInPart,
        target: &SchemaRef,
        sender: &tokio::sync::mpsc::Sender<Result<RecordBatch, FlightError>>,
        mut left: Option<&mut usize>,
    ) -> bool {
        let stream = match self.part_stream(catalog, scans, table, part).await {
            Ok(stream) => stream,
            Err(status) => {
                let _ = sender.send(Err(FlightError::Tonic(Box::new(status)))).await;
                return false;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let mut batch = match item.and_then(|b| conform(&b, target).map_err(FlightError::Arrow)) {
                Ok(batch) => batch,
                Err(error) => {
                    let _ = sender.send(Err(error)).await;
                    return false;
                }
            };
            if let Some(left) = left.as_deref_mut() {
                if batch.num_rows() > *left {
                    batch = batch.slice(0, *left);
                }
                *left -= batch.num_rows();
            }
            if sender.send(Ok(batch)).await.is_err() {
                return false;
            }
            if left.as_deref() == Some(&0) {
                break;
            }
        }
        true
    }

    /// Reads a conform ticket: the shard's ticket (here, or from its node), every batch in
    /// the table's merged schema.
    ///
    /// # Errors
    /// A malformed ticket (`INVALID_ARGUMENT`); the shard's error.
    pub(crate) async fn read_conformed(&self, catalog: &Arc<Catalog>, scans: &CallerAdmission, ticket: ConformTicket) -> Result<BoxedStream<FlightData>, Status> {
        let (schema, batches) = self.conformed_batches(catalog, scans, ticket).await?;
        Ok(encode(schema, batches))
    }

    /// [`Self::read_conformed`]'s batches, with their schema (the merged one).
    ///
    /// # Errors
    /// As [`Self::read_conformed`].
    pub(crate) async fn conformed_batches(&self, catalog: &Arc<Catalog>, scans: &CallerAdmission, ticket: ConformTicket) -> Result<(SchemaRef, BatchStream), Status> {
        let schema = decode_schema(&ticket.schema)?;
        let stream = self.part_stream(catalog, scans, &ticket.table, &ticket.part).await?;
        let target = Arc::clone(&schema);
        Ok((schema, stream.map(move |item| item.and_then(|batch| conform(&batch, &target).map_err(FlightError::Arrow))).boxed()))
    }

    /// The batches of one fan-in part's ticket.
    async fn part_stream(
        &self,
        catalog: &Arc<Catalog>,
        scans: &CallerAdmission,
        table: &str,
        part: &FanInPart,
    ) -> Result<BatchStream, Status> {
        let ticket = STANDARD.decode(&part.ticket).map_err(|_| Status::invalid_argument("fan-in ticket: a part's ticket is not base64"))?;
        if part.node == self.me {
            let permit = scans.enter().await?;
            let catalog = Arc::clone(catalog);
            return match blocking(move || ops::open_ticket(&catalog, &ticket)).await? {
                TicketScan::Aggregates(batch) => Ok(futures::stream::iter([Ok(batch)]).boxed()),
                TicketScan::Rows(scan) => Ok(stream_rows(permit, scan, None).boxed()),
            };
        }
        let mut client = self.peer(part.node)?;
        let stream = client
            .do_get(self.request(Ticket::new(ticket), None))
            .await
            .map_err(|e| self.peer_error(table, Some(part.shard), part.node, &e))?
            .into_inner();
        Ok(FlightRecordBatchStream::new_from_flight_data(stream.map_err(|e| FlightError::Tonic(Box::new(e)))).boxed())
    }
}

/// A ticket's schema (Arrow IPC, base64).
fn decode_schema(text: &str) -> Result<arrow_schema::SchemaRef, Status> {
    let bad = |what: &str| Status::invalid_argument(format!("shard ticket: {what}"));
    let bytes = STANDARD.decode(text).map_err(|_| bad("schema is not base64"))?;
    Ok(Arc::new(arrow_ipc::convert::try_schema_from_ipc_buffer(&bytes).map_err(|e| bad(&format!("schema is not Arrow IPC: {e}")))?))
}
