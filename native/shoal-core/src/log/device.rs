//! Where flushed pages go: segment files in a directory, or nowhere (FishStore's null
//! device, for benchmarks and tests).
//!
//! Page `p` lives in segment file `segment-{p / pages_per_segment:08}.log` at byte
//! offset `(p % pages_per_segment) × page_size`. Each page ends with a
//! [`PAGE_FOOTER_SIZE`]-byte footer: the CRC-32 (IEEE) of the page's
//! record area (u32 LE), a magic number (u32 LE) and the page number (u64 LE).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use super::withdrawn::Withdrawn;
use crate::error::{Error, Result};
use crate::LogAddress;

/// Bytes at the end of every page reserved for its footer.
pub const PAGE_FOOTER_SIZE: usize = 16;
const PAGE_MAGIC: u32 = 0x5348_4F4C; // "SHOL"

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
}

impl Device {
    pub(crate) fn open(config: &DeviceConfig, page_size: usize, pages_per_segment: u64) -> Result<Self> {
        match config {
            DeviceConfig::Null => Ok(Device::Null),
            DeviceConfig::Directory(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
                Ok(Device::Segments(SegmentFiles {
                    dir: dir.clone(),
                    page_size,
                    pages_per_segment,
                    files: RwLock::new(HashMap::new()),
                    write_fault: std::sync::atomic::AtomicI32::new(0),
                    withdrawn: Withdrawn::open(dir)?,
                }))
            }
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Device::Null)
    }
}

/// Computes and stores the footer of `page` (whose last [`PAGE_FOOTER_SIZE`] bytes are
/// overwritten).
pub(crate) fn seal_page(page: &mut [u8], page_number: u64) {
    let body = page.len() - PAGE_FOOTER_SIZE;
    let crc = crc32fast::hash(&page[..body]);
    page[body..body + 4].copy_from_slice(&crc.to_le_bytes());
    page[body + 4..body + 8].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
    page[body + 8..body + 16].copy_from_slice(&page_number.to_le_bytes());
}

/// Checks the footer written by [`seal_page`]; the error says what failed.
pub(crate) fn verify_page(page: &[u8], page_number: u64) -> std::result::Result<(), String> {
    let body = page.len() - PAGE_FOOTER_SIZE;
    let word = |at: usize| u32::from_le_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]]);
    if word(body + 4) != PAGE_MAGIC {
        return Err("missing page footer (torn or never written)".into());
    }
    let mut number = [0u8; 8];
    number.copy_from_slice(&page[body + 8..body + 16]);
    let stored_number = u64::from_le_bytes(number);
    if stored_number != page_number {
        return Err(format!("footer names page {stored_number}"));
    }
    let crc = crc32fast::hash(&page[..body]);
    if crc != word(body) {
        return Err(format!("checksum mismatch (stored {:#010x}, computed {crc:#010x})", word(body)));
    }
    Ok(())
}

impl SegmentFiles {
    fn segment_path(&self, segment: u64) -> PathBuf {
        self.dir.join(format!("segment-{segment:08}.log"))
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

    fn locate(&self, page: u64) -> (u64, u64) {
        (page / self.pages_per_segment, (page % self.pages_per_segment) * self.page_size as u64)
    }

    /// Writes a sealed page; with `sync`, waits until it is on stable storage.
    pub(crate) fn write_page(&self, page: u64, bytes: &[u8], sync: bool) -> Result<()> {
        let (segment, offset) = self.locate(page);
        let fault = self.write_fault.load(std::sync::atomic::Ordering::Relaxed);
        if fault != 0 {
            return Err(Error::io(self.segment_path(segment), std::io::Error::from_raw_os_error(fault)));
        }
        let file = self.file(segment)?;
        file.write_all_at(bytes, offset).map_err(|e| Error::io(self.segment_path(segment), e))?;
        if sync {
            file.sync_data().map_err(|e| Error::io(self.segment_path(segment), e))?;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes of page `page` starting at `offset_in_page`; withdrawn
    /// records whose header is in `buf` read as invalid.
    pub(crate) fn read(&self, page: u64, offset_in_page: usize, buf: &mut [u8]) -> Result<()> {
        self.read_raw(page, offset_in_page, buf)?;
        self.withdrawn.mask(LogAddress::new(page * self.page_size as u64 + offset_in_page as u64), buf);
        Ok(())
    }

    /// Reads `buf.len()` bytes of page `page` starting at `offset_in_page`, as stored.
    fn read_raw(&self, page: u64, offset_in_page: usize, buf: &mut [u8]) -> Result<()> {
        let (segment, offset) = self.locate(page);
        let file = self.open_file(segment, false)?;
        file.read_exact_at(buf, offset + offset_in_page as u64).map_err(|e| Error::io(self.segment_path(segment), e))
    }

    /// Reads a whole page and checks its footer; then withdrawn records read as invalid.
    pub(crate) fn read_page(&self, page: u64, buf: &mut [u8]) -> Result<()> {
        self.read_raw(page, 0, buf)?;
        verify_page(buf, page).map_err(|reason| Error::CorruptPage {
            page,
            path: self.segment_path(self.locate(page).0),
            reason,
        })?;
        self.withdrawn.mask(LogAddress::new(page * self.page_size as u64), buf);
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
    /// The page is there and its footer checks (its bytes are in the buffer).
    Valid,
    /// The page was never written (past the end of its segment file, or no file).
    Missing,
    /// The page is there but damaged: torn write, bad checksum, wrong page number.
    Corrupt(String),
}

impl SegmentFiles {
    /// Reads page `page` into `buf` (one page long) for recovery, without creating
    /// segment files, and says whether it is valid, missing or corrupt.
    ///
    /// # Errors
    /// [`Error::Io`] for read errors other than a short file.
    pub(crate) fn recover_page(&self, page: u64, buf: &mut [u8]) -> Result<PageState> {
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
        if length < offset + self.page_size as u64 {
            return Ok(PageState::Corrupt(format!("only {} of {} bytes were written", length - offset, self.page_size)));
        }
        self.read_raw(page, 0, buf)?;
        Ok(match verify_page(buf, page) {
            Ok(()) => {
                self.withdrawn.mask(LogAddress::new(page * self.page_size as u64), buf);
                PageState::Valid
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
