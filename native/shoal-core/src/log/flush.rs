//! The flush thread: closed pages (and, for group commit, the prefix of the open page)
//! appended to the device in page order, never rewritten, durability waits, and shutdown
//! (FASTER §5: pages below the read-only offset are flushed asynchronously).

use super::*;

impl HybridLog {
    pub(super) fn page_ready_to_flush(&self, page: u64) {
        let mut state = self.flush_state.lock();
        state.ready.insert(page);
        self.flushed_signal.notify_all();
    }

    /// Asks the flush thread to write everything allocated so far, including the
    /// filled prefix of the open tail page, without closing that page (the group commit
    /// of FASTER §6.3 / FishStore Appendix E). Once every thread that allocated below
    /// the current tail has finished its record (an epoch becomes safe), the flush thread
    /// writes the pages before it and then appends the open page's bytes after its last
    /// commit, with a commit slot naming the longer prefix (see [`super::device`]);
    /// `flushed_until` then reaches the tail read here. When the page closes, its final
    /// flush appends the rest the same way. Returns the address requested.
    /// No-op on the null device (nothing is ever durable there).
    pub fn request_flush(self: &Arc<Self>) -> LogAddress {
        let tail = self.tail_address();
        if self.device.is_null() || tail <= self.flushed_until() {
            return tail;
        }
        let log = Arc::downgrade(self);
        self.epoch.bump_with(move || {
            if let Some(log) = log.upgrade() {
                let mut state = log.flush_state.lock();
                state.partial = Some(state.partial.map_or(tail, |p| p.max(tail)));
                log.flushed_signal.notify_all();
            }
        });
        self.epoch.try_drain();
        tail
    }

    /// Waits until everything below `address` is flushed (or `timeout` passes).
    /// Returns the flushed address.
    pub fn wait_flushed(&self, address: LogAddress, timeout: Duration) -> LogAddress {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.epoch.try_drain();
            let flushed = self.flushed_until();
            if flushed >= address || std::time::Instant::now() >= deadline {
                return flushed;
            }
            let mut state = self.flush_state.lock();
            if self.flushed_until() < address {
                self.flushed_signal.wait_for(&mut state, Duration::from_millis(1));
            }
        }
    }

    /// Tells the flush and observer threads to end once their work is done (every
    /// closed page flushed and observed), without waiting for them: for an owner that
    /// goes away without [`Self::shutdown`]. Each thread holds the log only while it
    /// works or waits a few milliseconds, but the two could keep it alive in turns for
    /// good (found by the `ingest` fuzz target: ~750 threads and 1.1 GB after tables were
    /// created and dropped for 30 s).
    pub(crate) fn release_threads(&self) {
        let mut state = self.flush_state.lock();
        state.shutdown = true;
        self.flushed_signal.notify_all();
    }

    /// Stops the flush thread after it has flushed every closed page. Further
    /// allocations fail with [`Error::Closed`].
    pub fn shutdown(&self) {
        self.epoch.try_drain();
        {
            let mut state = self.flush_state.lock();
            state.shutdown = true;
            self.flushed_signal.notify_all();
        }
        // The flush thread first (it flushes every closed page and, as it ends, sets
        // `flusher_done`), then the observer (it observes every flushed page, then ends).
        join_unless_current(self.flush_thread.lock().take());
        join_unless_current(self.observer_thread.lock().take());
        self.closed.store(true, Ordering::Release);
    }

    /// Writes the closed page `page`: the bytes of its record area after the prefix a
    /// group commit already wrote (all of them if none did), then the commit slot naming
    /// the whole area (see [`super::device`]); advances `flushed_until` past the page.
    pub(super) fn flush_one(&self, page: u64, scratch: &mut Vec<u8>) {
        let mut writing = self.flush_write.lock();
        let result = match &self.device {
            Device::Null => Ok(()),
            Device::Segments(files) => self.append_to_device(files, &mut writing, page, self.page_capacity(), scratch),
        };
        let mut state = self.flush_state.lock();
        match result {
            Ok(()) => {
                // The page is whole on the device: the next one starts a proof of its own.
                *writing = None;
                state.error = None;
                state.next_page = page + 1;
                self.flushed_until.fetch_max(self.page_start(page + 1).get(), Ordering::AcqRel);
            }
            Err(e) => {
                tracing::error!(page, error = %e, "page flush failed; retrying");
                state.error = Some(failure(&e, state.error.as_ref()));
                state.ready.insert(page);
            }
        }
        self.flushed_signal.notify_all();
    }

    /// Writes the prefix `[page start, until)` of the open page `page` — only its bytes
    /// after what earlier group commits wrote, then a commit slot naming the prefix — and
    /// advances `flushed_until` to `until`. Called by the flush thread only, when every
    /// page before `page` is flushed.
    pub(super) fn flush_partial(&self, page: u64, until: LogAddress, scratch: &mut Vec<u8>) {
        let Device::Segments(files) = &self.device else { return };
        let length = (until - self.page_start(page)) as usize;
        let mut writing = self.flush_write.lock();
        let result = self.append_to_device(files, &mut writing, page, length, scratch);
        let mut state = self.flush_state.lock();
        match result {
            Ok(()) => {
                state.error = None;
                self.flushed_until.fetch_max(until.get(), Ordering::AcqRel);
            }
            Err(e) => {
                tracing::error!(page, error = %e, "partial page flush failed; retrying");
                state.error = Some(failure(&e, state.error.as_ref()));
                state.partial = Some(state.partial.map_or(until, |p| p.max(until)));
            }
        }
        self.flushed_signal.notify_all();
    }

    /// Appends the bytes `[proven, until)` of page `page`'s record area to the device,
    /// `proven` being what `commit` (the proof of the page being written, if it is this
    /// page's) covers. The caller holds `flush_write` (whose value `commit` is).
    fn append_to_device(
        &self,
        files: &SegmentFiles,
        commit: &mut Option<PageCommit>,
        page: u64,
        until: usize,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let commit = match commit {
            Some(c) if c.page() == page => c,
            _ => commit.insert(PageCommit::new(page)),
        };
        let from = commit.len();
        if until <= from {
            return Ok(());
        }
        // SAFETY: `page` is in memory (not flushed whole, so not evicted) and its bytes
        // below `until` are complete and no longer written (the page is closed, or the
        // request's epoch is safe); writers of later records touch only bytes at or above
        // `until`. Withdrawal may still set a header's invalid bit: the copy is what is
        // both checksummed and written.
        let src = unsafe { std::slice::from_raw_parts(self.frame_ptr(page).add(from), until - from) };
        scratch.clear();
        scratch.extend_from_slice(src);
        files.append_to_page(commit, scratch, self.sync_on_flush)
    }
}

