//! Writer sessions: batches ingested exactly once across resends and crashes
//! (FishStore Appendix E's per-session serial numbers; FASTER's CPR, §6, gives each
//! session a durable prefix of its operations).
//!
//! A writer names itself and tags each batch with a serial number that increases by
//! writer. [`Table::ingest_as`] ingests a batch whose serial is above the writer's last
//! one and skips (reports as a duplicate) one that is not, so a client that resends
//! after a failure ingests nothing twice. A batch is bracketed in the log by two
//! *control records* (header bits: invalid + control, so scans never see them):
//! `begin` before its records and `commit` (or `abort`, when ingestion failed) after.
//!
//! Crash consistency: a batch must be all there or not at all, although its records
//! are allocated one by one between other writers' records. Before writing `begin`, the
//! batch reserves the current tail; [`Table::durable_address`] never passes the oldest
//! reservation of a batch whose closing marker (`commit` or `abort`) is not durable yet.
//! Recovery cuts the log at the `begin` of the oldest batch without `commit`/`abort`:
//! everything cut was never reported durable, and every writer's last serial is the one
//! of its last `commit` before the cut. (A reservation must outlive the writing of the
//! closing marker until that marker is flushed: released as soon as the marker was
//! written, the durable address could cover the batch's `begin` but not its `commit`,
//! and recovery then cut acknowledged batches of other writers that followed the
//! `begin`.)

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ingest::IngestReport;
use crate::record::{record_size, RecordHeader, RECORD_PREFIX};
use crate::table::Table;

/// A batch's writer tag: who wrote it and its serial number (increasing per writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterBatch<'a> {
    /// The writer's name (any UTF-8, at most [`MAX_WRITER_NAME`] bytes).
    pub writer: &'a str,
    /// The batch's serial number.
    pub serial: u64,
}

/// Longest writer name, in bytes.
pub const MAX_WRITER_NAME: usize = 256;

/// What a table knows of one writer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WriterStatus {
    /// The writer's name.
    pub writer: String,
    /// Serial of its last ingested batch (`None`: none yet).
    pub last_serial: Option<u64>,
    /// Serial of its last batch that is durable (at or below [`Table::durable_address`]).
    pub last_durable_serial: Option<u64>,
}

/// The payload of a control record (JSON, a few dozen bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "marker", rename_all = "lowercase")]
pub(crate) enum Marker {
    Begin { writer: String, serial: u64 },
    Commit { writer: String, serial: u64 },
    Abort { writer: String, serial: u64 },
}

#[derive(Debug, Default)]
struct WriterState {
    last_serial: Option<u64>,
    last_durable_serial: Option<u64>,
    /// Committed batches not yet durable: (serial, end address of the commit record).
    pending: VecDeque<(u64, u64)>,
}

/// The writer sessions of one table.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Tail addresses reserved by writer batches (a multiset): for each, the address the
    /// flushed log must reach before the reservation ends — the end of the batch's
    /// closing marker, or `u64::MAX` while there is none (in flight, or the marker could
    /// not be written: recovery will cut at the batch's `begin`).
    reservations: Mutex<BTreeMap<u64, Vec<u64>>>,
    writers: Mutex<HashMap<String, Arc<Mutex<WriterState>>>>,
}

impl Sessions {
    fn writer(&self, name: &str) -> Arc<Mutex<WriterState>> {
        Arc::clone(self.writers.lock().entry(name.to_owned()).or_default())
    }

    /// The oldest reservation still held once the log is flushed up to `flushed`
    /// (reservations whose closing marker ends at or below it are dropped).
    pub(crate) fn oldest_reservation(&self, flushed: u64) -> Option<u64> {
        let mut reservations = self.reservations.lock();
        while let Some(mut entry) = reservations.first_entry() {
            entry.get_mut().retain(|&until| until > flushed);
            if !entry.get().is_empty() {
                return Some(*entry.key());
            }
            entry.remove();
        }
        None
    }

    fn reserve(&self, address: u64) {
        self.reservations.lock().entry(address).or_default().push(u64::MAX);
    }

    /// The batch that reserved `address` has ended: `Some(end)`, its closing marker ends
    /// at `end` (the reservation holds until that is flushed); `None`, it wrote nothing
    /// (the reservation ends now).
    fn close(&self, address: u64, end: Option<u64>) {
        let mut reservations = self.reservations.lock();
        let Some(held) = reservations.get_mut(&address) else { return };
        if let Some(slot) = held.iter().position(|&until| until == u64::MAX) {
            match end {
                Some(end) => held[slot] = end,
                None => {
                    held.swap_remove(slot);
                }
            }
        }
        if held.is_empty() {
            reservations.remove(&address);
        }
    }

