//! The segment files as a bounded cache of a remote copy of the log (issue 47, "open
//! anywhere": a table larger than the local disk). With a [`PageSource`] in the log's
//! config, a page that is not in its segment file — never written there (a table opened
//! from the remote store with an empty directory) or evicted ([`SegmentFiles::evict_pages`])
//! — is fetched from the source when read, checked (its footer must prove the whole page,
//! as for any page read below the head), and written at its place in the segment file, so
//! the next read is local. Eviction punches the page's bytes out of the file
//! (`fallocate(PUNCH_HOLE)`: the file keeps its length, the page reads as zeros, a hole
//! takes no disk), so a page and its cache entry are the same thing and a restart keeps
//! what was cached.
//!
//! Which pages go is chosen by the CLOCK algorithm (second chance: a read sets a page's
//! reference bit, the evicting hand clears it and passes; a page passed twice unread
//! goes). A page is evicted only below the address the remote copy holds and below the
//! flushed address (the caller's bound): what goes can always come back.
//!
//! Reads and eviction exclude each other per log (a reader holds the state shared from the
//! check to the end of its read; eviction holds it exclusively while it punches), so a read
//! never sees a page half punched.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

/// Where pages missing from the segment files come from (the daemon's remote store).
/// Implementations block the calling thread for the fetch (reads are synchronous).
pub trait PageSource: Send + Sync {
    /// Copies page `page`'s whole image (`buf.len()` = the page size in bytes, footer
    /// included) into `buf`. `Ok(false)` when the source does not hold the page (past the
    /// end of what it holds, or below its begin).
    ///
    /// # Errors
    /// Why the source could not be read (the store's error), as a message naming it.
    fn fetch_page(&self, page: u64, buf: &mut [u8]) -> std::result::Result<bool, String>;

    /// The bytes of the table's columnar file `name` (as `columnar/manifest.json` names it),
    /// `Ok(None)` when the source does not hold it (the default: a source of pages only).
    /// The caller checks them against the manifest ([`crate::columnar`]'s remote files).
    ///
    /// # Errors
    /// Why the source could not be read, as a message naming it.
    fn fetch_columnar_file(&self, name: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        let _ = name;
        Ok(None)
    }

    /// Whether the source holds columnar file `name` with these bytes (their CRC-32: a file
    /// compacted again under the same name differs until the source has the new one), so that
    /// it may be deleted here (it is fetched again when read). Default: no.
    fn holds_columnar_file(&self, name: &str, crc32: u32) -> bool {
        let _ = (name, crc32);
        false
    }
}

/// A [`PageSource`] in a [`super::LogConfig`]: compared by identity.
#[derive(Clone)]
pub struct PageSourceRef(pub Arc<dyn PageSource>);

impl std::fmt::Debug for PageSourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageSourceRef")
    }
}

impl PartialEq for PageSourceRef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl Eq for PageSourceRef {}

/// Counters of a log's page cache (bytes, pages).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Pages fetched from the source since the log was opened.
    pub fetched_pages: u64,
    /// Pages evicted since the log was opened.
    pub evicted_pages: u64,
}

/// One bit per page: present (known to be in its segment file) and referenced (read since
/// the hand last passed).
#[derive(Default)]
pub(crate) struct PageBits {
    present: Vec<AtomicU64>,
    referenced: Vec<AtomicU64>,
}

impl PageBits {
    fn word(page: u64) -> (usize, u64) {
        (usize::try_from(page / 64).unwrap_or(usize::MAX), 1u64 << (page % 64))
    }

    fn covers(&self, page: u64) -> bool {
        Self::word(page).0 < self.present.len()
    }

    fn grow_to(&mut self, page: u64) {
        let words = Self::word(page).0 + 1;
        if words > self.present.len() {
            self.present.resize_with(words, AtomicU64::default);
            self.referenced.resize_with(words, AtomicU64::default);
        }
    }

