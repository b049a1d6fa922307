//! Where flushed pages go: segment files in a directory, or nowhere (FishStore's null
//! device, for benchmarks and tests).
//!
//! Page `p` lives in segment file `segment-{p / pages_per_segment:08}.log` at byte
//! offset `(p % pages_per_segment) × page_size`. Each page ends with a
//! [`PAGE_FOOTER_SIZE`]-byte footer of two 8-byte *commit slots*. A slot names the
//! durable prefix of the page's record area: `CRC-32 (IEEE) (u32 LE) · length in bytes
//! (u32 LE)`, the CRC taken over `page number (u64 LE) · record area [0, length) · length
//! (u32 LE)`. A page is written only by appending: each write puts the bytes after the
//! prefix the newest slot proves, then the *other* slot, naming the longer prefix (a group
//! commit of the open page, or the whole record area when the page closes). A write cut
//! anywhere — SIGKILL between the kernel's page copies, a full disk, a power cut before an
//! fsync — leaves the older slot and the bytes it covers as they were, so the prefix
//! acknowledged before the write is still proven (the design note "Torn writes of the open
//! page" in docs/design.md says why not a rewrite in place, nor a separate commit file).
//! Recovery keeps the longest prefix a slot proves ([`verify_page`]).
//!
//! Pages written by builds before the two slots carry a single footer, `CRC-32 of the
//! whole record area (u32 LE) · magic "SHOL" (u32 LE) · page number (u64 LE)`; they are
//! still read (a slot's length is at most 2^30 bytes, never the magic's value), and a
//! table holding them continues in the new footer on its next page.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use super::cache::{punch_hole, PageCache, PageCacheStats, PageSourceRef};
use super::withdrawn::Withdrawn;
use crate::error::{Error, Result};
use crate::LogAddress;

/// Bytes at the end of every page reserved for its footer.
pub const PAGE_FOOTER_SIZE: usize = 16;

/// The storage below the in-memory ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceConfig {
    /// Pages are discarded when evicted; reads below the head address fail.
    Null,
    /// Pages are written to segment files in this directory (created if absent).
    Directory(PathBuf),
}

/// An open device.
#[derive(Debug)]
// The files variant is large (its page cache state, and the crash-point hook of `internals` builds).
#[allow(clippy::large_enum_variant, reason = "one device per table, never moved: boxing would add an indirection to every write")]
pub(crate) enum Device {
    Null,
    Segments(SegmentFiles),
}

#[derive(Debug)]
pub(crate) struct SegmentFiles {
    dir: PathBuf,
    page_size: usize,
    pages_per_segment: u64,
    files: RwLock<HashMap<u64, Arc<File>>>,
    /// OS error number every write fails with (0: none); a test hook.
    write_fault: std::sync::atomic::AtomicI32,
    /// Records withdrawn after they may have been written here; device reads return
    /// them invalid.
    withdrawn: Withdrawn,
    /// A simulated crash armed by a test ([`CrashPoint`]).
    #[cfg(feature = "internals")]
    crash: std::sync::OnceLock<Arc<CrashPoint>>,
    /// With a page source: the files are a cache of it ([`super::cache`]).
    cache: Option<PageCache>,
    /// The first page of the newest segment appended to (from the newest segment file at
    /// open): the segments below it are sealed, their modification time is their age.
    newest_segment_page: std::sync::atomic::AtomicU64,
}

/// A simulated process crash for the crash-consistency tests (feature `internals`, the
/// model of redb's `crash_consistency` tests): the segment files' writes pass until
/// `budget` bytes were written, the write that crosses it keeps only the bytes within it,
/// and from then on every write fails and writes nothing — as if the process had died in
/// the middle of that `pwrite` (the page cache keeps what a dead process wrote; what it had
/// not written yet never comes). A budget of `u64::MAX` only records the writes' lengths,
/// from which a test derives the budgets that cut every write at every interesting prefix.
#[cfg(feature = "internals")]
#[derive(Debug)]
pub struct CrashPoint {
    budget: std::sync::atomic::AtomicU64,
    crashed: std::sync::atomic::AtomicBool,
    writes: parking_lot::Mutex<Vec<usize>>,
}