    /// Restores the writers' last serials (recovery): everything recovered is durable.
    pub(crate) fn restore(&self, last_serials: &BTreeMap<String, u64>) {
        let mut writers = self.writers.lock();
        for (name, serial) in last_serials {
            let state = WriterState { last_serial: Some(*serial), last_durable_serial: Some(*serial), ..WriterState::default() };
            writers.insert(name.clone(), Arc::new(Mutex::new(state)));
        }
    }

    /// Every writer's last serial (for checkpoints).
    pub(crate) fn last_serials(&self) -> BTreeMap<String, u64> {
        let writers: Vec<(String, Arc<Mutex<WriterState>>)> =
            self.writers.lock().iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect();
        writers.into_iter().filter_map(|(name, state)| state.lock().last_serial.map(|s| (name, s))).collect()
    }
}

impl Table {
    /// Ingests `records` as batch `batch.serial` of writer `batch.writer`, exactly once:
    /// a serial at or below the writer's last one is not ingested again and comes back
    /// with [`IngestReport::duplicate`] set. Batches of one writer are ingested one at a
    /// time, in the order of the calls. See the [module documentation](self).
    ///
    /// # Errors
    /// As [`Table::ingest`] (the batch then ends with an `abort` marker and the serial
    /// is not taken, so the writer may resend it); [`Error::InvalidConfig`] for a writer
    /// name that is empty or longer than [`MAX_WRITER_NAME`] bytes.
    pub fn ingest_as(&self, batch: WriterBatch<'_>, records: &[&[u8]]) -> Result<IngestReport> {
        if batch.writer.is_empty() || batch.writer.len() > MAX_WRITER_NAME {
            return Err(Error::InvalidConfig(format!(
                "writer names must have 1 to {MAX_WRITER_NAME} bytes, got {}",
                batch.writer.len()
            )));
        }
        let writer = self.sessions.writer(batch.writer);
        let mut state = writer.lock();
        if state.last_serial.is_some_and(|last| batch.serial <= last) {
            return Ok(IngestReport { duplicate: true, ..IngestReport::default() });
        }
        self.refuse_if_not_durable()?;
        // Reserve the tail before `begin` is allocated: the durable address cannot pass
        // this batch until its commit (or abort) marker is durable.
        let reservation = self.log.tail_address();
        self.sessions.reserve(reservation);
        let (writer, serial) = (batch.writer.to_owned(), batch.serial);
        if let Err(e) = self.write_control(&Marker::Begin { writer: writer.clone(), serial }) {
            // Nothing of the batch is in the log.
            self.sessions.close(reservation, None);
            return Err(e);
        }
        let (outcome, closing_end) = match self.ingest(records) {
            Ok(report) => match self.write_control(&Marker::Commit { writer, serial }) {
                Ok(end) => (Ok((report, end)), Some(end)),
                Err(e) => (Err(e), None),
            },
            Err(e) => match self.write_control(&Marker::Abort { writer, serial }) {
                Ok(end) => (Err(e), Some(end)),
                Err(abort) => (Err(abort), None),
            },
        };
        match closing_end {
            Some(end) => self.sessions.close(reservation, Some(end)),
            // Without a closing marker the reservation is held for good: recovery will cut
            // the log at this batch's `begin`, so nothing after it may be reported durable.
            None => tracing::error!(writer = batch.writer, serial, "a writer batch has no commit or abort marker; the durable address stays below it"),
        }
        let (mut report, end) = outcome?;
        report.end_address = end;
        state.last_serial = Some(batch.serial);
        state.pending.push_back((batch.serial, end));
        Ok(report)
    }

    /// What the table knows of `writer` (nothing: all `None`).
    #[must_use]
    pub fn writer_status(&self, writer: &str) -> WriterStatus {
        let Some(state) = self.sessions.writers.lock().get(writer).cloned() else {
            return WriterStatus { writer: writer.to_owned(), ..WriterStatus::default() };
        };
        let durable = self.durable_address();
        let mut state = state.lock();
        while let Some(&(serial, end)) = state.pending.front() {
            if end > durable {
                break;
            }
            state.last_durable_serial = Some(serial);
            state.pending.pop_front();
        }
        WriterStatus { writer: writer.to_owned(), last_serial: state.last_serial, last_durable_serial: state.last_durable_serial }
    }

    /// Everything below this address survives a crash: the log's flushed address, held
    /// back to the start of the oldest writer batch still in flight. 0 for in-memory
    /// tables, where nothing survives.
    #[must_use]
    pub fn durable_address(&self) -> u64 {
        if !self.log.has_storage() {
            return 0;
        }
        let flushed = self.log.flushed_until();
        self.sessions.oldest_reservation(flushed).map_or(flushed, |r| r.min(flushed))
    }

