//! The shoal daemon as a library: the catalog of tables, the protocol's JSON bodies, and
//! its operations (actions, planning, scans, ingestion) independent of the transport.
//!
//! Two front ends use it: the Arrow Flight service ([`service`], the `shoal` binary) and
//! the embedded mode (`native/jni`, the engine inside a JVM), so both speak the same
//! protocol (`docs/protocol.md`) with the same plans and the same errors.

pub mod auth;
pub mod catalog;
pub mod config;
pub mod ops;
pub mod protocol;
pub mod service;
pub mod transactions;
