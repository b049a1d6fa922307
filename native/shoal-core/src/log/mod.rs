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

pub mod cache;
pub mod device;
mod flush;
mod observer;
mod read;
mod truncate;
pub(crate) mod withdrawn;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::epoch::{EpochGuard, LightEpoch};
use crate::error::{Error, Result};
use crate::record::RecordHeader;
use crate::LogAddress;
use crate::mem::AnonymousMemory;
pub use device::{page_location, DeviceConfig, PageSnapshot, PAGE_FOOTER_SIZE};
pub use cache::{PageCacheStats, PageSource, PageSourceRef};
#[cfg(feature = "internals")]
pub use device::CrashPoint;
use device::{Device, PageCommit, SegmentFiles};
use flush::flush_loop;
pub(crate) use observer::lower_priority;

pub use crate::record::FIRST_ADDRESS;

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
    /// Where pages missing from the segment files are read from (a table whose remote
    /// copy holds its log: [`cache`]). `None`: every page is local. Not part of the
    /// table's metadata.
    pub page_source: Option<PageSourceRef>,
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
            page_source: None,
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
    /// 272 MB resident per empty table). Faulting frames in page by page as records
    /// arrive made the first pass through the ring 1.5–2× slower (`shoal-bench`, 200 MB:
    /// 625–966 against 1300–1650 MB/s; with transparent huge pages, 292–1485 MB/s,
    /// compaction stalls included); one `madvise` per frame from the writer, 25–35%
    /// slower; from the flush thread ahead of the tail (with the index populated at its
    /// first insert), 0.91–0.99× the populated-at-creation ring. Zeroing memory from the
    /// allocator (`alloc_zeroed` of page-aligned frames: the kernel's zeroing on each
    /// fault, then a `memset`) zeroed it twice: a daemon's first `create_table` with a
    /// 1 GiB ring took 2.6 s that way and 1.2 s mapped (one run each, on a noisy machine).
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
    /// Held by the flush thread from its copy of a page's bytes until `flushed_until`
    /// covers what it wrote, so that [`HybridLog::withdraw_on_device`] knows which
    /// records a flush may have written before they were withdrawn.
    /// Its value is the proof of the page the flush thread is writing by appends (group
    /// commits of the open page), `None` between pages.
    flush_write: Mutex<Option<PageCommit>>,
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
    partial: Option<LogAddress>,
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
    pub fn recover(config: &LogConfig, begin_address: LogAddress, first_page: u64) -> Result<Arc<Self>> {
        Self::start(config, begin_address.get(), first_page)
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
        let device = Device::open(&config.device, page_size, config.pages_per_segment, config.page_source.as_ref())?;
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
            flush_write: Mutex::new(None),
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

    /// Frames of pages below this address may be evicted: they are flushed and, with an
    /// observer, observed.
    fn evictable_until(&self) -> LogAddress {
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
    pub fn page_of(&self, address: LogAddress) -> u64 {
        address.get() >> self.page_bits
    }

    /// Offset of `address` within its page.
    #[must_use]
    pub fn offset_of(&self, address: LogAddress) -> usize {
        (address.get() & ((1 << self.page_bits) - 1)) as usize
    }

    /// First address of page `page`.
    #[must_use]
    pub fn page_start(&self, page: u64) -> LogAddress {
        LogAddress::new(page << self.page_bits)
    }

    /// Next address to be allocated (the tail).
    #[must_use]
    pub fn tail_address(&self) -> LogAddress {
        let packed = self.tail.load(Ordering::Acquire);
        let (page, offset) = (packed >> 32, packed & 0xFFFF_FFFF);
        self.page_start(page) + offset.min(self.page_capacity() as u64)
    }

    /// Lowest valid address.
    #[must_use]
    pub fn begin_address(&self) -> LogAddress {
        LogAddress::new(self.begin_address.load(Ordering::Acquire))
    }

    /// Lowest address still in memory.
    #[must_use]
    pub fn head_address(&self) -> LogAddress {
        LogAddress::new(self.head_address.load(Ordering::Acquire))
    }

    /// Start of the open tail page; everything below is immutable.
    #[must_use]
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn read_only_address(&self) -> LogAddress {
        LogAddress::new(self.read_only_address.load(Ordering::Acquire))
    }

    /// Everything below this address has been written to the device.
    #[must_use]
    pub fn flushed_until(&self) -> LogAddress {
        LogAddress::new(self.flushed_until.load(Ordering::Acquire))
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
                LogAddress::ZERO
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
                    used: self.tail_address().bytes_since(self.begin_address()),
                });
            }
            match self.memory_reserved.compare_exchange_weak(reserved, reserved + wanted, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(RoomReservation { log: self, bytes: wanted }),
                Err(now) => reserved = now,
            }
        }
    }

    /// Test hook: arms a simulated crash of the segment files' writes ([`CrashPoint`]);
    /// a log's crash point is armed once.
    #[doc(hidden)]
    #[cfg(feature = "internals")]
    pub fn arm_crash(&self, crash: Arc<CrashPoint>) {
        if let Device::Segments(files) = &self.device {
            files.arm_crash(crash);
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

    /// Page `page` as the device proves it now ([`PageSnapshot`]; the bytes of withdrawn
    /// records as stored: `withdrawn.bin` travels with a copy of the log). `None` on the
    /// null device and for a page never written. Safe beside the flush thread: a page
    /// is only appended to.
    ///
    /// # Errors
    /// [`Error::Io`] naming the segment file; [`Error::CorruptPage`] when its footer proves
    /// nothing.
    pub fn snapshot_page(&self, page: u64) -> Result<Option<PageSnapshot>> {
        match &self.device {
            Device::Null => Ok(None),
            Device::Segments(files) => files.snapshot_page(page),
        }
    }

    /// Evicts up to `max_pages` pages of `[from, to)` from the segment files (a log with a
    /// page source only: [`cache`]); returns the pages evicted. The caller makes sure the
    /// source holds them and that they are flushed.
    ///
    /// # Errors
    /// [`Error::Io`] naming the segment file.
    pub fn evict_pages(&self, from: u64, to: u64, max_pages: u64) -> Result<u64> {
        match &self.device {
            Device::Null => Ok(0),
            Device::Segments(files) => files.evict_pages(from, to, max_pages),
        }
    }

    /// Bytes the segment files take on disk (0 on the null device).
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory.
    pub fn disk_bytes(&self) -> Result<u64> {
        match &self.device {
            Device::Null => Ok(0),
            Device::Segments(files) => files.disk_bytes(),
        }
    }

    /// The page cache's counters (`None` without a page source).
    #[must_use]
    pub fn cache_stats(&self) -> Option<PageCacheStats> {
        match &self.device {
            Device::Null => None,
            Device::Segments(files) => files.cache_stats(),
        }
    }

    /// Makes the withdrawal of in-memory records lasting (a batch that could not be made
    /// durable, e.g. on a full disk): `in_memory` are records whose in-memory header the
    /// caller has just marked invalid, `on_device` records below the head address; those
    /// a flush may have written valid — every one of `on_device`, and those of
    /// `in_memory` below `flushed_until` once the flush under way (if any) has finished —
    /// are listed in the device's withdrawn records (`withdrawn.bin`), so that reads from
    /// the device return them invalid. Returns the addresses listed, sorted. No-op on the
    /// null device.
    ///
    /// # Errors
    /// [`Error::Io`] when the list cannot be written and synced (then the records stay
    /// valid on the device and come back when read from it).
    pub(crate) fn withdraw_on_device(&self, in_memory: &[LogAddress], on_device: &[LogAddress]) -> Result<Vec<LogAddress>> {
        let Device::Segments(files) = &self.device else { return Ok(Vec::new()) };
        let flushed = {
            let _no_flush_under_way = self.flush_write.lock();
            self.flushed_until()
        };
        let mut listed: Vec<LogAddress> = in_memory.iter().copied().filter(|&a| a < flushed).collect();
        listed.extend_from_slice(on_device);
        listed.sort_unstable();
        files.withdrawn().add(&listed, self.begin_address())?;
        Ok(listed)
    }

    /// How many times the device's withdrawn records changed (0 on the null device or
    /// when none ever was): a columnar file built from pages read while it changed may
    /// hold a withdrawn record.
    #[must_use]
    pub(crate) fn withdrawn_generation(&self) -> u64 {
        match &self.device {
            Device::Segments(files) => files.withdrawn().generation(),
            Device::Null => 0,
        }
    }

    /// The device's withdrawn record addresses, sorted (empty on the null device).
    #[must_use]
    pub(crate) fn withdrawn_addresses(&self) -> Vec<LogAddress> {
        match &self.device {
            Device::Segments(files) => files.withdrawn().addresses(),
            Device::Null => Vec::new(),
        }
    }

    /// The size of the in-memory ring in bytes (`frames × page size`): the most memory
    /// the log's pages take.
    #[must_use]
    pub fn ring_bytes(&self) -> u64 {
        self.frame_count * self.page_size as u64
    }

    /// The bytes of the ring's frames populated so far (faulted in for the log's first
    /// pass through the ring): what the log's pages hold of memory now. An empty log holds
    /// one frame; a log that went once through its ring, all of [`Self::ring_bytes`].
    #[must_use]
    pub fn populated_bytes(&self) -> u64 {
        let claimed = self.populated_until_page.load(Ordering::Relaxed).saturating_sub(self.first_page);
        claimed.min(self.frame_count) * self.page_size as u64
    }

    /// The bytes of frames a batch of `bytes` of records may populate beyond
    /// [`Self::populated_bytes`]: the frames of its pages and of one page more (the fillers
    /// that close pages take less than a page per page), and those the flush thread then
    /// populates ahead of the tail ([`Self::populate_ahead`]), at most the whole ring. 0
    /// once every frame is populated: the log's memory does not grow any more.
    #[must_use]
    pub fn populated_growth_for(&self, bytes: usize) -> u64 {
        let claimed = self.populated_until_page.load(Ordering::Relaxed).saturating_sub(self.first_page);
        if claimed >= self.frame_count {
            return 0;
        }
        let end_page = self.page_of(self.tail_address() + bytes as u64);
        let last = (end_page + 1).max(end_page + POPULATE_AHEAD_PAGES.min(end_page - self.first_page));
        let wanted = (last + 1).saturating_sub(self.first_page).min(self.frame_count);
        wanted.saturating_sub(claimed) * self.page_size as u64
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
    pub fn allocate(self: &Arc<Self>, size: usize, guard: &mut EpochGuard<'_>) -> Result<LogAddress> {
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
                used: self.tail_address().bytes_since(self.begin_address()),
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
        if self.head_address.fetch_max(new_head.get(), Ordering::AcqRel) < new_head.get() {
            let log = Arc::downgrade(self);
            let safe_head = move || {
                if let Some(log) = log.upgrade() {
                    log.safe_head_address.fetch_max(new_head.get(), Ordering::AcqRel);
                }
            };
            self.epoch.bump_with(safe_head);
        }
        while self.safe_head_address.load(Ordering::Acquire) < new_head.get() {
            guard.refresh();
            std::thread::yield_now();
        }
        // 3. Clear the frame: scans rely on zero headers for unwritten space.
        // SAFETY: no thread can reach the evicted page's frame any more.
        unsafe { std::ptr::write_bytes(self.frame_ptr(page), 0, self.page_size) };
        Ok(())
    }

    /// Writes a record header at `address`.
    ///
    /// # Safety
    /// `address` must be in memory (≥ head, in a frame the caller owns a region of).
    pub(crate) unsafe fn write_header(&self, address: LogAddress, header: RecordHeader) {
        let ptr = self.frame_ptr(self.page_of(address)).add(self.offset_of(address)).cast::<AtomicU64>();
        (*ptr).store(header.0, Ordering::Release);
    }

    /// A pointer to the in-memory bytes at `address`.
    ///
    /// # Safety
    /// The caller must hold epoch protection and have checked `address >= head`, or
    /// own the region by allocation.
    pub(crate) unsafe fn memory_ptr(&self, address: LogAddress) -> *mut u8 {
        self.frame_ptr(self.page_of(address)).add(self.offset_of(address))
    }

    /// Atomically loads the header word at an in-memory `address`.
    ///
    /// # Safety
    /// As [`Self::memory_ptr`]; `address` must be 8-byte aligned.
    pub(crate) unsafe fn load_header(&self, address: LogAddress) -> RecordHeader {
        RecordHeader((*self.memory_ptr(address).cast::<AtomicU64>()).load(Ordering::Acquire))
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
            // A long filler (a page closed early) in a frame an older page used: zeros, as in
            // a fresh frame, so that its flush leaves them to the segment file's hole.
            let rest = (capacity - offset - HEADER_SIZE) as usize;
            if page >= self.first_page + self.frame_count && rest >= device::SPARSE_ZEROS_BYTES {
                // SAFETY: as above; the bytes after the filler's header lie within the frame.
                unsafe { std::ptr::write_bytes(self.memory_ptr(self.page_start(page) + offset + HEADER_SIZE), 0, rest) };
            }
        }
        self.open_page(page + 1, guard)?;
        self.tail.store((page + 1) << 32, Ordering::Release);
        self.read_only_address.store(self.page_start(page + 1).get(), Ordering::Release);
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
    pub fn close_tail_page(self: &Arc<Self>) -> Result<LogAddress> {
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