    /// Makes everything ingested below `address` durable (writing the open page's
    /// prefix if needed, see [`crate::log::HybridLog::request_flush`]) and waits for it.
    /// Returns the durable address.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an in-memory table; [`Error::Io`] with the device's
    /// last error when `timeout` passes first.
    pub fn wait_durable(&self, address: u64, timeout: Duration) -> Result<u64> {
        self.wait_durable_while(address, timeout, &|| true)
    }

    /// As [`Table::wait_durable`], but gives up as soon as `keep_waiting` (asked every
    /// few milliseconds) says no, e.g. when the client that waits went away (hardening
    /// issue, item 7).
    ///
    /// # Errors
    /// As [`Table::wait_durable`]; [`Error::Cancelled`] when `keep_waiting` said no.
    pub fn wait_durable_while(&self, address: u64, timeout: Duration, keep_waiting: &dyn Fn() -> bool) -> Result<u64> {
        if !self.log.has_storage() {
            return Err(Error::InvalidConfig("an in-memory table has no durable storage".into()));
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut failing_since: Option<std::time::Instant> = None;
        loop {
            let durable = self.durable_address();
            if durable >= address {
                return Ok(durable);
            }
            // A device that keeps failing during this wait (e.g. a full disk: the flush
            // thread's retries every 100 ms keep failing) fails it after half a second.
            if self.log.flush_error().is_some() {
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= Duration::from_millis(500) {
                    if let Some(error) = self.log.device_failure(Duration::ZERO) {
                        return Err(error);
                    }
                }
            } else {
                failing_since = None;
            }
            if !keep_waiting() {
                return Err(Error::Cancelled(format!("waiting for address {address} to be durable (durable up to {durable})")));
            }
            if std::time::Instant::now() >= deadline {
                let reason = self.log.flush_error().unwrap_or_else(|| "timed out".into());
                return Err(Error::io("log device", std::io::Error::other(format!(
                    "address {address} is not durable after {timeout:?} (durable up to {durable}): {reason}"
                ))));
            }
            // Group commit writes on its own interval; otherwise ask for the write now.
            if !matches!(self.config.durability, crate::table::DurabilityPolicy::GroupCommit { .. }) {
                self.log.request_flush();
            }
            self.log.wait_flushed(address.min(self.log.tail_address()), Duration::from_millis(5));
        }
    }

    /// Appends a control record; returns the address just past it.
    fn write_control(&self, marker: &Marker) -> Result<u64> {
        let body = serde_json::to_vec(marker).map_err(|e| Error::InvalidConfig(format!("encoding a marker: {e}")))?;
        let size = record_size(0, 0, body.len());
        // In memory, the marker needs room like any record (see `HybridLog::check_room`).
        let _room = if self.log.has_storage() { None } else { Some(self.log.check_room(size)?) };
        let mut guard = self.log.epoch().protect();
        let address = self.log.allocate(size, &mut guard)?;
        #[allow(clippy::cast_possible_truncation)]
        // SAFETY: `allocate` gave this thread [address, address + size) in an in-memory
        // page, which cannot be flushed or evicted while `guard` is held.
        unsafe {
            self.log.write_header(address, RecordHeader::new(size as u32, 0, 0));
            let base = self.log.memory_ptr(address);
            base.add(8).cast::<u32>().write_unaligned(body.len() as u32);
            base.add(12).cast::<u32>().write_unaligned(0);
            std::ptr::copy_nonoverlapping(body.as_ptr(), base.add(RECORD_PREFIX), body.len());
            self.log.write_header(address, RecordHeader::control(size as u32));
        }
        Ok(address + size as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_holds_until_its_closing_marker_is_flushed() {
        let sessions = Sessions::default();
        sessions.reserve(100);
        sessions.reserve(300);
        assert_eq!(sessions.oldest_reservation(1_000), Some(100), "in flight: held whatever is flushed");
        // Batch at 100 committed; its commit marker ends at 500.
        sessions.close(100, Some(500));
        assert_eq!(sessions.oldest_reservation(499), Some(100), "the commit is not durable yet");
        assert_eq!(sessions.oldest_reservation(500), Some(300), "the commit is durable: the next batch bounds");
        // The batch at 300 wrote nothing: its reservation ends at once.
        sessions.close(300, None);
        assert_eq!(sessions.oldest_reservation(0), None);
        // Two batches reserving the same tail, each released on its own.
        sessions.reserve(700);
        sessions.reserve(700);
        sessions.close(700, Some(800));
        assert_eq!(sessions.oldest_reservation(900), Some(700), "one of the two is still in flight");
        sessions.close(700, Some(950));
        assert_eq!(sessions.oldest_reservation(949), Some(700));
        assert_eq!(sessions.oldest_reservation(950), None);
    }
}
