//! The daemon's tables: one shoal-core [`Table`] per name, each with its own directory
//! `<data_dir>/tables/<name>/` holding its segment files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};

use shoal_core::checkpoint::TABLE_META_FILE;
use shoal_core::table::{DeviceConfig, Table, TableConfig};
use crate::error::OpsError;

use crate::config::{Durability, EngineConfig};
use crate::transactions::Transactions;
use crate::protocol::CreateTable;

/// A table of the daemon.
pub struct TableEntry {
    /// Its name.
    pub name: String,
    /// The engine instance.
    pub table: Arc<Table>,
    /// Its transactions (staged records of two-phase-commit writers).
    pub transactions: Transactions,
    /// The daemon's memory limit, which ingestion checks as the table fills.
    memory: MemoryLimit,
}

impl TableEntry {
    fn new(name: String, table: Arc<Table>, memory: MemoryLimit) -> Result<Self, String> {
        let transactions = Transactions::open(&table)?;
        Ok(Self { name, table, transactions, memory })
    }

    /// Refuses a batch (or a transaction's staging) of `bytes` of records that would take
    /// the memory the daemon's tables reserve past its limit (`max_memory_bytes`). A
    /// table's reservation grows as it fills ([`Table::reserved_bytes`]): its log's frames
    /// on the first pass through its page ring, its hash index at the first record indexed,
    /// its schema at the first record ([`Table::memory_growth_for`]), and a keyed table's
    /// key index with every new key and version (`stats.keys.memory_bytes`). A batch that
    /// grows nothing — a table whose ring is populated, without a key index — is never
    /// refused; a keyed table's batches are refused while the tables reserve more than the
    /// limit. Before a batch is refused, the tables' caches of decoded columns are let go
    /// ([`Table::release_cache`], the largest first, until enough is freed): memory held
    /// only for speed yields to data. The check comes before the batch, so the limit is
    /// passed by at most the batches in flight.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` naming the limit, the reservation and what this table needs
    /// (the caller adds the table's name).
    pub fn check_memory_for_ingest(&self, bytes: usize) -> Result<(), OpsError> {
        let growth = self.table.memory_growth_for(bytes);
        let keyed = !self.table.config().primary_key.is_empty();
        if growth == 0 && !keyed {
            return Ok(());
        }
        let mut reserved = self.memory.reserved_bytes();
        let limit = self.memory.limit;
        if (growth > 0 && reserved.saturating_add(growth) > limit) || (keyed && reserved > limit) {
            // Data first: the tables' caches yield before a batch is refused.
            let wanted = reserved.saturating_add(growth).saturating_sub(limit);
            if self.memory.release_caches(wanted) > 0 {
                reserved = self.memory.reserved_bytes();
            }
        }
        if growth > 0 && reserved.saturating_add(growth) > limit {
            let memory = self.table.memory_stats();
            return Err(OpsError::resource_exhausted(format!(
                "this batch needs up to {growth} more bytes of memory (the table reserves {} of its {} bytes as it fills: \
                 log frames, index, schema, cache), and the daemon's tables reserve {reserved} of its limit of {limit} bytes \
                 (max_memory_bytes): drop a table, create tables with a smaller memory_budget_bytes, or raise the limit",
                memory.reserved_bytes, memory.bound_bytes
            )));
        }
        if !keyed || reserved <= limit {
            return Ok(());
        }
        let keys = self.table.stats().keys.unwrap_or_default();
        Err(OpsError::resource_exhausted(format!(
            "the daemon's tables reserve {reserved} bytes, over its limit of {limit} (max_memory_bytes), and this keyed table's \
             key index holds {} bytes for {} keys: its batches are refused until memory is freed (compact this table, drop \
             a table, or raise the limit)",
            keys.memory_bytes,
            keys.keys
        )))
    }
}

/// The tables of a catalog, shared with each entry's [`MemoryLimit`].
type Tables = RwLock<BTreeMap<String, Arc<TableEntry>>>;

/// The daemon's memory limit and the tables that reserve it, as an entry sees them.
struct MemoryLimit {
    /// `max_memory_bytes` (or its default, [`EngineConfig::memory_limit_bytes`]).
    limit: u64,
    /// The catalog's tables (weak: the catalog owns them).
    tables: Weak<Tables>,
}

