//! The hybrid log (FASTER §4–5, append-only as in FishStore §5).
//!
//! One logical address space starting at 0. Addresses are 48-bit: the high bits are
//! the page number, the low `page_size_bits` bits the offset in the page. The newest
//! pages live in a ring of in-memory *frames* (page `p` in frame `p % frames`); the
//! tail is allocated with a fetch-and-add. Offsets:
//!
//! ```text
//! begin ≤ head ≤ flushed_until ≤ read_only ≤ tail
//!  |      |          |              |          `- next address to allocate
//!  |      |          |              `- start of the open tail page: everything below is immutable
//!  |      |          `- everything below is on the device
//!  |      `- lowest address still in memory (below: read from segment files)
//!  `- lowest valid address (retention truncates here)
//! ```
//!
//! A page is closed when an allocation overflows it: the overflowing thread writes a
//! filler header over the unused end, opens the next page (waiting, if needed, for the
//! frame's previous page to be flushed and evicted) and registers an epoch trigger
//! action that hands the closed page to the flush thread once all its writers are done.
//! An observer thread (schema inference) then reads each flushed page; a frame is reused
//! only once its page is flushed and observed.
//! Eviction moves the head forward and reuses the frame only when the epoch of the
//! move is safe, so readers that checked `address >= head` under protection may keep
//! reading the frame.

pub mod device;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::epoch::{EpochGuard, LightEpoch};
use crate::error::{Error, Result};
use crate::record::RecordHeader;
use crate::mem::AnonymousMemory;
pub use device::{DeviceConfig, PAGE_FOOTER_SIZE};
use device::{seal_page, Device};

/// The first address a record can have; addresses below it stay unused so that 0 can
/// mean "no address" in chains and index entries.
pub const FIRST_ADDRESS: u64 = 64;

/// Size of a record header in bytes; a page end with less room than this needs no filler.
const HEADER_SIZE: u64 = 8;

/// Configuration of a [`HybridLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// log2 of the page size in bytes (12..=30). Default 22 (4 MiB pages).
    pub page_size_bits: u32,
    /// Memory budget of the in-memory ring in bytes; rounded down to whole pages, at
    /// least 4 pages. Default 256 MiB.
    pub memory_budget_bytes: usize,
    /// Pages per segment file. Default 256 (1 GiB segments with 4 MiB pages).
    pub pages_per_segment: u64,
    /// Where flushed pages go.
    pub device: DeviceConfig,
    /// Whether each flushed page is synced to stable storage before it counts as
    /// flushed.
    pub sync_on_flush: bool,
    /// Group commit: every interval, the flush thread also writes the filled prefix of
    /// the open page ([`HybridLog::request_flush`]). `None`: only full pages are flushed
    /// unless someone asks.
    pub flush_interval: Option<Duration>,
    /// Null device only: when the ring is full, evict the oldest page and lose its
    /// records (the ring is a sliding window over the newest pages; for benchmarks and
    /// tests) instead of refusing new records with [`Error::MemoryFull`]. Default false:
    /// an acknowledged record is never lost while the log is open.
    pub discard_evicted_pages: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            page_size_bits: 22,
            memory_budget_bytes: 256 << 20,
            pages_per_segment: 256,
            device: DeviceConfig::Null,
            sync_on_flush: false,
            flush_interval: None,
            discard_evicted_pages: false,
        }
    }
}

/// Called with the record bytes of each closed page (its capacity, without the footer),
/// in page order, once the page is flushed (used for schema inference). It runs on the
/// log's observer thread (see [`HybridLog::set_page_observer`]).
pub type PageObserver = Box<dyn Fn(u64, &[u8]) + Send + Sync>;

/// Nice value of the observer thread (Linux; 0 is the default, 19 the lowest priority).
/// Observing pages (schema inference) is background work, like compaction in an LSM
/// store (RocksDB runs it at a lowered CPU priority for the same reason): on a machine
/// whose cores are all busy, ingestion, network receive and reads go first, and the
/// observer catches up when they pause. It cannot fall behind without bound: a frame is
/// reused only after its page was observed, so a ring full of unobserved pages makes
/// writers wait (backpressure).
pub const OBSERVER_NICE: i32 = 10;

/// How many pages ahead of the tail the flush thread faults in the ring's frames on the
/// first pass through it (a writer opening a page whose frame is not populated yet faults
/// it in itself, which made the first pass 25–35% slower: `shoal-bench --cases memory`).
const POPULATE_AHEAD_PAGES: u64 = 4;

