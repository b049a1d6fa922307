//! # shoal-core
//!
//! The storage engine of shoal, after FishStore (Xie et al., SIGMOD 2019) on FASTER's
//! hybrid log (Chandramouli et al., SIGMOD 2018).
//!
//! **Hybrid log** ([`log`]). Records are appended to one logical address space. The
//! tail lives in a ring of in-memory pages (the memory budget); a fetch-and-add on the
//! tail allocates; full pages become immutable, are flushed to segment files once all
//! their writers are done ([`epoch`] protection), and are evicted when the ring needs
//! their frame. Readers reach any address, in memory or on disk. Each record keeps its
//! exact input bytes behind a header and its *key pointers* ([`record`]).
//!
//! **PSFs** ([`psf`]). A predicated subset function maps a record to a value: a field
//! projection (`actor.login`), a boolean predicate (`type = 'IssuesEvent' AND
//! payload.action = 'opened'`), a numeric range bucket, or a tuple of fields. Every
//! record with value `v` gets a key pointer linked into the hash chain of the property
//! `(f, v)` ([`index`], FishStore Algorithm 1 in [`ingest`]). PSFs are registered and
//! deregistered while ingestion runs; each records the log addresses where its chains
//! begin and end (safe register / deregister boundaries).
//!
//! **Scans** ([`scan`]). A request is a filter (the same SQL expression language),
//! columns, a log range and a limit. The planner uses index scans along chains where a
//! PSF covers the range and full scans elsewhere; every candidate is re-checked against
//! the filter, and the requested columns come out as Arrow record batches typed by the
//! inferred schema ([`schema`]).
//!
//! ```
//! use shoal_core::psf::{parse_expr, PsfSpec};
//! use shoal_core::scan::ScanRequest;
//! use shoal_core::table::{Table, TableConfig};
//! use shoal_core::FieldPath;
//!
//! # fn main() -> shoal_core::Result<()> {
//! let table = Table::create(TableConfig::in_memory(16 << 20))?;
//! table.register_psf("by_type", &PsfSpec::Projection { field: "type".into() })?;
//! table.ingest(&[
//!     br#"{"id": 1, "type": "PushEvent", "actor": {"login": "alice"}}"#,
//!     br#"{"id": 2, "type": "IssuesEvent", "actor": {"login": "bob"}}"#,
//!     br#"{"id": 3, "type": "PushEvent", "actor": {"login": "carol"}}"#,
//! ])?;
//! let request = ScanRequest {
//!     filter: Some(parse_expr("type = 'PushEvent'")?),
//!     columns: vec![FieldPath::parse("actor.login")?],
//!     ..ScanRequest::default()
//! };
//! let plan = table.plan(&request);
//! assert_eq!(plan.index_scans[0].psfs, ["by_type"]); // answered from the chain
//! let (batches, _stats) = table.scan(&request)?;
//! assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
//! # Ok(())
//! # }
//! ```
//!
//! # Public surface
//! Tables ([`table`]: [`table::Table`], [`table::TableConfig`]), PSFs ([`psf`]), scans and
//! plans ([`scan`]), the inferred schema ([`schema`]), the columnar tier's settings
//! ([`columnar`]), writer sessions ([`session`]), retention ([`retention`]), recovery's
//! report ([`recovery`]), checkpoint file names ([`checkpoint`]), the parser interface
//! ([`parser`], FishStore §5.1's extension point), log addresses ([`LogAddress`]), paths,
//! values and errors. The log, hash index, record layout and epochs are the engine's own:
//! public only with the feature `internals`, for the engine's tests and benchmarks.
#![warn(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod address;
pub mod checkpoint;
pub mod columnar;
pub mod compaction;
mod completion;
mod config;
#[cfg(feature = "internals")]
pub mod epoch;
#[cfg(not(feature = "internals"))]
mod epoch;
pub mod error;
mod files;
#[cfg(feature = "internals")]
pub mod index;
#[cfg(not(feature = "internals"))]
mod index;
pub mod ingest;
pub mod keys;
#[cfg(feature = "internals")]
pub mod log;
#[cfg(not(feature = "internals"))]
mod log;
mod mem;
mod merge_patch;
#[cfg(feature = "internals")]
pub mod record;
#[cfg(not(feature = "internals"))]
mod record;
pub mod parser;
pub mod path;
pub mod psf;
pub mod recovery;
pub mod retention;
pub mod scan;
pub mod schema;
pub mod session;
pub mod table;
pub mod timestamp;
pub mod value;

pub use address::LogAddress;
pub use error::{Error, Result};
pub use path::FieldPath;
pub use value::FieldValue;
