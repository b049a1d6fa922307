//! Reads of log addresses: in memory under epoch protection, from segment files below the
//! head, whole pages for scans (FASTER §4: reads below the head go to storage).

use super::*;
use crate::record::RecordView;

impl HybridLog {
    /// The `len` bytes at `address` in place, without a copy, when they are in memory
    /// (at or above the head address) and within one page: valid for as long as `guard`
    /// — protection of this log's epoch — is neither dropped nor refreshed, since the page
    /// cannot be evicted before. `None` when below the head (read them from the device:
    /// [`Self::read_from_device`]) or when `[address, address + len)` crosses a page end.
    ///
    /// # Panics
    /// In debug builds, if `guard` protects another epoch domain.
    #[must_use]
    pub fn read_in_memory<'g>(&self, guard: &'g EpochGuard<'_>, address: LogAddress, len: usize) -> Option<&'g [u8]> {
        debug_assert!(std::ptr::eq(guard.domain(), &self.epoch), "a guard of another log's epoch");
        if address < self.head_address() || address < self.begin_address() || self.offset_of(address) + len > self.page_size {
            return None;
        }
        // SAFETY: protected by `guard` (whose borrow bounds the slice's lifetime) and at or
        // above the head, so the frame holds this page until the guard is refreshed or
        // dropped; the range lies within the page's frame.
        Some(unsafe { std::slice::from_raw_parts(self.memory_ptr(address), len) })
    }

    /// Copies `len` bytes at `address` (all within one page) into `out`, from memory or
    /// from the device. Returns `false` if the bytes are below the begin address or were
    /// evicted from the null device.
    ///
    /// # Errors
    /// [`Error::Io`] when the device read fails.
    pub fn read_into(&self, address: LogAddress, len: usize, out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        if address < self.begin_address() {
            return Ok(false);
        }
        {
            let _guard = self.epoch.protect();
            if address >= self.head_address() {
                // SAFETY: protected and at or above the head.
                let src = unsafe { std::slice::from_raw_parts(self.memory_ptr(address), len) };
                out.extend_from_slice(src);
                return Ok(true);
            }
        }
        self.read_from_device(address, len, out)
    }

    /// Reads from the device (for addresses below the head).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn read_from_device(&self, address: LogAddress, len: usize, out: &mut Vec<u8>) -> Result<bool> {
        match &self.device {
            Device::Null => Ok(false),
            Device::Segments(files) => {
                out.resize(len, 0);
                match files.read(self.page_of(address), self.offset_of(address), out) {
                    Ok(()) => Ok(true),
                    // Truncated by retention while this reader was on its way.
                    Err(_) if address < self.begin_address() => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Copies page `page` into `out` (resized to the page size) and returns how many
    /// bytes of it hold records: up to the tail for the open page. Pages on the device
    /// are checked against their footer.
    ///
    /// Returns `Ok(None)` when the page is no longer readable (null device, truncated).
    ///
    /// # Errors
    /// [`Error::CorruptPage`] or [`Error::Io`] for device pages.
    pub fn read_page(&self, page: u64, out: &mut Vec<u8>) -> Result<Option<usize>> {
        out.resize(self.page_size, 0);
        let start = self.page_start(page);
        if start + self.page_size as u64 <= self.begin_address() {
            return Ok(None);
        }
        {
            let _guard = self.epoch.protect();
            if start >= self.head_address() {
                let tail = self.tail_address();
                let end = if tail >= start + self.page_size as u64 {
                    self.page_capacity()
                } else {
                    (tail.bytes_since(start)) as usize
                };
                // SAFETY: protected, page at or above the head.
                let src = unsafe { std::slice::from_raw_parts(self.memory_ptr(start), end) };
                out[..end].copy_from_slice(src);
                out[end..].fill(0);
                return Ok(Some(end));
            }
        }
        match &self.device {
            Device::Null => Ok(None),
            Device::Segments(files) => match files.read_page(page, out) {
                Ok(()) => Ok(Some(self.page_capacity())),
                Err(_) if start + self.page_size as u64 <= self.begin_address() => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    /// Re-reads the header at an in-memory `address` of a page copy that showed an
    /// in-flight record; returns the current header, or `None` if the page has left
    /// memory (then it is complete on the device).
    #[must_use]
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn current_header(&self, address: LogAddress) -> Option<RecordHeader> {
        let _guard = self.epoch.protect();
        if address >= self.head_address() {
            // SAFETY: protected, at or above the head.
            Some(unsafe { self.load_header(address) })
        } else {
            None
        }
    }
}

impl HybridLog {
    /// Copies page `page` and returns the addresses and payload ranges (within `out`) of
    /// its visible records in `[from, to)` (a record is in the range when its address is;
    /// invalid records and a keyed table's tombstones are left out). Waits for records whose ingestion is in flight.
    pub(crate) fn page_records(&self, page: u64, from: LogAddress, to: LogAddress, out: &mut Vec<u8>) -> Result<Vec<(LogAddress, std::ops::Range<usize>)>> {
        let page_start = self.page_start(page);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        'copy: loop {
            let Some(end) = self.read_page(page, out)? else { return Ok(Vec::new()) };
            let mut records = Vec::new();
            let mut offset = if page == 0 { crate::log::FIRST_ADDRESS as usize } else { 0 };
            // A record is in the range when its address is.
            while offset + 8 <= end && page_start + (offset as u64) < to {
                let header = crate::record::RecordHeader(u64::from_le_bytes(
                    out[offset..offset + 8].try_into().map_err(|_| corrupt(page_start + offset as u64, "header"))?,
                ));
                if header.is_filler() {
                    break;
                }
                let complete = header.is_visible() || header.is_invalid();
                if !complete {
                    // Allocated but not yet written or linked: wait for its writer.
                    if std::time::Instant::now() > deadline {
                        return Err(Error::AddressNotReadable {
                            address: page_start + offset as u64,
                            reason: "a record stayed in flight for 5 s".into(),
                        });
                    }
                    std::thread::yield_now();
                    continue 'copy;
                }
                let view = RecordView::new(&out[offset..]).ok_or_else(|| corrupt(page_start + offset as u64, "page record"))?;
                let address = page_start + offset as u64;
                // A keyed table's tombstone (empty payload) is never a match.
                if header.is_visible() && !header.is_invalid() && address >= from && !view.payload().is_empty() {
                    let payload = view.payload();
                    let start = payload.as_ptr() as usize - out.as_ptr() as usize;
                    records.push((address, start..start + payload.len()));
                }
                offset += header.size();
            }
            return Ok(records);
        }
    }
}

fn corrupt(address: LogAddress, what: &str) -> Error {
    Error::AddressNotReadable { address, reason: format!("{what} does not decode (corrupt log?)") }
}
