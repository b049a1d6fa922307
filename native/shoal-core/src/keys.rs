//! Keyed tables: the primary key, the key index and validation (FASTER §2 and §5's
//! Upsert / Delete / Read-Modify-Write over the hybrid log; Perseid, ACM TOS 2024, §4's
//! validation of secondary-index candidates by blind writes).
//!
//! A keyed table's records carry a primary key: one field (a PSF projection) or a tuple
//! of fields (a composite), registered at creation as the PSF [`PRIMARY_KEY_PSF`], so
//! every version of a key is linked into the key's chain and a query on the key is an
//! index scan. Writes are *blind*: an upsert appends the new version and links its key
//! pointers like any record; superseded versions stay in their chains (no ingest stall,
//! no chain rewrite). A delete appends a *tombstone*: a record whose payload is empty
//! (never a valid JSON document) and whose only key pointer is the key's.
//!
//! Reads see one version per key through **validation** (Perseid §4.3): each candidate a
//! scan finds — along any chain or by a full scan — is checked against the [`KeyIndex`].
//! It maps each key (its canonical encoding, exact, in memory) to its latest version
//! (FASTER's hash index role), and keeps a small volatile table of the versions that a
//! newer one superseded, by address: a candidate absent from it is live without touching
//! the log or even parsing the record, a superseded one is dropped before it is read.
//!
//! A scan validates against a **snapshot**: a log address, every version at or above
//! which is ignored (the plan's end: the tail complete at planning, or the request's
//! `to_address` — time travel by log address). A candidate is valid when it is the
//! latest version of its key below the snapshot; when the newer version known lies at or
//! above it, the key's chain is walked to find the version the snapshot saw
//! (`crate::scan`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use serde::Serialize;

use crate::path::FieldPath;
use crate::psf::{PsfId, PsfKind};
use crate::value::{encode_canonical, encode_composite, FieldValue};
use crate::LogAddress;

/// The name of the PSF that indexes a keyed table's primary key (registered first, so
/// its id is 0).
pub const PRIMARY_KEY_PSF: &str = "primary_key";

/// What a record of a keyed-table batch does to its key (FASTER's operations on
/// documents). The default is [`RecordOp::Upsert`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordOp {
    /// The record becomes the key's latest version (an insert when the key is new).
    #[default]
    Upsert,
    /// The key is deleted (a tombstone is written); the record needs only the key.
    Delete,
    /// RFC 7386 JSON Merge Patch applied to the key's latest version (FASTER's
    /// Read-Modify-Write: a partial update); merging into a missing or deleted key
    /// inserts the patch with its nulls removed. The patch is applied to the version's
    /// stored text, not to a parsed copy: every member the patch does not name keeps its
    /// exact bytes (numbers beyond `f64` and `i64`, escapes, any nesting depth, every
    /// occurrence of a name given twice), and a name the version holds twice has its first
    /// occurrence — the one queries answer — replaced in place and the others removed. A
    /// version that is not valid JSON fails the merge's batch
    /// ([`crate::Error::InvalidRecord`]); it is never replaced by the patch alone.
    Merge,
}

impl RecordOp {
    /// Parses `upsert`, `delete` or `merge` (ASCII case-insensitive).
    ///
    /// # Errors
    /// The text given, when it is none of them.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "upsert" => Ok(Self::Upsert),
            "delete" => Ok(Self::Delete),
            "merge" => Ok(Self::Merge),
            _ => Err(format!("unknown op {text:?} (expected upsert, delete or merge)")),
        }
    }
}

/// A table's primary key: its fields and the PSF that indexes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryKey {
    /// The key's fields, in tuple order (one for a simple key).
    pub fields: Vec<FieldPath>,
    /// The id of the [`PRIMARY_KEY_PSF`].
    pub psf: PsfId,
}

impl PrimaryKey {
    /// The PSF kind that indexes `fields`: a projection for one, a composite for more.
    #[must_use]
    pub fn psf_kind(fields: &[FieldPath]) -> PsfKind {
        match fields {
            [field] => PsfKind::Projection { field: field.clone(), function: None },
            _ => PsfKind::Composite { fields: fields.to_vec() },
        }
    }

