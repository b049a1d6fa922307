//! A table's configuration: its log and index geometry, its durability and invalid-JSON
//! policies and its columnar tier (below [`crate::table`], which is built from it; the
//! checkpoint's metadata records the policies).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::columnar::ColumnarConfig;
use crate::log::{DeviceConfig, LogConfig};

/// What to do with a record that is not valid JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidJsonPolicy {
    /// Fail the whole batch, naming the record; nothing of the batch is written.
    #[default]
    Reject,
    /// Write the valid records, count and skip the others.
    Skip,
}

/// When an ingested batch counts as acknowledged, and what that promises.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum DurabilityPolicy {
    /// Acknowledged means accepted: pages reach the segment files when they fill (or on
    /// a checkpoint), unsynced. In-memory speed; a crash loses the unflushed tail.
    #[default]
    None,
    /// Group commit: every `interval_ms` the log's filled prefix is written and synced;
    /// a batch is acknowledged once it is durable (waits up to about one interval).
    GroupCommit {
        /// Interval between group commits, in milliseconds (at least 1).
        interval_ms: u64,
    },
    /// Every batch is written and synced before it is acknowledged.
    Fsync,
    /// The object store is the durable home (issue 47): every `interval_ms` the log's
    /// filled prefix is written to the segment files (unsynced: the local disk is a cache),
    /// and a batch is acknowledged once the table's owner has put those bytes into the
    /// remote store and said so ([`crate::Table::advance_remote_durable`]). The engine
    /// itself uploads nothing: the daemon's remote mirror does.
    Remote {
        /// Interval between flushes of the open page, in milliseconds (at least 1).
        interval_ms: u64,
    },
}

/// Configuration of a [`Table`].
#[derive(Debug, Clone, PartialEq)]
pub struct TableConfig {
    /// The hybrid log (page size, memory budget, device).
    pub log: LogConfig,
    /// log2 of the number of 64-byte hash buckets. Default 18 (16 MiB, ~1.8 M entries).
    pub index_size_bits: u32,
    /// Policy for invalid JSON. Default [`InvalidJsonPolicy::Reject`].
    pub on_invalid_json: InvalidJsonPolicy,
    /// Durability of acknowledged batches. Default [`DurabilityPolicy::None`]. Applied to
    /// the log's settings by [`TableConfig::with_durability`].
    pub durability: DurabilityPolicy,
    /// The columnar tier ([`crate::columnar`]). Default: on.
    pub columnar: ColumnarConfig,
    /// What retention keeps of the log, applied by [`Table::apply_retention`]
    /// (`crate::table::Table`). Default: everything.
    pub retention: RetentionPolicy,
    /// The primary key's fields ([`crate::keys`]): empty for an append-only table (the
    /// default); one path, or several for a composite key, for a keyed table, whose
    /// records are upserted, deleted and merged by key and whose queries see each key's
    /// latest version (its columnar files hold every version; scans validate them).
    pub primary_key: Vec<crate::path::FieldPath>,
}

/// A table's retention policy (Kafka's `retention.bytes` and `retention.ms`): the head of
/// the log beyond it is truncated ([`crate::retention`], FASTER's `ShiftBeginAddress`)
/// whenever [`Table::apply_retention`](crate::table::Table::apply_retention) runs (the
/// daemon: every `retention_check_secs`). Both unset: keep everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionPolicy {
    /// Keep about the newest this many bytes of log (whole pages are dropped, so up to a
    /// page more stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_bytes: Option<u64>,
    /// Drop the segment files last written longer ago than this many seconds (on-disk
    /// tables only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_secs: Option<u64>,
    /// Keyed tables ([`crate::keys`]): compact the log up to its flushed address
    /// ([`crate::table::Table::compact_log`], FASTER's roll to tail) when the obsolete
    /// versions below it (superseded versions and deleted keys' tombstones) are at least
    /// this percent of the key index's versions (live and obsolete). Unset:
    /// [`DEFAULT_COMPACT_OBSOLETE_PERCENT`]; 0: never. Append-only tables ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_obsolete_percent: Option<u8>,
}

