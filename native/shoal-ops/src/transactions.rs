//! Transactions: records staged under a transaction id, invisible to scans until a
//! commit ingests them — the daemon side of a two-phase-commit sink (Flink's
//! exactly-once `TwoPhaseCommittingSink`).
//!
//! Life cycle: `begin` → `DoPut` batches with `{"transaction": id}` are validated (as
//! ingestion would: invalid JSON is rejected naming the record, or skipped under the
//! table's `skip` policy) and appended to the transaction's staging file → `prepare`
//! syncs the staging file → `commit` ingests the staged records as writer batches of the
//! writer `txn/<id>` (serials 1, 2, … per chunk), waits until they are durable, and
//! records the outcome; `abort` drops the staged records.
//!
//! - `commit` is idempotent: a committed transaction answers "committed" again. A commit
//!   interrupted by a crash is finished by the next `commit`: chunks already ingested are
//!   skipped through the writer's serials (recovery keeps a writer batch whole or drops
//!   it), so every staged record is ingested exactly once.
//! - On disk (`<table dir>/transactions/`): `<id>.staged` holds the records, each as a
//!   little-endian u32 and its bytes — the u32's low 30 bits are the length, its top two
//!   the record's operation on a keyed table (0 upsert, 1 delete, 2 merge: files written
//!   before keyed tables read as upserts); `<id>.state` (JSON, replaced atomically)
//!   holds the state and the number of staged records. In-memory tables keep staged
//!   records in memory. A committed or aborted transaction keeps its state file so its
//!   outcome can be asked again; its staged records are deleted.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal_core::checkpoint::{read_json, write_json_atomic};
use shoal_core::keys::RecordOp;
use shoal_core::session::WriterBatch;
use shoal_core::table::Table;
use crate::error::OpsError;
use shoal_core::LogAddress;


/// Records per writer batch when a commit ingests the staged records.
const COMMIT_CHUNK: usize = 1000;

/// Where a staged record's operation sits in its u32 length word.
const OP_SHIFT: u32 = 30;

/// A staged record: its operation and its bytes.
type Staged = (RecordOp, Vec<u8>);

fn op_bits(op: RecordOp) -> u32 {
    match op {
        RecordOp::Upsert => 0,
        RecordOp::Delete => 1,
        RecordOp::Merge => 2,
    }
}

fn op_of_bits(bits: u32) -> Option<RecordOp> {
    match bits {
        0 => Some(RecordOp::Upsert),
        1 => Some(RecordOp::Delete),
        2 => Some(RecordOp::Merge),
        _ => None,
    }
}

/// The state of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionState {
    /// Accepting staged records.
    Open,
    /// Staged records are synced; waiting for commit or abort.
    Prepared,
    /// Its records are ingested and durable.
    Committed,
    /// Its records were dropped.
    Aborted,
}

/// What `<id>.state` holds, and what the transaction actions answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransactionInfo {
    /// The transaction id.
    pub transaction: String,
    /// Its state.
    pub state: TransactionState,
    /// Records staged (for committed ones: ingested).
    pub records: u64,
    /// Records skipped as invalid JSON under the table's `skip` policy.
    #[serde(default)]
    pub skipped: u64,
}

struct Transaction {
    info: TransactionInfo,
    /// Staged records of an in-memory table.
    memory: Vec<Staged>,
    /// Their bytes: at most a quarter of the table's page ring (what a commit can surely
    /// ingest).
    memory_bytes: u64,
}

/// The transactions of one table.
pub struct Transactions {
    /// `<table dir>/transactions`, or `None` for an in-memory table.
    dir: Option<PathBuf>,
    all: Mutex<HashMap<String, Arc<Mutex<Transaction>>>>,
}