    /// The key's canonical encoding (the PSF value encoding, [`crate::value`]) from the
    /// record's values of the key's fields, in key order; `false` when a field is
    /// missing, null, an array or an object (such a record has no key).
    pub fn encode<'v>(values: impl ExactSizeIterator<Item = &'v FieldValue<'v>>, out: &mut Vec<u8>) -> bool {
        out.clear();
        let values: Vec<&FieldValue<'_>> = values.collect();
        if !values.iter().all(|v| crate::psf::is_indexable_scalar(v)) {
            return false;
        }
        match values.as_slice() {
            [one] => encode_canonical(one, out),
            many => encode_composite(many.iter().copied(), out),
        }
    }

    /// The key's fields as dotted text, for messages (`id`, `(tenant, id)`).
    #[must_use]
    pub fn describe(&self) -> String {
        match self.fields.as_slice() {
            [one] => one.to_string(),
            many => format!("({})", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
        }
    }
}

/// What a keyed table holds besides an append-only one: its key, its key index, and
/// the lock that orders merges (read-modify-writes) against other writes.
#[derive(Debug)]
pub struct Keyed {
    /// The primary key.
    pub key: PrimaryKey,
    /// Each key's latest version.
    pub index: KeyIndex,
    /// Batches with merges take it exclusively (a merge reads the key's latest version
    /// and writes the next, with no other write to that key in between, FASTER's RMW);
    /// batches of upserts and deletes take it shared, so they still run in parallel.
    pub writes: RwLock<()>,
    /// The snapshots of the scans in progress, and the horizon below which none may
    /// start (log compaction, [`crate::compaction`]).
    pub snapshots: Snapshots,
    /// Serialises log compactions.
    pub(crate) compaction: Mutex<()>,
}

impl Keyed {
    /// A keyed table's state before any record: the key on PSF `psf`, an empty index.
    #[must_use]
    pub fn new(fields: Vec<FieldPath>, psf: PsfId) -> Self {
        Self {
            key: PrimaryKey { fields, psf },
            index: KeyIndex::default(),
            writes: RwLock::new(()),
            snapshots: Snapshots::default(),
            compaction: Mutex::new(()),
        }
    }

    /// The key of a record of this table, from its key pointer of the key's PSF, into
    /// `out`; `false` when it has none (not a record of a keyed table).
    pub(crate) fn record_key(&self, view: &crate::record::RecordView<'_>, out: &mut Vec<u8>) -> bool {
        out.clear();
        let header = view.header();
        (0..header.key_pointer_count())
            .filter_map(|i| view.key_pointer(i))
            .find(|kp| kp.psf_id == self.key.psf)
            .is_some_and(|kp| kp.canonical_value(view.value_region(), view.payload(), out))
    }
}

/// The snapshots (log addresses, [`crate::scan::ScanPlan::snapshot`]) of a keyed table's
/// scans in progress, and the **snapshot horizon**: the lowest snapshot a scan may still
/// have. Log compaction ([`crate::compaction`]) copies live versions to the tail and then
/// drops the head of the log, so a snapshot below the copies' end would see neither the
/// dropped originals nor the copies: compaction raises the horizon to that end, waits
/// for the scans with older snapshots to finish, and only then drops the head. A scan
/// (or a time-travel query, `to_address`) with an older snapshot is refused with
/// [`crate::Error::SnapshotTooOld`]. The horizon is kept in `table.json`.
#[derive(Debug, Default)]
pub struct Snapshots {
    state: Mutex<OpenSnapshots>,
    finished: Condvar,
}

#[derive(Debug, Default)]
struct OpenSnapshots {
    horizon: u64,
    /// Snapshot address → scans in progress with it.
    open: BTreeMap<u64, usize>,
}

/// How long a log compaction run by retention waits for scans with older snapshots to
/// finish before it leaves dropping the head to the next run.
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(30);

/// A scan in progress at its snapshot ([`Snapshots::open`]); closes it when dropped.
#[derive(Debug)]
pub struct OpenSnapshot<'s> {
    snapshots: &'s Snapshots,
    address: u64,
}

