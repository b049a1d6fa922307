//! The writer sessions' state of one table (below [`crate::table`], which holds it): the
//! writers' serials and the tail reservations of batches in flight. The operations on it
//! (`Table::ingest_as`, ...) are in [`crate::session`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::LogAddress;

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
    /// Serial of its last batch that is durable (at or below [`crate::table::Table::durable_address`]).
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
pub(crate) struct WriterState {
    pub(crate) last_serial: Option<u64>,
    pub(crate) last_durable_serial: Option<u64>,
    /// Committed batches not yet durable: (serial, end address of the commit record).
    pub(crate) pending: VecDeque<(u64, LogAddress)>,
}

/// The writer sessions of one table.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Tail addresses reserved by writer batches (a multiset): for each, the address the
    /// flushed log must reach before the reservation ends — the end of the batch's
    /// closing marker, or [`LogAddress::MAX`] while there is none (in flight, or the marker could
    /// not be written: recovery will cut at the batch's `begin`).
    reservations: Mutex<BTreeMap<LogAddress, Vec<LogAddress>>>,
    writers: Mutex<HashMap<String, Arc<Mutex<WriterState>>>>,
}

impl Sessions {
    /// The state of writer `name`, if the table knows it.
    pub(crate) fn known_writer(&self, name: &str) -> Option<Arc<Mutex<WriterState>>> {
        self.writers.lock().get(name).cloned()
    }

    /// The state of writer `name` (created on first use).
    pub(crate) fn writer(&self, name: &str) -> Arc<Mutex<WriterState>> {
        Arc::clone(self.writers.lock().entry(name.to_owned()).or_default())
    }

    /// The oldest reservation still held once the log is flushed up to `flushed`
    /// (reservations whose closing marker ends at or below it are dropped).
    pub(crate) fn oldest_reservation(&self, flushed: LogAddress) -> Option<LogAddress> {
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

    pub(crate) fn reserve(&self, address: LogAddress) {
        self.reservations.lock().entry(address).or_default().push(LogAddress::MAX);
    }

    /// The batch that reserved `address` has ended: `Some(end)`, its closing marker ends
    /// at `end` (the reservation holds until that is flushed); `None`, it wrote nothing
    /// (the reservation ends now).
    pub(crate) fn close(&self, address: LogAddress, end: Option<LogAddress>) {
        let mut reservations = self.reservations.lock();
        let Some(held) = reservations.get_mut(&address) else { return };
        if let Some(slot) = held.iter().position(|&until| until == LogAddress::MAX) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(raw: u64) -> LogAddress {
        LogAddress::new(raw)
    }

    #[test]
    fn a_reservation_holds_until_its_closing_marker_is_flushed() {
        let sessions = Sessions::default();
        sessions.reserve(at(100));
        sessions.reserve(at(300));
        assert_eq!(sessions.oldest_reservation(at(1_000)), Some(at(100)), "in flight: held whatever is flushed");
        // Batch at 100 committed; its commit marker ends at 500.
        sessions.close(at(100), Some(at(500)));
        assert_eq!(sessions.oldest_reservation(at(499)), Some(at(100)), "the commit is not durable yet");
        assert_eq!(sessions.oldest_reservation(at(500)), Some(at(300)), "the commit is durable: the next batch bounds");
        // The batch at 300 wrote nothing: its reservation ends at once.
        sessions.close(at(300), None);
        assert_eq!(sessions.oldest_reservation(at(0)), None);
        // Two batches reserving the same tail, each released on its own.
        sessions.reserve(at(700));
        sessions.reserve(at(700));
        sessions.close(at(700), Some(at(800)));
        assert_eq!(sessions.oldest_reservation(at(900)), Some(at(700)), "one of the two is still in flight");
        sessions.close(at(700), Some(at(950)));
        assert_eq!(sessions.oldest_reservation(at(949)), Some(at(700)));
        assert_eq!(sessions.oldest_reservation(at(950)), None);
    }
}