#[cfg(feature = "internals")]
impl CrashPoint {
    /// A crash after `budget` bytes of segment writes.
    #[must_use]
    pub fn after_bytes(budget: u64) -> Arc<Self> {
        Arc::new(Self {
            budget: std::sync::atomic::AtomicU64::new(budget),
            crashed: std::sync::atomic::AtomicBool::new(false),
            writes: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// Whether the crash happened (every later write fails).
    #[must_use]
    pub fn crashed(&self) -> bool {
        self.crashed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The lengths of the writes admitted so far (whole or cut), in order.
    #[must_use]
    pub fn writes(&self) -> Vec<usize> {
        self.writes.lock().clone()
    }

    /// How many bytes of a write of `len` bytes reach the file.
    fn admit(&self, len: usize) -> usize {
        use std::sync::atomic::Ordering;
        let mut writes = self.writes.lock();
        if self.crashed() {
            return 0;
        }
        let budget = self.budget.load(Ordering::Acquire);
        let admitted = usize::try_from(budget).unwrap_or(usize::MAX).min(len);
        self.budget.store(budget - admitted as u64, Ordering::Release);
        writes.push(admitted);
        if admitted < len || (len == 0 && budget == 0) {
            self.crashed.store(true, Ordering::Release);
        }
        admitted
    }
}

impl Device {
    /// Opens the device; with `source`, pages missing from the segment files are read
    /// from it ([`super::cache`]).
    pub(crate) fn open(config: &DeviceConfig, page_size: usize, pages_per_segment: u64, source: Option<&PageSourceRef>) -> Result<Self> {
        match config {
            DeviceConfig::Null => Ok(Device::Null),
            DeviceConfig::Directory(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
                let files = SegmentFiles {
                    dir: dir.clone(),
                    page_size,
                    pages_per_segment,
                    files: RwLock::new(HashMap::new()),
                    write_fault: std::sync::atomic::AtomicI32::new(0),
                    withdrawn: Withdrawn::open(dir)?,
                    #[cfg(feature = "internals")]
                    crash: std::sync::OnceLock::new(),
                    cache: source.cloned().map(PageCache::new),
                    newest_segment_page: std::sync::atomic::AtomicU64::new(0),
                };
                let newest = files.segment_entries()?.iter().map(|(number, _)| *number).max().unwrap_or(0);
                files.newest_segment_page.store(newest * pages_per_segment, std::sync::atomic::Ordering::Relaxed);
                Ok(Device::Segments(files))
            }
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Device::Null)
    }
}

/// The footer of pages written before commit slots: "SHOL".
const LEGACY_PAGE_MAGIC: u32 = 0x5348_4F4C;

/// Bytes of one commit slot (two per footer).
const SLOT_SIZE: usize = 8;

/// The running proof of one page being written by appends ([`SegmentFiles::append_to_page`]):
/// how many bytes of its record area are on the device and proven, the CRC state over them,
/// and which commit slot holds the newest proof.
#[derive(Clone)]
pub(crate) struct PageCommit {
    page: u64,
    /// Bytes of the record area written and proven (0: nothing yet).
    len: usize,
    /// CRC-32 over the page number and `[0, len)` of the record area.
    hasher: crc32fast::Hasher,
    /// The slot holding the proof of `len` (`None` before the first write).
    slot: Option<usize>,
}

impl PageCommit {
    /// A page nothing was written to yet.
    pub(crate) fn new(page: u64) -> Self {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&page.to_le_bytes());
        Self { page, len: 0, hasher, slot: None }
    }

    /// A page whose first `proven.len()` bytes are on the device, proven by commit slot
    /// `slot` (recovery, which goes on appending to it).
    pub(crate) fn resume(page: u64, proven: &[u8], slot: usize) -> Self {
        let mut commit = Self::new(page);
        commit.hasher.update(proven);
        commit.len = proven.len();
        commit.slot = Some(slot);
        commit
    }

    /// The page this proof is for.
    pub(crate) fn page(&self) -> u64 {
        self.page
    }

    /// Bytes of the page's record area written and proven.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot bytes proving `len` bytes, given the hasher over page number and those bytes.
    fn slot_bytes(hasher: &crc32fast::Hasher, len: usize) -> [u8; SLOT_SIZE] {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let mut hasher = hasher.clone();
        hasher.update(&len.to_le_bytes());
        let mut slot = [0u8; SLOT_SIZE];
        slot[..4].copy_from_slice(&hasher.finalize().to_le_bytes());
        slot[4..].copy_from_slice(&len.to_le_bytes());
        slot
    }
}

impl std::fmt::Debug for PageCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCommit").field("page", &self.page).field("len", &self.len).field("slot", &self.slot).finish()
    }
}

/// What a page's footer proves ([`verify_page`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proof {
    /// Bytes of the record area proven (the whole area for a closed page).
    pub(crate) len: usize,
    /// The slot that proves them (0 for a page with the older single footer).
    pub(crate) slot: usize,
}

