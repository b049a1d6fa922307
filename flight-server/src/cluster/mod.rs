//! Scale-out: a table sharded over several daemons. A static
//! membership list ([`ClusterConfig`]), the same on every node; sharded tables whose shards
//! are ordinary tables spread over the nodes ([`shards`]); actions that fan out to every
//! shard (this file); plans whose endpoints carry the location of the node that holds
//! their shard, and tickets any node can serve ([`reads`]); ingestion routed by shard key
//! ([`writes`]); shards moved to another node through the remote store ([`moves`]).
//!
//! A node talks to the others as any Flight client does (`FlightServiceClient` over one
//! lazily connected channel per node), with the daemon's own credentials. There is no
//! replication: a node that is down makes its shards unavailable (`UNAVAILABLE` naming
//! shard and node) until it is back with its volume — or, with a remote store, until its
//! replacement opens them from the store; its recovery is the tables' own.

pub mod config;
pub mod moves;
pub mod reads;
pub mod schema;
pub mod shards;
pub mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::Action;
use futures::future::join_all;
use futures::StreamExt;
use serde_json::{json, Map, Value};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use shoal_ops::catalog::Catalog;
use shoal_ops::ops::{self, ActionCall, ActionSpec, ShardedAnswer};

pub use config::ClusterConfig;
pub use shards::{ShardMap, ShardedTable};

/// An action of the cluster itself (not of a table): `create_table` takes `"shards"` and
/// `"shard_key"` on a node of a cluster, and every table action fans out over a sharded
/// table's shards as its [`ShardedAnswer`] says.
pub struct ClusterAction {
    /// The `Action.type` that names it.
    pub name: &'static str,
    /// Its body and answer (`ListActions`).
    pub description: &'static str,
    /// A call only nodes make to each other: refused unless it carries the cluster's
    /// secret ([`Cluster::is_node`]), also when client authentication is off.
    pub nodes_only: bool,
    handler: fn(&Cluster, &[u8]) -> Result<Value, Status>,
}

