//! What a table keeps on disk besides its log (FishStore Appendix E, FASTER §6.5):
//!
//! - `table.json` — [`TableMeta`]: the log geometry, the hash-index size, the invalid-JSON
//!   policy and every PSF ever registered with its id, definition and safe boundaries.
//!   Rewritten (atomically) when a table is created and when a PSF is registered or
//!   deregistered, *before* the change is acknowledged: a PSF's id is recorded before any
//!   record can carry a key pointer for it.
//! - `checkpoint.json` — [`CheckpointState`]: the inferred schema with the address up to
//!   which it covers the log, written by [`Table::checkpoint`](crate::table::Table::checkpoint)
//!   and at close, so that recovery re-infers only the pages after it.
//!
//! Files are replaced atomically: written to `NAME.tmp`, synced, renamed over `NAME`, and
//! the directory synced, so a crash leaves either the old or the new version.

pub mod index;

use serde::{Deserialize, Serialize};

pub use crate::files::{decode_checksummed, encode_checksummed, read_json, write_json_atomic};
use crate::psf::{Psf, PsfSpec, NOT_YET};
use crate::schema::InferredSchema;
use crate::config::{DurabilityPolicy, InvalidJsonPolicy, RetentionPolicy};
use crate::LogAddress;

/// File name of [`TableMeta`] in a table's directory.
pub const TABLE_META_FILE: &str = "table.json";
/// File name of [`CheckpointState`] in a table's directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";
/// Version of the on-disk format (`table.json`, records, pages).
pub const FORMAT_VERSION: u32 = 1;

/// A table's durable metadata (`table.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableMeta {
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// log2 of the page size in bytes.
    pub page_size_bits: u32,
    /// Pages per segment file.
    pub pages_per_segment: u64,
    /// log2 of the hash bucket count.
    pub index_size_bits: u32,
    /// Memory budget of the log's in-memory ring, in bytes.
    pub memory_budget_bytes: usize,
    /// Durability policy.
    #[serde(default)]
    pub durability: DurabilityPolicy,
    /// Lowest valid log address (moved by retention).
    #[serde(default = "first_address")]
    pub begin_address: LogAddress,
    /// Policy for invalid JSON.
    pub on_invalid_json: InvalidJsonPolicy,
    /// Every PSF ever registered, in id order.
    pub psfs: Vec<PsfMeta>,
    /// The columnar tier's settings (absent in tables written before it: the defaults).
    #[serde(default)]
    pub columnar: crate::columnar::ColumnarConfig,
    /// The retention policy (absent in tables written before it: keep everything).
    #[serde(default, skip_serializing_if = "RetentionPolicy::is_none")]
    pub retention: RetentionPolicy,
    /// The primary key's fields as dotted paths (absent: an append-only table).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_key: Vec<String>,
    /// A keyed table's snapshot horizon ([`crate::keys::Snapshots`]): the lowest
    /// snapshot a scan may have after the last log compaction (0: never compacted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub snapshot_horizon: LogAddress,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(value: &LogAddress) -> bool {
    *value == LogAddress::ZERO
}

fn first_address() -> LogAddress {
    LogAddress::FIRST
}

/// One PSF in [`TableMeta`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PsfMeta {
    /// Its id (its position in [`TableMeta::psfs`]).
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its definition.
    pub definition: PsfSpec,
    /// Safe register address; `None` while registration had not completed.
    pub safe_register_address: Option<LogAddress>,
    /// Safe deregister address; `None` while active.
    pub safe_deregister_address: Option<LogAddress>,
}

impl PsfMeta {
    /// The metadata of `psf` now.
    #[must_use]
    pub fn of(psf: &Psf) -> Self {
        let known = |address: LogAddress| (address != NOT_YET).then_some(address);
        Self {
            id: psf.id,
            name: psf.name.clone(),
            definition: psf.kind.to_spec(),
            safe_register_address: known(psf.safe_register_address()),
            safe_deregister_address: known(psf.safe_deregister_address()),
        }
    }
}

/// State written by a checkpoint (`checkpoint.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointState {
    /// The log's tail when the checkpoint was taken; everything below was flushed.
    pub log_end_address: LogAddress,
    /// The inferred schema of every record below [`Self::schema_observed_until`].
    pub schema: InferredSchema,
    /// Address up to which [`Self::schema`] covers the log (a page boundary).
    pub schema_observed_until: LogAddress,
    /// Every writer's last ingested serial (see [`crate::session`]), taken before
    /// [`Self::log_end_address`] was read.
    #[serde(default)]
    pub writers: std::collections::BTreeMap<String, u64>,
    /// Counters of the records below [`Self::schema_observed_until`].
    #[serde(default)]
    pub totals: ObservedTotals,
    /// The fuzzy index checkpoint taken with this checkpoint, if any.
    #[serde(default)]
    pub index: Option<IndexCheckpointRef>,
}