/// Checks a page's footer (either format, see the module documentation) and returns the
/// longest prefix of its record area that a footer proves; the error says what failed.
pub(crate) fn verify_page(page: &[u8], page_number: u64) -> std::result::Result<Proof, String> {
    let body = page.len() - PAGE_FOOTER_SIZE;
    let word = |at: usize| u32::from_le_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]]);
    if word(body + 4) == LEGACY_PAGE_MAGIC {
        let mut number = [0u8; 8];
        number.copy_from_slice(&page[body + 8..body + 16]);
        if u64::from_le_bytes(number) == page_number {
            let crc = crc32fast::hash(&page[..body]);
            if crc != word(body) {
                return Err(format!("checksum mismatch (stored {:#010x}, computed {crc:#010x})", word(body)));
            }
            return Ok(Proof { len: body, slot: 0 });
        }
    }
    let mut best: Option<Proof> = None;
    let mut reasons = Vec::new();
    for slot in 0..2 {
        let at = body + slot * SLOT_SIZE;
        let (stored, len) = (word(at), word(at + 4) as usize);
        if len == 0 && stored == 0 {
            reasons.push(format!("slot {slot} never written"));
            continue;
        }
        if len > body {
            reasons.push(format!("slot {slot} names {len} bytes, more than the page holds"));
            continue;
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&page_number.to_le_bytes());
        hasher.update(&page[..len]);
        if PageCommit::slot_bytes(&hasher, len)[..4] != stored.to_le_bytes() {
            reasons.push(format!("slot {slot} ({len} bytes): checksum mismatch"));
            continue;
        }
        if best.is_none_or(|b| b.len < len) {
            best = Some(Proof { len, slot });
        }
    }
    best.ok_or_else(|| format!("no commit slot proves any bytes ({}; torn or never written)", reasons.join("; ")))
}

/// Where page `page` lives on a directory device: its segment file's name
/// (`segment-{page / pages_per_segment:08}.log`) and its byte offset in that file.
#[must_use]
pub fn page_location(page: u64, page_size: usize, pages_per_segment: u64) -> (String, u64) {
    (format!("segment-{:08}.log", page / pages_per_segment), (page % pages_per_segment) * page_size as u64)
}

/// A page as its commit slots prove it at one moment ([`crate::log::HybridLog::snapshot_page`]),
/// for copies of the log (the daemon's remote store): `image` is the whole page
/// (`page_size` bytes) with the bytes after the proven prefix zeroed and the footer as
/// stored, which is what recovery reads of it when the image is written back at its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSnapshot {
    /// The page number.
    pub page: u64,
    /// Bytes of the record area its footer proves.
    pub proven: usize,
    /// The page's bytes (`page_size`), zeros after `proven`, then the footer.
    pub image: Vec<u8>,
}

impl PageSnapshot {
    /// The footer of page `page` whose record area's proven prefix is `proven`: slot 0
    /// proving it, slot 1 never written — the footer a copy of the log cut at an address
    /// inside the page gets (`shoal restore --until-address`).
    #[must_use]
    pub fn footer_proving(page: u64, proven: &[u8]) -> [u8; PAGE_FOOTER_SIZE] {
        let mut commit = PageCommit::new(page);
        commit.hasher.update(proven);
        let mut footer = [0u8; PAGE_FOOTER_SIZE];
        footer[..SLOT_SIZE].copy_from_slice(&PageCommit::slot_bytes(&commit.hasher, proven.len()));
        footer
    }

    /// Whether the footer proves the whole record area (the page is closed: no byte of it
    /// changes again).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.proven == self.image.len() - PAGE_FOOTER_SIZE
    }

    /// The page's footer (its two commit slots), as stored.
    #[must_use]
    pub fn footer(&self) -> &[u8] {
        &self.image[self.image.len() - PAGE_FOOTER_SIZE..]
    }
}

impl SegmentFiles {
    fn segment_path(&self, segment: u64) -> PathBuf {
        self.dir.join(page_location(segment * self.pages_per_segment, self.page_size, self.pages_per_segment).0)
    }