/// The hybrid log. Thread-safe; share it in an `Arc`.
pub struct HybridLog {
    page_bits: u32,
    page_size: usize,
    /// Number of frames: page `p` lives in frame `p % frame_count` of `ring`.
    frame_count: u64,
    /// The page the log started at (created or recovered): pages below
    /// `first_page + frame_count` are the first to use their frame, which is populated
    /// then.
    first_page: u64,
    /// The frames' memory, `frame_count × page_size` bytes: one anonymous mapping, each
    /// frame faulted in (zero-filled by the kernel) in one call shortly before the first
    /// page that uses it opens (`populated_until_page`), so that an empty table holds one
    /// frame, not its whole budget (it held all of it with `MAP_POPULATE` at creation:
    /// 272 MB per empty table, hardening issue item 5). Faulting frames in page by page
    /// as records arrive made the first pass through the ring 1.5–2× slower
    /// (`shoal-bench`, 200 MB: 625–966 against 1300–1650 MB/s; with transparent huge
    /// pages, 292–1485 MB/s, compaction stalls included); one `madvise` per frame from the
    /// writer, 25–35% slower; from the flush thread ahead of the tail (with the index
    /// populated at its first insert), 0.91–0.99× the populated-at-creation ring.
    /// Zeroing memory from the allocator (`alloc_zeroed` of page-aligned frames: the
    /// kernel's zeroing on each fault, then a `memset`) zeroed it twice: a daemon's first
    /// `create_table` with a 1 GiB ring took 2.6 s that way and 1.2 s mapped (one run each,
    /// on a noisy machine).
    ring: AnonymousMemory,
    /// First-pass pages below this one have their frame populated (or being populated):
    /// the flush thread populates [`POPULATE_AHEAD_PAGES`] ahead of the tail so that
    /// writers rarely pay for the faults; a writer that gets ahead populates its own.
    populated_until_page: AtomicU64,
    device: Device,
    sync_on_flush: bool,
    flush_interval: Option<Duration>,
    epoch: LightEpoch,
    /// Packed tail: page number in the high 32 bits, offset in the low 32 bits.
    tail: AtomicU64,
    begin_address: AtomicU64,
    head_address: AtomicU64,
    /// Frames of pages below this address may be reused.
    safe_head_address: AtomicU64,
    read_only_address: AtomicU64,
    flushed_until: AtomicU64,
    /// Pages below this address were handed to the page observer (only meaningful
    /// while `observing` is set).
    observed_until: AtomicU64,
    /// A page observer is installed: frames wait for their page's observation too.
    observing: AtomicBool,
    flush_state: Mutex<FlushState>,
    flushed_signal: Condvar,
    flush_thread: Mutex<Option<JoinHandle<()>>>,
    observer_thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    /// Null device: evict (and lose) pages when the ring is full instead of refusing.
    discard_evicted_pages: bool,
    /// In-memory logs (null device): bytes reserved by batches between
    /// [`HybridLog::check_room`] and the end of their writing ([`RoomReservation`]).
    memory_reserved: AtomicU64,
}

#[derive(Default)]
struct FlushState {
    /// Closed pages whose writers are done, waiting for the flush thread.
    ready: BTreeSet<u64>,
    /// The next page to flush (pages are flushed in order).
    next_page: u64,
    /// The last flush error (message, OS error number, when the failing began), cleared
    /// by the next success.
    error: Option<(String, Option<i32>, std::time::Instant)>,
    shutdown: bool,
    /// The flush thread has ended (set by it as it returns): no page will be flushed
    /// any more.
    flusher_done: bool,
    /// A requested flush of the open page's prefix: every record below this address
    /// is complete (its request's epoch is safe), so the prefix may be written.
    partial: Option<u64>,
}

// SAFETY: frames are raw buffers shared between threads; every access is either to a
// region owned by exactly one writer (allocated by fetch-and-add) or to immutable
// pages, and frame reuse is gated by epoch protection (see the module docs).
unsafe impl Send for HybridLog {}
// SAFETY: as above.
unsafe impl Sync for HybridLog {}

/// Room reserved for a batch by [`HybridLog::check_room`], released when dropped (after
/// the batch's records are allocated). Holds nothing on a log with a device.
#[must_use = "the reservation ends when the guard is dropped"]
pub struct RoomReservation<'a> {
    log: &'a HybridLog,
    bytes: u64,
}

impl Drop for RoomReservation<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.log.memory_reserved.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for HybridLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridLog")
            .field("page_size", &self.page_size)
            .field("frames", &self.frame_count)
            .field("begin", &self.begin_address())
            .field("head", &self.head_address())
            .field("flushed_until", &self.flushed_until())
            .field("tail", &self.tail_address())
            .finish_non_exhaustive()
    }
}

impl HybridLog {
    /// Creates an empty log and starts its flush thread.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a page size outside 4 KiB..=1 GiB;
    /// [`Error::Io`] if the device directory cannot be created.
    pub fn create(config: &LogConfig) -> Result<Arc<Self>> {
        Self::start(config, FIRST_ADDRESS, 0)
    }

    /// Opens the log of a recovered device for appending: pages below `first_page` are
    /// on the device (nothing of them is in memory), the tail is the start of
    /// `first_page` (for page 0: [`FIRST_ADDRESS`]), and `begin_address` is the lowest
    /// valid address. Starts the flush thread.
    ///
    /// # Errors
    /// As [`Self::create`].
    pub fn recover(config: &LogConfig, begin_address: u64, first_page: u64) -> Result<Arc<Self>> {
        Self::start(config, begin_address, first_page)
    }