/// The cluster's own actions, declared once: dispatch, `ListActions` and the secret check
/// are derived from them.
pub static ACTIONS: &[ClusterAction] = &[
    ClusterAction {
        name: "cluster",
        description: r#"{} → {"node_id", "nodes": [{"id", "location"}], "tables": [{"name", "shards", "shard_key", "nodes", "shard_map": [{"shard", "table", "node", "location"}]}], "forwarded_records"}"#,
        nodes_only: false,
        handler: |cluster, _| Ok(cluster.describe()),
    },
    ClusterAction {
        name: "cluster_define",
        description: r#"(between nodes) a sharded table's definition → {"name", "defined"}"#,
        nodes_only: true,
        handler: Cluster::define,
    },
    ClusterAction { name: "cluster_forget", description: r#"(between nodes) {"name"} → {"name", "forgotten"}"#, nodes_only: true, handler: Cluster::forget },
];

/// The node actions that change this node's sharded-table definitions (kept in the remote
/// store, when there is one, before they are answered: [`Cluster::keep_definitions`]).
const CHANGES_DEFINITIONS: &[&str] = &["cluster_define", "cluster_forget"];

/// True for a call only nodes make to each other ([`ClusterAction::nodes_only`]).
#[must_use]
pub fn is_node_action(name: &str) -> bool {
    ACTIONS.iter().any(|a| a.nodes_only && a.name == name) || moves::NODE_ACTIONS.iter().any(|(n, _)| *n == name)
}

/// The header in which a node sends the cluster's secret (`cluster.secret`) to another.
pub const SECRET_HEADER: &str = "x-shoal-cluster-secret";

/// How long a node waits for another to answer an action or a plan.
const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// This node's view of the cluster: who it is, where the others are, the shard map.
pub struct Cluster {
    me: usize,
    nodes: Vec<String>,
    /// The `authorization` header this node sends to the others (its own credentials).
    authorization: Option<MetadataValue<Ascii>>,
    /// The cluster's secret (`cluster.secret`), sent in [`SECRET_HEADER`] on every call to
    /// another node and required of the node actions ([`is_node_action`]).
    secret: MetadataValue<Ascii>,
    /// The TLS client configuration of calls to `grpc+tls://` nodes (`cluster.tls_ca`, else
    /// the system's roots: [`crate::tls_client`]); `None` when no node is one.
    tls: Option<Arc<rustls::ClientConfig>>,
    map: ShardMap,
    channels: Mutex<HashMap<usize, Channel>>,
    /// Round-robin position for tables without a shard key (spread by batch).
    spread: AtomicUsize,
    /// Records this node received by DoPut for a sharded table and forwarded to the node
    /// holding their shard (the slower way in; writers routing by key send none).
    forwarded_records: AtomicU64,
    /// The remote store shards move through ([`moves`]); `None` without `[storage] remote`.
    remote: std::sync::OnceLock<Arc<crate::remote::RemoteStore>>,
}

impl Cluster {
    /// The cluster `config` describes, as node `config.resolve_node_id()`, keeping the
    /// shard map in `<data_dir>/cluster/` (`None`: in memory). `bearer` / `basic` are the
    /// daemon's own credentials, sent on calls to the other nodes.
    ///
    /// # Errors
    /// A message for an invalid config, a missing or unusable secret
    /// ([`ClusterConfig::resolve_secret`]), an unreadable CA file or shard map.
    pub fn open(config: &ClusterConfig, map_dir: Option<std::path::PathBuf>, bearer: Option<&str>, basic: Option<&str>) -> Result<Self, String> {
        config.validate()?;
        let me = config.resolve_node_id()?;
        let secret = config
            .resolve_secret()?
            .parse::<MetadataValue<Ascii>>()
            .map_err(|_| "the cluster secret is not a valid header value".to_owned())?;
        let authorization = match (bearer, basic) {
            (Some(token), _) => Some(format!("Bearer {token}")),
            (None, Some(basic)) => {
                use base64::Engine as _;
                Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(basic)))
            }
            (None, None) => None,
        }
        .map(|value| value.parse::<MetadataValue<Ascii>>().map_err(|_| "the credentials are not ASCII".to_owned()))
        .transpose()?;
        let tls = if config.nodes.iter().any(|n| n.starts_with("grpc+tls://")) {
            let tls = crate::tls_client::client_config(config.tls_ca.as_deref()).map_err(|e| format!("cluster.tls_ca: {e}"))?;
            Some(Arc::new(tls))
        } else {
            None
        };
        Ok(Self {
            me,
            nodes: config.nodes.clone(),
            authorization,
            secret,
            tls,
            map: ShardMap::open(map_dir)?,
            channels: Mutex::new(HashMap::new()),
            spread: AtomicUsize::new(0),
            forwarded_records: AtomicU64::new(0),
            remote: std::sync::OnceLock::new(),
        })
    }

    /// This node's id.
    #[must_use]
    pub fn node_id(&self) -> usize {
        self.me
    }

    /// Node `node`'s Flight location.
    #[must_use]
    pub fn location(&self, node: usize) -> &str {
        self.nodes.get(node).map_or("", String::as_str)
    }

    /// The shard map.
    #[must_use]
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// A client of node `node` (one channel per node, connected on first use).
    ///
    /// # Errors
    /// `UNAVAILABLE` when the node's location cannot make a channel.
    fn peer(&self, node: usize) -> Result<FlightServiceClient<Channel>, Status> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(&node) {
            return Ok(FlightServiceClient::new(channel.clone()).max_decoding_message_size(256 << 20).max_encoding_message_size(256 << 20));
        }
        let location = self.location(node);
        let tls = location.strip_prefix("grpc+tls://");
        let uri = match tls {
            Some(rest) => format!("http://{rest}"),
            None => location.replacen("grpc://", "http://", 1),
        };
        let unavailable = |e: &dyn std::fmt::Display| Status::unavailable(format!("node {node} ({location}): {e}"));
        let endpoint = Endpoint::from_shared(uri).map_err(|e| unavailable(&e))?.tcp_nodelay(true).connect_timeout(Duration::from_secs(10));
        let channel = match (tls, &self.tls) {
            (Some(_), Some(config)) => {
                let host = endpoint.uri().host().unwrap_or_default().to_owned();
                crate::tls_client::connect_lazy(endpoint, Arc::clone(config), &host)
            }
            _ => endpoint.connect_lazy(),
        };
        channels.insert(node, channel.clone());
        Ok(FlightServiceClient::new(channel).max_decoding_message_size(256 << 20).max_encoding_message_size(256 << 20))
    }

    /// `message` as a request to another node: with this node's credentials.
    fn request<T>(&self, message: T, timeout: Option<Duration>) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(value) = &self.authorization {
            request.metadata_mut().insert("authorization", value.clone());
        }
        request.metadata_mut().insert(SECRET_HEADER, self.secret.clone());
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        request
    }

    /// True when a call's `metadata` carries the cluster's secret (compared in constant
    /// time): the call comes from a node of this cluster.
    #[must_use]
    pub fn is_node(&self, metadata: &tonic::metadata::MetadataMap) -> bool {
        metadata
            .get(SECRET_HEADER)
            .is_some_and(|presented| crate::auth::constant_time_eq(self.secret.as_bytes(), presented.as_bytes()))
    }

    /// A peer's error, with which shard and node it came from. A node that cannot be
    /// reached (or went away mid-call) is `UNAVAILABLE`.
    fn peer_error(&self, table: &str, shard: Option<usize>, node: usize, status: &Status) -> Status {
        let place = match shard {
            Some(shard) => format!("table {table:?}, shard {shard} on node {node} ({})", self.location(node)),
            None => format!("table {table:?}, node {node} ({})", self.location(node)),
        };
        Status::new(broken_code(status), format!("{place}: {}", status.message()))
    }

    /// Runs action `name` with `body` on node `node` (this node: directly).
    async fn action_on(&self, catalog: &Arc<Catalog>, node: usize, name: &str, body: Value) -> Result<Value, Status> {
        if node == self.me {
            let synced = self.remote.get().and_then(|remote| crate::remote::synced_table(catalog, name, body.to_string().as_bytes()).map(|t| (remote, t)));
            let (running, action) = (Arc::clone(catalog), name.to_owned());
            // Its filter (a SQL DELETE's rendered condition, or a client's held to its limit
            // by the caller of the fan-out): the longer limit, as a node's.
            let answer = crate::rpc::blocking(move || {
                let call = ActionCall { filter_bytes: shoal_core::psf::expr::MAX_RENDERED_EXPR_BYTES, ..ActionCall::CLIENT };
                ops::run_action_with(&running, &action, body.to_string().as_bytes(), call)
            })
            .await?;
            // As the same action sent to this node would: answered once the store holds it.
            if let Some((remote, table)) = synced {
                remote.sync_table(catalog, &table).await?;
            }
            return Ok(answer);
        }
        let mut client = self.peer(node)?;
        let action = Action { r#type: name.to_owned(), body: body.to_string().into() };
        let mut results = client.do_action(self.request(action, Some(PEER_CALL_TIMEOUT))).await?.into_inner();
        let first = results.next().await.ok_or_else(|| Status::internal(format!("node {node} answered {name} with no result")))??;
        serde_json::from_slice(&first.body).map_err(|e| Status::internal(format!("node {node} answered {name} with no JSON: {e}")))
    }

    /// Action `name` on every shard of `table` (its body's table renamed to the shard's),
    /// at once; each shard's answer or error, in shard order.
    async fn on_every_shard(&self, catalog: &Arc<Catalog>, table: &ShardedTable, name: &str, body: &Map<String, Value>, key: &str) -> Vec<Result<Value, Status>> {
        let calls = (0..table.shards).map(|shard| {
            let mut body = body.clone();
            body.insert(key.to_owned(), json!(table.shard_table(shard)));
            let node = table.node_of(shard);
            async move { self.action_on(catalog, node, name, Value::Object(body)).await.map_err(|e| self.peer_error(&table.name, Some(shard), node, &e)) }
        });
        join_all(calls).await
    }

    /// The shard map and membership: what the `cluster` action answers.
    #[must_use]
    pub fn describe(&self) -> Value {
        let tables: Vec<Value> = self
            .map
            .all()
            .iter()
            .map(|t| {
                let shards: Vec<Value> = (0..t.shards)
                    .map(|s| json!({"shard": s, "table": t.shard_table(s), "node": t.node_of(s), "location": self.location(t.node_of(s))}))
                    .collect();
                json!({"name": t.name, "shards": t.shards, "shard_key": t.shard_key, "nodes": t.nodes, "shard_map": shards})
            })
            .collect();
        let nodes: Vec<Value> = self.nodes.iter().enumerate().map(|(id, location)| json!({"id": id, "location": location})).collect();
        json!({"node_id": self.me, "nodes": nodes, "tables": tables, "forwarded_records": self.forwarded_records.load(Ordering::Relaxed)})
    }

    /// Counts `records` forwarded to another node by DoPut routing (`cluster`'s
    /// `forwarded_records`, the metric `shoal_cluster_forwarded_records_total`).
    fn count_forwarded(&self, records: usize) {
        self.forwarded_records.fetch_add(records as u64, Ordering::Relaxed);
        metrics::counter!("shoal_cluster_forwarded_records_total").increment(records as u64);
    }

    /// Handles the actions that concern the cluster: `cluster`, the definitions of
    /// sharded tables (`create_table` with `shards` or `shard_key`, `drop_table`), any
    /// action whose `table` is a sharded table (run on every shard, answers merged), and
    /// any action naming a shard's own table that another node holds (forwarded there).
    /// `None`: an ordinary action of this node's tables.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a bad definition; a shard's error, naming the shard and
    /// node (a fan-out that reached only some shards says which failed; repeating it is
    /// safe).
    /// `from_node`: the call came from another node (it carries the cluster's secret): a
    /// shard's own table is answered here, never forwarded again — two nodes whose shard maps
    /// disagree for a moment would otherwise send a call back and forth.
    pub async fn action(&self, catalog: &Arc<Catalog>, name: &str, body: &[u8], from_node: bool) -> Result<Option<Value>, Status> {
        if let Some(action) = ACTIONS.iter().find(|a| a.name == name) {
            let answer = (action.handler)(self, body)?;
            if CHANGES_DEFINITIONS.contains(&name) {
                self.keep_definitions().await?;
            }
            return Ok(Some(answer));
        }
        if let Some(moved) = self.move_action(catalog, name, body).await {
            return moved.map(Some);
        }
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else { return Ok(None) };
        if name == "create_table" && (body.contains_key("shards") || body.contains_key("shard_key")) {
            return self.create_sharded(catalog, body).await.map(Some);
        }
        let key = if body.contains_key("table") { "table" } else { "name" };
        if let Some((table, shard)) = body.get(key).and_then(Value::as_str).and_then(|t| self.map.shard_of_table(t)) {
            // A shard's own table held by another node (`make_durable` of `T.shard-2` from a
            // writer that reached every shard through this node): answered there.
            let node = table.node_of(shard);
            if node == self.me || from_node {
                return Ok(None);
            }
            return self.action_on(catalog, node, name, Value::Object(body)).await.map(Some).map_err(|e| self.peer_error(&table.name, Some(shard), node, &e));
        }
        let Some(table) = body.get(key).and_then(Value::as_str).and_then(|t| self.map.get(t)) else { return Ok(None) };
        let Some(spec) = ActionSpec::find(name) else {
            // Not an action of a table: the node's own answer (an unknown action's error).
            return Ok(None);
        };
        match spec.sharded {
            ShardedAnswer::Define => {
                // A plain create_table of a sharded table's name: it exists (sharded).
                if body.get("if_not_exists").and_then(Value::as_bool) == Some(true) {
                    return Ok(Some(json!({"created": false, "name": table.name, "shards": table.shards})));
                }
                Err(Status::already_exists(format!(
                    "create_table: the sharded table {:?} exists (\"if_not_exists\": true to accept it)",
                    table.name
                )))
            }
            ShardedAnswer::Drop => self.drop_sharded(catalog, &table, &body, key).await.map(Some),
            answer => {
                let results = self.on_every_shard(catalog, &table, name, &body, key).await;
                let answers = all_or_report(&table.name, name, results)?;
                Ok(Some(merge_answers(&table, answer, answers)))
            }
        }
    }

    /// `cluster_define`: a sharded table's definition, saved in this node's shard map.
    fn define(&self, body: &[u8]) -> Result<Value, Status> {
        let table: ShardedTable = shoal_ops::protocol::parse_body("cluster_define", body).map_err(crate::rpc::status)?;
        table.validate().map_err(|e| Status::invalid_argument(format!("cluster_define: {e}")))?;
        match self.map.define(&table) {
            Ok(defined) => Ok(json!({"name": table.name, "defined": defined})),
            Err((true, message)) => Err(Status::already_exists(message)),
            Err((false, message)) => Err(Status::internal(message)),
        }
    }

    /// `cluster_forget`: a sharded table's definition, removed from this node's shard map.
    fn forget(&self, body: &[u8]) -> Result<Value, Status> {
        let table: shoal_ops::protocol::TableRef = shoal_ops::protocol::parse_body("cluster_forget", body).map_err(crate::rpc::status)?;
        shoal_ops::catalog::validate_table_name(&table.table).map_err(crate::rpc::status)?;
        let forgotten = self.map.forget(&table.table).map_err(Status::internal)?;
        Ok(json!({"name": table.table, "forgotten": forgotten}))
    }

    /// `create_table` with `shards` / `shard_key`: the definition on every node, then
    /// each shard's table on its node (`if_not_exists`, so that a repeat completes a
    /// fan-out that failed part-way).
    async fn create_sharded(&self, catalog: &Arc<Catalog>, mut body: Map<String, Value>) -> Result<Value, Status> {
        let invalid = |m: String| Status::invalid_argument(format!("create_table: {m}"));
        let name = body.get("name").and_then(Value::as_str).ok_or_else(|| invalid("\"name\" is required".into()))?.to_owned();
        shoal_ops::catalog::validate_table_name(&name).map_err(crate::rpc::status)?;
        if name.contains(shards::SHARD_INFIX) {
            return Err(invalid(format!("a sharded table's name cannot contain {:?} (its shards' tables are named so)", shards::SHARD_INFIX)));
        }
        let shard_count = match body.remove("shards") {
            None | Some(Value::Null) => self.nodes.len(),
            Some(value) => value
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| (1..=shards::MAX_SHARDS).contains(n))
                .ok_or_else(|| invalid(format!("\"shards\" must be an integer in 1..={}, got {value}", shards::MAX_SHARDS)))?,
        };
        let if_not_exists = body.remove("if_not_exists").and_then(|v| v.as_bool()).unwrap_or(false);
        let paths = |value: &Value, what: &str| -> Result<Vec<String>, Status> {
            match value {
                Value::String(path) => Ok(vec![path.clone()]),
                Value::Array(items) if !items.is_empty() => items
                    .iter()
                    .map(|p| p.as_str().map(str::to_owned).ok_or_else(|| invalid(format!("{what} must be a path or a list of paths, got {value}"))))
                    .collect(),
                _ => Err(invalid(format!("{what} must be a path or a non-empty list of paths, got {value}"))),
            }
        };
        let shard_key = match body.remove("shard_key") {
            Some(key) => paths(&key, "\"shard_key\"")?,
            None => body.get("primary_key").map(|k| paths(k, "\"primary_key\"")).transpose()?.unwrap_or_default(),
        };
        for path in &shard_key {
            shoal_core::FieldPath::parse(path).map_err(|e| invalid(format!("\"shard_key\" {path:?}: {e}")))?;
        }
        if let Some(primary) = body.get("primary_key") {
            let primary = paths(primary, "\"primary_key\"")?;
            if !primary.iter().any(|p| shard_key.contains(p)) || !shard_key.iter().all(|p| primary.contains(p)) {
                return Err(invalid(format!(
                    "the shard key {shard_key:?} must be made of the primary key's fields {primary:?}: a key's versions must all go to one shard"
                )));
            }
        }
        body.remove("name");
        if catalog.get(&name).is_ok() {
            return Err(Status::already_exists(format!("create_table: a table {name:?} exists on node {} (not sharded)", self.me)));
        }
        let table = ShardedTable { name: name.clone(), shards: shard_count, shard_key, nodes: self.nodes.len(), options: body, placement: BTreeMap::new() };
        if let Some(existing) = self.map.get(&name) {
            if !if_not_exists {
                return Err(Status::already_exists(format!("create_table: the sharded table {name:?} exists (\"if_not_exists\": true to accept it)")));
            }
            if !existing.same_table(&table) {
                return Err(Status::already_exists(format!(
                    "create_table: the sharded table {name:?} exists with another definition: {}",
                    serde_json::to_string(existing.as_ref()).unwrap_or_default()
                )));
            }
        }
        let definition = serde_json::to_value(&table).map_err(|e| Status::internal(e.to_string()))?;
        let name = name.as_str();
        let defined = join_all((0..self.nodes.len()).map(|node| {
            let definition = definition.clone();
            async move {
                if node == self.me {
                    return self.action(catalog, "cluster_define", definition.to_string().as_bytes(), false).await.map(|_| Value::Null);
                }
                self.action_on(catalog, node, "cluster_define", definition).await.map_err(|e| self.peer_error(name, None, node, &e))
            }
        }))
        .await;
        all_or_report(name, "create_table (defining the table on every node)", defined)?;
        // A repeat after a move: the shards are where the moves put them.
        let table = self.map.get(name).map_or(table, |defined| defined.as_ref().clone());
        let mut shard_body = table.options.clone();
        shard_body.insert("if_not_exists".into(), json!(true));
        let created = self.on_every_shard(catalog, &table, "create_table", &shard_body, "name").await;
        let created = all_or_report(name, "create_table", created)?;
        let fresh = created.iter().any(|answer| answer.get("created").and_then(Value::as_bool) == Some(true));
        Ok(json!({
            "created": fresh,
            "name": name,
            "shards": table.shards,
            "shard_key": table.shard_key,
            "shard_map": (0..table.shards).map(|s| json!({"shard": s, "table": table.shard_table(s), "node": table.node_of(s), "location": self.location(table.node_of(s))})).collect::<Vec<_>>(),
        }))
    }

    /// `drop_table` of a sharded table: every shard's table (one already gone counts as
    /// dropped), then the definition on every node.
    async fn drop_sharded(&self, catalog: &Arc<Catalog>, table: &ShardedTable, body: &Map<String, Value>, key: &str) -> Result<Value, Status> {
        let dropped = self.on_every_shard(catalog, table, "drop_table", body, key).await;
        let dropped = dropped.into_iter().map(|r| match r {
            Err(e) if e.code() == Code::NotFound => Ok(Value::Null),
            other => other,
        });
        all_or_report(&table.name, "drop_table", dropped.collect())?;
        let forgotten = join_all((0..self.nodes.len()).map(|node| async move {
            let body = json!({"name": table.name});
            if node == self.me {
                return self.action(catalog, "cluster_forget", body.to_string().as_bytes(), false).await.map(|_| Value::Null);
            }
            self.action_on(catalog, node, "cluster_forget", body).await.map_err(|e| self.peer_error(&table.name, None, node, &e))
        }))
        .await;
        all_or_report(&table.name, "drop_table (forgetting the table on every node)", forgotten)?;
        Ok(json!({"dropped": true, "name": table.name, "shards": table.shards}))
    }
}