    /// Reads what page `page`'s footer proves now ([`PageSnapshot`]): the footer first, then
    /// the record area up to the longer prefix a slot names — a page is only appended to,
    /// the proven bytes before the slot that proves them, so the bytes read are those the
    /// footer read proves, however the flush thread goes on meanwhile. `None` when the page
    /// was never written (no file, a file that ends before the page's footer, a zero footer).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; [`Error::CorruptPage`] when the footer proves nothing.
    pub(crate) fn snapshot_page(&self, page: u64) -> Result<Option<PageSnapshot>> {
        let (segment, offset) = self.locate(page);
        let path = self.segment_path(segment);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let capacity = self.page_size - PAGE_FOOTER_SIZE;
        let mut image = vec![0u8; self.page_size];
        match file.read_exact_at(&mut image[capacity..], offset + capacity as u64) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        }
        if image[capacity..].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let slot_len = |at: usize| u32::from_le_bytes([image[at + 4], image[at + 5], image[at + 6], image[at + 7]]) as usize;
        let longest = (0..2).map(|slot| slot_len(capacity + slot * SLOT_SIZE)).filter(|&len| len <= capacity).max().unwrap_or(0);
        // A single (legacy) footer proves the whole area.
        let wanted = if slot_len(capacity) == LEGACY_PAGE_MAGIC as usize || slot_len(capacity) > capacity { capacity } else { longest };
        file.read_exact_at(&mut image[..wanted], offset).map_err(|e| Error::io(&path, e))?;
        let proof = verify_page(&image, page).map_err(|reason| Error::CorruptPage { page, path, reason })?;
        image[proof.len..capacity].fill(0);
        Ok(Some(PageSnapshot { page, proven: proof.len, image }))
    }

    fn file(&self, segment: u64) -> Result<Arc<File>> {
        self.open_file(segment, true)
    }

    /// The segment's file, opened once and cached; created if `create` (writes) —
    /// reads of a segment retention deleted fail with `NotFound` instead of creating it.
    fn open_file(&self, segment: u64, create: bool) -> Result<Arc<File>> {
        if let Some(file) = self.files.read().get(&segment) {
            return Ok(Arc::clone(file));
        }
        let path = self.segment_path(segment);
        let file = OpenOptions::new().read(true).write(true).create(create).truncate(false).open(&path).map_err(|e| Error::io(&path, e))?;
        let file = Arc::new(file);
        Ok(Arc::clone(self.files.write().entry(segment).or_insert(file)))
    }

    /// Runs `change` (a page fetched into, or evicted from, segment `segment`'s `file`),
    /// keeping the file's modification time when the segment is sealed: time-based
    /// retention ages a segment by it, and a page cached again or evicted is not new data.
    fn keeping_age<T>(&self, segment: u64, file: &File, change: impl FnOnce() -> Result<T>) -> Result<T> {
        let sealed = (segment + 1) * self.pages_per_segment <= self.newest_segment_page.load(std::sync::atomic::Ordering::Relaxed);
        let age = if sealed { file.metadata().and_then(|m| m.modified()).ok() } else { None };
        let result = change();
        if let Some(modified) = age {
            if let Err(e) = file.set_modified(modified) {
                tracing::debug!(error = %e, segment, "could not keep a segment file's modification time");
            }
        }
        result
    }

    fn locate(&self, page: u64) -> (u64, u64) {
        (page / self.pages_per_segment, (page % self.pages_per_segment) * self.page_size as u64)
    }

    /// Appends `bytes` to page `commit.page()`'s record area at `commit.len()`, then writes
    /// the commit slot that does not hold the newest proof, naming the longer prefix; with
    /// `sync`, waits until both are on stable storage. On success `commit` proves the
    /// longer prefix; on failure it is unchanged and the device still proves what it
    /// proved (the write may be retried). `bytes` may be empty: the other slot then names
    /// the same prefix (recovery uses this to move the proof before it overwrites bytes).
    ///
    /// # Errors
    /// [`Error::Io`] naming the segment file; [`Error::InvalidConfig`] when the bytes do
    /// not fit the record area.
    pub(crate) fn append_to_page(&self, commit: &mut PageCommit, bytes: &[u8], sync: bool) -> Result<()> {
        let capacity = self.page_size - PAGE_FOOTER_SIZE;
        let len = commit.len + bytes.len();
        if len > capacity {
            return Err(Error::InvalidConfig(format!("a write of {len} bytes into a page that holds {capacity}")));
        }
        let (segment, offset) = self.locate(commit.page);
        self.newest_segment_page.fetch_max(segment * self.pages_per_segment, std::sync::atomic::Ordering::Relaxed);
        let path = || self.segment_path(segment);
        let fault = self.write_fault.load(std::sync::atomic::Ordering::Relaxed);
        if fault != 0 {
            return Err(Error::io(path(), std::io::Error::from_raw_os_error(fault)));
        }
        let mut hasher = commit.hasher.clone();
        hasher.update(bytes);
        let slot = commit.slot.map_or(0, |s| 1 - s);
        let proof = PageCommit::slot_bytes(&hasher, len);
        let file = self.file(segment)?;
        let write = |bytes: &[u8], at: usize| self.write_at(&file, bytes, offset + at as u64).map_err(|e| Error::io(path(), e));
        // A page closed early (shutdown, checkpoint, a flush request) ends in a filler of
        // zeros: those left to the file's hole take no disk (they read back as the zeros the
        // proof's checksum covers).
        let written = sparse_prefix(&file, bytes, offset + commit.len as u64);
        write(&bytes[..written], commit.len)?;
        if commit.slot.is_none() {
            // The first write of the page: the footer whole, the other slot empty, so
            // that the file reaches the page's end.
            let mut footer = [0u8; PAGE_FOOTER_SIZE];
            footer[..SLOT_SIZE].copy_from_slice(&proof);
            write(&footer, capacity)?;
        } else {
            write(&proof, capacity + slot * SLOT_SIZE)?;
        }
        if sync {
            file.sync_data().map_err(|e| Error::io(path(), e))?;
        }
        commit.len = len;
        commit.hasher = hasher;
        commit.slot = Some(slot);
        Ok(())
    }

    /// One positioned write, cut short when a test arms the injecting device.
    fn write_at(&self, file: &File, bytes: &[u8], at: u64) -> std::io::Result<()> {
        #[cfg(feature = "internals")]
        if let Some(written) = self.crash.get().map(|c| c.admit(bytes.len())) {
            file.write_all_at(&bytes[..written], at)?;
            if written < bytes.len() {
                return Err(std::io::Error::other("injected crash"));
            }
            return Ok(());
        }
        file.write_all_at(bytes, at)
    }

    /// Reads `buf.len()` bytes of page `page` starting at `offset_in_page`; withdrawn
    /// records whose header is in `buf` read as invalid.
    pub(crate) fn read(&self, page: u64, offset_in_page: usize, buf: &mut [u8]) -> Result<()> {
        self.read_raw(page, offset_in_page, buf)?;
        self.withdrawn.mask(LogAddress::new(page * self.page_size as u64 + offset_in_page as u64), buf);
        Ok(())
    }

    /// Reads the first `buf.len()` bytes of page `page` as stored, withdrawn records not
    /// masked (recovery takes a proof's checksum over them).
    pub(crate) fn read_unmasked(&self, page: u64, buf: &mut [u8]) -> Result<()> {
        self.read_raw(page, 0, buf)
    }

    /// Reads `buf.len()` bytes of page `page` starting at `offset_in_page`, as stored.
    /// With a page source, a page not in its segment file is fetched first, and the read
    /// holds off eviction until it is done.
    fn read_raw(&self, page: u64, offset_in_page: usize, buf: &mut [u8]) -> Result<()> {
        let (segment, offset) = self.locate(page);
        let mut read = || {
            let file = self.open_file(segment, false)?;
            file.read_exact_at(buf, offset + offset_in_page as u64).map_err(|e| Error::io(self.segment_path(segment), e))
        };
        let Some(cache) = &self.cache else {
            return read();
        };
        // A page evicted between its fetch and the read is fetched again (it was just
        // referenced, so the hand passes it once first: this loops at most a few times).
        loop {
            {
                let bits = cache.bits_covering(page);
                if bits.is_present(page) {
                    PageCache::referenced(&bits, page);
                    return read();
                }
                if self.on_disk(page)? {
                    PageCache::found(&bits, page);
                    return read();
                }
            }
            self.fetch(cache, page, false)?;
        }
    }

    /// Whether page `page`'s footer is in its segment file (not a hole, not past the end).
    fn on_disk(&self, page: u64) -> Result<bool> {
        let (segment, offset) = self.locate(page);
        let file = match self.open_file(segment, false) {
            Ok(file) => file,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut footer = [0u8; PAGE_FOOTER_SIZE];
        match file.read_exact_at(&mut footer, offset + (self.page_size - PAGE_FOOTER_SIZE) as u64) {
            Ok(()) => Ok(footer.iter().any(|&b| b != 0)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(Error::io(self.segment_path(segment), e)),
        }
    }

    /// Fetches page `page` from the cache's source, checks that its footer proves all of
    /// it, and writes it at its place in its segment file (marked present). Returns the
    /// image (masked for nothing: as stored) and the proof its footer gave.
    ///
    /// # Errors
    /// [`Error::RemoteUnavailable`] when the source fails; [`Error::CorruptPage`] when
    /// the source's page is not whole and proven; [`Error::Io`] when the source does not
    /// hold the page, or for the local write.
    /// `replace`: written over what the segment file holds at the page (a damaged copy).
    fn fetch(&self, cache: &PageCache, page: u64, replace: bool) -> Result<(Vec<u8>, Proof)> {
        let (segment, offset) = self.locate(page);
        let mut image = vec![0u8; self.page_size];
        let held = cache.source.0.fetch_page(page, &mut image).map_err(|why| Error::RemoteUnavailable(format!("page {page}: {why}")))?;
        if !held {
            let missing = std::io::Error::new(std::io::ErrorKind::NotFound, format!("page {page} is neither here nor in the remote copy of the log"));
            return Err(Error::io(self.segment_path(segment), missing));
        }
        let corrupt =
            |reason: String| Error::CorruptPage { page, path: self.segment_path(segment), reason: format!("as fetched from the remote copy: {reason}") };
        let proof = verify_page(&image, page).map_err(corrupt)?;
        if proof.len < self.page_size - PAGE_FOOTER_SIZE {
            return Err(corrupt(format!("only {} bytes are proven", proof.len)));
        }
        let bits = cache.bits_covering(page);
        if replace || (!bits.is_present(page) && !self.on_disk(page)?) {
            let file = self.file(segment)?;
            self.keeping_age(segment, &file, || self.write_at(&file, &image, offset).map_err(|e| Error::io(self.segment_path(segment), e)))?;
        }
        PageCache::found(&bits, page);
        cache.count_fetch();
        Ok((image, proof))
    }

    /// [`Self::fetch`], `None` when the source does not hold the page.
    fn fetch_held(&self, cache: &PageCache, page: u64, replace: bool) -> Result<Option<(Vec<u8>, Proof)>> {
        match self.fetch(cache, page, replace) {
            Ok(fetched) => Ok(Some(fetched)),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Evicts up to `max_pages` pages of `[from, to)` from the segment files ([`super::cache`]);
    /// the caller makes sure the page source holds them. Returns the pages evicted (0
    /// without a page source).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file (a file system without holes: `EOPNOTSUPP`).
    pub(crate) fn evict_pages(&self, from: u64, to: u64, max_pages: u64) -> Result<u64> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        cache.evict(
            from,
            to,
            max_pages,
            |page| self.on_disk(page).unwrap_or(false),
            |page| {
                let (segment, offset) = self.locate(page);
                let file = self.open_file(segment, false)?;
                self.keeping_age(segment, &file, || {
                    punch_hole(&file, offset, self.page_size as u64).map_err(|e| Error::io(self.segment_path(segment), e))
                })
            },
        )
    }

    /// Bytes the segment files take on disk (allocated blocks: holes take none).
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory or file.
    pub(crate) fn disk_bytes(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let mut bytes = 0;
        for (_, entry) in self.segment_entries()? {
            bytes += entry.metadata().map_err(|e| Error::io(entry.path(), e))?.blocks() * 512;
        }
        Ok(bytes)
    }

    /// The page cache's counters (`None` without a page source).
    pub(crate) fn cache_stats(&self) -> Option<PageCacheStats> {
        self.cache.as_ref().map(PageCache::stats)
    }

    /// Reads a whole page (flushed whole: below the head, or closed by recovery) and checks
    /// that its footer proves all of it; then withdrawn records read as invalid.
    ///
    /// With a page source, a page damaged here (a bit flipped on the local disk) is replaced
    /// by the source's copy, checked the same way; without one, or when the source does not
    /// hold the page, the damage is [`Error::CorruptPage`].
    pub(crate) fn read_page(&self, page: u64, buf: &mut [u8]) -> Result<()> {
        self.read_raw(page, 0, buf)?;
        if let Err(damaged) = self.check_whole(page, buf) {
            let Some(cache) = &self.cache else { return Err(damaged) };
            let Some((image, _)) = self.fetch_held(cache, page, true)? else { return Err(damaged) };
            tracing::warn!(page, error = %damaged, "a damaged page was replaced by the page source's copy");
            buf.copy_from_slice(&image);
        }
        self.withdrawn.mask(LogAddress::new(page * self.page_size as u64), buf);
        Ok(())
    }

    /// [`Error::CorruptPage`] unless `image`'s footer proves all of page `page`.
    fn check_whole(&self, page: u64, image: &[u8]) -> Result<()> {
        let corrupt = |reason: String| Error::CorruptPage { page, path: self.segment_path(self.locate(page).0), reason };
        let proof = verify_page(image, page).map_err(corrupt)?;
        let capacity = image.len() - PAGE_FOOTER_SIZE;
        if proof.len < capacity {
            // Pages below the head were flushed whole: a shorter proof means the newest
            // slot was lost or damaged, and records after the proven bytes would vanish.
            return Err(corrupt(format!("only {} of its {capacity} bytes are proven by a commit slot", proof.len)));
        }
        Ok(())
    }

    /// The records withdrawn after they may have been written here.
    pub(crate) fn withdrawn(&self) -> &Withdrawn {
        &self.withdrawn
    }
}

/// What recovery finds at a page of the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PageState {
    /// The page is there and a footer proves a prefix of it (its bytes are in the
    /// buffer, zeros after the prefix).
    Valid(Recovered),
    /// The page was never written (past the end of its segment file, or no file).
    Missing,
    /// The page is there but no footer proves any of it: torn first write, damage.
    Corrupt(String),
}

/// A page recovery can use ([`PageState::Valid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// The prefix proven and the slot that proves it.
    pub(crate) proof: Proof,
    /// Bytes after the proven prefix that were not zero: a write after the last commit
    /// was cut (they were never acknowledged and read as zeros).
    pub(crate) unproven_bytes: bool,
}