    pub(crate) fn is_present(&self, page: u64) -> bool {
        let (word, bit) = Self::word(page);
        self.present.get(word).is_some_and(|w| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Marks the page present and referenced (the caller made sure the bits cover it).
    fn mark_present(&self, page: u64) {
        let (word, bit) = Self::word(page);
        self.present[word].fetch_or(bit, Ordering::AcqRel);
        self.referenced[word].fetch_or(bit, Ordering::AcqRel);
    }

    fn reference(&self, page: u64) {
        let (word, bit) = Self::word(page);
        if let Some(w) = self.referenced.get(word) {
            if w.load(Ordering::Relaxed) & bit == 0 {
                w.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// Clears the page's reference bit; returns whether it was set.
    fn take_reference(&self, page: u64) -> bool {
        let (word, bit) = Self::word(page);
        self.referenced.get(word).is_some_and(|w| w.fetch_and(!bit, Ordering::AcqRel) & bit != 0)
    }

    fn clear_present(&self, page: u64) {
        let (word, bit) = Self::word(page);
        if let Some(w) = self.present.get(word) {
            w.fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

/// A log's page cache state ([module documentation](self)).
pub(crate) struct PageCache {
    pub(crate) source: PageSourceRef,
    bits: RwLock<PageBits>,
    /// The CLOCK hand: the next page the evictor looks at.
    hand: Mutex<u64>,
    fetched: AtomicU64,
    evicted: AtomicU64,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache").field("fetched", &self.fetched).field("evicted", &self.evicted).finish_non_exhaustive()
    }
}

impl PageCache {
    pub(crate) fn new(source: PageSourceRef) -> Self {
        Self { source, bits: RwLock::new(PageBits::default()), hand: Mutex::new(0), fetched: AtomicU64::new(0), evicted: AtomicU64::new(0) }
    }

    /// The bits, shared, covering `page`.
    pub(crate) fn bits_covering(&self, page: u64) -> RwLockReadGuard<'_, PageBits> {
        {
            let bits = self.bits.read();
            if bits.covers(page) {
                return bits;
            }
        }
        self.bits.write().grow_to(page);
        self.bits.read()
    }

    /// Marks `page` present and referenced, under the shared state the caller holds.
    pub(crate) fn found(bits: &PageBits, page: u64) {
        bits.mark_present(page);
    }

    pub(crate) fn referenced(bits: &PageBits, page: u64) {
        bits.reference(page);
    }

    pub(crate) fn count_fetch(&self) {
        self.fetched.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> PageCacheStats {
        PageCacheStats { fetched_pages: self.fetched.load(Ordering::Relaxed), evicted_pages: self.evicted.load(Ordering::Relaxed) }
    }

    /// Evicts up to `max_pages` pages of `[from, to)` (CLOCK order), calling `punch` for
    /// each page to go with the state held exclusively (no read is under way); `on_disk`
    /// says whether a page not known present is in its file. Returns the pages evicted.
    pub(crate) fn evict<E>(
        &self,
        from: u64,
        to: u64,
        max_pages: u64,
        on_disk: impl Fn(u64) -> bool,
        punch: impl Fn(u64) -> std::result::Result<(), E>,
    ) -> std::result::Result<u64, E> {
        if from >= to || max_pages == 0 {
            return Ok(0);
        }
        let mut hand = self.hand.lock();
        let span = to - from;
        let mut evicted = 0;
        let mut looked = 0;
        // Two passes at most: the first clears reference bits, the second takes pages.
        while evicted < max_pages && looked < 2 * span {
            // Pages go in small steps, so that reads wait for a few punches at a time.
            let mut bits = self.bits.write();
            for _ in 0..64 {
                if evicted >= max_pages || looked >= 2 * span {
                    break;
                }
                if *hand < from || *hand >= to {
                    *hand = from;
                }
                let page = *hand;
                *hand += 1;
                looked += 1;
                bits.grow_to(page);
                if bits.take_reference(page) {
                    continue;
                }
                if !bits.is_present(page) && !on_disk(page) {
                    continue;
                }
                if let Err(e) = punch(page) {
                    self.evicted.fetch_add(evicted, Ordering::Relaxed);
                    return Err(e);
                }
                bits.clear_present(page);
                evicted += 1;
            }
        }
        self.evicted.fetch_add(evicted, Ordering::Relaxed);
        Ok(evicted)
    }
}

/// Frees `len` bytes of `file` at `offset` (they read as zeros; the file keeps its length).
///
/// # Errors
/// The OS error (`EOPNOTSUPP` on a file system without holes).
pub(crate) fn punch_hole(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Err(std::io::Error::other("offset out of range"));
        };
        // SAFETY: fallocate on a descriptor this `File` owns, over a range of it.
        let result = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len) };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}
