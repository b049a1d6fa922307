//! Moving a shard to another node (`move_shard`, `shoal cluster move-shard`; issue 47): with
//! the nodes' tables in a remote store, a shard changes nodes without a copy of its data.
//!
//! Any node coordinates, in four steps, each a call to the node concerned:
//! 1. `cluster_hand_over` on the shard's node: it refuses new batches of the shard
//!    (`UNAVAILABLE`, retried by writers), lets those admitted finish, flushes, and makes the
//!    store hold all of it ([`RemoteStore::hand_over`]);
//! 2. `cluster_take_over` on the new node: a manifest under its prefix naming the old node's
//!    objects, the shard restored from it, opened and claimed ([`RemoteStore::take_over`]);
//!    when this fails, `cluster_keep` on the old node takes writes again;
//! 3. `cluster_place` on every node: the definition with the shard's new node (writes, reads
//!    and actions through any node go there from now on);
//! 4. `cluster_give_up` on the old node: its copy dropped, the drop recorded in its manifests.
//!
//! A move that fails part-way is repeated: every step is idempotent.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use shoal_ops::catalog::Catalog;
use tonic::Status;

use super::{Cluster, ShardedTable};
use crate::remote::RemoteStore;

/// The actions of a move only nodes make to each other: name, body and answer.
pub static NODE_ACTIONS: &[(&str, &str)] = &[
    ("cluster_hand_over", r#"(between nodes) {"table", "to"}: a shard's table refuses new batches and is uploaded whole → {"table", "log_end"}"#),
    ("cluster_keep", r#"(between nodes) {"table"}: a shard's table takes writes again (a move that failed) → {"table", "kept"}"#),
    ("cluster_take_over", r#"(between nodes) {"table", "from"}: a shard's table opened from node "from"'s objects in the store → {"table", "taken"}"#),
    ("cluster_place", r#"(between nodes) a sharded table's definition with its shards' new places → {"name"}"#),
    ("cluster_give_up", r#"(between nodes) {"table"}: a shard's table dropped on the node it left → {"table", "dropped"}"#),
];

/// `move_shard`'s entry in `ListActions`.
pub const MOVE_SHARD: (&str, &str) = (
    "move_shard",
    r#"{"table", "shard", "to"}: shard "shard" of sharded table "table" moved to node "to" through the remote store, online (its batches are refused with UNAVAILABLE for the moment of the hand-over) → {"table", "shard", "from", "to", "moved", "log_end", "elapsed_ms"}"#,
);

impl Cluster {
    /// The remote store a move goes through: the daemon's (`[storage] remote`).
    pub fn set_remote(&self, remote: Arc<RemoteStore>) {
        let _ = self.remote.set(remote);
    }

    /// With a remote store, uploads this node's sharded-table definitions that changed: a
    /// node replaced right after a change keeps the definitions it answered for.
    ///
    /// # Errors
    /// `UNAVAILABLE` naming the store's error.
    pub(crate) async fn keep_definitions(&self) -> Result<(), Status> {
        match self.remote.get() {
            Some(remote) => remote.upload_cluster_definitions().await.map_err(|e| Status::unavailable(format!("the remote store did not take the definitions: {e}"))),
            None => Ok(()),
        }
    }

    fn remote_store(&self) -> Result<&Arc<RemoteStore>, Status> {
        self.remote.get().ok_or_else(|| {
            Status::failed_precondition("moving a shard needs the nodes' tables in a remote store ([storage] remote on every node: docs/deployment.md)")
        })
    }

    /// `move_shard` and the moves' node actions; `None` for any other action.
    pub(crate) async fn move_action(&self, catalog: &Arc<Catalog>, name: &str, body: &[u8]) -> Option<Result<Value, Status>> {
        if name != MOVE_SHARD.0 && !NODE_ACTIONS.iter().any(|(n, _)| *n == name) {
            return None;
        }
        let body: Value = match serde_json::from_slice(body) {
            Ok(Value::Object(body)) => Value::Object(body),
            _ => return Some(Err(Status::invalid_argument(format!("{name}: the body must be a JSON object")))),
        };
        Some(if name == MOVE_SHARD.0 { self.move_shard(catalog, &body).await } else { self.node_action(catalog, name, &body).await })
    }

    /// One node action of a move, here.
    async fn node_action(&self, catalog: &Arc<Catalog>, name: &str, body: &Value) -> Result<Value, Status> {
        let table = || body.get("table").and_then(Value::as_str).ok_or_else(|| Status::invalid_argument(format!("{name}: \"table\" is required")));
        let node = |key: &str| {
            body.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| Status::invalid_argument(format!("{name}: \"{key}\" (a node id) is required")))
        };
        match name {
            "cluster_hand_over" => self.remote_store()?.hand_over(catalog, table()?, node("to")?).await,
            "cluster_keep" => self.remote_store()?.keep(catalog, table()?),
            "cluster_take_over" => self.remote_store()?.take_over(catalog, table()?, node("from")?).await,
            "cluster_give_up" => self.remote_store()?.give_up(catalog, table()?).await,
            _ => {
                let table: ShardedTable = serde_json::from_value(body.clone()).map_err(|e| Status::invalid_argument(format!("{name}: {e}")))?;
                self.map.replace(&table).map_err(Status::internal)?;
                self.keep_definitions().await?;
                Ok(json!({"name": table.name}))
            }
        }
    }

    /// Node action `name` on node `node` (this node: directly).
    async fn on_node(&self, catalog: &Arc<Catalog>, node: usize, name: &str, body: Value) -> Result<Value, Status> {
        if node == self.me {
            return self.node_action(catalog, name, &body).await;
        }
        self.action_on(catalog, node, name, body).await
    }

    /// `move_shard {"table", "shard", "to"}` ([module documentation](self)).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a table that is not sharded, a shard or node out of range;
    /// `FAILED_PRECONDITION` without a remote store; a step's error, naming the step and the
    /// node (the move may be repeated).
    async fn move_shard(&self, catalog: &Arc<Catalog>, body: &Value) -> Result<Value, Status> {
        let invalid = |m: String| Status::invalid_argument(format!("move_shard: {m}"));
        let name = body.get("table").and_then(Value::as_str).ok_or_else(|| invalid("\"table\" is required".into()))?;
        let table = self.map.get(name).ok_or_else(|| invalid(format!("{name:?} is no sharded table")))?;
        let number = |key: &str| body.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
        let shard = number("shard").filter(|&s| s < table.shards).ok_or_else(|| invalid(format!("\"shard\" must be a shard of {name:?}: 0..{}", table.shards)))?;
        let to = number("to").filter(|&n| n < self.nodes.len()).ok_or_else(|| invalid(format!("\"to\" must be a node: 0..{}", self.nodes.len())))?;
        self.remote_store()?;
        let from = table.node_of(shard);
        let shard_table = table.shard_table(shard);
        if from == to {
            return Ok(json!({"table": name, "shard": shard, "from": from, "to": to, "moved": false}));
        }
        let started = Instant::now();
        let step = |what: &str, node: usize, e: Status| {
            Status::new(e.code(), format!("move_shard {name:?} shard {shard} from node {from} to node {to}: {what} on node {node}: {} (repeat the move)", e.message()))
        };
        tracing::info!(table = %name, shard, from, to, "moving a shard");
        let handed = self.on_node(catalog, from, "cluster_hand_over", json!({"table": shard_table, "to": to})).await.map_err(|e| step("the hand-over", from, e))?;
        if let Err(e) = self.on_node(catalog, to, "cluster_take_over", json!({"table": shard_table, "from": from})).await {
            let _ = self.on_node(catalog, from, "cluster_keep", json!({"table": shard_table})).await;
            return Err(step("the take-over", to, e));
        }
        let mut placed = table.as_ref().clone();
        placed.placement.insert(shard, to);
        if placed.placement.get(&shard) == Some(&(shard % placed.nodes.max(1))) {
            placed.placement.remove(&shard);
        }
        let definition = serde_json::to_value(&placed).map_err(|e| Status::internal(e.to_string()))?;
        for node in 0..self.nodes.len() {
            self.on_node(catalog, node, "cluster_place", definition.clone()).await.map_err(|e| step("the new placement", node, e))?;
        }
        self.on_node(catalog, from, "cluster_give_up", json!({"table": shard_table})).await.map_err(|e| step("dropping the old copy", from, e))?;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(table = %name, shard, from, to, elapsed_ms, "shard moved");
        Ok(json!({"table": name, "shard": shard, "from": from, "to": to, "moved": true, "log_end": handed.get("log_end"), "elapsed_ms": elapsed_ms}))
    }
}
