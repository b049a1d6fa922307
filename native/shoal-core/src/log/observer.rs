//! The page observer: a thread of lower priority than ingestion that reads each flushed
//! page once, in order (schema inference, AsterixDB's tuple compactor); a frame is reused
//! only once its page is flushed and observed.

use super::*;

impl HybridLog {
    /// Installs the function called with every closed page once it is flushed, in page
    /// order from the page the log started at, on a thread of its own (`shoal-observe`,
    /// at nice [`OBSERVER_NICE`]). From then on a frame is reused only after its page was
    /// observed as well as flushed. Call it once, before the first page closes.
    ///
    /// # Errors
    /// [`Error::Io`] when the thread cannot be started.
    pub fn set_page_observer(self: &Arc<Self>, observer: PageObserver) -> Result<()> {
        if self.observing.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidConfig("the log already has a page observer".into()));
        }
        let first_page = self.page_of(self.observed_until());
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("shoal-observe".into())
            .spawn(move || observe_loop(&weak, &observer, first_page));
        match spawned {
            Ok(handle) => {
                *self.observer_thread.lock() = Some(handle);
                Ok(())
            }
            Err(e) => {
                // No observer: frames must not wait for one.
                self.observing.store(false, Ordering::Release);
                Err(Error::io("observer thread", e))
            }
        }
    }

    /// Pages below this address were handed to the page observer; with no observer,
    /// the flushed address.
    #[must_use]
    pub fn observed_until(&self) -> LogAddress {
        if self.observing.load(Ordering::Acquire) {
            LogAddress::new(self.observed_until.load(Ordering::Acquire))
        } else {
            self.flushed_until()
        }
    }

    /// Waits until every page below `address` was observed (or `timeout` passes);
    /// returns [`observed_until`](Self::observed_until). Only whole pages are observed,
    /// and only once flushed: `address` should be a page start at or below the flushed
    /// address.
    pub fn wait_observed(&self, address: LogAddress, timeout: Duration) -> LogAddress {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let observed = self.observed_until();
            if observed >= address || std::time::Instant::now() >= deadline || self.closed.load(Ordering::Acquire) {
                return observed;
            }
            let mut state = self.flush_state.lock();
            if self.observed_until() < address {
                self.flushed_signal.wait_for(&mut state, Duration::from_millis(1));
            }
        }
    }
}

/// The observer thread: hands each closed page, once flushed, to the page observer, in
/// page order from `page`, then raises `observed_until` past it. Like the flush thread,
/// it holds a strong reference to the log only while it works or waits for at most
/// 10 ms. At shutdown it observes every page the flush thread flushed, then ends.
pub(super) fn observe_loop(log: &Weak<HybridLog>, observer: &PageObserver, mut page: u64) {
    lower_priority(OBSERVER_NICE);
    loop {
        let Some(log) = log.upgrade() else { return };
        let end = log.page_start(page + 1);
        if log.flushed_until() >= end {
            // SAFETY: the page is flushed, so closed with all its writers done; its frame
            // is not reused before `observed_until` passes it, which only this thread
            // raises. Records end before the footer.
            let bytes = unsafe { std::slice::from_raw_parts(log.frame_ptr(page), log.page_capacity()) };
            // A panicking observer must not stop the log (frames wait for observation):
            // the page is passed over, loudly.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| observer(page, bytes))).is_err() {
                tracing::error!(page, "the page observer panicked; the page is left out of the inferred schema");
            }
            log.observed_until.store(end.get(), Ordering::Release);
            let _state = log.flush_state.lock();
            log.flushed_signal.notify_all();
            page += 1;
            continue;
        }
        let mut state = log.flush_state.lock();
        if log.flushed_until() < end {
            if state.flusher_done {
                return;
            }
            log.flushed_signal.wait_for(&mut state, Duration::from_millis(10));
        }
    }
}

/// Gives the calling thread the nice value `nice` (Linux; elsewhere nothing). A failure
/// (e.g. a sandbox forbidding it) only leaves the thread at the default priority.
pub(crate) fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id; no memory is passed.
        let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) };
        if result != 0 {
            tracing::debug!(nice, error = %std::io::Error::last_os_error(), "could not lower the observer thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}