/// Checks a transaction id: 1–200 characters of `A-Z a-z 0-9 _ - . :`.
fn validate_id(id: &str) -> Result<(), OpsError> {
    let valid = !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if valid {
        Ok(())
    } else {
        Err(OpsError::invalid_argument(format!(
            "invalid transaction id {id:?}: use 1-200 characters of A-Z a-z 0-9 _ - . : (not starting with '.')"
        )))
    }
}

fn io_status(what: &str, path: &Path, error: &std::io::Error) -> OpsError {
    let message = format!("{what} {}: {error}", path.display());
    if matches!(error.raw_os_error(), Some(28 | 122)) {
        OpsError::resource_exhausted(message)
    } else {
        OpsError::internal(message)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Transactions {
    /// The transactions of `table`, loaded from its directory (after a restart, open
    /// and prepared transactions are still there with their staged records).
    ///
    /// # Errors
    /// When the directory cannot be created or a state file cannot be read.
    pub fn open(table: &Table) -> Result<Self, String> {
        let dir = table.directory().map(|d| d.join("transactions"));
        let mut all = HashMap::new();
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_suffix(".state") else { continue };
                let mut info: TransactionInfo = read_json(dir, &name)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{name} vanished"))?;
                if info.state == TransactionState::Open {
                    match recount_staged(&dir.join(format!("{id}.staged"))) {
                        Ok(records) => info.records = records,
                        Err(error) => tracing::warn!(transaction = id, %error, "cannot recount an open transaction's staged records"),
                    }
                }
                all.insert(id.to_owned(), Arc::new(Mutex::new(Transaction { info, memory: Vec::new(), memory_bytes: 0 })));
            }
        }
        Ok(Self { dir, all: Mutex::new(all) })
    }

    fn get(&self, id: &str) -> Result<Arc<Mutex<Transaction>>, OpsError> {
        validate_id(id)?;
        lock(&self.all).get(id).cloned().ok_or_else(|| {
            OpsError::not_found(format!("transaction {id:?} does not exist (begin it with begin_transaction)"))
        })
    }

    fn staged_path(&self, id: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{id}.staged")))
    }

    fn save(&self, info: &TransactionInfo) -> Result<(), OpsError> {
        match &self.dir {
            Some(dir) => write_json_atomic(dir, &format!("{}.state", info.transaction), info).map_err(|e| OpsError::from_engine(&e)),
            None => Ok(()),
        }
    }

    /// `begin_transaction`: creates an open transaction; beginning an open or prepared
    /// one again is a no-op.
    ///
    /// # Errors
    /// `FAILED_PRECONDITION` for a committed or aborted id; `INVALID_ARGUMENT` for a bad id.
    pub fn begin(&self, id: &str) -> Result<TransactionInfo, OpsError> {
        validate_id(id)?;
        let mut all = lock(&self.all);
        if let Some(existing) = all.get(id) {
            let info = lock(existing).info.clone();
            return match info.state {
                TransactionState::Open | TransactionState::Prepared => Ok(info),
                state => Err(OpsError::failed_precondition(format!("transaction {id:?} is already {state:?}"))),
            };
        }
        let info = TransactionInfo { transaction: id.to_owned(), state: TransactionState::Open, records: 0, skipped: 0 };
        if let Some(path) = self.staged_path(id) {
            std::fs::File::create(&path).map_err(|e| io_status("cannot create", &path, &e))?;
        }
        self.save(&info)?;
        all.insert(id.to_owned(), Arc::new(Mutex::new(Transaction { info: info.clone(), memory: Vec::new(), memory_bytes: 0 })));
        Ok(info)
    }

    /// Stages `records` (validated as `table` would ingest them) in transaction `id`, each
    /// with its operation `ops[i]` (empty: upserts; deletes and merges only in a keyed
    /// table). Returns `(records staged, skipped (row, reason))`.
    ///
    /// # Errors
    /// `NOT_FOUND`; `FAILED_PRECONDITION` unless the transaction is open;
    /// `INVALID_ARGUMENT` naming the first invalid record under the `reject` policy
    /// (nothing of the batch is staged).
    pub fn stage(&self, table: &Table, id: &str, records: &[&[u8]], ops: &[RecordOp]) -> Result<(usize, Vec<(usize, String)>), OpsError> {
        table.check_ops(records.len(), ops).map_err(|e| OpsError::from_engine(&e))?;
        let op = |index: usize| ops.get(index).copied().unwrap_or_default();
        let transaction = self.get(id)?;
        let mut transaction = lock(&transaction);
        if transaction.info.state != TransactionState::Open {
            return Err(OpsError::failed_precondition(format!(
                "transaction {id:?} is {:?}; records can be staged only while it is open",
                transaction.info.state
            )));
        }
        let problems = table.check_records(records);
        if let Some((index, reason)) = problems.first() {
            if table.config().on_invalid_json == shoal_core::table::InvalidJsonPolicy::Reject {
                return Err(OpsError::invalid_argument(format!("record {index} of the batch is not valid: {reason}")));
            }
        }
        let skip: std::collections::HashSet<usize> = problems.iter().map(|(i, _)| *i).collect();
        let kept: Vec<(RecordOp, &[u8])> = records.iter().enumerate().filter(|(i, _)| !skip.contains(i)).map(|(i, r)| (op(i), *r)).collect();
        match self.staged_path(id) {
            Some(path) => {
                let mut buffer = Vec::with_capacity(kept.iter().map(|(_, r)| r.len() + 4).sum());
                for (op, record) in &kept {
                    let length = u32::try_from(record.len())
                        .ok()
                        .filter(|l| *l < 1 << OP_SHIFT)
                        .ok_or_else(|| OpsError::invalid_argument("a record of 1 GiB or more cannot be staged"))?;
                    buffer.extend_from_slice(&(length | op_bits(*op) << OP_SHIFT).to_le_bytes());
                    buffer.extend_from_slice(record);
                }
                let mut file = std::fs::OpenOptions::new().append(true).open(&path).map_err(|e| io_status("cannot open", &path, &e))?;
                file.write_all(&buffer).map_err(|e| io_status("cannot write", &path, &e))?;
            }
            None => {
                let bytes: u64 = kept.iter().map(|(_, r)| r.len() as u64).sum();
                // A quarter of the ring: records take their payload plus a header and key
                // pointers, and a batch ingested into an in-memory ring reserves twice its
                // size (the fillers that may close its pages).
                let limit = table.ring_bytes() / 4;
                if transaction.memory_bytes + bytes > limit {
                    return Err(OpsError::resource_exhausted(format!(
                        "transaction {}: staging {bytes} more bytes would pass {limit} bytes, a quarter of its in-memory \
                         table's page ring (memory_budget_bytes): more than a commit could ingest; commit it and begin another",
                        crate::protocol::quoted(id)
                    )));
                }
                transaction.memory_bytes += bytes;
                transaction.memory.extend(kept.iter().map(|(op, r)| (*op, r.to_vec())));
            }
        }
        transaction.info.records += kept.len() as u64;
        transaction.info.skipped += problems.len() as u64;
        Ok((kept.len(), problems))
    }

    /// `prepare_transaction`: syncs the staged records; afterwards nothing more is staged.
    ///
    /// # Errors
    /// `NOT_FOUND`; `FAILED_PRECONDITION` for a committed or aborted transaction.
    pub fn prepare(&self, id: &str) -> Result<TransactionInfo, OpsError> {
        let transaction = self.get(id)?;
        let mut transaction = lock(&transaction);
        match transaction.info.state {
            TransactionState::Prepared => return Ok(transaction.info.clone()),
            TransactionState::Open => {}
            state => return Err(OpsError::failed_precondition(format!("transaction {id:?} is already {state:?}"))),
        }
        if let Some(path) = self.staged_path(id) {
            let file = std::fs::File::open(&path).map_err(|e| io_status("cannot open", &path, &e))?;
            file.sync_all().map_err(|e| io_status("cannot sync", &path, &e))?;
        }
        transaction.info.state = TransactionState::Prepared;
        self.save(&transaction.info)?;
        Ok(transaction.info.clone())
    }

    /// `commit_transaction`: ingests the staged records exactly once and waits until
    /// they are durable (on-disk tables); idempotent.
    ///
    /// # Errors
    /// `NOT_FOUND`; `FAILED_PRECONDITION` for an aborted transaction; engine errors.
    pub fn commit(&self, table: &Table, id: &str) -> Result<TransactionInfo, OpsError> {
        let transaction = self.get(id)?;
        let mut transaction = lock(&transaction);
        match transaction.info.state {
            TransactionState::Committed => return Ok(transaction.info.clone()),
            TransactionState::Aborted => {
                return Err(OpsError::failed_precondition(format!("transaction {id:?} was aborted; it cannot commit")))
            }
            TransactionState::Open | TransactionState::Prepared => {}
        }
        let writer = format!("txn/{id}");
        let mut end = LogAddress::ZERO;
        let mut committed = 0u64;
        let mut ingest_chunk = |chunk: &[Staged], serial: u64| -> Result<(), OpsError> {
            let refs: Vec<&[u8]> = chunk.iter().map(|(_, r)| r.as_slice()).collect();
            let ops: Vec<RecordOp> = chunk.iter().map(|(op, _)| *op).collect();
            let report =
                table.ingest_ops_as(WriterBatch { writer: &writer, serial }, &refs, &ops).map_err(|e| OpsError::from_engine(&e))?;
            end = end.max(report.end_address);
            committed += chunk.len() as u64;
            Ok(())
        };
        match self.staged_path(id) {
            // One chunk in memory at a time, however large the transaction (the whole
            // staging file was read first: a daemon's memory for a large transaction).
            Some(path) => {
                let mut staged = StagedReader::open(&path)?;
                let mut serial = 1u64;
                loop {
                    let chunk = staged.next_chunk(COMMIT_CHUNK)?;
                    if chunk.is_empty() {
                        break;
                    }
                    ingest_chunk(&chunk, serial)?;
                    serial += 1;
                }
            }
            // Kept until the commit succeeds, so that a failed commit can be retried.
            None => {
                for (chunk, serial) in transaction.memory.chunks(COMMIT_CHUNK).zip(1u64..) {
                    ingest_chunk(chunk, serial)?;
                }
            }
        }
        transaction.memory = Vec::new();
        transaction.memory_bytes = 0;
        if table.has_storage() {
            // Chunks skipped as already ingested (a retried commit) are below the tail.
            let target = if end == LogAddress::ZERO { table.tail_address() } else { end };
            table.wait_durable(target, Duration::from_secs(60)).map_err(|e| OpsError::from_engine(&e))?;
        }
        transaction.info.state = TransactionState::Committed;
        transaction.info.records = committed;
        self.save(&transaction.info)?;
        if let Some(path) = self.staged_path(id) {
            let _ = std::fs::remove_file(path);
        }
        Ok(transaction.info.clone())
    }

    /// `abort_transaction`: drops the staged records; idempotent.
    ///
    /// # Errors
    /// `NOT_FOUND`; `FAILED_PRECONDITION` for a committed transaction.
    pub fn abort(&self, id: &str) -> Result<TransactionInfo, OpsError> {
        let transaction = self.get(id)?;
        let mut transaction = lock(&transaction);
        match transaction.info.state {
            TransactionState::Aborted => return Ok(transaction.info.clone()),
            TransactionState::Committed => {
                return Err(OpsError::failed_precondition(format!("transaction {id:?} is committed; it cannot abort")))
            }
            TransactionState::Open | TransactionState::Prepared => {}
        }
        transaction.memory = Vec::new();
        transaction.memory_bytes = 0;
        transaction.info.state = TransactionState::Aborted;
        self.save(&transaction.info)?;
        if let Some(path) = self.staged_path(id) {
            let _ = std::fs::remove_file(path);
        }
        Ok(transaction.info.clone())
    }

    /// `list_transactions`: every transaction, by id.
    #[must_use]
    pub fn list(&self) -> Vec<TransactionInfo> {
        let all: Vec<Arc<Mutex<Transaction>>> = lock(&self.all).values().cloned().collect();
        let mut infos: Vec<TransactionInfo> = all.iter().map(|t| lock(t).info.clone()).collect();
        infos.sort_by(|a, b| a.transaction.cmp(&b.transaction));
        infos
    }
}

