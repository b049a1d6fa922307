//! # shoal-core
//!
//! The storage engine of shoal, after FishStore (Xie et al., SIGMOD 2019) on FASTER's
//! hybrid log (Chandramouli et al., SIGMOD 2018).
#![warn(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod epoch;
pub mod error;
pub mod index;
pub mod ingest;
pub mod log;
pub mod record;
pub mod parser;
pub mod path;
pub mod psf;
pub mod scan;
pub mod schema;
pub mod table;
pub mod value;

pub use error::{Error, Result};
pub use path::FieldPath;
pub use value::FieldValue;
