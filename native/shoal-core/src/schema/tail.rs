//! The inferred schema of the log's unobserved suffix, kept up to date incrementally.
//!
//! The log's observer thread merges each page into the table's schema once the page is
//! flushed (AsterixDB's tuple compactor infers at flush time; shoal's observer runs at a
//! lower CPU priority, see [`crate::log::OBSERVER_NICE`]). Records on pages it has not
//! reached yet — the open tail page, closed pages still queued — must be reflected too,
//! so that a column is queryable the moment its first record lands. Observing those
//! pages again on every `GetSchema` / `GetFlightInfo` / `DoGet` cost up to a whole page
//! (4 MiB by default) of parsing per call, the largest part of a point lookup's latency
//! over Flight. [`TailSchema`] remembers, per unobserved page, the schema of the records
//! it has already observed and where it stopped, so each call only parses the records
//! ingested since the previous one.
//!
//! Records still being written (header written, visible bit not yet set) are remembered
//! by address and looked at again on the next call, so a record completed after a later
//! one is neither missed nor counted twice. A page's entry is dropped once the observer
//! has merged that page.

use std::collections::BTreeMap;

use crate::log::{HybridLog, FIRST_ADDRESS};
use crate::record::{RecordHeader, RecordView};
use crate::schema::InferredSchema;
use crate::LogAddress;

/// What has been observed of one unflushed page.
#[derive(Debug, Default)]
struct PageTail {
    /// Schema of the visible records observed on this page.
    schema: InferredSchema,
    /// Offset in the page of the next record to look at (a record boundary).
    next_offset: usize,
    /// Addresses of records seen in flight (neither visible nor invalid), to look at again.
    in_flight: Vec<LogAddress>,
    /// The page's filler was reached: nothing more will be written on it.
    complete: bool,
}

/// Incrementally maintained schema of the pages at and above the flushed-schema
/// boundary (see the [module documentation](self)). Not synchronised: the table keeps it
/// behind a mutex.
#[derive(Debug, Default)]
pub(crate) struct TailSchema {
    pages: BTreeMap<u64, PageTail>,
    buffer: Vec<u8>,
}

impl TailSchema {
    /// Observes what was ingested since the last call on pages `first_page..` up to the
    /// log's tail, forgets pages below `first_page` (the observer has merged them
    /// into the observed schema), and merges the schema of every remembered page into
    /// `schema`. `first_page` is the page of the observed schema's `until` address.
    ///
    /// Pages that can no longer be read (evicted from a null device, truncated) are
    /// skipped, as a scan would skip them.
    pub(crate) fn catch_up_and_merge(&mut self, log: &HybridLog, first_page: u64, schema: &mut InferredSchema) {
        self.pages = self.pages.split_off(&first_page);
        let tail = log.tail_address();
        let last_page = log.page_of(tail);
        if tail <= log.page_start(first_page) {
            return;
        }
        for page in first_page..=last_page {
            let entry = self.pages.entry(page).or_default();
            Self::catch_up_page(log, page, tail, entry, &mut self.buffer);
            schema.merge(&entry.schema);
        }
    }

    fn catch_up_page(log: &HybridLog, page: u64, tail: LogAddress, entry: &mut PageTail, buffer: &mut Vec<u8>) {
        let start = log.page_start(page);
        // Records completed since the last call.
        entry.in_flight.retain(|&address| match read_record(log, address, buffer) {
            RecordState::Visible => {
                observe(&mut entry.schema, buffer);
                false
            }
            RecordState::InFlight => true,
            RecordState::Gone => false,
        });
        if entry.complete {
            return;
        }
        if page == 0 && entry.next_offset == 0 {
            #[allow(clippy::cast_possible_truncation)]
            let first = FIRST_ADDRESS as usize;
            entry.next_offset = first;
        }
        let end = if tail >= start + log.page_size() as u64 {
            log.page_capacity()
        } else {
            #[allow(clippy::cast_possible_truncation)]
            let in_page = (tail - start) as usize;
            in_page.min(log.page_capacity())
        };
        if end <= entry.next_offset {
            return;
        }
        let from = start + entry.next_offset as u64;
        if !matches!(log.read_into(from, end - entry.next_offset, buffer), Ok(true)) {
            return;
        }
        let mut at = 0;
        while at + 8 <= buffer.len() {
            let header = header_at(&buffer[at..]);
            if header.is_empty() {
                // Allocated, header not written yet: start here next time.
                break;
            }
            if header.is_filler() {
                entry.complete = true;
                break;
            }
            let size = header.size();
            if size == 0 || at + size > buffer.len() {
                break;
            }
            if header.is_visible() {
                observe(&mut entry.schema, &buffer[at..at + size]);
            } else if !header.is_invalid() {
                entry.in_flight.push(from + at as u64);
            }
            at += size;
        }
        entry.next_offset += at;
        if entry.next_offset >= log.page_capacity() {
            entry.complete = true;
        }
    }
}

enum RecordState {
    /// Complete; its bytes are in the buffer.
    Visible,
    /// Still being written.
    InFlight,
    /// Abandoned, or no longer readable.
    Gone,
}

/// Reads the record at `address` into `buffer` when it is visible.
fn read_record(log: &HybridLog, address: LogAddress, buffer: &mut Vec<u8>) -> RecordState {
    if !matches!(log.read_into(address, 8, buffer), Ok(true)) || buffer.len() < 8 {
        return RecordState::Gone;
    }
    let header = header_at(buffer);
    if header.is_invalid() {
        return RecordState::Gone;
    }
    if !header.is_visible() {
        return RecordState::InFlight;
    }
    if matches!(log.read_into(address, header.size(), buffer), Ok(true)) {
        RecordState::Visible
    } else {
        RecordState::Gone
    }
}

/// The header word at the start of `bytes` (at least 8 bytes long).
fn header_at(bytes: &[u8]) -> RecordHeader {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    RecordHeader(u64::from_le_bytes(word))
}

/// Merges the payload of the visible record `record` (header first) into `schema`.
fn observe(schema: &mut InferredSchema, record: &[u8]) {
    if let Some(view) = RecordView::new(record) {
        schema.observe_validated(view.payload());
    }
}
