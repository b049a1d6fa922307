//! The shoal daemon: the Arrow Flight service over [`shoal_ops`]' operations, its
//! authentication, TLS and configuration. The `shoal` binary (`main.rs`) adds the CLI,
//! the metrics exporter and the client commands.

pub mod auth;
pub mod cluster;
pub mod config;
pub mod flight_sql;
pub mod limits;
mod put;
pub mod remote;
mod route;
pub mod rpc;
pub mod service;
pub mod tls_client;
