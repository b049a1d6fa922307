//! The daemon's tables: one shoal-core [`Table`] per name, each with its own directory
//! `<data_dir>/tables/<name>/` holding its segment files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use shoal_core::log::DeviceConfig;
use shoal_core::table::{Table, TableConfig};
use tonic::Status;

use crate::config::ServerConfig;
use crate::protocol::{status_from_engine, CreateTable};

/// A table of the daemon.
pub struct TableEntry {
    /// Its name.
    pub name: String,
    /// The engine instance.
    pub table: Arc<Table>,
}

/// All tables of one daemon.
pub struct Catalog {
    config: ServerConfig,
    tables: RwLock<BTreeMap<String, Arc<TableEntry>>>,
}

/// Checks a table name: 1–128 characters of `[A-Za-z0-9_.-]`, not starting with `.`.
pub fn validate_table_name(name: &str) -> Result<(), Status> {
    let valid_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if name.is_empty() || name.len() > 128 || !valid_chars || name.starts_with('.') {
        return Err(Status::invalid_argument(format!(
            "invalid table name {name:?}: use 1-128 characters of A-Z a-z 0-9 _ - . (not starting with '.')"
        )));
    }
    Ok(())
}

impl Catalog {
    /// Opens the catalog on `config.data_dir`.
    ///
    /// # Errors
    /// When the data directory cannot be created, or already holds tables: reopening
    /// existing tables needs recovery, which this version does not have.
    pub fn open(config: ServerConfig) -> Result<Self, String> {
        if !config.in_memory {
            let tables = config.data_dir.join("tables");
            std::fs::create_dir_all(&tables)
                .map_err(|e| format!("cannot create data directory {}: {e}", tables.display()))?;
            let existing: Vec<String> = std::fs::read_dir(&tables)
                .map_err(|e| format!("cannot read {}: {e}", tables.display()))?
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if !existing.is_empty() {
                return Err(format!(
                    "data directory {} already holds tables {existing:?}; this version cannot recover existing tables yet \
                     — start with an empty --data-dir (or move the old one away)",
                    config.data_dir.display()
                ));
            }
        }
        Ok(Self { config, tables: RwLock::new(BTreeMap::new()) })
    }

    /// The server configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    fn table_dir(&self, name: &str) -> PathBuf {
        self.config.data_dir.join("tables").join(name)
    }

    /// The table `name`, or `NOT_FOUND` naming it.
    pub fn get(&self, name: &str) -> Result<Arc<TableEntry>, Status> {
        self.tables
            .read()
            .map_err(|_| Status::internal("catalog lock poisoned"))?
            .get(name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("table {name:?} does not exist (create it with the create_table action)")))
    }

    /// All tables, by name.
    pub fn list(&self) -> Vec<Arc<TableEntry>> {
        self.tables.read().map(|t| t.values().cloned().collect()).unwrap_or_default()
    }

    /// Creates a table. Returns `false` if it existed and `if_not_exists` was set.
    pub fn create(&self, request: &CreateTable) -> Result<bool, Status> {
        validate_table_name(&request.name)?;
        let mut tables = self.tables.write().map_err(|_| Status::internal("catalog lock poisoned"))?;
        if tables.contains_key(&request.name) {
            if request.if_not_exists {
                return Ok(false);
            }
            return Err(Status::already_exists(format!("table {:?} already exists", request.name)));
        }
        check_limits(request, &self.config)?;
        let mut config = TableConfig { on_invalid_json: request.on_invalid_json, ..TableConfig::default() };
        config.log.memory_budget_bytes = request.memory_budget_bytes.unwrap_or(self.config.memory_budget_bytes);
        if let Some(bits) = request.page_size_bits {
            config.log.page_size_bits = bits;
        }
        if let Some(bits) = request.index_size_bits {
            config.index_size_bits = bits;
        }
        config.log.sync_on_flush = self.config.sync_on_flush;
        if !self.config.in_memory {
            let dir = self.table_dir(&request.name);
            remove_dir_if_exists(&dir)?;
            config.log.device = DeviceConfig::Directory(dir);
        }
        let table = Table::create(config).map_err(|e| status_from_engine(&e))?;
        tables.insert(request.name.clone(), Arc::new(TableEntry { name: request.name.clone(), table }));
        tracing::info!(table = %request.name, "table created");
        Ok(true)
    }

    /// Drops a table: stops it and deletes its files.
    pub fn drop_table(&self, name: &str) -> Result<(), Status> {
        let entry = {
            let mut tables = self.tables.write().map_err(|_| Status::internal("catalog lock poisoned"))?;
            tables.remove(name).ok_or_else(|| Status::not_found(format!("table {name:?} does not exist")))?
        };
        entry.table.log().shutdown();
        if !self.config.in_memory {
            remove_dir_if_exists(&self.table_dir(name))?;
        }
        tracing::info!(table = %name, "table dropped");
        Ok(())
    }

    /// Flushes and stops every table (graceful shutdown).
    pub fn close_all(&self) {
        for entry in self.list() {
            match entry.table.close() {
                Ok(()) => tracing::info!(table = %entry.name, tail = entry.table.log().tail_address(), "table flushed and closed"),
                Err(e) => tracing::error!(table = %entry.name, error = %e, "closing the table failed"),
            }
        }
    }
}

/// Largest `index_size_bits` a client may ask for (2^24 buckets × 64 bytes = 1 GiB).
pub const MAX_INDEX_SIZE_BITS: u32 = 24;
/// Largest `page_size_bits` a client may ask for (256 MiB pages).
pub const MAX_PAGE_SIZE_BITS: u32 = 28;

/// Rejects table sizes that would exhaust the daemon's memory: the index and page sizes
/// within fixed bounds, the memory budget at most 4 × the server's default.
fn check_limits(request: &CreateTable, config: &ServerConfig) -> Result<(), Status> {
    if let Some(bits) = request.index_size_bits {
        if !(4..=MAX_INDEX_SIZE_BITS).contains(&bits) {
            return Err(Status::invalid_argument(format!(
                "index_size_bits must be within 4..={MAX_INDEX_SIZE_BITS} (2^bits buckets of 64 bytes), got {bits}"
            )));
        }
    }
    if let Some(bits) = request.page_size_bits {
        if !(12..=MAX_PAGE_SIZE_BITS).contains(&bits) {
            return Err(Status::invalid_argument(format!(
                "page_size_bits must be within 12..={MAX_PAGE_SIZE_BITS} (4 KiB to 256 MiB pages), got {bits}"
            )));
        }
    }
    if let Some(bytes) = request.memory_budget_bytes {
        let max = config.memory_budget_bytes.saturating_mul(4);
        if bytes > max {
            return Err(Status::resource_exhausted(format!(
                "memory_budget_bytes {bytes} exceeds this server's limit of {max} (4 × memory_budget_bytes)"
            )));
        }
    }
    Ok(())
}

fn remove_dir_if_exists(dir: &Path) -> Result<(), Status> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Status::internal(format!("cannot remove {}: {e}", dir.display()))),
    }
}
