//! The log address below which every record is complete: the boundary a query's answer
//! is complete up to, and a follower's next `from_address` (streaming reads).
//!
//! Ingestion allocates each record on the log (a fetch-and-add on the tail), writes it,
//! links its key pointers into their chains, and only then sets its visible bit (FishStore
//! §6, Algorithm 1). Between the allocation and the visible bit a record is *in flight*: a
//! full scan that meets it waits for it, but an index scan does not find it yet (its key
//! pointers are not linked), so an answer up to the tail could miss a record that a later
//! answer from the tail would skip too. [`InFlight`] keeps, for each batch being written,
//! a lower bound of its addresses (the tail when it began); [`InFlight::complete_until`]
//! is the lowest of them, or the tail when none is in flight. Every record below it is
//! visible (or invalid, never to become visible) when it is read, and the boundary only
//! grows.
//!
//! Registration and the boundary's computation take one lock, twice per ingested batch
//! (a batch is typically thousands of records), so the cost is negligible.

use parking_lot::Mutex;

use crate::LogAddress;

/// The batches being written, by the tail when each began (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    starts: Mutex<Vec<LogAddress>>,
}

impl InFlight {
    /// Registers a batch about to allocate records; `tail` reads the log's tail (under the
    /// lock, so that a concurrent [`InFlight::complete_until`] either sees the batch or
    /// reads a tail below all its records). The batch is complete when the guard drops —
    /// after the last record's visible (or invalid) bit is written.
    pub(crate) fn begin(&self, tail: impl FnOnce() -> LogAddress) -> InFlightBatch<'_> {
        let mut starts = self.starts.lock();
        let start = tail();
        starts.push(start);
        InFlightBatch { set: self, start }
    }

    /// The log address below which every record is complete: the lowest start of a batch
    /// in flight, or `tail()` when none is.
    pub(crate) fn complete_until(&self, tail: impl FnOnce() -> LogAddress) -> LogAddress {
        let starts = self.starts.lock();
        let tail = tail();
        starts.iter().copied().min().map_or(tail, |start| start.min(tail))
    }
}

/// A batch registered with [`InFlight::begin`]; deregisters itself when dropped (also when
/// ingestion fails part-way: whatever it wrote is then visible or invalid).
pub(crate) struct InFlightBatch<'a> {
    set: &'a InFlight,
    start: LogAddress,
}

impl Drop for InFlightBatch<'_> {
    fn drop(&mut self) {
        let mut starts = self.set.starts.lock();
        if let Some(i) = starts.iter().position(|&s| s == self.start) {
            starts.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::InFlight;
    use crate::LogAddress;

    fn at(raw: u64) -> impl FnOnce() -> LogAddress {
        move || LogAddress::new(raw)
    }

    #[test]
    fn the_boundary_is_the_oldest_batch_in_flight_or_the_tail() {
        let in_flight = InFlight::default();
        assert_eq!(in_flight.complete_until(at(500)), LogAddress::new(500));
        let first = in_flight.begin(at(100));
        let second = in_flight.begin(at(300));
        assert_eq!(in_flight.complete_until(at(900)), LogAddress::new(100));
        drop(first);
        assert_eq!(in_flight.complete_until(at(900)), LogAddress::new(300));
        let same = in_flight.begin(at(300));
        drop(second);
        assert_eq!(in_flight.complete_until(at(900)), LogAddress::new(300), "two batches began at the same tail");
        drop(same);
        assert_eq!(in_flight.complete_until(at(900)), LogAddress::new(900));
    }
}