    fn start(config: &LogConfig, begin_address: u64, first_page: u64) -> Result<Arc<Self>> {
        if !(12..=30).contains(&config.page_size_bits) {
            return Err(Error::InvalidConfig(format!(
                "page_size_bits must be within 12..=30 (4 KiB to 1 GiB pages), got {}",
                config.page_size_bits
            )));
        }
        if config.pages_per_segment == 0 {
            return Err(Error::InvalidConfig("pages_per_segment must be at least 1".into()));
        }
        let page_size = 1usize << config.page_size_bits;
        #[allow(clippy::cast_possible_truncation)]
        let ring_bytes = Self::ring_bytes_for(config) as usize;
        let frame_count = ring_bytes / page_size;
        let ring = AnonymousMemory::new(ring_bytes, "the in-memory ring (memory budget)")?;
        let device = Device::open(&config.device, page_size, config.pages_per_segment)?;
        let start_address = first_page << config.page_size_bits;
        let log = Arc::new(Self {
            page_bits: config.page_size_bits,
            page_size,
            frame_count: frame_count as u64,
            first_page,
            ring,
            device,
            sync_on_flush: config.sync_on_flush,
            discard_evicted_pages: config.discard_evicted_pages,
            flush_interval: config.flush_interval,
            epoch: LightEpoch::new(),
            tail: AtomicU64::new(if first_page == 0 { FIRST_ADDRESS } else { first_page << 32 }),
            begin_address: AtomicU64::new(begin_address),
            head_address: AtomicU64::new(start_address),
            safe_head_address: AtomicU64::new(start_address),
            read_only_address: AtomicU64::new(start_address),
            flushed_until: AtomicU64::new(start_address),
            observed_until: AtomicU64::new(start_address),
            observing: AtomicBool::new(false),
            flush_state: Mutex::new(FlushState { next_page: first_page, ..FlushState::default() }),
            flushed_signal: Condvar::new(),
            flush_thread: Mutex::new(None),
            observer_thread: Mutex::new(None),
            closed: AtomicBool::new(false),
            memory_reserved: AtomicU64::new(0),
            populated_until_page: AtomicU64::new(first_page),
        });
        log.populate_through(first_page);
        let weak = Arc::downgrade(&log);
        let handle = std::thread::Builder::new()
            .name("shoal-flush".into())
            .spawn(move || flush_loop(&weak))
            .map_err(|e| Error::io("flush thread", e))?;
        *log.flush_thread.lock() = Some(handle);
        Ok(log)
    }

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
        let first_page = self.page_of(self.observed_until.load(Ordering::Acquire));
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
    pub fn observed_until(&self) -> u64 {
        if self.observing.load(Ordering::Acquire) {
            self.observed_until.load(Ordering::Acquire)
        } else {
            self.flushed_until()
        }
    }