impl SegmentFiles {
    /// Reads page `page` into `buf` (one page long) for recovery, without creating
    /// segment files, and says whether it is valid, missing or corrupt. A file that ends
    /// inside the page reads as zeros past its end (a cut first write of the page).
    ///
    /// # Errors
    /// [`Error::Io`] for read errors other than a short file.
    ///
    /// With a page source, a page missing or damaged here is asked of the source (a table
    /// opened from its remote copy, a bit flipped in a cached page): the source's copy is
    /// written here when it holds the page, and its failure is an error, never a shorter log.
    pub(crate) fn recover_page(&self, page: u64, buf: &mut [u8]) -> Result<PageState> {
        let state = self.recover_local_page(page, buf)?;
        let Some(cache) = self.cache.as_ref().filter(|_| matches!(state, PageState::Missing | PageState::Corrupt(_))) else {
            return Ok(state);
        };
        // A page damaged here is replaced by the source's copy, if it holds one; not in the
        // source, the page is what this copy says (missing, or damaged: cut).
        let Some((image, proof)) = self.fetch_held(cache, page, matches!(state, PageState::Corrupt(_)))? else { return Ok(state) };
        if let PageState::Corrupt(why) = &state {
            tracing::warn!(page, path = %self.segment_path(self.locate(page).0).display(), why = %why, "recovery replaced a damaged page by the page source's copy");
        }
        buf.copy_from_slice(&image);
        self.withdrawn.mask(LogAddress::new(page * self.page_size as u64), buf);
        Ok(PageState::Valid(Recovered { proof, unproven_bytes: false }))
    }