/// The records of an open transaction's staging file after a restart, which is cut after
/// its last whole record. Its count (kept in memory only while the daemon runs) is taken
/// from the file: a batch written just before a crash but never acknowledged is in it, so
/// the writer's count of acknowledged records differs at `prepare_transaction` and the
/// writer aborts instead of committing it twice after resending it; and records staged
/// after the restart follow whole records, not a torn one.
fn recount_staged(path: &Path) -> Result<u64, OpsError> {
    if !path.exists() {
        return Ok(0);
    }
    let mut reader = StagedReader::open(path)?;
    let mut records = 0u64;
    loop {
        let chunk = reader.next_chunk(COMMIT_CHUNK)?;
        if chunk.is_empty() {
            break;
        }
        records += chunk.len() as u64;
    }
    let whole = reader.whole_bytes;
    drop(reader);
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| io_status("cannot open", path, &e))?;
    if file.metadata().map_err(|e| io_status("cannot read", path, &e))?.len() > whole {
        file.set_len(whole).map_err(|e| io_status("cannot cut", path, &e))?;
        file.sync_all().map_err(|e| io_status("cannot sync", path, &e))?;
    }
    Ok(records)
}

/// Reads a staging file (u32 LE length + bytes per record) a chunk of records at a time.
/// A torn last record (a crash while an open transaction was written) ends the file.
struct StagedReader<'a> {
    path: &'a Path,
    reader: BufReader<std::fs::File>,
    /// Bytes left in the file: no length read from it may pass them.
    remaining: u64,
    /// Bytes of the whole records read so far.
    whole_bytes: u64,
}