/// A peer's status code, `UNAVAILABLE` for a connection that failed or broke. tonic reports
/// those as `UNKNOWN` / `CANCELLED` made on this side of the connection: the status carries
/// the transport error as its source (a peer's own answer never does), or — when the status
/// was rebuilt on the way — a transport message (hyper's "operation was canceled" when the
/// peer dies with the request in flight).
fn broken_code(status: &Status) -> Code {
    let message = status.message();
    let local = std::error::Error::source(status).is_some();
    let broken = matches!(status.code(), Code::Unknown | Code::Cancelled)
        && (local || ["transport", "connect", "closed", "reset", "broken pipe", "operation was canceled"].iter().any(|m| message.contains(m)));
    if broken { Code::Unavailable } else { status.code() }
}

/// Every answer, or one error that reports every failure (the first failure's code) and
/// that a repeat is safe.
fn all_or_report<T>(table: &str, what: &str, results: Vec<Result<T, Status>>) -> Result<Vec<T>, Status> {
    let total = results.len();
    let mut answers = Vec::with_capacity(total);
    let mut failures: Vec<Status> = Vec::new();
    for result in results {
        match result {
            Ok(answer) => answers.push(answer),
            Err(e) => failures.push(e),
        }
    }
    let Some(first) = failures.first() else { return Ok(answers) };
    // Named one by one up to a few (a status must fit gRPC's 16 KiB of metadata).
    const NAMED: usize = 4;
    let mut list = failures.iter().take(NAMED).map(Status::message).collect::<Vec<_>>().join("; ");
    if failures.len() > NAMED {
        list.push_str(&format!("; and {} more", failures.len() - NAMED));
    }
    Err(Status::new(
        first.code(),
        shoal_ops::protocol::bounded(format!(
            "{what} on sharded table {table:?}: {} of {total} parts failed ({list}); the others succeeded, and repeating the call is safe",
            failures.len()
        )),
    ))
}