    fn recover_local_page(&self, page: u64, buf: &mut [u8]) -> Result<PageState> {
        let (segment, offset) = self.locate(page);
        let path = self.segment_path(segment);
        let length = match std::fs::metadata(&path) {
            Ok(metadata) => metadata.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PageState::Missing),
            Err(e) => return Err(Error::io(&path, e)),
        };
        if length <= offset {
            return Ok(PageState::Missing);
        }
        let present = usize::try_from((length - offset).min(self.page_size as u64)).unwrap_or(self.page_size);
        buf.fill(0);
        let file = self.open_file(segment, false)?;
        file.read_exact_at(&mut buf[..present], offset).map_err(|e| Error::io(&path, e))?;
        Ok(match verify_page(buf, page) {
            Ok(proof) => {
                let capacity = buf.len() - PAGE_FOOTER_SIZE;
                let unproven_bytes = buf[proof.len..capacity].iter().any(|&b| b != 0);
                buf[proof.len..capacity].fill(0);
                self.withdrawn.mask(LogAddress::new(page * self.page_size as u64), buf);
                PageState::Valid(Recovered { proof, unproven_bytes })
            }
            // All zeros: space the file was extended over, never written.
            Err(_) if buf.iter().all(|&b| b == 0) => PageState::Missing,
            Err(reason) => PageState::Corrupt(reason),
        })
    }

    /// Removes page `page` and everything after it from the device: its segment file is
    /// cut at the page, later segment files are deleted. Returns the bytes removed.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn truncate_from(&self, page: u64) -> Result<u64> {
        let (segment, offset) = self.locate(page);
        let mut removed = 0;
        self.files.write().clear();
        for (number, entry) in self.segment_entries()? {
            let path = entry.path();
            let length = entry.metadata().map_err(|e| Error::io(&path, e))?.len();
            if number > segment {
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                removed += length;
            } else if number == segment && length > offset {
                let file = OpenOptions::new().write(true).open(&path).map_err(|e| Error::io(&path, e))?;
                file.set_len(offset).map_err(|e| Error::io(&path, e))?;
                file.sync_all().map_err(|e| Error::io(&path, e))?;
                removed += length - offset;
            }
        }
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(&self.dir, e))?;
        Ok(removed)
    }
}