/// The flush error to record: `error`, failing since the earlier failure if any.
pub(super) fn failure(error: &Error, earlier: Option<&(String, Option<i32>, std::time::Instant)>) -> (String, Option<i32>, std::time::Instant) {
    let errno = match error {
        Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    let since = earlier.map_or_else(std::time::Instant::now, |(_, _, since)| *since);
    (error.to_string(), errno, since)
}

pub(super) enum FlushWork {
    /// A closed page.
    Page(u64),
    /// The prefix of the open page up to an address.
    Prefix(u64, LogAddress),
}

/// The flush thread: flushes closed pages in page order. It holds a strong reference
/// to the log only while it works or waits for at most 10 ms, so a log dropped without
/// `shutdown` (e.g. a table whose creation failed later) ends the thread.
pub(super) fn flush_loop(log: &Weak<HybridLog>) {
    flush_pages(log);
    // No page will be flushed any more: the observer ends once it has observed the rest.
    if let Some(log) = log.upgrade() {
        log.flush_state.lock().flusher_done = true;
        log.flushed_signal.notify_all();
    }
}

/// The body of [`flush_loop`]; returns at shutdown, after a give-up at shutdown, or once
/// the log is gone.
pub(super) fn flush_pages(log: &Weak<HybridLog>) {
    let mut scratch = Vec::new();
    let mut last_group_commit = std::time::Instant::now();
    loop {
        let Some(log) = log.upgrade() else { return };
        log.populate_ahead();
        if let Some(interval) = log.flush_interval {
            if last_group_commit.elapsed() >= interval {
                last_group_commit = std::time::Instant::now();
                log.request_flush();
            }
        }
        let idle_wait = log.flush_interval.map_or(Duration::from_millis(10), |i| i.min(Duration::from_millis(10)));
        let work = {
            let mut state = log.flush_state.lock();
            let next_page = state.next_page;
            if state.ready.remove(&next_page) {
                Some(FlushWork::Page(next_page))
            } else if let Some(until) = state.partial.take() {
                // A prefix of the open page, once every earlier page is written; a
                // request that the page's own (full) flush already covers is done. A
                // request that ends at a page boundary waits for that page's full
                // flush (a "prefix" up to the boundary would let the page be evicted
                // before its full flush ran).
                if until <= log.flushed_until() {
                    None
                } else if log.page_of(until) == next_page {
                    Some(FlushWork::Prefix(next_page, until))
                } else {
                    state.partial = Some(until);
                    log.flushed_signal.wait_for(&mut state, Duration::from_millis(1));
                    None
                }
            } else if state.shutdown {
                return;
            } else {
                log.flushed_signal.wait_for(&mut state, idle_wait);
                None
            }
        };
        let page = match work {
            Some(FlushWork::Page(page)) => {
                log.flush_one(page, &mut scratch);
                page
            }
            Some(FlushWork::Prefix(page, until)) => {
                log.flush_partial(page, until, &mut scratch);
                page
            }
            None => {
                // Closed pages wait for their epoch; nudge it if writers went idle.
                log.epoch.try_drain();
                continue;
            }
        };
        // A failed write is retried every 100 ms (a hiccup clears; a full disk may be
        // freed), except at shutdown, which must not hang on a device that stays broken
        // (e.g. a data directory deleted under the daemon).
        if let Some(error) = log.flush_error() {
            if log.flush_state.lock().shutdown {
                tracing::error!(page, %error, "giving up flushing at shutdown; the log's durable end stays at the last flushed page");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