impl MemoryLimit {
    /// What the catalog's tables reserve now (`Table::reserved_bytes`, summed); 0 while a
    /// table is being created or dropped (the catalog's lock is taken then: a batch is not
    /// kept waiting for it, and the next one is checked).
    fn reserved_bytes(&self) -> u64 {
        let Some(tables) = self.tables.upgrade() else { return 0 };
        let Ok(tables) = tables.try_read() else { return 0 };
        tables.values().map(|e| e.table.reserved_bytes()).sum()
    }

    /// Lets go of the tables' caches ([`Table::release_cache`]), the largest first, until
    /// `wanted` bytes are freed or none is left; returns the bytes freed (0 while the
    /// catalog's lock is taken, as in [`Self::reserved_bytes`]).
    fn release_caches(&self, wanted: u64) -> u64 {
        let Some(tables) = self.tables.upgrade() else { return 0 };
        let Ok(tables) = tables.try_read() else { return 0 };
        let mut cached: Vec<(u64, &Arc<TableEntry>)> =
            tables.values().map(|e| (e.table.memory_stats().columnar_bytes, e)).filter(|(bytes, _)| *bytes > 0).collect();
        cached.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        let mut freed = 0;
        for (_, entry) in cached {
            if freed >= wanted {
                break;
            }
            freed += entry.table.release_cache();
        }
        if freed > 0 {
            tracing::info!(freed_bytes = freed, "memory limit: the tables' caches of decoded columns let go for data");
        }
        freed
    }
}

/// All tables of one daemon.
pub struct Catalog {
    config: EngineConfig,
    tables: Arc<Tables>,
    /// `<data_dir>/LOCK`, locked exclusively while the catalog lives, so that two
    /// processes (daemons, embedded engines) never open the same tables.
    _lock: Option<std::fs::File>,
}

