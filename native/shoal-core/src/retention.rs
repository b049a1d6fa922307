//! Retention: truncating the head of the log (FASTER's `ShiftBeginAddress`, §6) by
//! address, by size or by age, deleting whole segment files. On a keyed table retention
//! never drops a live version: the head is compacted instead ([`Table::compact_log`],
//! which copies the live versions to the tail first), and a table whose obsolete versions
//! pass [`RetentionPolicy::compact_obsolete_percent`](crate::table::RetentionPolicy) is
//! compacted up to its flushed address.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::table::Table;
use crate::LogAddress;

/// Which part of the log to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionRule {
    /// Drop everything below this log address.
    BeforeAddress(LogAddress),
    /// Keep about the newest this many bytes of log.
    KeepBytes(u64),
    /// Drop the segment files last written longer ago than this.
    OlderThan(Duration),
}

/// What [`Table::truncate`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TruncateReport {
    /// The begin address before.
    pub previous_begin_address: LogAddress,
    /// The begin address now (a page boundary, never above the flushed address).
    pub begin_address: LogAddress,
    /// Segment files deleted.
    pub segments_deleted: u64,
    /// Bytes of segment files deleted.
    pub bytes_deleted: u64,
    /// A keyed table's live versions below the new begin address, copied to the tail
    /// first (0 for an append-only table).
    pub versions_copied: u64,
}

impl Table {
    /// Applies the table's [`RetentionPolicy`](crate::table::RetentionPolicy): its
    /// `keep_bytes` rule, then its `max_age_secs` rule, each as [`Table::truncate`] does.
    /// Returns what was dropped in all (`None` when the policy keeps everything or
    /// nothing was dropped).
    ///
    /// # Errors
    /// As [`Table::truncate`].
    pub fn apply_retention(&self) -> Result<Option<TruncateReport>> {
        let policy = self.retention();
        let mut rules = Vec::new();
        if let Some(bytes) = policy.keep_bytes {
            rules.push(RetentionRule::KeepBytes(bytes));
        }
        if let Some(secs) = policy.max_age_secs.filter(|_| self.log().has_storage()) {
            rules.push(RetentionRule::OlderThan(Duration::from_secs(secs)));
        }
        let mut reports = Vec::new();
        for rule in rules {
            let target = self.retention_target(rule)?;
            // A keyed table's rule that would drop no obsolete version would only copy live
            // ones to the tail (retention never drops them): nothing to do.
            if self.keyed().as_ref().is_some_and(|k| k.index.obsolete_below(target) == 0) {
                continue;
            }
            reports.push(self.truncate(RetentionRule::BeforeAddress(target))?);
        }
        if let Some(keyed) = self.keyed() {
            let percent = u64::from(policy.compact_obsolete_percent.unwrap_or(crate::config::DEFAULT_COMPACT_OBSOLETE_PERCENT));
            let until = self.compactable_until();
            let stats = keyed.index.stats();
            let obsolete = keyed.index.obsolete_below(until);
            if percent > 0 && obsolete > 0 && obsolete * 100 >= percent * (stats.superseded + stats.keys) {
                let report = self.compact_log(until, crate::keys::SNAPSHOT_WAIT)?;
                tracing::info!(?report, obsolete, "keyed table compacted: obsolete versions passed compact_obsolete_percent");
                reports.push(report.truncate);
            }
        }
        let mut total: Option<TruncateReport> = None;
        for report in reports {
            if report.begin_address == report.previous_begin_address {
                continue;
            }
            let sum = total.get_or_insert(TruncateReport { previous_begin_address: report.previous_begin_address, ..TruncateReport::default() });
            sum.begin_address = report.begin_address;
            sum.segments_deleted += report.segments_deleted;
            sum.bytes_deleted += report.bytes_deleted;
            sum.versions_copied += report.versions_copied;
        }
        Ok(total)
    }

    /// The address `rule` would drop the log below (before rounding to pages).
    fn retention_target(&self, rule: RetentionRule) -> Result<LogAddress> {
        let previous = self.log().begin_address();
        Ok(match rule {
            RetentionRule::BeforeAddress(address) => address,
            RetentionRule::KeepBytes(bytes) => self.log().tail_address().sub_bytes(bytes),
            RetentionRule::OlderThan(age) => {
                if !self.log().has_storage() {
                    return Err(Error::InvalidConfig("an in-memory table has no segment files to age".into()));
                }
                let cutoff = SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
                self.log().begin_for_age(cutoff)?.unwrap_or(previous)
            }
        })
    }

    /// The highest address the head of the log may be dropped up to: the start of the
    /// page holding the flushed address (only whole flushed pages are dropped).
    pub(crate) fn compactable_until(&self) -> LogAddress {
        self.log().page_start(self.log().page_of(self.log().flushed_until().min(self.complete_until())))
    }

    /// Drops the head of the log per `rule`: records below the new begin address are
    /// gone from scans and chains at once, and segment files wholly below it are
    /// deleted (a segment partly above it stays until the begin address passes it). The
    /// new begin address is written to `table.json` before any file is deleted, so
    /// recovery never looks for a deleted page. On a keyed table this is
    /// [`Table::compact_log`] up to the rule's address: live versions are copied to the
    /// tail first, never dropped.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::InvalidConfig`] for an age on an in-memory table; as
    /// [`Table::compact_log`] on a keyed table.
    pub fn truncate(&self, rule: RetentionRule) -> Result<TruncateReport> {
        let target = self.retention_target(rule)?;
        if self.keyed().is_some() {
            return Ok(self.compact_log(target, crate::keys::SNAPSHOT_WAIT)?.truncate);
        }
        self.shift_head(target)
    }

    /// Drops the head of the log below `target` (rounded down to a page boundary, never
    /// above the flushed address): [`Table::truncate`] without the keyed table's copy.
    pub(crate) fn shift_head(&self, target: LogAddress) -> Result<TruncateReport> {
        let previous = self.log().begin_address();
        if target <= previous {
            return Ok(TruncateReport { previous_begin_address: previous, begin_address: previous, ..TruncateReport::default() });
        }
        // Persist the begin address first (clamped as the shift will clamp it).
        let limit = self.log().page_start(self.log().page_of(self.log().flushed_until()));
        let begin = self.log().page_start(self.log().page_of(target.min(limit))).max(previous);
        // The pages to drop are flushed: let the observer merge them into the inferred
        // schema first, so the schema does not lose their columns and types (the schema of
        // pages it had not reached is otherwise forgotten with them, and a reader that
        // loaded the schema before would see it narrow).
        let observed = self.log().wait_observed(begin, std::time::Duration::from_secs(10));
        if observed < begin {
            tracing::warn!(observed = observed.get(), begin = begin.get(), "truncating pages the schema observer has not reached yet");
        }
        self.write_meta_with_begin(begin)?;
        let (begin, segments_deleted, bytes_deleted) = self.log().shift_begin_address(begin)?;
        self.columnar().drop_below(begin)?;
        tracing::info!(previous = previous.get(), begin = begin.get(), segments_deleted, bytes_deleted, "log truncated");
        Ok(TruncateReport { previous_begin_address: previous, begin_address: begin, segments_deleted, bytes_deleted, versions_copied: 0 })
    }
}
