//! Random reads of log addresses for chain walks, with FishStore's adaptive
//! prefetching (§7.2) for addresses below the head.
//!
//! In-memory addresses are copied under epoch protection. Below the head, the reader
//! keeps one window of a page read from the segment file. When a chain's next address
//! falls outside the window, the reader issues a new read that ends just after the
//! address and reaches back `window` bytes (chains go towards lower addresses). The
//! window doubles (up to [`MAX_WINDOW`]) when the previous window served at least two
//! further reads — the chain is dense there, so one larger sequential read beats many
//! small ones — and halves (down to [`MIN_WINDOW`]) otherwise.

use crate::error::Result;
use crate::log::HybridLog;
use crate::record::{RecordHeader, RECORD_PREFIX};
use crate::LogAddress;

/// Smallest read window, in bytes.
pub const MIN_WINDOW: usize = 4 << 10;
/// Largest read window, in bytes.
pub const MAX_WINDOW: usize = 1 << 20;

pub(crate) struct LogReader<'l> {
    log: &'l HybridLog,
    scratch: Vec<u8>,
    window: Vec<u8>,
    window_start: LogAddress,
    window_size: usize,
    window_hits: usize,
    pub(crate) device_bytes: u64,
    pub(crate) device_reads: u64,
}

impl<'l> LogReader<'l> {
    pub(crate) fn new(log: &'l HybridLog) -> Self {
        Self {
            log,
            scratch: Vec::new(),
            window: Vec::new(),
            window_start: LogAddress::ZERO,
            window_size: MIN_WINDOW,
            window_hits: 0,
            device_bytes: 0,
            device_reads: 0,
        }
    }

    /// `len` bytes at `address` (within one page); `None` if not readable (truncated,
    /// or evicted from the null device).
    pub(crate) fn read(&mut self, address: LogAddress, len: usize) -> Result<Option<&[u8]>> {
        if address < self.log.begin_address() {
            return Ok(None);
        }
        if address >= self.log.head_address() {
            // Re-checked under protection inside `read_into`.
            if self.log.read_into(address, len, &mut self.scratch)? {
                return Ok(Some(&self.scratch));
            }
            return Ok(None);
        }
        if !self.log.has_storage() {
            return Ok(None);
        }
        let end = address + len as u64;
        let in_window = address >= self.window_start && end <= self.window_start + self.window.len() as u64;
        if !in_window {
            self.refill(address, len)?;
        } else {
            self.window_hits += 1;
        }
        let at = (address - self.window_start) as usize;
        Ok(Some(&self.window[at..at + len]))
    }

    fn refill(&mut self, address: LogAddress, len: usize) -> Result<()> {
        if self.window_hits >= 2 {
            self.window_size = (self.window_size * 2).min(MAX_WINDOW);
        } else {
            self.window_size = (self.window_size / 2).max(MIN_WINDOW);
        }
        self.window_hits = 0;
        let page_start = self.log.page_start(self.log.page_of(address));
        let page_end = page_start + self.log.page_capacity() as u64;
        let end = (address + len.max(MIN_WINDOW) as u64).min(page_end).max(address + len as u64);
        let start = end.sub_bytes(self.window_size as u64).max(page_start).min(address);
        let size = (end - start) as usize;
        self.log.read_from_device(start, size, &mut self.window)?;
        self.window_start = start;
        self.device_reads += 1;
        self.device_bytes += size as u64;
        Ok(())
    }

    /// The whole record at `address` (header first), or `None` if not readable.
    pub(crate) fn read_record(&mut self, address: LogAddress) -> Result<Option<&[u8]>> {
        let Some(prefix) = self.read(address, RECORD_PREFIX)? else { return Ok(None) };
        let mut word = [0u8; 8];
        word.copy_from_slice(&prefix[..8]);
        let header = RecordHeader(u64::from_le_bytes(word));
        let size = header.size();
        if size < RECORD_PREFIX || size > self.log.page_capacity() {
            return Ok(None);
        }
        self.read(address, size)
    }
}