    /// Waits until every page below `address` was observed (or `timeout` passes);
    /// returns [`observed_until`](Self::observed_until). Only whole pages are observed,
    /// and only once flushed: `address` should be a page start at or below the flushed
    /// address.
    pub fn wait_observed(&self, address: u64, timeout: Duration) -> u64 {
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

    /// Frames of pages below this address may be evicted: they are flushed and, with an
    /// observer, observed.
    fn evictable_until(&self) -> u64 {
        self.flushed_until().min(self.observed_until())
    }

    /// The epoch domain that protects frames of this log.
    #[must_use]
    pub fn epoch(&self) -> &LightEpoch {
        &self.epoch
    }

    /// Page size in bytes.
    #[must_use]
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Bytes of a page available to records (the page size less the footer).
    #[must_use]
    pub fn page_capacity(&self) -> usize {
        self.page_size - PAGE_FOOTER_SIZE
    }

    /// The largest record (in bytes) that fits in a page.
    #[must_use]
    pub fn max_record_size(&self) -> usize {
        self.page_capacity()
    }

    /// Page number of `address`.
    #[must_use]
    pub fn page_of(&self, address: u64) -> u64 {
        address >> self.page_bits
    }

    /// Offset of `address` within its page.
    #[must_use]
    pub fn offset_of(&self, address: u64) -> usize {
        (address & ((1 << self.page_bits) - 1)) as usize
    }

    /// First address of page `page`.
    #[must_use]
    pub fn page_start(&self, page: u64) -> u64 {
        page << self.page_bits
    }

    /// Next address to be allocated (the tail).
    #[must_use]
    pub fn tail_address(&self) -> u64 {
        let packed = self.tail.load(Ordering::Acquire);
        let (page, offset) = (packed >> 32, packed & 0xFFFF_FFFF);
        self.page_start(page) + offset.min(self.page_capacity() as u64)
    }

    /// Lowest valid address.
    #[must_use]
    pub fn begin_address(&self) -> u64 {
        self.begin_address.load(Ordering::Acquire)
    }

    /// FASTER's `ShiftBeginAddress`: raises the begin address to `address` (rounded down
    /// to a page, at most the flushed address rounded down), waits until every reader
    /// protected before the shift has moved on (an epoch becomes safe), then deletes the
    /// segment files wholly below it. Scans and chain walks never read below the begin
    /// address. Returns `(new begin, files deleted, bytes deleted)`; the in-memory null
    /// device only moves the address.
    ///
    /// # Errors
    /// [`Error::Io`] deleting a file.
    pub fn shift_begin_address(&self, address: u64) -> Result<(u64, u64, u64)> {
        let limit = self.page_start(self.page_of(self.flushed_until()));
        let target = self.page_start(self.page_of(address.min(limit))).max(self.begin_address());
        self.begin_address.fetch_max(target, Ordering::AcqRel);
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
    pub fn begin_for_age(&self, cutoff: std::time::SystemTime) -> Result<Option<u64>> {
        match &self.device {
            Device::Null => Ok(None),
            Device::Segments(segments) => {
                Ok(segments.first_page_after_segments_older_than(cutoff)?.map(|page| self.page_start(page)))
            }
        }
    }

    /// Lowest address still in memory.
    #[must_use]
    pub fn head_address(&self) -> u64 {
        self.head_address.load(Ordering::Acquire)
    }

    /// Start of the open tail page; everything below is immutable.
    #[must_use]
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn read_only_address(&self) -> u64 {
        self.read_only_address.load(Ordering::Acquire)
    }

    /// Everything below this address has been written to the device.
    #[must_use]
    pub fn flushed_until(&self) -> u64 {
        self.flushed_until.load(Ordering::Acquire)
    }

    /// The last flush error, if the most recent flush attempt failed.
    #[must_use]
    pub fn flush_error(&self) -> Option<String> {
        self.flush_state.lock().error.as_ref().map(|(message, _, _)| message.clone())
    }

    /// The device's failure as an error, once flushes have been failing for at least
    /// `for_at_least` (a disk that is full stays full; a hiccup clears in a retry).
    #[must_use]
    pub fn device_failure(&self, for_at_least: Duration) -> Option<Error> {
        let state = self.flush_state.lock();
        let (message, errno, since) = state.error.as_ref()?;
        (since.elapsed() >= for_at_least).then(|| {
            let source = match errno {
                Some(code) => std::io::Error::from_raw_os_error(*code),
                None => std::io::Error::other(message.clone()),
            };
            Error::io(format!("log device ({message}); writes are retried every 100 ms"), source)
        })
    }

    /// Waits until `bytes` more fit in the memory ring without waiting for a flush in
    /// the middle of a batch, or fails with the device's error if the device is failing
    /// meanwhile: ingestion then stops before writing anything of the batch (e.g. disk
    /// full → `RESOURCE_EXHAUSTED` at the Flight boundary) instead of hanging halfway.
    /// Everything already ingested stays readable; ingestion resumes once the flush
    /// thread's retries succeed. Call it without log-epoch protection.
    ///
    /// An in-memory log (null device) has nowhere to put a page whose frame is needed:
    /// its pages stay in the ring until retention moves the begin address past them. There
    /// the batch's room is *reserved* until the returned guard is dropped, so that
    /// concurrent batches cannot together overrun the ring, and a batch that does not fit
    /// fails with [`Error::MemoryFull`] before anything is written: acknowledged records
    /// are never evicted.
    ///
    /// # Errors
    /// [`Error::Io`] with the device's error; [`Error::Closed`]; [`Error::MemoryFull`].
    pub fn check_room(&self, bytes: usize) -> Result<RoomReservation<'_>> {
        if self.device.is_null() {
            if self.discard_evicted_pages {
                return Ok(RoomReservation { log: self, bytes: 0 });
            }
            return self.reserve_memory(bytes);
        }
        let frames = self.frame_count;
        loop {
            // The frames of every page up to the batch's last (with a page of slack for
            // fillers) must be free, i.e. the pages they held flushed. A batch larger
            // than the ring can only wait for every closed page to be flushed.
            let tail = self.tail_address();
            let (first_page, last_page) = (self.page_of(tail), self.page_of(tail + bytes as u64) + 1);
            let needed = if last_page < frames {
                0
            } else {
                self.page_start((last_page + 1 - frames).min(first_page))
            };
            if self.evictable_until() >= needed {
                return Ok(RoomReservation { log: self, bytes: 0 });
            }
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            if let Some(error) = self.device_failure(Duration::ZERO) {
                return Err(error);
            }
            self.epoch.try_drain();
            let mut state = self.flush_state.lock();
            self.flushed_signal.wait_for(&mut state, Duration::from_millis(1));
        }
    }

    /// The first page an in-memory log cannot open: page `p` takes the frame of page
    /// `p - frames`, which must lie wholly below the begin address (truncated).
    fn memory_limit_page(&self) -> u64 {
        self.page_of(self.begin_address()) + self.frame_count
    }

    /// [`Self::check_room`] of an in-memory log: reserves room for `bytes` of records
    /// (twice as much, for the fillers that close pages: a page's unused end is smaller
    /// than the record that did not fit in it, and that record is part of the batch).
    fn reserve_memory(&self, bytes: usize) -> Result<RoomReservation<'_>> {
        let wanted = 2 * bytes as u64;
        let mut reserved = self.memory_reserved.load(Ordering::Acquire);
        loop {
            // Reserved first, then the tail: a batch's records are allocated before it
            // releases its reservation, so the sum never misses them.
            let end = self.tail_address() + reserved + wanted;
            let limit_page = self.memory_limit_page();
            if self.page_of(end) >= limit_page {
                return Err(Error::MemoryFull {
                    requested: bytes as u64,
                    capacity: self.frame_count * self.page_size as u64,
                    used: self.tail_address().saturating_sub(self.begin_address()),
                });
            }
            match self.memory_reserved.compare_exchange_weak(reserved, reserved + wanted, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(RoomReservation { log: self, bytes: wanted }),
                Err(now) => reserved = now,
            }
        }
    }

