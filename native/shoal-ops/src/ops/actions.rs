//! The actions `DoAction` understands, declared once: each [`ActionSpec`] gives its name,
//! its description (`ListActions`), how a cluster answers it for a sharded table
//! ([`ShardedAnswer`]) and its handler. The dispatch ([`run_action`]), the daemon's
//! `ListActions` and the cluster's fan-out are all derived from [`ACTIONS`].

use std::time::Duration;

use serde_json::{json, Value};
use shoal_core::psf::expr::{parse_expr_within, MAX_EXPR_BYTES};
use shoal_core::LogAddress;

use super::ingest::wait_acknowledgeable;
use crate::catalog::Catalog;
use crate::error::OpsError;
use crate::protocol::{
    parse_body, AlterTable, Compact, CreateTable, DeleteRows, DeregisterPsf, MakeDurable, RegisterPsf, TableRef, TransactionRef, Truncate, WriterRef,
};

/// How a cluster answers an action on a sharded table (`flight-server`'s cluster module):
/// from its shards' answers, or by a definition of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardedAnswer {
    /// `create_table` with `shards` / `shard_key`: the definition on every node, then each
    /// shard's table; without them, of a sharded table's name: it exists.
    Define,
    /// `drop_table`: every shard's table, then the definition.
    Drop,
    /// Every shard's answer, listed: `{"table", "shards": [answer, …]}`.
    PerShard,
    /// Every shard's PSFs in one list, each with its `shard`.
    Psfs,
    /// The shards' counters summed (`records`, bytes, a keyed table's `keys`), with each
    /// shard's answer.
    Stats,
    /// A writer's serials: the least over the shards (a serial is durable once it is on
    /// every shard).
    WriterStatus,
    /// One transaction's state on every shard, merged (a two-phase commit's decision).
    Transaction,
    /// Every transaction over the shards, its records summed.
    Transactions,
}

/// What a handler may ask of its call besides the body.
#[derive(Clone, Copy)]
pub struct ActionCall<'a> {
    /// Asked every few milliseconds by a long wait (`make_durable`, a `delete`'s
    /// durability): `false` gives up with `CANCELLED` (the client went away).
    pub keep_waiting: &'a dyn Fn() -> bool,
    /// The longest `filter` text (bytes) the body may carry: [`MAX_EXPR_BYTES`] for what a
    /// client wrote, `MAX_RENDERED_EXPR_BYTES` for a condition the daemon rendered (a SQL
    /// `DELETE`) or a call a node of the cluster sent on.
    pub filter_bytes: usize,
}

impl ActionCall<'_> {
    /// A client's call that waits as long as it must.
    pub const CLIENT: ActionCall<'static> = ActionCall { keep_waiting: &|| true, filter_bytes: MAX_EXPR_BYTES };
}

/// One action: its name, description, cluster answer and handler.
pub struct ActionSpec {
    /// The `Action.type` that names it.
    pub name: &'static str,
    /// Its body and answer, as `ListActions` describes them.
    pub description: &'static str,
    /// How a cluster answers it for a sharded table.
    pub sharded: ShardedAnswer,
    /// Called with the catalog, the action's name (for messages), its body and the call.
    handler: fn(&Catalog, &str, &[u8], ActionCall<'_>) -> Result<Value, OpsError>,
}

impl std::fmt::Debug for ActionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionSpec").field("name", &self.name).field("sharded", &self.sharded).finish_non_exhaustive()
    }
}

impl ActionSpec {
    /// The action named `name`, if there is one.
    #[must_use]
    pub fn find(name: &str) -> Option<&'static Self> {
        ACTIONS.iter().find(|a| a.name == name)
    }
}

