//! Log compaction of keyed tables: the garbage collection of FASTER's hybrid log by
//! **roll to tail** (FASTER, SIGMOD 2018, Appendix C), which drops the obsolete versions
//! that blind upserts and deletes leave behind (Perseid, ACM TOS 2024, §4.3.2's garbage
//! collection of the entries validation filters out).
//!
//! A compaction up to an address `until` reads the log from its begin address to
//! `until` (whole flushed pages) and copies each **live** version — its key's latest, and
//! not a tombstone — to the tail as an upsert of the same document (re-indexed by every
//! PSF, so the copy is an ordinary version). Superseded versions and tombstones are not
//! copied. Then the head of the log below `until` is dropped (FASTER's
//! `ShiftBeginAddress`, [`crate::retention`]), and the key index forgets what lay there:
//! superseded-versions entries below the new begin address, and the keys whose latest
//! version was a tombstone there. The superseded-versions table thus holds only the
//! obsolete versions of the log that is left: it stays bounded by the log.
//!
//! **Liveness** is read from the key index (FASTER Appendix C's "identifying live values":
//! the in-memory index names the latest version, no chain walk), and checked again while
//! the copy is written with the table's write lock held exclusively
//! ([`crate::keys::Keyed::writes`]): a key upserted between the read and the copy keeps
//! its newer version, never the copy.
//!
//! **Snapshots.** A scan sees the versions below its snapshot. Once copies exist, a
//! snapshot below their end would see neither the dropped originals nor the copies, so
//! the compaction raises the **snapshot horizon** to the complete address after its copies
//! (the tail then, other writers' versions included; [`crate::keys::Snapshots`]), waits
//! (at most a given time) for the scans in progress with older snapshots to finish, and
//! only then drops the head; later scans and time-travel queries below the horizon are
//! refused ([`Error::SnapshotTooOld`]). When the wait times out, the head is not dropped
//! and the horizon goes back (the copies stay, as newer versions; the next compaction
//! drops the head). A scan with a newer snapshot that read a head page before it was
//! dropped sees its versions as superseded once they are below the begin address (their
//! live ones were copied), so it never returns a key twice.
//!
//! **Crash safety.** The copies are made durable before the new begin address is
//! written to `table.json` and segment files are deleted: a crash at any point leaves
//! every live version in the log at least once (an original and its copy are two
//! versions of one key; recovery's key index keeps the later).

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
pub use crate::keys::SNAPSHOT_WAIT;
use crate::keys::{Keyed, Latest, RecordOp};
use crate::record::PageRecords;
use crate::retention::TruncateReport;
use crate::table::Table;
use crate::LogAddress;

/// Payload bytes copied per batch (each batch holds the table's write lock exclusively,
/// so writers wait for at most one batch).
const COPY_BATCH_BYTES: usize = 4 << 20;

/// Records copied per batch at most.
const COPY_BATCH_RECORDS: usize = 16_384;

/// What [`Table::compact_log`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// The head of the log dropped (`versions_copied`: live versions copied to the tail).
    #[serde(flatten)]
    pub truncate: TruncateReport,
    /// Versions (records and tombstones) read below the compaction's end address.
    pub versions_scanned: u64,
    /// Payload bytes of the live versions copied to the tail.
    pub bytes_copied: u64,
    /// Superseded versions dropped (their superseded-versions entries removed).
    pub superseded_dropped: u64,
    /// Deleted keys forgotten: their tombstone was their latest version and lay below the
    /// new begin address.
    pub tombstones_dropped: u64,
    /// The snapshot horizon after the compaction: scans and time-travel queries with an
    /// older snapshot are refused.
    pub snapshot_horizon: LogAddress,
    /// Scans with snapshots below the horizon were still running when the wait ended: the
    /// live versions were copied, the head was not dropped (the next compaction drops it).
    pub deferred: bool,
}

/// A live version read for copying: its address, key and document.
struct LiveVersion {
    address: LogAddress,
    key: Vec<u8>,
    payload: Vec<u8>,
}