/// One answer for an action run on every shard: the shards' answers under `shards`, and
/// for `stats` the sums of the counters, for `list_psfs` one list whose entries name their
/// shard, for `writer_status` the writer's serials every shard has (the least), for
/// `list_transactions` one entry per transaction ([`merge_transactions`]).
fn merge_answers(table: &ShardedTable, answer: ShardedAnswer, answers: Vec<Value>) -> Value {
    match answer {
        ShardedAnswer::Psfs => Value::Array(
            answers
                .into_iter()
                .enumerate()
                .flat_map(|(shard, list)| {
                    let list = match list {
                        Value::Array(items) => items,
                        other => vec![other],
                    };
                    list.into_iter().map(move |mut psf| {
                        psf["shard"] = json!(shard);
                        psf
                    })
                })
                .collect(),
        ),
        ShardedAnswer::Transactions => merge_transactions(answers),
        ShardedAnswer::Transaction => {
            // One transaction's state on every shard: the same shape, merged.
            let wrapped = answers.into_iter().map(|a| Value::Array(vec![a])).collect();
            match merge_transactions(wrapped) {
                Value::Array(mut one) if one.len() == 1 => {
                    let mut answer = one.remove(0);
                    answer["table"] = json!(table.name);
                    answer
                }
                other => json!({"table": table.name, "shards": other}),
            }
        }
        ShardedAnswer::Stats => {
            let mut merged = json!({"table": table.name, "sharded": true});
            for counter in ["records", "payload_bytes", "index_bytes", "reserved_bytes"] {
                let sum: u64 = answers.iter().filter_map(|a| a.get(counter).and_then(Value::as_u64)).sum();
                merged[counter] = json!(sum);
            }
            merged["psfs"] = answers.iter().filter_map(|a| a.get("psfs").and_then(Value::as_u64)).max().map_or(Value::Null, |n| json!(n));
            if let Some(first) = answers.iter().find_map(|a| a.get("keys").filter(|k| k.is_object())) {
                // A keyed table: its keys' counters summed (a key lives on one shard).
                let mut keys = json!({"primary_key": first["primary_key"]});
                for counter in ["live", "keys", "superseded", "memory_bytes"] {
                    keys[counter] = json!(answers.iter().filter_map(|a| a["keys"].get(counter).and_then(Value::as_u64)).sum::<u64>());
                }
                merged["keys"] = keys;
            }
            merged["shards"] = Value::Array(answers);
            merged
        }
        ShardedAnswer::WriterStatus => {
            let least = |field: &str| -> Value {
                let values: Vec<Option<u64>> = answers.iter().map(|a| a.get(field).and_then(Value::as_u64)).collect();
                if values.iter().any(Option::is_none) {
                    Value::Null
                } else {
                    values.into_iter().flatten().min().map_or(Value::Null, |n| json!(n))
                }
            };
            json!({"table": table.name, "last_serial": least("last_serial"), "last_durable_serial": least("last_durable_serial"), "shards": answers})
        }
        ShardedAnswer::PerShard | ShardedAnswer::Define | ShardedAnswer::Drop => json!({"table": table.name, "shards": answers}),
    }
}

