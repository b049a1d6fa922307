//! Where a request's table lives, decided in one place for every handler (Flight and
//! Flight SQL): on this daemon ([`Route::Local`]), or sharded over the nodes of its cluster
//! ([`Route::Sharded`], served through `cluster/`). A handler asks once per request and
//! branches on the answer.

use std::sync::Arc;

use tonic::Request;

use crate::cluster::{Cluster, ShardedTable};
use crate::limits::Caller;

/// Where a table lives.
pub(crate) enum Route {
    /// A table of this daemon's catalog (or no table at all: the catalog answers).
    Local,
    /// A table sharded over the cluster's nodes: its definition, and the cluster.
    Sharded(Arc<Cluster>, Arc<ShardedTable>),
}

/// This daemon's place in a cluster, if any, as the handlers need it.
#[derive(Clone, Default)]
pub(crate) struct Router {
    cluster: Option<Arc<Cluster>>,
}

impl Router {
    /// A router of a daemon that is a node of `cluster` (or of none).
    pub(crate) fn new(cluster: Option<Arc<Cluster>>) -> Self {
        Self { cluster }
    }

    /// The cluster this daemon is a node of, if any.
    pub(crate) fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// Where the table named `table` lives.
    pub(crate) fn route(&self, table: &str) -> Route {
        match &self.cluster {
            Some(cluster) => cluster.map().get(table).map_or(Route::Local, |sharded| Route::Sharded(Arc::clone(cluster), sharded)),
            None => Route::Local,
        }
    }

    /// True for a shard's own table (`T.shard-2`): listed as its sharded table, not by
    /// itself, though it stays readable by name.
    pub(crate) fn is_shard_table(&self, name: &str) -> bool {
        self.cluster.as_ref().is_some_and(|c| c.map().shard_of_table(name).is_some())
    }

    /// Who makes `request` ([`Caller`]): a node of the cluster when it carries the
    /// cluster's secret, else a client at its peer address.
    pub(crate) fn caller<T>(&self, request: &Request<T>) -> Caller {
        crate::cluster::caller_of(self.cluster.as_deref(), request)
    }
}