/// Every action of the protocol (`docs/protocol.md`), in the order `ListActions` lists them.
pub static ACTIONS: &[ActionSpec] = &[
    ActionSpec {
        name: "create_table",
        description: r#"{"name", "on_invalid_json"?: "reject"|"skip", "memory_budget_bytes"?, "page_size_bits"?, "index_size_bits"?, "if_not_exists"?, "columnar"?: {"enabled"?, "file_log_bytes"?, "row_group_rows"?, "codec"?: "zstd"|"lz4"|"none", "idle_ms"?}, "retention"?: {"keep_bytes"?, "max_age_secs"?, "compact_obsolete_percent"?}, "primary_key"?: "path"|["path", …]} → {"created": bool}"#,
        sharded: ShardedAnswer::Define,
        handler: create_table,
    },
    ActionSpec { name: "drop_table", description: r#"{"name"} → {"dropped": true}"#, sharded: ShardedAnswer::Drop, handler: drop_table },
    ActionSpec {
        name: "alter_table",
        description: r#"{"table", "retention": {"keep_bytes"?, "max_age_secs"?, "compact_obsolete_percent"?}} → replaces the retention policy ({} keeps everything); {"retention", "previous_retention"}"#,
        sharded: ShardedAnswer::PerShard,
        handler: alter_table,
    },
    ActionSpec {
        name: "register_psf",
        description: r#"{"table", "name", "kind": "projection"|"predicate"|"range"|"composite", "field"|"expr"|"fields", "boundaries"?, "type"?: "timestamp", "bucket"?: "1h", "unit"?: "s"|"ms"|"us", "backfill"?} → PSF with safe register address; the records already there are indexed in the background unless "backfill": false"#,
        sharded: ShardedAnswer::PerShard,
        handler: register_psf,
    },
    ActionSpec { name: "deregister_psf", description: r#"{"table", "name"} → PSF with safe deregister address"#, sharded: ShardedAnswer::PerShard, handler: deregister_psf },
    ActionSpec { name: "list_psfs", description: r#"{"table"} → [PSF]"#, sharded: ShardedAnswer::Psfs, handler: list_psfs },
    ActionSpec { name: "stats", description: r#"{"table"} → counters and log addresses"#, sharded: ShardedAnswer::Stats, handler: stats },
    ActionSpec {
        name: "delete",
        description: r#"{"table", "filter"?} → a keyed table's live rows matching the filter (all without one) get a tombstone each (SQL's DELETE); {"deleted", "end_address", "durable_address"}"#,
        sharded: ShardedAnswer::PerShard,
        handler: delete,
    },
    ActionSpec {
        name: "truncate",
        description: r#"{"table", "before_address" | "keep_bytes" | "older_than_secs"} → drops the head of the log (whole segment files; a keyed table's live versions are copied to the tail first); {"begin_address", "segments_deleted", "bytes_deleted", "versions_copied"}"#,
        sharded: ShardedAnswer::PerShard,
        handler: truncate,
    },
    ActionSpec {
        name: "compact",
        description: r#"{"table", "until_address"?, "wait_ms"?} → a keyed table's log compaction: live versions below until_address (default: everything flushed) copied to the tail, obsolete versions and deleted keys dropped with the head; {"begin_address", "versions_copied", "superseded_dropped", "tombstones_dropped", "snapshot_horizon", "deferred", …}"#,
        sharded: ShardedAnswer::PerShard,
        handler: compact,
    },
    ActionSpec {
        name: "make_durable",
        description: r#"{"table", "address"?} → waits until everything below address (default: the tail) is durable, without closing the open page; {"durable_address"}"#,
        sharded: ShardedAnswer::PerShard,
        handler: make_durable,
    },
    ActionSpec {
        name: "writer_status",
        description: r#"{"table", "writer"} → {"last_serial", "last_durable_serial", "durable_address"}"#,
        sharded: ShardedAnswer::WriterStatus,
        handler: writer_status,
    },
    ActionSpec {
        name: "begin_transaction",
        description: r#"{"table", "transaction"} → opens a transaction; DoPut batches with app_metadata {"transaction"} are staged in it"#,
        sharded: ShardedAnswer::Transaction,
        handler: |catalog, name, body, _| transaction(catalog, name, body, Step::Begin),
    },
    ActionSpec {
        name: "prepare_transaction",
        description: r#"{"table", "transaction"} → syncs its staged records"#,
        sharded: ShardedAnswer::Transaction,
        handler: |catalog, name, body, _| transaction(catalog, name, body, Step::Prepare),
    },
    ActionSpec {
        name: "commit_transaction",
        description: r#"{"table", "transaction"} → ingests its staged records exactly once, durably; idempotent"#,
        sharded: ShardedAnswer::Transaction,
        handler: |catalog, name, body, _| transaction(catalog, name, body, Step::Commit),
    },
    ActionSpec {
        name: "abort_transaction",
        description: r#"{"table", "transaction"} → drops its staged records; idempotent"#,
        sharded: ShardedAnswer::Transaction,
        handler: |catalog, name, body, _| transaction(catalog, name, body, Step::Abort),
    },
    ActionSpec {
        name: "list_transactions",
        description: r#"{"table"} → [{"transaction", "state", "records"}]"#,
        sharded: ShardedAnswer::Transactions,
        handler: list_transactions,
    },
    ActionSpec {
        name: "checkpoint",
        description: r#"{"table"} → flushes the log and saves the inferred schema; {"flushed_until_address"}"#,
        sharded: ShardedAnswer::PerShard,
        handler: checkpoint,
    },
];

/// Runs the action `name` (one of [`ACTIONS`]) with its JSON `body`, as a client's call
/// ([`ActionCall::CLIENT`]); returns its JSON result.
///
/// # Errors
/// `INVALID_ARGUMENT` for an unknown action or a malformed body (the message names the
/// key), `NOT_FOUND` for unknown tables or PSFs, and the engine's errors as statuses.
pub fn run_action(catalog: &Catalog, name: &str, body: &[u8]) -> Result<Value, OpsError> {
    run_action_with(catalog, name, body, ActionCall::CLIENT)
}

/// As [`run_action`], for a `call` that may give up waiting or carry a longer filter.
///
/// # Errors
/// As [`run_action`]; `CANCELLED` when `call.keep_waiting` said no during a wait.
pub fn run_action_with(catalog: &Catalog, name: &str, body: &[u8], call: ActionCall<'_>) -> Result<Value, OpsError> {
    match ActionSpec::find(name) {
        Some(action) => (action.handler)(catalog, action.name, body, call),
        None => Err(OpsError::invalid_argument(format!(
            "unknown action {name:?}; known actions: {}",
            ACTIONS.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The most `make_durable` calls that may wait at once (each holds a blocking thread
/// until its address is durable, normally a few milliseconds).
pub const MAX_DURABLE_WAITS: usize = 64;

/// A place among the [`MAX_DURABLE_WAITS`] waiting `make_durable` calls, given back when
/// dropped.
struct DurableWaitSlot;

static DURABLE_WAITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl DurableWaitSlot {
    fn take() -> Result<Self, OpsError> {
        use std::sync::atomic::Ordering;
        if DURABLE_WAITS.fetch_add(1, Ordering::AcqRel) >= MAX_DURABLE_WAITS {
            DURABLE_WAITS.fetch_sub(1, Ordering::AcqRel);
            return Err(OpsError::resource_exhausted(format!(
                "make_durable: {MAX_DURABLE_WAITS} calls are already waiting for durability (the limit); retry shortly"
            )));
        }
        Ok(Self)
    }
}

impl Drop for DurableWaitSlot {
    fn drop(&mut self) {
        DURABLE_WAITS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A PSF as `register_psf`, `deregister_psf` and `list_psfs` answer it: its definition,
/// boundaries, the log range it covers (`to` is `"tail"` while it is registered) and its
/// backfill's progress, if one was asked for.
fn psf_json(psf: &shoal_core::psf::Psf, table: &shoal_core::table::Table) -> Value {
    let (register, deregister) = (psf.safe_register_address(), psf.safe_deregister_address());
    let spec = serde_json::to_value(psf.kind.to_spec()).unwrap_or_default();
    let bound = |address: shoal_core::LogAddress| if address == shoal_core::psf::NOT_YET { json!("tail") } else { json!(address) };
    let backfill = table.backfill_progress(psf.id).map(|p| {
        json!({
            "backfilled_from": p.backfilled_from,
            "target": p.target,
            "done": p.done,
            "bytes_per_second": p.bytes_per_second.round(),
            "runs": p.runs,
            "entries": p.entries,
        })
    });
    json!({
        "id": psf.id,
        "name": psf.name,
        "definition": spec,
        "active": psf.is_active(),
        "safe_register_address": (register != shoal_core::psf::NOT_YET).then_some(register),
        "safe_deregister_address": (deregister != shoal_core::psf::NOT_YET).then_some(deregister),
        "coverage": psf.coverage().map(|(from, to)| json!({"from": from, "to": bound(to)})),
        "key_pointers": psf.key_pointer_count(),
        "backfill": backfill,
    })
}

fn engine(error: &shoal_core::Error) -> OpsError {
    OpsError::from_engine(error)
}

fn create_table(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: CreateTable = parse_body(name, body)?;
    let created = catalog.create(&request)?;
    Ok(json!({"created": created, "name": request.name}))
}

fn alter_table(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: AlterTable = parse_body(name, body)?;
    let previous = catalog.alter_retention(&request.table, request.retention)?;
    Ok(json!({"table": request.table, "retention": request.retention, "previous_retention": previous}))
}

fn drop_table(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: TableRef = parse_body(name, body)?;
    catalog.drop_table(&request.table)?;
    Ok(json!({"dropped": true, "name": request.table}))
}

fn register_psf(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: RegisterPsf = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    let backfill = request.backfill.unwrap_or(true);
    let psf = entry.table.register_psf_with(&request.name, &request.spec, backfill).map_err(|e| engine(&e))?;
    tracing::info!(table = %request.table, psf = %psf.name, address = psf.safe_register_address().get(), backfill, "PSF registered");
    Ok(psf_json(&psf, &entry.table))
}

fn deregister_psf(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: DeregisterPsf = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    let psf = entry.table.deregister_psf(&request.name).map_err(|e| engine(&e))?;
    Ok(psf_json(&psf, &entry.table))
}

fn list_psfs(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: TableRef = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    Ok(Value::Array(entry.table.psfs().all().iter().map(|p| psf_json(p, &entry.table)).collect()))
}

fn stats(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: TableRef = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    let mut stats = serde_json::to_value(entry.table.stats()).unwrap_or_default();
    stats["table"] = json!(request.table);
    stats["psfs"] = json!(entry.table.psfs().all().len());
    // The backfills under way: what each PSF still has to index.
    let backfills: Vec<Value> = entry
        .table
        .psfs()
        .all()
        .iter()
        .filter(|p| p.is_active())
        .filter_map(|p| entry.table.backfill_progress(p.id).filter(|b| !b.done).map(|b| (p, b)))
        .map(|(p, b)| {
            json!({"psf": p.name, "backfilled_from": b.backfilled_from, "target": b.target,
                   "remaining_bytes": b.backfilled_from.bytes_since(b.target), "bytes_per_second": b.bytes_per_second.round()})
        })
        .collect();
    stats["backfills"] = Value::Array(backfills);
    stats["reserved_bytes"] = json!(entry.table.reserved_bytes());
    Ok(stats)
}

fn delete(catalog: &Catalog, name: &str, body: &[u8], call: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: DeleteRows = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    let filter = request.filter.as_deref().map(|f| parse_expr_within(f, call.filter_bytes)).transpose().map_err(|e| engine(&e))?;
    let report = entry.table.delete_where(filter.as_ref()).map_err(|e| engine(&e))?;
    metrics::counter!("shoal_deleted_rows_total", "table" => entry.name.clone()).increment(report.deleted);
    wait_acknowledgeable(&entry.table, report.end_address, call.keep_waiting).map_err(|e| engine(&e))?;
    Ok(json!({
        "table": request.table,
        "deleted": report.deleted,
        "end_address": report.end_address,
        "durable_address": entry.table.durable_address(),
    }))
}

fn truncate(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: Truncate = parse_body(name, body)?;
    let rule = request.rule()?;
    let entry = catalog.get(&request.table)?;
    let report = entry.table.truncate(rule).map_err(|e| engine(&e))?;
    let mut answer = serde_json::to_value(&report).unwrap_or_default();
    answer["table"] = json!(request.table);
    Ok(answer)
}

fn compact(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: Compact = parse_body(name, body)?;
    let wait = request.wait_ms.unwrap_or(30_000);
    if wait > crate::protocol::MAX_COMPACT_WAIT_MS {
        return Err(OpsError::invalid_argument(format!(
            "compact: wait_ms {wait} is above {} (10 minutes)",
            crate::protocol::MAX_COMPACT_WAIT_MS
        )));
    }
    let entry = catalog.get(&request.table)?;
    let report = entry
        .table
        .compact_log(request.until_address.unwrap_or(LogAddress::MAX), Duration::from_millis(wait))
        .map_err(|e| engine(&e).context(format!("compact {:?}", request.table)))?;
    metrics::counter!("shoal_compacted_versions_total", "table" => entry.name.clone()).increment(report.truncate.versions_copied);
    let mut answer = serde_json::to_value(&report).unwrap_or_default();
    answer["table"] = json!(request.table);
    Ok(answer)
}

fn make_durable(catalog: &Catalog, name: &str, body: &[u8], call: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: MakeDurable = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    if !entry.table.has_storage() {
        return Err(OpsError::failed_precondition(format!(
            "table {:?} is in memory (the daemon runs --in-memory): nothing can be made durable",
            request.table
        )));
    }
    let tail = entry.table.tail_address();
    let address = request.address.unwrap_or(tail);
    if address > tail {
        // Nothing would ever make it durable but records yet to come: refuse rather than
        // hold a thread until the wait times out.
        return Err(OpsError::out_of_range(format!(
            "make_durable: address {address} is beyond the tail of table {} ({tail}); \
             ask for an address that was written (a PutResult's end or durable address)",
            request.table
        )));
    }
    let _slot = DurableWaitSlot::take()?;
    let durable = entry.table.wait_durable_while(address, Duration::from_secs(60), call.keep_waiting).map_err(|e| engine(&e))?;
    Ok(json!({"table": request.table, "durable_address": durable}))
}

fn writer_status(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: WriterRef = parse_body(name, body)?;
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

/// A step of a transaction's life (the `*_transaction` actions).
#[derive(Debug, Clone, Copy)]
enum Step {
    Begin,
    Prepare,
    Commit,
    Abort,
}

fn transaction(catalog: &Catalog, name: &str, body: &[u8], step: Step) -> Result<Value, OpsError> {
    let request: TransactionRef = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    // A table handed to another node (or fenced) takes no transaction step here: the step
    // would be lost with this copy.
    let _writing = entry.table.hold_writable().map_err(|e| OpsError::from_engine(&e))?;
    let transactions = &entry.transactions;
    let info = match step {
        Step::Begin => transactions.begin(&request.transaction),
        Step::Prepare => transactions.prepare(&request.transaction),
        Step::Commit => transactions.commit(&entry.table, &request.transaction),
        Step::Abort => transactions.abort(&request.transaction),
    }?;
    tracing::debug!(table = %request.table, transaction = %request.transaction, state = ?info.state, "{name}");
    Ok(serde_json::to_value(&info).unwrap_or_default())
}

fn list_transactions(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: TableRef = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    Ok(serde_json::to_value(entry.transactions.list()).unwrap_or_default())
}

fn checkpoint(catalog: &Catalog, name: &str, body: &[u8], _: ActionCall<'_>) -> Result<Value, OpsError> {
    let request: TableRef = parse_body(name, body)?;
    let entry = catalog.get(&request.table)?;
    let state = entry.table.checkpoint().map_err(|e| engine(&e))?;
    Ok(json!({
        "table": request.table,
        "flushed_until_address": state.log_end_address,
        "schema_observed_until": state.schema_observed_until,
        "index_checkpoint": state.index,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_is_declared_once_and_found_by_its_name() {
        for (i, action) in ACTIONS.iter().enumerate() {
            assert!(ACTIONS[..i].iter().all(|a| a.name != action.name), "{} declared twice", action.name);
            assert_eq!(ActionSpec::find(action.name).map(|a| a.name), Some(action.name));
        }
        assert!(ActionSpec::find("no_such_action").is_none());
    }
}