impl Snapshots {
    /// Registers a scan at `snapshot`, until the returned guard is dropped.
    ///
    /// # Errors
    /// [`crate::Error::SnapshotTooOld`] when `snapshot` is below the horizon.
    pub fn open(&self, snapshot: LogAddress) -> crate::Result<OpenSnapshot<'_>> {
        let mut state = self.state.lock();
        if snapshot.get() < state.horizon {
            return Err(crate::Error::SnapshotTooOld { snapshot, horizon: LogAddress::new(state.horizon) });
        }
        let snapshot = snapshot.get();
        *state.open.entry(snapshot).or_default() += 1;
        Ok(OpenSnapshot { snapshots: self, address: snapshot })
    }

    /// The snapshot horizon: the lowest log address a scan's snapshot may be.
    #[must_use]
    pub fn horizon(&self) -> LogAddress {
        LogAddress::new(self.state.lock().horizon)
    }

    /// Raises the horizon to `horizon` (never lowers it): no scan below it starts after
    /// this returns.
    pub(crate) fn raise_horizon(&self, horizon: LogAddress) {
        let mut state = self.state.lock();
        state.horizon = state.horizon.max(horizon.get());
    }

    /// Sets the horizon back to `horizon` (a compaction raised it, then kept the head:
    /// nothing was dropped, so older snapshots still see their versions).
    pub(crate) fn restore_horizon(&self, horizon: LogAddress) {
        self.state.lock().horizon = horizon.get();
    }

    /// Waits until no scan with a snapshot below `address` is in progress, at most
    /// `timeout`; `false` when some still is.
    pub(crate) fn wait_finished_below(&self, address: LogAddress, timeout: Duration) -> bool {
        let address = address.get();
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        while state.open.range(..address).next().is_some() {
            if self.finished.wait_until(&mut state, deadline).timed_out() {
                return state.open.range(..address).next().is_none();
            }
        }
        true
    }
}

impl Drop for OpenSnapshot<'_> {
    fn drop(&mut self) {
        let mut state = self.snapshots.state.lock();
        if let std::collections::btree_map::Entry::Occupied(mut entry) = state.open.entry(self.address) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
        drop(state);
        self.snapshots.finished.notify_all();
    }
}

/// Bit of a [`KeyIndex`] entry set when the key's latest version is a tombstone.
const TOMBSTONE: u64 = 1 << 63;

/// Shards of the key index and of the superseded-versions table (each a lock and a
/// map), to spread concurrent writers.
const SHARDS: usize = 64;

/// The latest version of a key, as the [`KeyIndex`] holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latest {
    /// Log address of the version's record.
    pub address: LogAddress,
    /// The version is a tombstone (the key is deleted).
    pub tombstone: bool,
}

/// What validation says of a candidate record, from its address alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No newer version of its key exists: the candidate is live at any snapshot.
    Live,
    /// A newer version below the snapshot supersedes it.
    Superseded,
    /// Newer versions exist, the one known lies at or above the snapshot: the key's chain
    /// must be walked to find the version the snapshot saw (time travel, or a key updated
    /// after the query was planned).
    Walk,
}

type KeyMap = HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>;
type VersionMap = HashMap<u64, u64, foldhash::fast::RandomState>;

/// The key index of a keyed table: each key's canonical encoding → its latest version
/// (address and tombstone bit), exact and in memory (FASTER's hash index role, for
/// merges, chain walks and counts); and the **superseded-versions table**: the address of
/// each version that a newer version replaced → that newer version's address. The latter
/// is what validation reads (Perseid §4.3's small volatile table, keyed by version
/// rather than by key: a scan knows a candidate's address before it reads the record, so
/// a superseded candidate is dropped without reading or parsing it, and a version absent
/// from it is live without any lookup of its key). Rebuilt from the log by recovery.
#[derive(Debug)]
pub struct KeyIndex {
    keys: Vec<RwLock<KeyMap>>,
    superseded: Vec<RwLock<VersionMap>>,
    /// Keys whose latest version is not a tombstone.
    live: AtomicI64,
    /// Bytes held by both maps (keys and a per-entry overhead).
    bytes: AtomicU64,
    hasher: foldhash::fast::RandomState,
}

