//! shoal's operations, independent of the transport: the catalog of tables, the
//! protocol's JSON bodies (`docs/protocol.md`), the actions, planning (`GetFlightInfo`),
//! scans of a ticket (`DoGet`), ingestion of a batch (`DoPut`) and transactions.
//!
//! Two front ends use it: the Arrow Flight service (`flight-server`, the `shoal`
//! binary), which maps [`OpsError`] onto a gRPC status in one place, and the embedded
//! mode (`native/jni`, the engine inside a JVM), so both speak the same protocol with the
//! same plans and the same errors. Nothing here knows about gRPC, sockets or the CLI.

pub mod catalog;
pub mod config;
pub mod error;
pub mod merge;
pub mod ops;
pub mod protocol;
pub mod sql;
pub mod transactions;

pub use error::{ErrorClass, OpsError, OpsResult};