/// `list_transactions` over the shards: one `{"transaction", "state", "records", "skipped",
/// "shards"}` per transaction, its records summed. Its state is the shards' when they agree; otherwise
/// the decision a two-phase commit has taken: `committed` once any shard committed (a commit
/// repeated on the table completes it), else `aborted` once any shard aborted, else `open`.
fn merge_transactions(answers: Vec<Value>) -> Value {
    /// One transaction over the shards that answered for it.
    struct Merged {
        id: String,
        states: Vec<String>,
        records: u64,
        skipped: u64,
        shards: Vec<Value>,
    }
    let mut merged: Vec<Merged> = Vec::new();
    for (shard, answer) in answers.into_iter().enumerate() {
        let Value::Array(entries) = answer else { continue };
        for entry in entries {
            let id = entry.get("transaction").and_then(Value::as_str).unwrap_or_default().to_owned();
            let state = entry.get("state").and_then(Value::as_str).unwrap_or_default().to_owned();
            let records = entry.get("records").and_then(Value::as_u64).unwrap_or(0);
            let skipped = entry.get("skipped").and_then(Value::as_u64).unwrap_or(0);
            let detail = json!({"shard": shard, "state": state, "records": records});
            match merged.iter_mut().find(|m| m.id == id) {
                Some(m) => {
                    m.states.push(state);
                    m.records += records;
                    m.skipped += skipped;
                    m.shards.push(detail);
                }
                None => merged.push(Merged { id, states: vec![state], records, skipped, shards: vec![detail] }),
            }
        }
    }
    Value::Array(
        merged
            .into_iter()
            .map(|Merged { id, states, records, skipped, shards }| {
                let state = if states.iter().all(|s| *s == states[0]) {
                    states[0].clone()
                } else if states.iter().any(|s| s == "committed") {
                    "committed".to_owned()
                } else if states.iter().any(|s| s == "aborted") {
                    "aborted".to_owned()
                } else {
                    "open".to_owned()
                };
                json!({"transaction": id, "state": state, "records": records, "skipped": skipped, "shards": shards})
            })
            .collect(),
    )
}

/// Who makes `request`: a node of `cluster` when it carries the cluster's secret, else a
/// client at its peer address.
pub(crate) fn caller_of<T>(cluster: Option<&Cluster>, request: &Request<T>) -> crate::limits::Caller {
    if cluster.is_some_and(|c| c.is_node(request.metadata())) {
        crate::limits::Caller::NODE
    } else {
        crate::limits::Caller::client(request.remote_addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_is_unavailable_and_a_peers_answer_keeps_its_code() {
        // Made on this side of the connection (the transport error is the source).
        let local = Status::from_error(Box::new(std::io::Error::other("peer went away")));
        assert_eq!(local.code(), Code::Unknown);
        assert_eq!(broken_code(&local), Code::Unavailable);
        // Rebuilt statuses, recognised by their transport message.
        assert_eq!(broken_code(&Status::cancelled("operation was canceled")), Code::Unavailable);
        assert_eq!(broken_code(&Status::unknown("transport error")), Code::Unavailable);
        // A peer's own answers.
        assert_eq!(broken_code(&Status::cancelled("the query was cancelled by its caller")), Code::Cancelled);
        assert_eq!(broken_code(&Status::not_found("no table \"x\"")), Code::NotFound);
    }
}
