//! Epoch protection (FASTER §2.3).
//!
//! A [`LightEpoch`] keeps a global *current epoch* and, per thread, the epoch at which
//! that thread last entered a protected region (its *local epoch*, 0 when outside). An
//! epoch `e` is *safe* once every protected thread has a local epoch greater than `e`:
//! no thread can still hold a reference obtained during `e`. [`LightEpoch::bump_with`]
//! advances the current epoch and registers a *trigger action* that runs, on whichever
//! thread notices first, as soon as the epoch before the bump is safe.
//!
//! The hybrid log uses it to flush a page once all its writers are done and to reuse a
//! page frame once no reader can still see it; the PSF registry uses a second instance
//! so that registration phases wait for ingestion batches, not for page I/O.
//!
//! Threads are given a process-wide slot number the first time they touch any epoch
//! (freed when the thread exits), so one thread has the same slot in every instance.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Most threads that can be inside epoch-protected code at once (process-wide).
pub const MAX_THREADS: usize = 1024;

/// Local epoch value of a thread outside any protected region.
const UNPROTECTED: u64 = 0;

static SLOT_USED: [AtomicBool; MAX_THREADS] = [const { AtomicBool::new(false) }; MAX_THREADS];
/// One past the highest slot ever handed out; bounds the scans of the epoch tables.
static SLOT_HIGH_WATER: AtomicUsize = AtomicUsize::new(0);

struct SlotLease(Cell<Option<usize>>);