impl<'a> StagedReader<'a> {
    fn open(path: &'a Path) -> Result<Self, OpsError> {
        let file = std::fs::File::open(path).map_err(|e| io_status("cannot open", path, &e))?;
        let remaining = file.metadata().map_err(|e| io_status("cannot read", path, &e))?.len();
        Ok(Self { path, reader: BufReader::new(file), remaining, whole_bytes: 0 })
    }

    /// Up to `max` records; empty at the end of the file.
    fn next_chunk(&mut self, max: usize) -> Result<Vec<Staged>, OpsError> {
        let mut records = Vec::new();
        while records.len() < max {
            let mut length = [0u8; 4];
            match self.reader.read_exact(&mut length) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(io_status("cannot read", self.path, &e)),
            }
            let word = u32::from_le_bytes(length);
            let length = u64::from(word & ((1 << OP_SHIFT) - 1));
            let Some(op) = op_of_bits(word >> OP_SHIFT) else {
                return Err(OpsError::internal(format!("{}: a staged record with an unknown operation (damaged file?)", self.path.display())));
            };
            self.remaining = self.remaining.saturating_sub(4);
            if length > self.remaining {
                break; // torn (or damaged) last record
            }
            #[allow(clippy::cast_possible_truncation)]
            let mut record = vec![0u8; length as usize];
            match self.reader.read_exact(&mut record) {
                Ok(()) => {
                    records.push((op, record));
                    self.whole_bytes += 4 + length;
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(io_status("cannot read", self.path, &e)),
            }
            self.remaining -= length;
        }
        Ok(records)
    }
}