impl Table {
    /// Compacts a keyed table's log up to `until` (rounded down to a page boundary, and to
    /// the flushed address): copies the live versions below it to the tail, then drops
    /// the head below it and the key index's entries for it (see [`crate::compaction`]),
    /// in steps of at most 64 MiB of log (in an in-memory table, of half its ring's free
    /// room, so that the copies fit).
    /// Waits at most `wait` for scans with snapshots below the new horizon to finish; if
    /// some still run, the head is kept ([`CompactReport::deferred`]). Runs one at a
    /// time per table; writers wait for one copy batch at a time.
    ///
    /// # Errors
    /// [`Error::InvalidOperation`] on an append-only table (it has no obsolete versions:
    /// [`Table::truncate`] drops its head); device errors reading the log or making the
    /// copies durable (nothing is dropped then); ingest errors of the copies (e.g.
    /// [`Error::MemoryFull`] in an in-memory table whose ring cannot hold them).
    pub fn compact_log(&self, until: LogAddress, wait: Duration) -> Result<CompactReport> {
        let Some(keyed) = self.keyed() else {
            return Err(Error::InvalidOperation(
                "log compaction drops the obsolete versions of a keyed table; this table is append-only (truncate or a retention policy drops its head)".into(),
            ));
        };
        let _one_at_a_time = keyed.compaction.lock();
        let previous = self.log().begin_address();
        let until = self.log().page_start(self.log().page_of(until.min(self.compactable_until())));
        let mut report = CompactReport {
            truncate: TruncateReport { previous_begin_address: previous, begin_address: previous, ..TruncateReport::default() },
            snapshot_horizon: keyed.snapshots.horizon(),
            ..CompactReport::default()
        };
        // In steps, each dropping its part of the head before the next copies: the copies
        // of an in-memory table need room in its ring, which the steps before free.
        while report.truncate.begin_address < until {
            let from = report.truncate.begin_address;
            let step_end = self.log().page_of(from + self.compaction_step_bytes()).max(self.log().page_of(from) + 1);
            let step_until = until.min(self.log().page_start(step_end));
            if !self.compact_step(keyed, from, step_until, wait, &mut report)? {
                report.deferred = true;
                break;
            }
            if report.truncate.begin_address <= from {
                break;
            }
        }
        if report.truncate.begin_address > previous {
            tracing::info!(?report, "keyed table's log compacted");
        }
        Ok(report)
    }

    /// Log bytes one compaction step covers at most: 64 MiB, or in an in-memory table a
    /// quarter of the ring's free room (the step's copies must fit in it, and each copy
    /// batch reserves twice its size), at least a page.
    fn compaction_step_bytes(&self) -> u64 {
        const STEP: u64 = 64 << 20;
        if self.log().has_storage() {
            return STEP;
        }
        let used = self.log().tail_address() - self.log().begin_address();
        (self.log().ring_bytes().saturating_sub(used) / 4).clamp(1 << self.config().log.page_size_bits, STEP)
    }

    /// One step of [`Self::compact_log`] over `[from, until)`: copies, horizon, wait,
    /// durability, head dropped. `false` when the head was kept (the horizon set back):
    /// scans with older snapshots still ran after `wait`, or a version withdrawn since the
    /// copies left a live key below `until` uncopied.
    fn compact_step(&self, keyed: &Keyed, from: LogAddress, until: LogAddress, wait: Duration, report: &mut CompactReport) -> Result<bool> {
        self.copy_live_versions(keyed, from, until, report)?;
        // With the write lock held no keyed batch is in flight: every version written so
        // far (each copy, and each version that superseded an original) is below the
        // complete address, so a snapshot at or above it sees the copies.
        let horizon = {
            let _exclusive = keyed.writes.write();
            self.complete_until().max(until)
        };
        let previous_horizon = keyed.snapshots.horizon();
        keyed.snapshots.raise_horizon(horizon);
        // The head stays: the horizon goes back, older snapshots still see their versions.
        let keep_head = |why: &str| {
            keyed.snapshots.restore_horizon(previous_horizon);
            tracing::info!(until = until.get(), horizon = horizon.get(), why, "log compaction: the head is kept for the next compaction");
            Ok(false)
        };
        if !keyed.snapshots.wait_finished_below(horizon, wait) {
            return keep_head("scans with older snapshots still run");
        }
        if self.log().has_storage() {
            if let Err(error) = self.wait_durable(horizon, Duration::from_secs(60)) {
                keyed.snapshots.restore_horizon(previous_horizon);
                return Err(error);
            }
        }
        // A version withdrawn since the copies were made (its batch failed to become
        // durable) gave its key back a version below `until` that was not copied.
        let missed = {
            let _exclusive = keyed.writes.write();
            keyed.index.live_below(until)
        };
        if missed > 0 {
            return keep_head("live versions below the head were not copied (a newer version was withdrawn)");
        }
        report.snapshot_horizon = keyed.snapshots.horizon();
        let step = self.shift_head(until)?;
        report.truncate.begin_address = step.begin_address;
        report.truncate.segments_deleted += step.segments_deleted;
        report.truncate.bytes_deleted += step.bytes_deleted;
        let (superseded, deleted, lost) = keyed.index.drop_below(step.begin_address);
        report.superseded_dropped += superseded;
        report.tombstones_dropped += deleted;
        if lost > 0 {
            tracing::error!(lost, "log compaction: live keys whose latest version was not copied were dropped with the head");
        }
        Ok(true)
    }