impl Drop for SlotLease {
    fn drop(&mut self) {
        if let Some(slot) = self.0.get() {
            SLOT_USED[slot].store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static THREAD_SLOT: SlotLease = const { SlotLease(Cell::new(None)) };
}

/// The calling thread's slot, acquired on first use. Waits (yielding) if all
/// [`MAX_THREADS`] slots are in use by live threads.
fn thread_slot() -> usize {
    THREAD_SLOT.with(|lease| {
        if let Some(slot) = lease.0.get() {
            return slot;
        }
        loop {
            for (slot, used) in SLOT_USED.iter().enumerate() {
                if !used.load(Ordering::Relaxed)
                    && used.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok()
                {
                    SLOT_HIGH_WATER.fetch_max(slot + 1, Ordering::AcqRel);
                    lease.0.set(Some(slot));
                    return slot;
                }
            }
            std::thread::yield_now();
        }
    })
}

type TriggerAction = Box<dyn FnOnce() + Send>;

/// One epoch-protection domain: a current epoch, a table of local epochs (one cache
/// line per thread slot) and the list of pending trigger actions.
pub struct LightEpoch {
    current: CachePadded<AtomicU64>,
    /// The largest epoch known to be safe.
    safe: CachePadded<AtomicU64>,
    table: Box<[CachePadded<AtomicU64>]>,
    /// Pending trigger actions with the epoch that must become safe first.
    drain_list: Mutex<Vec<(u64, TriggerAction)>>,
    drain_pending: AtomicUsize,
}

impl Default for LightEpoch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LightEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LightEpoch")
            .field("current", &self.current.load(Ordering::Relaxed))
            .field("safe", &self.safe.load(Ordering::Relaxed))
            .field("pending_actions", &self.drain_pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl LightEpoch {
    /// A new domain at epoch 1 with no protected thread.
    #[must_use]
    pub fn new() -> Self {
        Self {
            current: CachePadded::new(AtomicU64::new(1)),
            safe: CachePadded::new(AtomicU64::new(0)),
            table: (0..MAX_THREADS).map(|_| CachePadded::new(AtomicU64::new(UNPROTECTED))).collect(),
            drain_list: Mutex::new(Vec::new()),
            drain_pending: AtomicUsize::new(0),
        }
    }

    /// Enters a protected region: the thread's local epoch becomes the current epoch
    /// until the guard is dropped. Re-entrant: a nested guard leaves the outer
    /// protection in place.
    pub fn protect(&self) -> EpochGuard<'_> {
        let slot = thread_slot();
        let entry = &self.table[slot];
        let nested = entry.load(Ordering::Relaxed) != UNPROTECTED;
        if !nested {
            entry.store(self.current.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        EpochGuard { epoch: self, slot, nested }
    }

    /// The current epoch.
    #[must_use]
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// True when no thread holds protection at `epoch` or earlier.
    #[must_use]
    pub fn is_safe(&self, epoch: u64) -> bool {
        epoch <= self.safe.load(Ordering::Acquire) || epoch <= self.compute_safe()
    }

    /// Advances the current epoch and runs `action` once the epoch before the advance
    /// is safe — possibly at once, on this thread, if no thread is protected.
    /// Returns the epoch that must become safe.
    pub fn bump_with(&self, action: impl FnOnce() + Send + 'static) -> u64 {
        let prior = self.current.fetch_add(1, Ordering::SeqCst);
        {
            let mut list = self.drain_list.lock();
            list.push((prior, Box::new(action)));
            self.drain_pending.fetch_add(1, Ordering::Release);
        }
        self.try_drain();
        prior
    }

    /// Runs every pending trigger action whose epoch has become safe.
    pub fn try_drain(&self) {
        if self.drain_pending.load(Ordering::Acquire) == 0 {
            return;
        }
        let safe = self.compute_safe();
        let ready: Vec<TriggerAction> = {
            let mut list = self.drain_list.lock();
            let mut ready = Vec::new();
            let mut index = 0;
            while index < list.len() {
                if list[index].0 <= safe {
                    ready.push(list.remove(index).1);
                } else {
                    index += 1;
                }
            }
            self.drain_pending.fetch_sub(ready.len(), Ordering::Release);
            ready
        };
        for action in ready {
            action();
        }
    }

    /// Number of trigger actions not yet run.
    #[must_use]
    pub fn pending_actions(&self) -> usize {
        self.drain_pending.load(Ordering::Acquire)
    }

    /// Scans the table: the safe epoch is one less than the oldest local epoch, or one
    /// less than the current epoch if no thread is protected.
    fn compute_safe(&self) -> u64 {
        let mut oldest = self.current.load(Ordering::SeqCst);
        let high = SLOT_HIGH_WATER.load(Ordering::Acquire);
        for entry in &self.table[..high] {
            let local = entry.load(Ordering::SeqCst);
            if local != UNPROTECTED && local < oldest {
                oldest = local;
            }
        }
        let safe = oldest - 1;
        self.safe.fetch_max(safe, Ordering::AcqRel);
        safe
    }
}

/// Proof that the calling thread is inside a protected region of a [`LightEpoch`].
/// Dropping it leaves the region (unless it was nested in another guard).
#[must_use = "protection ends when the guard is dropped"]
pub struct EpochGuard<'a> {
    epoch: &'a LightEpoch,
    slot: usize,
    nested: bool,
}

impl EpochGuard<'_> {
    /// Moves the thread's local epoch to the current epoch (announcing that it holds no
    /// reference older than now) and runs trigger actions that became safe.
    ///
    /// Callers must not hold references obtained under the old epoch across this call.
    pub fn refresh(&mut self) {
        if !self.nested {
            self.epoch.table[self.slot].store(self.epoch.current.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        self.epoch.try_drain();
    }

    /// The epoch domain.
    #[must_use]
    pub fn domain(&self) -> &LightEpoch {
        self.epoch
    }
}

impl Drop for EpochGuard<'_> {
    fn drop(&mut self) {
        if !self.nested {
            self.epoch.table[self.slot].store(UNPROTECTED, Ordering::SeqCst);
            self.epoch.try_drain();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn action_runs_at_once_when_no_thread_is_protected() {
        let epoch = LightEpoch::new();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        epoch.bump_with(move || flag.store(true, Ordering::SeqCst));
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn action_waits_for_every_protected_thread_to_refresh() {
        let epoch = Arc::new(LightEpoch::new());
        let ran = Arc::new(AtomicBool::new(false));
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let other = {
            let epoch = Arc::clone(&epoch);
            std::thread::spawn(move || {
                let mut guard = epoch.protect();
                entered_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                guard.refresh();
                drop(guard);
            })
        };
        entered_rx.recv().unwrap();
        let flag = Arc::clone(&ran);
        epoch.bump_with(move || flag.store(true, Ordering::SeqCst));
        // The other thread still holds the old epoch.
        epoch.try_drain();
        assert!(!ran.load(Ordering::SeqCst));
        go_tx.send(()).unwrap();
        other.join().unwrap();
        epoch.try_drain();
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn nested_protection_keeps_the_outer_epoch() {
        let epoch = LightEpoch::new();
        let outer = epoch.protect();
        let before = epoch.current();
        {
            let _inner = epoch.protect();
        }
        epoch.bump_with(|| {});
        assert!(!epoch.is_safe(before), "the outer guard still protects");
        drop(outer);
        assert!(epoch.is_safe(before));
    }

    #[test]
    fn stress_no_action_runs_while_its_epoch_is_held() {
        // Each worker holds a shared counter value under protection; an action that
        // "reclaims" a value must never run while a worker still reads it.
        let epoch = Arc::new(LightEpoch::new());
        let retired = Arc::new(AtomicU64::new(0));
        let violations = Arc::new(AtomicU64::new(0));
        let published = Arc::new(AtomicU64::new(1));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (epoch, retired, violations, published) =
                    (Arc::clone(&epoch), Arc::clone(&retired), Arc::clone(&violations), Arc::clone(&published));
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let guard = epoch.protect();
                        let seen = published.load(Ordering::SeqCst);
                        std::hint::spin_loop();
                        if retired.load(Ordering::SeqCst) >= seen {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        drop(guard);
                    }
                })
            })
            .collect();
        for round in 1..2_000u64 {
            published.store(round + 1, Ordering::SeqCst);
            let retired = Arc::clone(&retired);
            epoch.bump_with(move || {
                retired.fetch_max(round, Ordering::SeqCst);
            });
        }
        for worker in workers {
            worker.join().unwrap();
        }
        epoch.try_drain();
        assert_eq!(violations.load(Ordering::SeqCst), 0);
        assert_eq!(epoch.pending_actions(), 0);
    }
}