/// The default [`RetentionPolicy::compact_obsolete_percent`] of keyed tables: compact
/// once half the versions are obsolete (each compaction then copies at most as many
/// bytes as it frees).
pub const DEFAULT_COMPACT_OBSOLETE_PERCENT: u8 = 50;

impl RetentionPolicy {
    /// Whether the policy keeps everything.
    #[must_use]
    pub fn is_none(&self) -> bool {
        self.keep_bytes.is_none() && self.max_age_secs.is_none() && self.compact_obsolete_percent.is_none()
    }
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            log: LogConfig::default(),
            index_size_bits: 18,
            on_invalid_json: InvalidJsonPolicy::Reject,
            durability: DurabilityPolicy::None,
            columnar: ColumnarConfig::default(),
            retention: RetentionPolicy::default(),
            primary_key: Vec::new(),
        }
    }
}

impl TableConfig {
    /// An in-memory table (null device) with the given memory budget. Its records live
    /// only in the page ring: a batch that does not fit is refused with
    /// [`Error::MemoryFull`](crate::Error::MemoryFull) (nothing of it written) until
    /// retention frees pages; see [`Self::in_memory_window`] for FishStore's null device,
    /// which discards evicted pages.
    #[must_use]
    pub fn in_memory(memory_budget_bytes: usize) -> Self {
        Self { log: LogConfig { memory_budget_bytes, ..LogConfig::default() }, ..Self::default() }
    }

    /// [`Self::in_memory`] as a sliding window: once the ring is full, each new page
    /// evicts the oldest, whose records are lost ([`LogConfig::discard_evicted_pages`]);
    /// for benchmarks and tests that stream more than the budget through memory.
    #[must_use]
    pub fn in_memory_window(memory_budget_bytes: usize) -> Self {
        let mut config = Self::in_memory(memory_budget_bytes);
        config.log.discard_evicted_pages = true;
        config
    }

    /// This configuration with `policy`, and the log set up for it: synced flushes for
    /// `group_commit` and `fsync`, a group-commit interval for `group_commit`.
    #[must_use]
    pub fn with_durability(mut self, policy: DurabilityPolicy) -> Self {
        self.durability = policy;
        self.log.sync_on_flush = matches!(policy, DurabilityPolicy::GroupCommit { .. } | DurabilityPolicy::Fsync);
        self.log.flush_interval = match policy {
            DurabilityPolicy::GroupCommit { interval_ms } | DurabilityPolicy::Remote { interval_ms } => {
                Some(std::time::Duration::from_millis(interval_ms.max(1)))
            }
            _ => None,
        };
        self
    }

    /// The most memory a table with this configuration reserves for its page ring, index,
    /// schema and cache, in bytes, once full: its page ring (the memory budget rounded down
    /// to whole pages, at least 4), its hash index's main buckets (64 bytes each), the
    /// inferred schema's bound ([`crate::schema::SCHEMA_RESERVED_BYTES`]) and the columnar
    /// tier's decoded-column cache (`columnar.cache_bytes`, when the tier is on). A keyed
    /// table's key index and an in-memory table's Parquet files come on top
    /// ([`crate::Table::reserved_bytes`]).
    #[must_use]
    pub fn memory_bound_bytes(&self) -> u64 {
        let columnar = if self.columnar.enabled { self.columnar.cache_bytes } else { 0 };
        crate::log::HybridLog::ring_bytes_for(&self.log)
            + (64u64 << self.index_size_bits)
            + crate::schema::SCHEMA_RESERVED_BYTES
            + columnar
    }

    /// The memory a table with this configuration reserves when it is made, before it holds
    /// a record, in bytes: the frame of its first log page (one page). The rest is reserved
    /// as the table fills ([`crate::Table::reserved_bytes`],
    /// [`crate::Table::memory_growth_for`]).
    #[must_use]
    pub fn empty_reserved_bytes(&self) -> u64 {
        1u64 << self.log.page_size_bits.min(30)
    }

    /// A table whose log pages are flushed to segment files in `dir`.
    #[must_use]
    pub fn on_disk(dir: impl Into<PathBuf>) -> Self {
        Self { log: LogConfig { device: DeviceConfig::Directory(dir.into()), ..LogConfig::default() }, ..Self::default() }
    }
}
