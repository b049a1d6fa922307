//! The protocol's operations, independent of the transport: actions, planning
//! (`GetFlightInfo`), scans of a ticket (`DoGet`), ingestion of a batch (`DoPut`) and table
//! listings. The Flight service ([`crate::service`]) and the embedded mode (`native/jni`)
//! both call these, so a plan, a result or an error is the same whichever way a client
//! comes in. Errors are [`OpsError`]s: their class is the protocol's error class
//! (`docs/protocol.md`), their message names what was wrong.
//!
//! Split by concern: [`query`] plans queries and opens tickets, [`ingest`] ingests and
//! acknowledges DoPut batches, [`actions`] declares every action once. Their public items
//! are re-exported here (`shoal_ops::ops::plan_query`, …).

pub mod actions;
pub mod ingest;
pub mod query;

pub use actions::{run_action, run_action_with, ActionCall, ActionSpec, ShardedAnswer, ACTIONS, MAX_DURABLE_WAITS};
pub use ingest::{acknowledge, acknowledge_while, check_put_schema, ingest_batch, Ingested};
pub use query::*;