/// Counters of a [`KeyIndex`], in [`crate::table::TableStats::keys`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyStats {
    /// The primary key's fields, as dotted paths.
    pub primary_key: Vec<String>,
    /// Keys whose latest version is live (not deleted): the rows a query without a
    /// filter returns.
    pub live: u64,
    /// Keys in the index (live or deleted).
    pub keys: u64,
    /// Versions a newer version of their key replaced (updated or deleted), kept until
    /// garbage collection: the superseded-versions table's entries.
    pub superseded: u64,
    /// Approximate memory of the key index and the superseded-versions table, in bytes
    /// (bounded by the log: log compaction drops the entries of what it drops).
    pub memory_bytes: u64,
    /// The snapshot horizon ([`Snapshots`]): scans and time-travel queries with an older
    /// snapshot (log address) are refused. 0 until the first log compaction.
    pub snapshot_horizon: LogAddress,
}

/// Per-entry overhead counted in [`KeyStats::memory_bytes`] (box header, value, the
/// map's control bytes and load factor), in bytes.
const KEY_OVERHEAD: u64 = 48;
/// Bytes per superseded-versions entry counted in [`KeyStats::memory_bytes`].
const VERSION_ENTRY: u64 = 24;

impl Default for KeyIndex {
    fn default() -> Self {
        Self {
            keys: (0..SHARDS).map(|_| RwLock::new(KeyMap::default())).collect(),
            superseded: (0..SHARDS).map(|_| RwLock::new(VersionMap::default())).collect(),
            live: AtomicI64::new(0),
            bytes: AtomicU64::new(0),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl KeyIndex {
    fn key_shard(&self, key: &[u8]) -> &RwLock<KeyMap> {
        use std::hash::BuildHasher;
        #[allow(clippy::cast_possible_truncation)]
        let at = (self.hasher.hash_one(key) as usize) % SHARDS;
        &self.keys[at]
    }

    fn version_shard(&self, address: u64) -> &RwLock<VersionMap> {
        // Records are 8-byte aligned and at least 16 bytes long.
        #[allow(clippy::cast_possible_truncation)]
        let at = ((address >> 4) as usize) % SHARDS;
        &self.superseded[at]
    }

    fn supersede(&self, old: u64, newer: u64) {
        if self.version_shard(old).write().insert(old, newer).is_none() {
            self.bytes.fetch_add(VERSION_ENTRY, Ordering::Relaxed);
        }
    }

    /// Records a new version of `key` at `address` (a tombstone when `tombstone`). The
    /// entry keeps the highest address (concurrent writers of one key: the later
    /// allocation is the later version), and the version it replaces is entered as
    /// superseded by it. Called after the record's key pointers are linked and before it
    /// is made visible, so a scan that sees the record finds its versions here.
    ///
    /// Applied out of address order (two writers of one key), a version is entered as
    /// superseded by the newer one already here, and the older version stays superseded
    /// by that one too, not by its immediate successor: validation then walks the chain
    /// for snapshots between them ([`Verdict::Walk`]).
    pub fn apply(&self, key: &[u8], address: LogAddress, tombstone: bool) {
        let address = address.get();
        let new = address | if tombstone { TOMBSTONE } else { 0 };
        let mut shard = self.key_shard(key).write();
        let before = shard.get(key).copied();
        match before {
            None => {
                shard.insert(key.into(), new);
                self.bytes.fetch_add(key.len() as u64 + KEY_OVERHEAD, Ordering::Relaxed);
            }
            Some(previous) if address > previous & !TOMBSTONE => {
                shard.insert(key.into(), new);
                // A tombstone is never a candidate: it needs no entry.
                if previous & TOMBSTONE == 0 {
                    self.supersede(previous, address);
                }
            }
            Some(newer) => {
                if !tombstone {
                    self.supersede(address, newer & !TOMBSTONE);
                }
                return;
            }
        }
        drop(shard);
        let was_live = before.is_some_and(|b| b & TOMBSTONE == 0);
        self.live.fetch_add(i64::from(!tombstone) - i64::from(was_live), Ordering::Relaxed);
    }

    /// Sets the versions of `key` to `versions` exactly (valid versions, newest first;
    /// empty: the key has none left), for versions withdrawn after [`Self::apply`].
    pub fn reset(&self, key: &[u8], versions: &[Latest]) {
        let mut shard = self.key_shard(key).write();
        let before = shard.get(key).copied();
        match versions.first() {
            Some(l) => {
                shard.insert(key.into(), l.address.get() | if l.tombstone { TOMBSTONE } else { 0 });
            }
            None => {
                shard.remove(key);
            }
        }
        drop(shard);
        if let Some(latest) = versions.first() {
            self.version_shard(latest.address.get()).write().remove(&latest.address.get());
        }
        for pair in versions.windows(2) {
            if !pair[1].tombstone {
                self.supersede(pair[1].address.get(), pair[0].address.get());
            }
        }
        let was_live = before.is_some_and(|b| b & TOMBSTONE == 0);
        let is_live = versions.first().is_some_and(|l| !l.tombstone);
        self.live.fetch_add(i64::from(is_live) - i64::from(was_live), Ordering::Relaxed);
    }

    /// The latest version of `key`, if it has one.
    #[must_use]
    pub fn latest(&self, key: &[u8]) -> Option<Latest> {
        self.key_shard(key).read().get(key).map(|&e| Latest { address: LogAddress::new(e & !TOMBSTONE), tombstone: e & TOMBSTONE != 0 })
    }

    /// Validates the candidate version at `address` against `snapshot` from its address
    /// alone (Perseid §4.3): a version no newer one replaced is live; one replaced below
    /// the snapshot is not; otherwise only the key's chain can tell.
    #[must_use]
    pub fn validate(&self, address: LogAddress, snapshot: LogAddress) -> Verdict {
        let address = address.get();
        match self.version_shard(address).read().get(&address) {
            None => Verdict::Live,
            Some(&newer) if newer < snapshot.get() => Verdict::Superseded,
            Some(_) => Verdict::Walk,
        }
    }

    /// Obsolete versions below `until`: superseded versions, and tombstones that are
    /// their key's latest version (what a log compaction up to `until` drops).
    #[must_use]
    pub fn obsolete_below(&self, until: LogAddress) -> u64 {
        let until = until.get();
        let superseded: usize = self.superseded.iter().map(|s| s.read().keys().filter(|&&a| a < until).count()).sum();
        let tombstones: usize =
            self.keys.iter().map(|s| s.read().values().filter(|&&e| e & TOMBSTONE != 0 && e & !TOMBSTONE < until).count()).sum();
        (superseded + tombstones) as u64
    }

    /// Keys whose latest version is live and below `until` (a log compaction copies them
    /// all before it drops the head there: one left means a version was withdrawn since).
    #[must_use]
    pub fn live_below(&self, until: LogAddress) -> u64 {
        let until = until.get();
        self.keys.iter().map(|s| s.read().values().filter(|&&e| e & TOMBSTONE == 0 && e < until).count() as u64).sum()
    }

    /// Forgets every version below `begin` (the log's new begin address, after a
    /// compaction copied the live ones above it): superseded-versions entries, and keys
    /// whose latest version is below it — tombstones (the key has no version left), or,
    /// if one was not copied, a live version (counted in the result's third element and
    /// logged: it is lost with the head of the log). Returns (superseded entries, deleted
    /// keys, live keys) removed.
    pub(crate) fn drop_below(&self, begin: LogAddress) -> (u64, u64, u64) {
        let begin = begin.get();
        let mut superseded = 0u64;
        for shard in &self.superseded {
            let mut shard = shard.write();
            let before = shard.len();
            shard.retain(|&address, _| address >= begin);
            superseded += (before - shard.len()) as u64;
        }
        let (mut deleted, mut live, mut key_bytes) = (0u64, 0u64, 0u64);
        for shard in &self.keys {
            shard.write().retain(|key, &mut entry| {
                if entry & !TOMBSTONE >= begin {
                    return true;
                }
                key_bytes += key.len() as u64 + KEY_OVERHEAD;
                if entry & TOMBSTONE == 0 {
                    live += 1;
                } else {
                    deleted += 1;
                }
                false
            });
        }
        self.bytes.fetch_sub((superseded * VERSION_ENTRY + key_bytes).min(self.bytes.load(Ordering::Relaxed)), Ordering::Relaxed);
        #[allow(clippy::cast_possible_wrap)]
        self.live.fetch_sub(live as i64, Ordering::Relaxed);
        (superseded, deleted, live)
    }

    /// Bytes of the key index and the superseded-versions table ([`KeyStats::memory_bytes`])
    /// without taking the shards' locks.
    #[must_use]
    pub fn memory_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> KeyStats {
        KeyStats {
            primary_key: Vec::new(),
            live: u64::try_from(self.live.load(Ordering::Relaxed)).unwrap_or(0),
            keys: self.keys.iter().map(|s| s.read().len() as u64).sum(),
            superseded: self.superseded.iter().map(|s| s.read().len() as u64).sum(),
            memory_bytes: self.bytes.load(Ordering::Relaxed),
            snapshot_horizon: LogAddress::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_superseded_by_newer_ones_and_live_keys_are_counted() {
        let index = KeyIndex::default();
        index.apply(b"a", crate::LogAddress::new(100), false);
        index.apply(b"b", crate::LogAddress::new(200), false);
        assert_eq!(index.validate(crate::LogAddress::new(100), crate::LogAddress::new(1_000)), Verdict::Live);
        index.apply(b"a", crate::LogAddress::new(300), false);
        assert_eq!(index.validate(crate::LogAddress::new(100), crate::LogAddress::new(1_000)), Verdict::Superseded);
        assert_eq!(index.validate(crate::LogAddress::new(300), crate::LogAddress::new(1_000)), Verdict::Live);
        // The newer version lies past the snapshot: only the chain can tell.
        assert_eq!(index.validate(crate::LogAddress::new(100), crate::LogAddress::new(250)), Verdict::Walk);
        // An older version applied late (a concurrent writer) does not win.
        index.apply(b"b", crate::LogAddress::new(150), false);
        assert_eq!(index.latest(b"b"), Some(Latest { address: crate::LogAddress::new(200), tombstone: false }));
        assert_eq!(index.validate(crate::LogAddress::new(150), crate::LogAddress::new(1_000)), Verdict::Superseded);
        index.apply(b"b", crate::LogAddress::new(400), true);
        let stats = index.stats();
        assert_eq!((stats.live, stats.keys, stats.superseded), (1, 2, 3));
        assert_eq!(stats.memory_bytes, 2 * (1 + KEY_OVERHEAD) + 3 * VERSION_ENTRY);
        index.apply(b"b", crate::LogAddress::new(500), false);
        assert_eq!(index.stats().live, 2);
        // 500 withdrawn: the tombstone at 400 is the latest again.
        index.reset(b"b", &[Latest { address: crate::LogAddress::new(400), tombstone: true }, Latest { address: crate::LogAddress::new(200), tombstone: false }]);
        assert_eq!(index.stats().live, 1);
        assert_eq!(index.validate(crate::LogAddress::new(200), crate::LogAddress::new(1_000)), Verdict::Superseded);
        index.reset(b"a", &[]);
        assert_eq!(index.stats().live, 0);
    }

    #[test]
    fn keys_are_scalars_in_key_order() {
        let mut out = Vec::new();
        assert!(PrimaryKey::encode([&FieldValue::Int(7)].into_iter(), &mut out));
        let simple = out.clone();
        assert!(PrimaryKey::encode([&FieldValue::Int(7), &FieldValue::Str("x".into())].into_iter(), &mut out));
        assert_ne!(out, simple);
        for bad in [FieldValue::Null, FieldValue::Missing] {
            assert!(!PrimaryKey::encode([&bad].into_iter(), &mut out));
        }
        assert_eq!(RecordOp::parse("DELETE"), Ok(RecordOp::Delete));
        assert!(RecordOp::parse("remove").unwrap_err().contains("remove"));
    }
}