    /// Copies the live versions of `[from, until)` (whole pages) to the tail.
    fn copy_live_versions(&self, keyed: &Keyed, from: LogAddress, until: LogAddress, report: &mut CompactReport) -> Result<()> {
        let mut buffer = Vec::new();
        let mut key = Vec::new();
        let mut batch: Vec<LiveVersion> = Vec::new();
        let mut batch_bytes = 0usize;
        for page in self.log().page_of(from)..self.log().page_of(until) {
            let Some(end) = self.log().read_page(page, &mut buffer)? else { continue };
            let page_start = self.log().page_start(page);
            for (offset, view) in PageRecords::new(&buffer[..end.min(self.log().page_capacity())]) {
                let address = page_start + offset as u64;
                let header = view.header();
                if address < from || !header.is_visible() || header.is_invalid() || !keyed.record_key(&view, &mut key) {
                    continue;
                }
                report.versions_scanned += 1;
                // A tombstone is never copied; a version with a newer one is obsolete.
                if view.payload().is_empty() || keyed.index.latest(&key) != Some(Latest { address, tombstone: false }) {
                    continue;
                }
                batch_bytes += view.payload().len();
                batch.push(LiveVersion { address, key: key.clone(), payload: view.payload().to_vec() });
                if batch.len() >= COPY_BATCH_RECORDS || batch_bytes >= COPY_BATCH_BYTES {
                    self.copy_batch(keyed, &mut batch, report)?;
                    batch_bytes = 0;
                }
            }
        }
        self.copy_batch(keyed, &mut batch, report)
    }

    /// Writes the versions of `batch` still live as upserts, with the write lock held
    /// exclusively (no other write of their keys in between), and empties it.
    fn copy_batch(&self, keyed: &Keyed, batch: &mut Vec<LiveVersion>, report: &mut CompactReport) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let _exclusive = keyed.writes.write();
        batch.retain(|v| keyed.index.latest(&v.key) == Some(Latest { address: v.address, tombstone: false }));
        let records: Vec<&[u8]> = batch.iter().map(|v| v.payload.as_slice()).collect();
        let ops = vec![RecordOp::Upsert; records.len()];
        let written = self.ingest_resolved(&records, &ops, Some(keyed))?;
        if written.records != records.len() {
            // (Skipped under the table's `skip` policy: e.g. grown past a page by PSFs
            // registered since.) The head must not be dropped without them.
            let reasons: Vec<String> = written.skipped_examples.iter().take(3).map(|(i, why)| format!("version at {}: {why}", batch[*i].address)).collect();
            return Err(Error::InvalidOperation(format!(
                "log compaction could not copy {} live versions ({}); nothing was dropped",
                records.len() - written.records,
                reasons.join("; ")
            )));
        }
        report.truncate.versions_copied += written.records as u64;
        report.bytes_copied += records.iter().map(|r| r.len() as u64).sum::<u64>();
        batch.clear();
        Ok(())
    }
}
