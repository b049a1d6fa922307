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

pub(crate) mod state;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::ingest::IngestReport;
use crate::record::{record_size, RecordHeader, RecordLayout};
use crate::table::Table;
use crate::LogAddress;

pub(crate) use state::Marker;
pub use state::{WriterBatch, WriterStatus, MAX_WRITER_NAME};

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
        self.ingest_ops_as(batch, records, &[])
    }

    /// [`Self::ingest_as`] for a batch with operations ([`Table::ingest_ops`]: upserts,
    /// deletes and merges of a keyed table), exactly once.
    ///
    /// # Errors
    /// As [`Self::ingest_as`] and [`Table::ingest_ops`].
    pub fn ingest_ops_as(&self, batch: WriterBatch<'_>, records: &[&[u8]], ops: &[crate::keys::RecordOp]) -> Result<IngestReport> {
        if batch.writer.is_empty() || batch.writer.len() > MAX_WRITER_NAME {
            return Err(Error::InvalidConfig(format!(
                "writer names must have 1 to {MAX_WRITER_NAME} bytes, got {}",
                batch.writer.len()
            )));
        }
        let writer = self.sessions().writer(batch.writer);
        let mut state = writer.lock();
        if state.last_serial.is_some_and(|last| batch.serial <= last) {
            return Ok(IngestReport { duplicate: true, ..IngestReport::default() });
        }
        self.refuse_if_not_durable()?;
        // Reserve the tail before `begin` is allocated: the durable address cannot pass
        // this batch until its commit (or abort) marker is durable.
        let reservation = self.log().tail_address();
        self.sessions().reserve(reservation);
        let (writer, serial) = (batch.writer.to_owned(), batch.serial);
        if let Err(e) = self.write_control(&Marker::Begin { writer: writer.clone(), serial }) {
            // Nothing of the batch is in the log.
            self.sessions().close(reservation, None);
            return Err(e);
        }
        let (outcome, closing_end) = match self.ingest_ops(records, ops) {
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
            Some(end) => self.sessions().close(reservation, Some(end)),
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
        let Some(state) = self.sessions().known_writer(writer) else {
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
    pub fn durable_address(&self) -> LogAddress {
        if !self.log().has_storage() {
            return LogAddress::ZERO;
        }
        let mut flushed = self.log().flushed_until();
        if matches!(self.config().durability, crate::table::DurabilityPolicy::Remote { .. }) {
            // The object store is the durable home: the local segment files are a cache.
            flushed = flushed.min(self.remote_durable_address());
        }
        self.sessions().oldest_reservation(flushed).map_or(flushed, |r| r.min(flushed))
    }

    /// Makes everything ingested below `address` durable (writing the open page's
    /// prefix if needed, see [`crate::log::HybridLog::request_flush`]) and waits for it.
    /// Returns the durable address.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an in-memory table; [`Error::Io`] with the device's
    /// last error when `timeout` passes first.
    pub fn wait_durable(&self, address: LogAddress, timeout: Duration) -> Result<LogAddress> {
        self.wait_durable_while(address, timeout, &|| true)
    }

    /// As [`Table::wait_durable`], but gives up as soon as `keep_waiting` (asked every
    /// few milliseconds) says no, e.g. when the client that waits went away, so that its
    /// thread is not held until `timeout`.
    ///
    /// # Errors
    /// As [`Table::wait_durable`]; [`Error::Cancelled`] when `keep_waiting` said no.
    pub fn wait_durable_while(&self, address: LogAddress, timeout: Duration, keep_waiting: &dyn Fn() -> bool) -> Result<LogAddress> {
        if !self.log().has_storage() {
            return Err(Error::InvalidConfig("an in-memory table has no durable storage".into()));
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut failing_since: Option<std::time::Instant> = None;
        loop {
            let durable = self.durable_address();
            if durable >= address {
                return Ok(durable);
            }
            if let Some(reason) = self.fenced() {
                return Err(Error::Fenced(format!("{reason} (address {address} was not made durable)")));
            }
            if let Some(error) = self.remote_failure() {
                return Err(error);
            }
            // A device that keeps failing during this wait (e.g. a full disk: the flush
            // thread's retries every 100 ms keep failing) fails it after half a second.
            if self.log().flush_error().is_some() {
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= Duration::from_millis(500) {
                    if let Some(error) = self.log().device_failure(Duration::ZERO) {
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
                let reason = self.log().flush_error().unwrap_or_else(|| "timed out".into());
                return Err(Error::io("log device", std::io::Error::other(format!(
                    "address {address} is not durable after {timeout:?} (durable up to {durable}): {reason}"
                ))));
            }
            let here = address.min(self.log().tail_address());
            let remote = matches!(self.config().durability, crate::table::DurabilityPolicy::Remote { .. });
            if remote && self.log().flushed_until() >= here {
                // Written here: the remote store's upload is what is waited for (woken when
                // it lands, the table is fenced or uploads fail; not polled).
                self.wait_remote_durable(address, Duration::from_millis(10));
                continue;
            }
            // Group commit (and remote) write on their own interval; otherwise ask for the write now.
            if !remote && !matches!(self.config().durability, crate::table::DurabilityPolicy::GroupCommit { .. }) {
                self.log().request_flush();
            }
            self.log().wait_flushed(here, Duration::from_millis(5));
        }
    }

    /// Appends a control record; returns the address just past it.
    fn write_control(&self, marker: &Marker) -> Result<LogAddress> {
        let body = serde_json::to_vec(marker).map_err(|e| Error::InvalidConfig(format!("encoding a marker: {e}")))?;
        let size = record_size(0, 0, body.len());
        // In memory, the marker needs room like any record (see `HybridLog::check_room`).
        let _room = if self.log().has_storage() { None } else { Some(self.log().check_room(size)?) };
        let mut guard = self.log().epoch().protect();
        let address = self.log().allocate(size, &mut guard)?;
        #[allow(clippy::cast_possible_truncation)]
        // SAFETY: `allocate` gave this thread [address, address + size) in an in-memory
        // page, which cannot be flushed or evicted while `guard` is held.
        unsafe {
            self.log().write_header(address, RecordHeader::new(size as u32, 0, 0));
            RecordLayout::new(0, 0, body.len()).write_body(self.log().memory_ptr(address), &[], &body);
            self.log().write_header(address, RecordHeader::control(size as u32));
        }
        Ok(address + size as u64)
    }
}
