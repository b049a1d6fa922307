//! Truncation of the log's head (FASTER's `ShiftBeginAddress`, §6): moving the begin
//! address, by address or by the age of segment files.

use super::*;

impl HybridLog {
    /// FASTER's `ShiftBeginAddress`: raises the begin address to `address` (rounded down
    /// to a page, at most the flushed address rounded down), waits until every reader
    /// protected before the shift has moved on (an epoch becomes safe), then deletes the
    /// segment files wholly below it. Scans and chain walks never read below the begin
    /// address. Returns `(new begin, files deleted, bytes deleted)`; the in-memory null
    /// device only moves the address.
    ///
    /// # Errors
    /// [`Error::Io`] deleting a file.
    pub fn shift_begin_address(&self, address: LogAddress) -> Result<(LogAddress, u64, u64)> {
        let limit = self.page_start(self.page_of(self.flushed_until()));
        let target = self.page_start(self.page_of(address.min(limit))).max(self.begin_address());
        self.begin_address.fetch_max(target.get(), Ordering::AcqRel);
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        self.epoch.bump_with(move || flag.store(true, Ordering::Release));
        while !done.load(Ordering::Acquire) {
            self.epoch.try_drain();
            std::thread::sleep(Duration::from_micros(200));
        }
        let begin = self.begin_address();
        let (files, bytes) = match &self.device {
            Device::Null => (0, 0),
            Device::Segments(segments) => segments.delete_segments_below(self.page_of(begin))?,
        };
        Ok((begin, files, bytes))
    }

    /// The begin address that retention by age would set: the start of the segment after
    /// the newest segment file last written before `cutoff` (`None`: no such file).
    ///
    /// # Errors
    /// [`Error::Io`] listing the directory.
    pub fn begin_for_age(&self, cutoff: std::time::SystemTime) -> Result<Option<LogAddress>> {
        match &self.device {
            Device::Null => Ok(None),
            Device::Segments(segments) => {
                Ok(segments.first_page_after_segments_older_than(cutoff)?.map(|page| self.page_start(page)))
            }
        }
    }
}
