//! A table handed from one node of a cluster to another through the remote store, without
//! copying its data (`move_shard`, issue 47): the node giving it up refuses new batches,
//! lets those admitted finish and uploads everything ([`RemoteStore::hand_over`]); the node
//! taking it writes a manifest under its own prefix naming the giver's objects
//! (`../node-<id>/tables/...`), restores the table from it, opens it and claims it
//! ([`RemoteStore::take_over`]); the giver then drops its copy ([`RemoteStore::give_up`]),
//! which its manifests record, so that its next start does not open the table again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shoal_ops::catalog::Catalog;
use tonic::Status;

use super::manifest::{self, CommitError, Manifest};
use super::RemoteStore;

/// How long admitted batches may take to finish once a table refuses new ones.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

impl RemoteStore {
    /// The node giving table `name` to node `to`: new batches are refused (`UNAVAILABLE`:
    /// the table is moving, retry), the batches admitted before finish, the log is flushed
    /// (a checkpoint) and the store made to hold all of it. Answers `{"table", "log_end"}`.
    /// [`Self::keep`] undoes the refusal when the move fails later.
    ///
    /// # Errors
    /// `NOT_FOUND` for a table this node does not hold; `UNAVAILABLE` when batches did not
    /// finish or the store did not take the table within its timeouts (writes are taken
    /// again then).
    pub async fn hand_over(self: &Arc<Self>, catalog: &Arc<Catalog>, name: &str, to: usize) -> Result<Value, Status> {
        let entry = catalog.get(name).map_err(crate::rpc::status)?;
        let table = Arc::clone(&entry.table);
        // Waits for a transaction's staging or step under way (off the runtime's threads:
        // a commit may wait for this runtime's uploads).
        let (closing, reason) = (Arc::clone(&table), format!("table {name:?} is moving to node {to}: retry the batch (it was not written)"));
        crate::rpc::blocking(move || {
            closing.close_to_writes(Some(reason));
            Ok(())
        })
        .await?;
        let handed = async {
            let started = Instant::now();
            while table.complete_until() < table.tail_address() {
                if started.elapsed() > DRAIN_TIMEOUT {
                    return Err(Status::unavailable(format!("table {name:?}: batches under way did not finish within {} s", DRAIN_TIMEOUT.as_secs())));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let (flushing, table_name) = (Arc::clone(catalog), name.to_owned());
            crate::rpc::blocking(move || {
                shoal_ops::ops::run_action_with(&flushing, "checkpoint", json!({"table": table_name}).to_string().as_bytes(), shoal_ops::ops::ActionCall::CLIENT)
            })
            .await?;
            self.sync_table(catalog, name).await?;
            match table.remote_lag_bytes() {
                Some(0) => Ok(json!({"table": name, "log_end": table.tail_address().get()})),
                lag => Err(Status::unavailable(format!("table {name:?}: {} bytes of its log are not in the store yet", lag.unwrap_or(u64::MAX)))),
            }
        };
        let answer = handed.await;
        if answer.is_err() {
            table.close_to_writes(None);
        }
        answer
    }

    /// Takes writes to table `name` again (a move that failed after [`Self::hand_over`]).
    ///
    /// # Errors
    /// `NOT_FOUND` for a table this node does not hold.
    pub fn keep(&self, catalog: &Arc<Catalog>, name: &str) -> Result<Value, Status> {
        catalog.get(name).map_err(crate::rpc::status)?.table.close_to_writes(None);
        Ok(json!({"table": name, "kept": true}))
    }

    /// The node taking table `name` from node `from` (after its [`Self::hand_over`]): the
    /// table's next manifest under this node's prefix names `from`'s objects (no data is
    /// copied), the table is restored from it (without its page runs with a
    /// `local_cache_bytes`), opened, and claimed (the store holds it under this node's
    /// prefix when this answers). Repeating it once the table is here answers
    /// `{"taken": false}`.
    ///
    /// # Errors
    /// `FAILED_PRECONDITION` on a daemon that is no node of a cluster, or when `from`'s
    /// store holds no such table; `UNAVAILABLE` for the store's errors; `INTERNAL` when the
    /// table cannot be restored or opened.
    pub async fn take_over(self: &Arc<Self>, catalog: &Arc<Catalog>, name: &str, from: usize) -> Result<Value, Status> {
        if catalog.get(name).is_ok() {
            return Ok(json!({"table": name, "taken": false}));
        }
        shoal_ops::catalog::validate_table_name(name).map_err(crate::rpc::status)?;
        let (Some(data_dir), true) = (self.data_dir.get(), self.is_node) else {
            return Err(Status::failed_precondition("a table is taken over from another node of a cluster, and this daemon is none"));
        };
        let unavailable = |e: String| Status::unavailable(format!("table {name:?}: {e}"));
        let giver_root = manifest::object_path(&self.root, &format!("../node-{from}"));
        let Some((_, given)) = manifest::latest(self.store.as_ref(), &manifest::table_prefix(&giver_root, name)).await.map_err(unavailable)? else {
            return Err(Status::failed_precondition(format!("table {name:?}: node {from} holds no such table in the store")));
        };
        if given.dropped {
            return Err(Status::failed_precondition(format!("table {name:?}: node {from} dropped it")));
        }
        let prefix = self.table_prefix(name);
        let (seq, epoch) = match manifest::latest(self.store.as_ref(), &prefix).await.map_err(unavailable)? {
            Some((seq, mine)) => (seq + 1, mine.epoch.max(given.epoch) + 1),
            None => (0, given.epoch + 1),
        };
        // The giver's objects, named from this node's prefix (a sibling of the giver's).
        let rename = |object: &str| if object.starts_with("../") { object.to_owned() } else { format!("../node-{from}/{object}") };
        let mut taken = Manifest { table: name.to_owned(), epoch, owner: self.owner.clone(), ..given };
        for run in &mut taken.runs {
            run.object = rename(&run.object);
        }
        if let Some(open) = &mut taken.open_page {
            for chunk in &mut open.chunks {
                chunk.object = rename(&chunk.object);
            }
        }
        for file in taken.files.values_mut() {
            file.object = rename(&file.object);
        }
        match manifest::commit(self.store.as_ref(), &prefix, seq, &taken).await {
            Ok(()) => {}
            Err(CommitError::Store(e)) => return Err(unavailable(e)),
            Err(e) => return Err(Status::aborted(format!("table {name:?}: its manifests changed meanwhile ({e}); move it again"))),
        }
        let restored = self.restore_table(data_dir, name, &taken).await.map_err(unavailable)?;
        self.remote_pages(name).set(&taken);
        let (adopting, table_name) = (Arc::clone(catalog), name.to_owned());
        crate::rpc::blocking(move || adopting.adopt(&table_name).map(|()| json!({}))).await?;
        self.sync_table(catalog, name).await?;
        tracing::info!(table = %name, from, "remote store: table taken over");
        Ok(json!({"table": name, "taken": true, "objects_read": restored.objects, "bytes_read": restored.bytes}))
    }

    /// The giver's last step: its copy of table `name` dropped, and the drop recorded in
    /// its manifests (the objects stay: the taker's manifests name them).
    ///
    /// # Errors
    /// As `drop_table`, and `UNAVAILABLE` when the store did not record the drop.
    pub async fn give_up(self: &Arc<Self>, catalog: &Arc<Catalog>, name: &str) -> Result<Value, Status> {
        if catalog.get(name).is_err() {
            return Ok(json!({"table": name, "dropped": false}));
        }
        let (dropping, table_name) = (Arc::clone(catalog), name.to_owned());
        crate::rpc::blocking(move || {
            shoal_ops::ops::run_action_with(&dropping, "drop_table", json!({"name": table_name}).to_string().as_bytes(), shoal_ops::ops::ActionCall::CLIENT)
        })
        .await?;
        self.sync_table(catalog, name).await?;
        Ok(json!({"table": name, "dropped": true}))
    }
}