/// Counters of the records in observed (whole, flushed) pages, kept by the log's page
/// observer together with the inferred schema.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedTotals {
    /// Visible records.
    pub records: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// Key pointers by PSF id.
    pub key_pointers: Vec<u64>,
}

impl ObservedTotals {
    /// Adds one visible record with its key pointers' PSF ids.
    pub fn add(&mut self, payload_bytes: usize, psf_ids: impl Iterator<Item = u32>) {
        self.records += 1;
        self.payload_bytes += payload_bytes as u64;
        for id in psf_ids {
            let id = id as usize;
            if self.key_pointers.len() <= id {
                self.key_pointers.resize(id + 1, 0);
            }
            self.key_pointers[id] += 1;
        }
    }

    /// Takes away one record that [`Self::add`] counted (it was withdrawn since).
    pub fn remove(&mut self, payload_bytes: usize, psf_ids: impl Iterator<Item = u32>) {
        self.records = self.records.saturating_sub(1);
        self.payload_bytes = self.payload_bytes.saturating_sub(payload_bytes as u64);
        for id in psf_ids {
            if let Some(count) = self.key_pointers.get_mut(id as usize) {
                *count = count.saturating_sub(1);
            }
        }
    }

    /// Adds `other`.
    pub fn merge(&mut self, other: &ObservedTotals) {
        self.records += other.records;
        self.payload_bytes += other.payload_bytes;
        if self.key_pointers.len() < other.key_pointers.len() {
            self.key_pointers.resize(other.key_pointers.len(), 0);
        }
        for (mine, theirs) in self.key_pointers.iter_mut().zip(&other.key_pointers) {
            *mine += theirs;
        }
    }
}

/// Where a checkpoint's index copy is and the log range it is fuzzy over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexCheckpointRef {
    /// File name in the table directory.
    pub file: String,
    /// Log tail before the copy began: recovery replays from here.
    pub start: LogAddress,
    /// Log tail after the copy ended: the checkpoint is usable only if the recovered log
    /// reaches it.
    pub end: LogAddress,
    /// Entries copied.
    pub entries: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_json_round_trips_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_json::<CheckpointState>(dir.path(), CHECKPOINT_FILE).unwrap().is_none());
        let mut state = CheckpointState { log_end_address: LogAddress::FIRST, ..CheckpointState::default() };
        write_json_atomic(dir.path(), CHECKPOINT_FILE, &state).unwrap();
        state.log_end_address = LogAddress::new(128);
        write_json_atomic(dir.path(), CHECKPOINT_FILE, &state).unwrap();
        let read: CheckpointState = read_json(dir.path(), CHECKPOINT_FILE).unwrap().unwrap();
        assert_eq!(read.log_end_address, LogAddress::new(128));
        assert!(!dir.path().join("checkpoint.json.tmp").exists());
        std::fs::write(dir.path().join(TABLE_META_FILE), b"{not json").unwrap();
        let error = read_json::<TableMeta>(dir.path(), TABLE_META_FILE).unwrap_err();
        assert!(error.to_string().contains("table.json"), "{error}");
    }

    #[test]
    fn a_flipped_bit_anywhere_in_the_content_fails_the_read() {
        let dir = tempfile::tempdir().unwrap();
        let state = CheckpointState { log_end_address: LogAddress::new(4_194_304), ..CheckpointState::default() };
        write_json_atomic(dir.path(), CHECKPOINT_FILE, &state).unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        let good = std::fs::read(&path).unwrap();
        let mut checked = 0;
        for at in 0..good.len() {
            for bit in [0x01u8, 0x10] {
                let mut bytes = good.clone();
                bytes[at] ^= bit;
                std::fs::write(&path, &bytes).unwrap();
                let read = read_json::<CheckpointState>(dir.path(), CHECKPOINT_FILE);
                assert!(read.is_err(), "a flip of {bit:#x} at byte {at} was believed: {read:?}");
                checked += 1;
            }
        }
        assert!(checked > 100);
        // Files from before the checksum: the bare value, still read.
        std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
        let read: CheckpointState = read_json(dir.path(), CHECKPOINT_FILE).unwrap().unwrap();
        assert_eq!(read.log_end_address, state.log_end_address);
    }
}