impl SegmentFiles {
    /// The segment files in the directory, with their segment numbers.
    fn segment_entries(&self) -> Result<Vec<(u64, std::fs::DirEntry)>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        Ok(entries
            .filter_map(std::result::Result::ok)
            .filter_map(|entry| {
                let number = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("segment-"))
                    .and_then(|n| n.strip_suffix(".log"))
                    .and_then(|n| n.parse::<u64>().ok())?;
                Some((number, entry))
            })
            .collect())
    }

    #[cfg(feature = "internals")]
    pub(crate) fn arm_crash(&self, crash: Arc<CrashPoint>) {
        let _ = self.crash.set(crash);
    }

    #[cfg(feature = "internals")]
    pub(crate) fn inject_write_fault(&self, errno: Option<i32>) {
        self.write_fault.store(errno.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    }

    /// Deletes every segment file all of whose pages are below `page` (retention).
    /// Returns `(files deleted, bytes deleted)`. Readers that opened a file before keep
    /// reading it (the open handle outlives the unlink).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn delete_segments_below(&self, page: u64) -> Result<(u64, u64)> {
        let last_whole_segment = page / self.pages_per_segment; // segments before it are whole
        let (mut files, mut bytes) = (0, 0);
        for (number, entry) in self.segment_entries()? {
            if number < last_whole_segment {
                let path = entry.path();
                bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
                self.files.write().remove(&number);
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                files += 1;
            }
        }
        Ok((files, bytes))
    }

    /// The first page of the newest segment file last modified before `cutoff`, plus
    /// one segment: retention by age deletes everything below the returned page.
    pub(crate) fn first_page_after_segments_older_than(&self, cutoff: std::time::SystemTime) -> Result<Option<u64>> {
        let mut newest_old: Option<u64> = None;
        for (number, entry) in self.segment_entries()? {
            let modified = entry.metadata().and_then(|m| m.modified()).map_err(|e| Error::io(entry.path(), e))?;
            if modified < cutoff {
                newest_old = Some(newest_old.map_or(number, |n: u64| n.max(number)));
            }
        }
        Ok(newest_old.map(|segment| (segment + 1) * self.pages_per_segment))
    }
}
/// Trailing zeros of a page write at least this long are left to the segment file's hole
/// where it has one ([`sparse_prefix`]).
pub(crate) const SPARSE_ZEROS_BYTES: usize = 64 << 10;