    /// Test hook: makes every device write fail with OS error `errno` (e.g. 28, no space
    /// left on device) until called with `None`.
    #[doc(hidden)]
    #[cfg(feature = "internals")]
    pub fn inject_write_fault(&self, errno: Option<i32>) {
        if let Device::Segments(files) = &self.device {
            files.inject_write_fault(errno);
        }
    }

    /// True when pages below the head can be read back (a directory device).
    #[must_use]
    pub fn has_storage(&self) -> bool {
        !self.device.is_null()
    }

    /// The size of the in-memory ring in bytes (`frames × page size`): the most memory
    /// the log's pages take.
    #[must_use]
    pub fn ring_bytes(&self) -> u64 {
        self.frame_count * self.page_size as u64
    }

    /// The ring size a log with `config` gets: the memory budget rounded down to whole
    /// pages, at least 4.
    #[must_use]
    pub fn ring_bytes_for(config: &LogConfig) -> u64 {
        let page_size = 1usize << config.page_size_bits.min(30);
        ((config.memory_budget_bytes / page_size).max(4) * page_size) as u64
    }

    /// Faults in the frames of the first-pass pages up to `page` (inclusive) that no
    /// thread populated yet, each claimed by one thread. Only a speed-up: a frame
    /// written before (or while) it is populated faults in lazily.
    fn populate_through(&self, page: u64) {
        let last = page.min(self.first_page + self.frame_count - 1);
        let mut next = self.populated_until_page.load(Ordering::Relaxed);
        while next <= last {
            match self.populated_until_page.compare_exchange_weak(next, next + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    #[allow(clippy::cast_possible_truncation)]
                    let frame = (next % self.frame_count) as usize;
                    self.ring.populate(frame * self.page_size, self.page_size);
                    next += 1;
                }
                Err(current) => next = current,
            }
        }
    }

    /// The flush thread's share of [`Self::populate_through`]: one frame per call, so
    /// that flushes are not held up, at most [`POPULATE_AHEAD_PAGES`] ahead of the tail
    /// and no further ahead than the log has grown (an empty table keeps one frame).
    fn populate_ahead(&self) {
        let next = self.populated_until_page.load(Ordering::Relaxed);
        let tail_page = self.page_of(self.tail_address());
        let wanted = tail_page + POPULATE_AHEAD_PAGES.min(tail_page - self.first_page);
        if next <= wanted {
            self.populate_through(next);
        }
    }

    fn frame_ptr(&self, page: u64) -> *mut u8 {
        #[allow(clippy::cast_possible_truncation)]
        let frame = (page % self.frame_count) as usize;
        // SAFETY: frame < frame_count, so the frame's bytes lie within the ring's mapping.
        unsafe { self.ring.as_ptr().add(frame * self.page_size) }
    }

    /// Allocates `size` bytes (a multiple of 8, at most [`Self::max_record_size`]) at
    /// the tail and returns their address. The caller must hold `guard` until it has
    /// written the record, and write its header before anything else.
    ///
    /// May wait for a flush and eviction when the ring is full (backpressure); the
    /// guard is refreshed while waiting.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a size that cannot fit a page; [`Error::Closed`].
    pub fn allocate(self: &Arc<Self>, size: usize, guard: &mut EpochGuard<'_>) -> Result<u64> {
        let capacity = self.page_capacity() as u64;
        if size == 0 || size as u64 > capacity || !size.is_multiple_of(8) {
            return Err(Error::InvalidConfig(format!(
                "allocation of {size} bytes (must be a non-zero multiple of 8 up to {capacity})"
            )));
        }
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            // About to overflow the page: make sure the next page's frame can be had
            // before claiming the overflow (the claimer must close the page), so that a
            // failing device fails this allocation instead of blocking the log.
            let peek = self.tail.load(Ordering::Acquire);
            let (page, offset) = (peek >> 32, peek & 0xFFFF_FFFF);
            if offset <= capacity && offset + size as u64 > capacity {
                self.wait_for_frame(page + 1, guard)?;
            }
            let old = self.tail.fetch_add(size as u64, Ordering::AcqRel);
            let (page, offset) = (old >> 32, old & 0xFFFF_FFFF);
            if offset + size as u64 <= capacity {
                return Ok(self.page_start(page) + offset);
            }
            if offset <= capacity {
                // This allocation overflowed the page first: close it.
                self.close_page(page, offset, guard)?;
            } else {
                // Another thread is closing the page; wait for the tail to move on.
                while self.tail.load(Ordering::Acquire) >> 32 == page {
                    guard.refresh();
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Waits until the page that `page`'s frame holds is flushed, failing with the
    /// device's error if the device is failing meanwhile.
    fn wait_for_frame(&self, page: u64, guard: &mut EpochGuard<'_>) -> Result<()> {
        let frames = self.frame_count;
        if page < frames {
            return Ok(());
        }
        if self.device.is_null() && !self.discard_evicted_pages && page >= self.memory_limit_page() {
            // The frame holds records that exist nowhere else: refuse rather than evict.
            return Err(Error::MemoryFull {
                requested: self.page_size as u64,
                capacity: frames * self.page_size as u64,
                used: self.tail_address().saturating_sub(self.begin_address()),
            });
        }
        let needed = self.page_start(page - frames + 1);
        while self.evictable_until() < needed {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            if let Some(error) = self.device_failure(Duration::ZERO) {
                return Err(error);
            }
            guard.refresh();
            let mut state = self.flush_state.lock();
            if self.evictable_until() < needed {
                self.flushed_signal.wait_for(&mut state, Duration::from_millis(1));
            }
        }
        Ok(())
    }

    /// Makes the frame of `page` available: the page it held before must be flushed
    /// and evicted, and no reader may still be protected in an epoch that saw it.
    fn open_page(self: &Arc<Self>, page: u64, guard: &mut EpochGuard<'_>) -> Result<()> {
        let frames = self.frame_count;
        self.populate_through(page);
        if page < frames {
            return Ok(());
        }
        let evicted_page = page - frames;
        let new_head = self.page_start(evicted_page + 1);
        // 1. The evicted page must be on the device (and observed).
        while self.evictable_until() < new_head {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            guard.refresh();
            let mut state = self.flush_state.lock();
            if self.evictable_until() < new_head {
                self.flushed_signal.wait_for(&mut state, Duration::from_millis(1));
            }
        }
        // 2. Shift the head; the frame is reusable once the shift's epoch is safe.
        if self.head_address.fetch_max(new_head, Ordering::AcqRel) < new_head {
            let log = Arc::downgrade(self);
            let safe_head = move || {
                if let Some(log) = log.upgrade() {
                    log.safe_head_address.fetch_max(new_head, Ordering::AcqRel);
                }
            };
            self.epoch.bump_with(safe_head);
        }
        while self.safe_head_address.load(Ordering::Acquire) < new_head {
            guard.refresh();
            std::thread::yield_now();
        }
        // 3. Clear the frame: scans rely on zero headers for unwritten space.
        // SAFETY: no thread can reach the evicted page's frame any more.
        unsafe { std::ptr::write_bytes(self.frame_ptr(page), 0, self.page_size) };
        Ok(())
    }

    fn page_ready_to_flush(&self, page: u64) {
        let mut state = self.flush_state.lock();
        state.ready.insert(page);
        self.flushed_signal.notify_all();
    }

    /// Writes a record header at `address`.
    ///
    /// # Safety
    /// `address` must be in memory (≥ head, in a frame the caller owns a region of).
    pub(crate) unsafe fn write_header(&self, address: u64, header: RecordHeader) {
        let ptr = self.frame_ptr(self.page_of(address)).add(self.offset_of(address)).cast::<AtomicU64>();
        (*ptr).store(header.0, Ordering::Release);
    }

    /// A pointer to the in-memory bytes at `address`.
    ///
    /// # Safety
    /// The caller must hold epoch protection and have checked `address >= head`, or
    /// own the region by allocation.
    pub(crate) unsafe fn memory_ptr(&self, address: u64) -> *mut u8 {
        self.frame_ptr(self.page_of(address)).add(self.offset_of(address))
    }

    /// Atomically loads the header word at an in-memory `address`.
    ///
    /// # Safety
    /// As [`Self::memory_ptr`]; `address` must be 8-byte aligned.
    pub(crate) unsafe fn load_header(&self, address: u64) -> RecordHeader {
        RecordHeader((*self.memory_ptr(address).cast::<AtomicU64>()).load(Ordering::Acquire))
    }

    /// The `len` bytes at `address` in place, without a copy, when they are in memory
    /// (at or above the head address) and within one page: valid for as long as `guard`
    /// — protection of this log's epoch — is neither dropped nor refreshed, since the page
    /// cannot be evicted before. `None` when below the head (read them from the device:
    /// [`Self::read_from_device`]) or when `[address, address + len)` crosses a page end.
    ///
    /// # Panics
    /// In debug builds, if `guard` protects another epoch domain.
    #[must_use]
    pub fn read_in_memory<'g>(&self, guard: &'g EpochGuard<'_>, address: u64, len: usize) -> Option<&'g [u8]> {
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
    pub fn read_into(&self, address: u64, len: usize, out: &mut Vec<u8>) -> Result<bool> {
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
    pub fn read_from_device(&self, address: u64, len: usize, out: &mut Vec<u8>) -> Result<bool> {
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
                    (tail.saturating_sub(start)) as usize
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
    pub fn current_header(&self, address: u64) -> Option<RecordHeader> {
        let _guard = self.epoch.protect();
        if address >= self.head_address() {
            // SAFETY: protected, at or above the head.
            Some(unsafe { self.load_header(address) })
        } else {
            None
        }
    }

    /// The thread that overflowed page `page` at `offset` closes it: a filler over the
    /// unused end, the next page's frame made ready, the tail moved, and the flush of
    /// `page` registered for when all its writers are done (epoch safe).
    fn close_page(self: &Arc<Self>, page: u64, offset: u64, guard: &mut EpochGuard<'_>) -> Result<()> {
        let capacity = self.page_capacity() as u64;
        if capacity - offset >= HEADER_SIZE {
            #[allow(clippy::cast_possible_truncation)]
            let filler = RecordHeader::filler((capacity - offset) as u32);
            // SAFETY: [offset, capacity) of the open page is owned by the closing thread.
            unsafe { self.write_header(self.page_start(page) + offset, filler) };
        }
        self.open_page(page + 1, guard)?;
        self.tail.store((page + 1) << 32, Ordering::Release);
        self.read_only_address.store(self.page_start(page + 1), Ordering::Release);
        let log = Arc::downgrade(self);
        self.epoch.bump_with(move || {
            if let Some(log) = log.upgrade() {
                log.page_ready_to_flush(page);
            }
        });
        Ok(())
    }

    /// Closes the open page (its unused end becomes a filler) so that everything
    /// allocated so far gets flushed; returns the start of the new tail page.
    ///
    /// # Errors
    /// [`Error::Closed`].
    pub fn close_tail_page(self: &Arc<Self>) -> Result<u64> {
        let mut guard = self.epoch.protect();
        let target_page = self.page_of(self.tail_address());
        let capacity = self.page_capacity() as u64;
        // The next page's frame first, as `allocate` does: once the page is claimed, other
        // writers spin until it is closed, and closing may wait for the frame (for the
        // flush and the lower-priority observer), which the spinning would starve.
        self.wait_for_frame(target_page + 1, &mut guard)?;
        loop {
            let packed = self.tail.load(Ordering::Acquire);
            let (page, offset) = (packed >> 32, packed & 0xFFFF_FFFF);
            if page > target_page || offset == 0 {
                return Ok(self.page_start(page));
            }
            if offset > capacity {
                guard.refresh();
                std::thread::yield_now();
                continue;
            }
            // Claim the rest of the page plus 8 bytes, so that this thread is the one
            // that overflows it.
            let claimed = packed + (capacity - offset) + 8;
            if self.tail.compare_exchange(packed, claimed, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.close_page(page, offset, &mut guard)?;
                return Ok(self.page_start(page + 1));
            }
        }
    }

    /// Asks the flush thread to write everything allocated so far, including the
    /// filled prefix of the open tail page, without closing that page (the group commit
    /// of FASTER §6.3 / FishStore Appendix E). Once every thread that allocated below
    /// the current tail has finished its record (an epoch becomes safe), the flush thread
    /// writes the pages before it and then the prefix of the open page, sealed, at its
    /// place in the segment file; `flushed_until` then reaches the tail read here. The
    /// page is written again, whole, when it closes. Returns the address requested.
    /// No-op on the null device (nothing is ever durable there).
    pub fn request_flush(self: &Arc<Self>) -> u64 {
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
    pub fn wait_flushed(&self, address: u64, timeout: Duration) -> u64 {
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

    fn flush_one(&self, page: u64) {
        // SAFETY: the page is closed and all writers are done (its epoch is safe); it
        // cannot be evicted before `flushed_until` passes it, which only this thread
        // advances. The footer area is not used by records.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(page), self.page_size) };
        let result = match &self.device {
            Device::Null => Ok(()),
            Device::Segments(files) => {
                seal_page(bytes, page);
                files.write_page(page, bytes, self.sync_on_flush)
            }
        };
        let mut state = self.flush_state.lock();
        match result {
            Ok(()) => {
                state.error = None;
                state.next_page = page + 1;
                self.flushed_until.fetch_max(self.page_start(page + 1), Ordering::AcqRel);
            }
            Err(e) => {
                tracing::error!(page, error = %e, "page flush failed; retrying");
                state.error = Some(failure(&e, state.error.as_ref()));
                state.ready.insert(page);
            }
        }
        self.flushed_signal.notify_all();
    }
}

impl HybridLog {
    /// Writes the prefix `[page start, until)` of the open page `page` (sealed, rest
    /// zero) and advances `flushed_until` to `until`. Called by the flush thread only,
    /// when every page before `page` is flushed.
    fn flush_partial(&self, page: u64, until: u64, scratch: &mut Vec<u8>) {
        let Device::Segments(files) = &self.device else { return };
        let length = (until - self.page_start(page)) as usize;
        scratch.clear();
        scratch.resize(self.page_size, 0);
        // SAFETY: `page` is in memory (it is not flushed, so not evicted) and its bytes
        // below `until` are complete and no longer written (the request's epoch is
        // safe); writers of later records touch only bytes at or above `until`.
        let src = unsafe { std::slice::from_raw_parts(self.frame_ptr(page), length) };
        scratch[..length].copy_from_slice(src);
        seal_page(scratch, page);
        let result = files.write_page(page, scratch, self.sync_on_flush);
        let mut state = self.flush_state.lock();
        match result {
            Ok(()) => {
                state.error = None;
                self.flushed_until.fetch_max(until, Ordering::AcqRel);
            }
            Err(e) => {
                tracing::error!(page, error = %e, "partial page flush failed; retrying");
                state.error = Some(failure(&e, state.error.as_ref()));
                state.partial = Some(state.partial.map_or(until, |p| p.max(until)));
            }
        }
        self.flushed_signal.notify_all();
    }
}

/// The flush error to record: `error`, failing since the earlier failure if any.
fn failure(error: &Error, earlier: Option<&(String, Option<i32>, std::time::Instant)>) -> (String, Option<i32>, std::time::Instant) {
    let errno = match error {
        Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    let since = earlier.map_or_else(std::time::Instant::now, |(_, _, since)| *since);
    (error.to_string(), errno, since)
}

enum FlushWork {
    /// A closed page.
    Page(u64),
    /// The prefix of the open page up to an address.
    Prefix(u64, u64),
}

/// The flush thread: flushes closed pages in page order. It holds a strong reference
/// to the log only while it works or waits for at most 10 ms, so a log dropped without
/// `shutdown` (e.g. a table whose creation failed later) ends the thread.
fn flush_loop(log: &Weak<HybridLog>) {
    flush_pages(log);
    // No page will be flushed any more: the observer ends once it has observed the rest.
    if let Some(log) = log.upgrade() {
        log.flush_state.lock().flusher_done = true;
        log.flushed_signal.notify_all();
    }
}

/// The body of [`flush_loop`]; returns at shutdown, after a give-up at shutdown, or once
/// the log is gone.
fn flush_pages(log: &Weak<HybridLog>) {
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
                log.flush_one(page);
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

/// The observer thread: hands each closed page, once flushed, to the page observer, in
/// page order from `page`, then raises `observed_until` past it. Like the flush thread,
/// it holds a strong reference to the log only while it works or waits for at most
/// 10 ms. At shutdown it observes every page the flush thread flushed, then ends.
fn observe_loop(log: &Weak<HybridLog>, observer: &PageObserver, mut page: u64) {
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
            log.observed_until.store(end, Ordering::Release);
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

/// Joins a log thread, unless it is the calling thread (a log dropped or shut down from
/// its own flush or observer thread).
fn join_unless_current(handle: Option<JoinHandle<()>>) {
    if let Some(handle) = handle {
        if handle.thread().id() != std::thread::current().id() {
            let _ = handle.join();
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

impl Drop for HybridLog {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.epoch.try_drain();
        // The ring's mapping is released when `ring` drops.
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// Fills `pages` pages of `log` with 512-byte records (headers only) from a thread of
    /// its own; returns the thread. The last page stays open (full, but not closed).
    fn fill(log: &Arc<HybridLog>, pages: u64) -> std::thread::JoinHandle<()> {
        let log = Arc::clone(log);
        std::thread::spawn(move || {
            let records = pages * (log.page_capacity() as u64 / 512);
            for _ in 0..records {
                let mut guard = log.epoch().protect();
                let address = log.allocate(512, &mut guard).unwrap();
                // SAFETY: just allocated by this thread, under `guard`.
                unsafe { log.write_header(address, RecordHeader::new(512, 0, 0)) };
            }
        })
    }

    #[test]
    fn frames_wait_for_a_lagging_observer_and_every_page_is_observed_once_in_order() {
        let config = LogConfig {
            page_size_bits: 12,
            memory_budget_bytes: 4 << 12,
            discard_evicted_pages: true,
            ..LogConfig::default()
        };
        let log = HybridLog::create(&config).unwrap();
        let (observed, pages) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        log.set_page_observer(Box::new(move |page, bytes| {
            assert_eq!(bytes.len(), 4096 - PAGE_FOOTER_SIZE);
            gate.lock().recv().unwrap();
            observed.send(page).unwrap();
        }))
        .unwrap();
        let writer = fill(&log, 12);
        // The observer holds page 0: the writer fills the ring (4 frames) and waits for
        // page 0's frame although the page was flushed long ago. Waits for those conditions
        // (no fixed sleep that a loaded machine could outlast), then gives a writer that
        // wrongly reused the frame time to run on.
        let flushed = log.wait_flushed(log.page_start(1), Duration::from_secs(10));
        assert!(flushed >= log.page_start(1), "page 0 is flushed: {flushed}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while log.tail_address() < log.page_start(3) {
            assert!(std::time::Instant::now() < deadline, "the writer stalled at {}", log.tail_address());
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(!writer.is_finished(), "the writer reused an unobserved frame");
        assert!(log.tail_address() < log.page_start(5), "tail {} ran past the ring", log.tail_address());
        assert_eq!(log.observed_until(), log.page_start(0));
        for _ in 0..11 {
            release.send(()).unwrap();
        }
        writer.join().unwrap();
        assert_eq!(log.wait_observed(log.page_start(11), Duration::from_secs(10)), log.page_start(11));
        let seen: Vec<u64> = pages.try_iter().collect();
        assert_eq!(seen, (0..11).collect::<Vec<u64>>());
        assert!(log.set_page_observer(Box::new(|_, _| {})).is_err(), "a second observer would observe pages twice");
        drop(release);
        log.shutdown();
    }
}