/// The lock file of a data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Locks `<data_dir>/LOCK` exclusively (released when the file is closed, including when
/// the process dies).
fn lock_data_dir(data_dir: &Path) -> Result<std::fs::File, String> {
    let path = data_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open the lock file {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "the data directory {} is in use by another shoal process (a daemon or an embedded engine holds {}); \
             stop it or use another --data-dir",
            data_dir.display(),
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// Checks a table name: 1–128 characters of `[A-Za-z0-9_.-]`, not starting with `.`.
pub fn validate_table_name(name: &str) -> Result<(), OpsError> {
    let valid_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if name.is_empty() || name.len() > 128 || !valid_chars || name.starts_with('.') {
        return Err(OpsError::invalid_argument(format!(
            "invalid table name {}: use 1-128 characters of A-Z a-z 0-9 _ - . (not starting with '.')",
            crate::protocol::quoted(name)
        )));
    }
    Ok(())
}

/// Opens (recovers) the table in `dir` as the catalog's entry `name`, logging what
/// recovery did; a table with durability `remote` and no remote store is fenced.
fn open_table(config: &EngineConfig, shared: &Arc<Tables>, name: &str, dir: &std::path::Path) -> Result<TableEntry, String> {
    let mut table_config = TableConfig::on_disk(dir);
    table_config.log.page_source = config.page_sources.as_ref().and_then(|sources| (sources.0)(name));
    let (table, report) = Table::open(table_config)
        .map_err(|e| format!("cannot recover table {name:?} in {}: {e} (move the directory away to start without it)", dir.display()))?;
    tracing::info!(
        table = %name,
        records = report.records,
        pages = report.pages_replayed,
        bytes_replayed = report.bytes_replayed,
        checkpoint_used = report.checkpoint_used,
        corrupt_page = ?report.corrupt_page,
        bytes_cut = report.bytes_cut,
        elapsed_ms = report.elapsed_ms,
        "table recovered"
    );
    if let Some((page, reason)) = &report.corrupt_page {
        tracing::warn!(table = %name, page, %reason, "a damaged page and everything after it were cut off");
    }
    if matches!(table.config().durability, shoal_core::table::DurabilityPolicy::Remote { .. }) && config.remote_commit_ms.is_none() {
        // Its batches would wait for uploads nobody makes: refused instead, reads go on.
        table.fence(format!(
            "table {name:?} has durability \"remote\", but this engine has no remote store ([storage] remote, \
             --remote or SHOAL_REMOTE on the daemon): its writes are refused, its reads served"
        ));
    }
    let memory = MemoryLimit { limit: config.memory_limit_bytes(), tables: Arc::downgrade(shared) };
    TableEntry::new(name.to_owned(), table, memory)
}

impl Catalog {
    /// Opens the catalog on `config.data_dir`, recovering every table found under
    /// `<data_dir>/tables/` (see `shoal_core::recovery`) and logging what recovery did.
    ///
    /// # Errors
    /// When the data directory cannot be created or read, is locked by another process
    /// (`<data_dir>/LOCK`), or a table there cannot be
    /// recovered (the message names it; the daemon does not start rather than serve
    /// without it).
    pub fn open(config: EngineConfig) -> Result<Self, String> {
        let shared: Arc<Tables> = Arc::default();
        let mut tables = BTreeMap::new();
        let mut lock = None;
        if !config.in_memory {
            let root = config.data_dir.join("tables");
            std::fs::create_dir_all(&root)
                .map_err(|e| format!("cannot create data directory {}: {e}", root.display()))?;
            lock = Some(lock_data_dir(&config.data_dir)?);
            let mut names: Vec<String> = std::fs::read_dir(&root)
                .map_err(|e| format!("cannot read {}: {e}", root.display()))?
                .filter_map(Result::ok)
                .filter(|e| e.path().join(TABLE_META_FILE).exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for name in names {
                let entry = open_table(&config, &shared, &name, &root.join(&name))?;
                tables.insert(name, Arc::new(entry));
            }
        }
        *shared.write().map_err(|_| "catalog lock poisoned".to_owned())? = tables;
        Ok(Self { config, tables: shared, _lock: lock })
    }

    /// The server configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    fn table_dir(&self, name: &str) -> PathBuf {
        self.config.data_dir.join("tables").join(name)
    }

    /// The table `name`, or `NOT_FOUND` naming it.
    pub fn get(&self, name: &str) -> Result<Arc<TableEntry>, OpsError> {
        self.tables
            .read()
            .map_err(|_| OpsError::internal("catalog lock poisoned"))?
            .get(name)
            .cloned()
            .ok_or_else(|| {
                OpsError::not_found(format!(
                    "table {} does not exist (create it with the create_table action)",
                    crate::protocol::quoted(name)
                ))
            })
    }

    /// All tables, by name.
    pub fn list(&self) -> Vec<Arc<TableEntry>> {
        self.tables.read().map(|t| t.values().cloned().collect()).unwrap_or_default()
    }

    /// Opens the table another process wrote into `<data_dir>/tables/<name>` (a shard moved
    /// here from another node, restored from the remote store) and serves it, as a start
    /// would have.
    ///
    /// # Errors
    /// `ALREADY_EXISTS` when the catalog has a table of that name; `INTERNAL` when the
    /// directory holds no table or recovery fails (the message names it).
    pub fn adopt(&self, name: &str) -> Result<(), OpsError> {
        validate_table_name(name)?;
        let mut tables = self.tables.write().map_err(|_| OpsError::internal("catalog lock poisoned"))?;
        if tables.contains_key(name) {
            return Err(OpsError::already_exists(format!("table {name:?} already exists")));
        }
        let entry = open_table(&self.config, &self.tables, name, &self.table_dir(name)).map_err(OpsError::internal)?;
        tables.insert(name.to_owned(), Arc::new(entry));
        tracing::info!(table = %name, "table adopted");
        Ok(())
    }

    /// Creates a table. Returns `false` if it existed and `if_not_exists` was set.
    pub fn create(&self, request: &CreateTable) -> Result<bool, OpsError> {
        validate_table_name(&request.name)?;
        let mut tables = self.tables.write().map_err(|_| OpsError::internal("catalog lock poisoned"))?;
        if tables.contains_key(&request.name) {
            if request.if_not_exists {
                return Ok(false);
            }
            return Err(OpsError::already_exists(format!("table {:?} already exists", request.name)));
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
        config.columnar = columnar_config(&self.config.columnar, request.columnar.as_ref())?;
        if let Some(key) = &request.primary_key {
            config.primary_key = key.paths()?;
        }
        if let Some(retention) = request.retention {
            check_retention(&request.name, &retention, self.config.in_memory)?;
            config.retention = retention;
        }
        self.check_capacity(&tables, &request.name, &config)?;
        let durability = request.durability.unwrap_or(self.config.durability);
        let group_commit_ms = request.group_commit_ms.unwrap_or(self.config.group_commit_ms);
        if self.config.in_memory && durability != Durability::None {
            return Err(OpsError::invalid_argument(format!(
                "table {:?}: durability {durability:?} needs storage, but this daemon runs --in-memory",
                request.name
            )));
        }
        if durability == Durability::Remote && self.config.remote_commit_ms.is_none() {
            return Err(OpsError::invalid_argument(format!(
                "table {:?}: durability \"remote\" needs a remote store, and this engine has none (set [storage] remote, \
                 --remote or SHOAL_REMOTE on the daemon; the embedded engine has no remote store)",
                request.name
            )));
        }
        let remote_commit_ms = self.config.remote_commit_ms.unwrap_or(0);
        let mut config = config.with_durability(durability.policy(group_commit_ms, remote_commit_ms));
        if !self.config.in_memory {
            let dir = self.table_dir(&request.name);
            if dir.join(TABLE_META_FILE).exists() {
                return Err(OpsError::failed_precondition(format!(
                    "{} holds a table {:?} this daemon did not load; move it away first",
                    dir.display(),
                    request.name
                )));
            }
            // Leftovers of a creation that crashed before writing the metadata.
            remove_dir_if_exists(&dir)?;
            config.log.device = DeviceConfig::Directory(dir);
            config.log.page_source = self.config.page_sources.as_ref().and_then(|sources| (sources.0)(&request.name));
        }
        let table = Table::create(config).map_err(|e| OpsError::from_engine(&e))?;
        let memory = MemoryLimit { limit: self.config.memory_limit_bytes(), tables: Arc::downgrade(&self.tables) };
        let entry = TableEntry::new(request.name.clone(), table, memory).map_err(OpsError::internal)?;
        tables.insert(request.name.clone(), Arc::new(entry));
        tracing::info!(table = %request.name, "table created");
        Ok(true)
    }

    /// Refuses a new table beyond `max_tables`, one whose reservation when made would take
    /// the tables' reserved memory past the limit (`max_memory_bytes`), or one whose page
    /// ring, index, schema and cache alone could never fit in the limit. A table reserves
    /// as it fills ([`Table::reserved_bytes`]): made, one log page
    /// ([`TableConfig::empty_reserved_bytes`]); full, its ring (`memory_budget_bytes` in
    /// whole pages), its index (`2^index_size_bits` buckets of 64 bytes), its schema's
    /// bound and its columnar tier's decoded-column cache (`columnar.cache_bytes`)
    /// ([`TableConfig::memory_bound_bytes`]), and a keyed table's key index and an
    /// in-memory table's Parquet files as they are. A table that cannot grow is refused
    /// its batches then ([`TableEntry::check_memory_for_ingest`]).
    fn check_capacity(&self, tables: &BTreeMap<String, Arc<TableEntry>>, name: &str, config: &TableConfig) -> Result<(), OpsError> {
        if tables.len() >= self.config.max_tables {
            return Err(OpsError::resource_exhausted(format!(
                "table {}: this daemon already serves {} tables, its limit (max_tables); drop one or raise the limit",
                crate::protocol::quoted(name),
                tables.len()
            )));
        }
        let limit = self.config.memory_limit_bytes();
        let bound = config.memory_bound_bytes();
        if bound > limit {
            return Err(OpsError::resource_exhausted(format!(
                "table {}: its page ring, index, schema and columnar cache take up to {bound} bytes once full, more than this \
                 daemon's limit of {limit} (max_memory_bytes): ask for a smaller memory_budget_bytes, or raise the limit",
                crate::protocol::quoted(name)
            )));
        }
        let reserved: u64 = tables.values().map(|e| e.table.reserved_bytes()).sum();
        let wanted = config.empty_reserved_bytes();
        if reserved.saturating_add(wanted) > limit {
            return Err(OpsError::resource_exhausted(format!(
                "table {}: it needs {wanted} bytes when made (one log page); the {} tables reserve {reserved} of this daemon's \
                 {limit} (max_memory_bytes): drop a table, or raise the limit",
                crate::protocol::quoted(name),
                tables.len()
            )));
        }
        Ok(())
    }

    /// Drops a table: stops it and deletes its files.
    pub fn drop_table(&self, name: &str) -> Result<(), OpsError> {
        let entry = {
            let mut tables = self.tables.write().map_err(|_| OpsError::internal("catalog lock poisoned"))?;
            tables
                .remove(name)
                .ok_or_else(|| OpsError::not_found(format!("table {} does not exist", crate::protocol::quoted(name))))?
        };
        entry.table.shutdown();
        if !self.config.in_memory {
            remove_dir_if_exists(&self.table_dir(name))?;
        }
        tracing::info!(table = %name, "table dropped");
        Ok(())
    }

    /// Replaces `name`'s retention policy (`alter_table`), checked as `create_table`
    /// checks it; kept across restarts, applied from the next retention check. Returns
    /// the previous policy.
    ///
    /// # Errors
    /// `NOT_FOUND` for an unknown table; `INVALID_ARGUMENT` for a zero amount, or an age
    /// on an in-memory daemon; `INTERNAL` when `table.json` cannot be rewritten.
    pub fn alter_retention(&self, name: &str, retention: shoal_core::table::RetentionPolicy) -> Result<shoal_core::table::RetentionPolicy, OpsError> {
        let entry = self.get(name)?;
        check_retention(name, &retention, self.config.in_memory)?;
        let previous = entry.table.retention();
        entry.table.set_retention(retention).map_err(|e| OpsError::from_engine(&e))?;
        tracing::info!(table = %name, ?previous, ?retention, "retention policy altered");
        Ok(previous)
    }

    /// Applies every table's retention policy ([`Table::apply_retention`]), logging what
    /// each dropped; returns the number of tables whose log head was truncated. A table
    /// whose truncation fails is logged and skipped.
    pub fn apply_retention(&self) -> usize {
        let mut truncated = 0;
        for entry in self.list() {
            match entry.table.apply_retention() {
                Ok(Some(report)) => {
                    truncated += 1;
                    tracing::info!(
                        table = %entry.name,
                        begin_address = report.begin_address.get(),
                        segments_deleted = report.segments_deleted,
                        bytes_deleted = report.bytes_deleted,
                        "retention truncated the log's head"
                    );
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(table = %entry.name, error = %e, "applying the retention policy failed"),
            }
        }
        truncated
    }

    /// Flushes and stops every table (graceful shutdown).
    pub fn close_all(&self) {
        for entry in self.list() {
            match entry.table.close() {
                Ok(()) => tracing::info!(table = %entry.name, tail = entry.table.tail_address().get(), "table flushed and closed"),
                Err(e) => tracing::error!(table = %entry.name, error = %e, "closing the table failed"),
            }
        }
    }
}

/// Checks a table's retention policy: positive amounts; an age only for a table with
/// segment files.
fn check_retention(table: &str, retention: &shoal_core::table::RetentionPolicy, in_memory: bool) -> Result<(), OpsError> {
    if retention.keep_bytes == Some(0) || retention.max_age_secs == Some(0) {
        return Err(OpsError::invalid_argument(format!(
            "table {table:?}: retention.keep_bytes and retention.max_age_secs must be positive (leave one out to keep everything by it)"
        )));
    }
    if retention.compact_obsolete_percent.is_some_and(|p| p > 100) {
        return Err(OpsError::invalid_argument(format!(
            "table {table:?}: retention.compact_obsolete_percent must be 0 (never) to 100"
        )));
    }
    if in_memory && retention.max_age_secs.is_some() {
        return Err(OpsError::invalid_argument(format!(
            "table {table:?}: retention.max_age_secs ages segment files, and this daemon runs --in-memory (use retention.keep_bytes)"
        )));
    }
    Ok(())
}

/// Largest `index_size_bits` a client may ask for (2^24 buckets × 64 bytes = 1 GiB).
pub const MAX_INDEX_SIZE_BITS: u32 = 24;
/// Largest `page_size_bits` a client may ask for (256 MiB pages).
pub const MAX_PAGE_SIZE_BITS: u32 = 28;

/// Rejects table sizes that would exhaust the daemon's memory: the index and page sizes
/// within fixed bounds, the memory budget at most 4 × the server's default.
fn check_limits(request: &CreateTable, config: &EngineConfig) -> Result<(), OpsError> {
    if let Some(bits) = request.index_size_bits {
        if !(4..=MAX_INDEX_SIZE_BITS).contains(&bits) {
            return Err(OpsError::invalid_argument(format!(
                "index_size_bits must be within 4..={MAX_INDEX_SIZE_BITS} (2^bits buckets of 64 bytes), got {bits}"
            )));
        }
    }
    if let Some(bits) = request.page_size_bits {
        if !(12..=MAX_PAGE_SIZE_BITS).contains(&bits) {
            return Err(OpsError::invalid_argument(format!(
                "page_size_bits must be within 12..={MAX_PAGE_SIZE_BITS} (4 KiB to 256 MiB pages), got {bits}"
            )));
        }
    }
    if let Some(bytes) = request.memory_budget_bytes {
        let max = config.memory_budget_bytes.saturating_mul(4);
        if bytes > max {
            return Err(OpsError::resource_exhausted(format!(
                "memory_budget_bytes {bytes} exceeds this server's limit of {max} (4 × memory_budget_bytes)"
            )));
        }
    }
    Ok(())
}

fn remove_dir_if_exists(dir: &Path) -> Result<(), OpsError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OpsError::internal(format!("cannot remove {}: {e}", dir.display()))),
    }
}


/// The columnar settings of a new table: the server's, with the keys `requested` gives
/// replaced.
///
/// # Errors
/// `INVALID_ARGUMENT` naming an unknown key or a value of the wrong type.
fn columnar_config(
    server: &shoal_core::columnar::ColumnarConfig,
    requested: Option<&serde_json::Value>,
) -> Result<shoal_core::columnar::ColumnarConfig, OpsError> {
    let Some(requested) = requested else { return Ok(server.clone()) };
    let serde_json::Value::Object(changes) = requested else {
        return Err(OpsError::invalid_argument("columnar: an object of settings expected (enabled, file_log_bytes, row_group_rows, codec, idle_ms, cache_bytes)"));
    };
    let base = serde_json::to_value(server).map_err(|e| OpsError::internal(e.to_string()))?;
    let with = |changes: &serde_json::Map<String, serde_json::Value>| {
        let mut merged = base.clone();
        if let serde_json::Value::Object(fields) = &mut merged {
            fields.extend(changes.clone());
        }
        serde_json::from_value::<shoal_core::columnar::ColumnarConfig>(merged)
    };
    // Each key alone first, so that the error names the key that is wrong.
    for (key, value) in changes {
        let one = serde_json::Map::from_iter([(key.clone(), value.clone())]);
        if let Err(e) = with(&one) {
            return Err(OpsError::invalid_argument(format!("columnar.{key}: {e}")));
        }
    }
    let config = with(changes).map_err(|e| OpsError::invalid_argument(format!("columnar: {e}")))?;
    if config.file_log_bytes == 0 || config.row_group_rows == 0 {
        return Err(OpsError::invalid_argument("columnar: file_log_bytes and row_group_rows must be positive"));
    }
    crate::config::check_range("columnar.cache_bytes", config.cache_bytes, 0, crate::config::MAX_MEMORY_BUDGET_BYTES as u64, " bytes")
        .map_err(OpsError::invalid_argument)?;
    crate::config::check_range("columnar.threads", config.threads, 1, shoal_core::columnar::MAX_COMPACTOR_THREADS, " threads")
        .map_err(OpsError::invalid_argument)?;
    Ok(config)
}