/// How much of `bytes`, to be written at file offset `at`, must be written: all of it,
/// unless it ends in at least [`SPARSE_ZEROS_BYTES`] of zeros whose whole file blocks
/// (4 KiB) hold no data yet (`lseek(SEEK_DATA)`: a hole, which reads as zeros) — then up
/// to the first such block. A file system without `SEEK_DATA`, or any doubt, writes all.
fn sparse_prefix(file: &File, bytes: &[u8], at: u64) -> usize {
    const BLOCK: u64 = 4096;
    let zeros = bytes.iter().rev().take_while(|&&b| b == 0).count();
    if zeros < SPARSE_ZEROS_BYTES {
        return bytes.len();
    }
    let data_end = at + (bytes.len() - zeros) as u64;
    let hole_from = data_end.div_ceil(BLOCK) * BLOCK;
    let end = at + bytes.len() as u64;
    if hole_from >= end {
        return bytes.len();
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let Ok(from) = libc::off_t::try_from(hole_from) else { return bytes.len() };
        // SAFETY: lseek on a descriptor this `File` owns; it moves the file position,
        // which positioned writes and reads (pwrite/pread) do not use.
        let next_data = unsafe { libc::lseek(file.as_raw_fd(), from, libc::SEEK_DATA) };
        let hole = if next_data < 0 {
            std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO)
        } else {
            u64::try_from(next_data).is_ok_and(|d| d >= end)
        };
        if hole {
            return usize::try_from(hole_from - at).unwrap_or(bytes.len());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
    bytes.len()
}

