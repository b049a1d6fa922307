//! Records withdrawn after they may have reached the device: the lasting half of
//! [`crate::table::Table::withdraw`].
//!
//! A batch that cannot be made durable (the disk is full) is withdrawn: its records'
//! headers get the invalid bit in memory, and every page flushed afterwards carries it.
//! Pages of the batch flushed *before* the failure hold the records as written, valid,
//! and would come back when they are read from the device (after their frame is reused,
//! or after a restart: 312 such rows in the full-disk probe, `bench/probe.py`). Rewriting
//! those pages in place would be a torn-page risk on the very pages that were durable;
//! instead their addresses are kept in `withdrawn.bin` beside the segment files, and
//! every read from the device sets the invalid bit of a listed record in the bytes it
//! returns (a whole page after its checksum was checked), so scans, chain walks, the
//! columnar compactor and recovery skip the record as they skip one withdrawn in memory.
//!
//! The file is written before it is needed: created with [`PREALLOCATED_BYTES`] of
//! zeros, so that adding entries overwrites blocks the file already has and works on a
//! full disk (on file systems that overwrite in place: not copy-on-write ones such as
//! btrfs or ZFS). An entry is `magic (u32 LE) · count (u32 LE) · count × address (u64 LE) ·
//! CRC-32 of the preceding bytes (u32 LE) · 4 zero bytes`; the magic says whether it adds
//! its addresses or forgets every address at or above its one address (recovery: the
//! addresses of records that never reached the device go to new records). Entries are
//! appended in place and synced; reading stops at the first entry whose magic or checksum
//! is wrong (a torn append was never reported as lasting). When the preallocated room is
//! used up, the file is rewritten (temporary file, sync, rename) with the addresses still
//! in the log, which needs free space again.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::record::RecordHeader;
use crate::LogAddress;

/// The file's name in the log's directory.
pub const WITHDRAWN_FILE: &str = "withdrawn.bin";

/// Bytes of zeros a new file is written with: room for about 32,000 addresses in entries
/// appended without new space (a withdrawal on a full disk lists only the records a failed
/// flush may have written; an empty table's directory stays under 1 MiB on disk).
pub const PREALLOCATED_BYTES: u64 = 256 << 10;

/// "WDRN": the entry adds its addresses.
const ADD_MAGIC: u32 = 0x5744_524E;

/// "WDRF": the entry forgets every address at or above its one address.
const FORGET_MAGIC: u32 = 0x5744_5246;

/// Bytes of an entry around its addresses: magic, count, checksum, padding.
const ENTRY_OVERHEAD: usize = 16;

/// The open file, the end of its last good entry and its length.
#[derive(Debug)]
struct ListFile {
    file: File,
    end: u64,
    length: u64,
}

/// The withdrawn addresses of one log directory, in memory (sorted) and in the file.
#[derive(Debug)]
pub(crate) struct Withdrawn {
    dir: PathBuf,
    /// Record addresses, sorted, without duplicates.
    addresses: RwLock<Vec<u64>>,
    /// How many times the set changed (readers' fast path checks `addresses` only when
    /// this is not 0; the columnar compactor compares it around a file's build).
    generation: AtomicU64,
    /// The file; `None` when it could not be created (a full disk when a table made before
    /// this file existed was opened): [`Self::add`] tries again.
    file: Mutex<Option<ListFile>>,
}

impl Withdrawn {
    /// Opens `dir/withdrawn.bin` and reads its entries, or creates it (preallocated); a
    /// file that cannot be created is logged and tried again by the first [`Self::add`].
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when an existing one cannot be read or opened.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(WITHDRAWN_FILE);
        let (file, addresses) = if path.exists() {
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let (addresses, end) = parse(&bytes);
            let file = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| Error::io(&path, e))?;
            (Some(ListFile { file, end, length: bytes.len() as u64 }), addresses)
        } else {
            match create_preallocated(dir, &[]) {
                Ok(file) => (Some(file), Vec::new()),
                Err(error) => {
                    tracing::warn!(%error, "the list of withdrawn records could not be created; tried again when needed");
                    (None, Vec::new())
                }
            }
        };
        let generation = u64::from(!addresses.is_empty());
        Ok(Self {
            dir: dir.to_path_buf(),
            addresses: RwLock::new(addresses),
            generation: AtomicU64::new(generation),
            file: Mutex::new(file),
        })
    }

    /// Changes so far (0: nothing was ever withdrawn here).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The listed addresses, sorted.
    pub(crate) fn addresses(&self) -> Vec<LogAddress> {
        self.addresses.read().iter().map(|&a| LogAddress::new(a)).collect()
    }

    /// Adds `addresses` (record addresses, sorted), synced to the device before it
    /// returns; listed addresses below `begin` are left out when the file is rewritten.
    ///
    /// # Errors
    /// [`Error::Io`] when the entry cannot be written and synced, or the file is full
    /// (or missing) and cannot be written anew (no free space); then nothing was added.
    pub(crate) fn add(&self, addresses: &[LogAddress], begin: LogAddress) -> Result<()> {
        if addresses.is_empty() {
            return Ok(());
        }
        let (addresses, begin) = (crate::address::raw_slice(addresses), begin.get());
        let mut file = self.file.lock();
        let mut merged: Vec<u64> = self.addresses.read().iter().copied().chain(addresses.iter().copied()).collect();
        merged.sort_unstable();
        merged.dedup();
        if !self.append(&mut file, &encode_entry(ADD_MAGIC, addresses))? {
            merged.retain(|&a| a >= begin);
            self.rewrite(&mut file, &merged)?;
        }
        self.replace(merged);
        Ok(())
    }

    /// Forgets the addresses at or above `tail` (recovery, once the log's end is known:
    /// the addresses of records that never reached the device go to new records).
    ///
    /// # Errors
    /// [`Error::Io`] when the forgetting cannot be written (the file is full and there is
    /// no room to write it anew).
    pub(crate) fn forget_from(&self, tail: LogAddress) -> Result<()> {
        let tail = tail.get();
        let kept: Vec<u64> = {
            let addresses = self.addresses.read();
            if addresses.last().is_none_or(|&last| last < tail) {
                return Ok(());
            }
            addresses.iter().copied().filter(|&a| a < tail).collect()
        };
        let mut file = self.file.lock();
        if !self.append(&mut file, &encode_entry(FORGET_MAGIC, &[tail]))? {
            self.rewrite(&mut file, &kept)?;
        }
        self.replace(kept);
        Ok(())
    }

    /// Sets the invalid bit of every listed record whose header lies wholly in `bytes`,
    /// which hold the log's bytes from `start` on (a device read).
    pub(crate) fn mask(&self, start: LogAddress, bytes: &mut [u8]) {
        if self.generation() == 0 || bytes.len() < 8 {
            return;
        }
        let start = start.get();
        let addresses = self.addresses.read();
        let last = start + bytes.len() as u64 - 8;
        let from = addresses.partition_point(|&a| a < start);
        for &address in addresses[from..].iter().take_while(|&&a| a <= last) {
            let at = (address - start) as usize;
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            let header = RecordHeader(u64::from_le_bytes(word));
            if !header.is_empty() && !header.is_filler() {
                bytes[at..at + 8].copy_from_slice(&header.with_invalid().0.to_le_bytes());
            }
        }
    }

    fn replace(&self, addresses: Vec<u64>) {
        *self.addresses.write() = addresses;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Appends `entry` in place and syncs it; `false` when the file has no room for it
    /// (or there is no file).
    fn append(&self, file: &mut Option<ListFile>, entry: &[u8]) -> Result<bool> {
        let Some(list) = file.as_mut().filter(|l| l.end + entry.len() as u64 <= l.length) else { return Ok(false) };
        let path = self.dir.join(WITHDRAWN_FILE);
        list.file.write_all_at(entry, list.end).map_err(|e| Error::io(&path, e))?;
        list.file.sync_data().map_err(|e| Error::io(&path, e))?;
        list.end += entry.len() as u64;
        Ok(true)
    }

    /// Replaces the file with one entry of `all` (preallocated again).
    fn rewrite(&self, file: &mut Option<ListFile>, all: &[u64]) -> Result<()> {
        *file = Some(create_preallocated(&self.dir, all)?);
        Ok(())
    }
}

/// Writes `dir/withdrawn.bin` atomically: one entry of `addresses` (none when empty),
/// then zeros up to [`PREALLOCATED_BYTES`] (or twice the entry); returns it open.
fn create_preallocated(dir: &Path, addresses: &[u64]) -> Result<ListFile> {
    let path = dir.join(WITHDRAWN_FILE);
    let mut bytes = if addresses.is_empty() { Vec::new() } else { encode_entry(ADD_MAGIC, addresses) };
    let end = bytes.len() as u64;
    let length = PREALLOCATED_BYTES.max(2 * end);
    bytes.resize(usize::try_from(length).unwrap_or(usize::MAX), 0);
    let temporary = dir.join(format!("{WITHDRAWN_FILE}.tmp"));
    let written = std::fs::write(&temporary, &bytes)
        .and_then(|()| File::open(&temporary)?.sync_all())
        .and_then(|()| std::fs::rename(&temporary, &path));
    if let Err(e) = written {
        // A partial temporary file would hold the last free blocks of a full disk.
        let _ = std::fs::remove_file(&temporary);
        return Err(Error::io(&path, e));
    }
    if let Err(error) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(%error, dir = %dir.display(), "directory sync after writing the list of withdrawn records failed");
    }
    let file = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| Error::io(&path, e))?;
    Ok(ListFile { file, end, length })
}

fn encode_entry(magic: u32, addresses: &[u64]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(ENTRY_OVERHEAD + 8 * addresses.len());
    entry.extend_from_slice(&magic.to_le_bytes());
    entry.extend_from_slice(&u32::try_from(addresses.len()).unwrap_or(u32::MAX).to_le_bytes());
    for address in addresses {
        entry.extend_from_slice(&address.to_le_bytes());
    }
    let crc = crc32fast::hash(&entry);
    entry.extend_from_slice(&crc.to_le_bytes());
    entry.extend_from_slice(&[0; 4]);
    entry
}

/// The addresses of the good entries of `bytes` (sorted, without duplicates) and where
/// those entries end.
fn parse(bytes: &[u8]) -> (Vec<u64>, u64) {
    let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let mut addresses = Vec::new();
    let mut at = 0usize;
    while at + ENTRY_OVERHEAD <= bytes.len() && matches!(word(at), ADD_MAGIC | FORGET_MAGIC) {
        let count = word(at + 4) as usize;
        let body = 8 + 8 * count;
        if at + body + 8 > bytes.len() || crc32fast::hash(&bytes[at..at + body]) != word(at + body) {
            break;
        }
        let listed = bytes[at + 8..at + body].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        if word(at) == ADD_MAGIC {
            addresses.extend(listed);
        } else if let Some(from) = listed.min() {
            addresses.retain(|&a| a < from);
        }
        at += body + 8;
    }
    addresses.sort_unstable();
    addresses.dedup();
    (addresses, at as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(raw: &[u64]) -> Vec<LogAddress> {
        raw.iter().map(|&a| LogAddress::new(a)).collect()
    }

    fn header(size: u32) -> [u8; 8] {
        RecordHeader::new(size, 1, 0).with_visible().0.to_le_bytes()
    }

    #[test]
    fn entries_survive_a_reopen_and_a_torn_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let withdrawn = Withdrawn::open(dir.path()).unwrap();
        assert_eq!(std::fs::metadata(dir.path().join(WITHDRAWN_FILE)).unwrap().len(), PREALLOCATED_BYTES);
        assert_eq!(withdrawn.generation(), 0);
        withdrawn.add(&at(&[640, 64]), LogAddress::ZERO).unwrap();
        withdrawn.add(&at(&[128]), LogAddress::ZERO).unwrap();
        assert_eq!(withdrawn.addresses(), at(&[64, 128, 640]));
        drop(withdrawn);
        // A torn third entry: its checksum does not match.
        let path = dir.path().join(WITHDRAWN_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let end = 2 * ENTRY_OVERHEAD + 3 * 8;
        let torn = encode_entry(ADD_MAGIC, &[999]);
        bytes[end..end + torn.len() - 8].copy_from_slice(&torn[..torn.len() - 8]);
        std::fs::write(&path, &bytes).unwrap();
        let reopened = Withdrawn::open(dir.path()).unwrap();
        assert_eq!(reopened.addresses(), at(&[64, 128, 640]));
        assert!(reopened.generation() > 0);
        // Forgetting from a recovered tail: an entry in place (over the torn one), then
        // later additions count again.
        reopened.forget_from(LogAddress::new(128)).unwrap();
        assert_eq!(reopened.addresses(), at(&[64]));
        reopened.add(&at(&[4096]), LogAddress::ZERO).unwrap();
        assert_eq!(Withdrawn::open(dir.path()).unwrap().addresses(), at(&[64, 4096]));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), PREALLOCATED_BYTES, "no rewrite");
    }

    #[test]
    fn a_full_file_is_rewritten_without_the_addresses_below_the_begin_address() {
        let dir = tempfile::tempdir().unwrap();
        let withdrawn = Withdrawn::open(dir.path()).unwrap();
        let per_entry = 4096u64;
        let entries = PREALLOCATED_BYTES / (ENTRY_OVERHEAD as u64 + 8 * per_entry);
        for e in 0..=entries {
            let batch: Vec<u64> = (0..per_entry).map(|i| (e * per_entry + i) * 64).collect();
            withdrawn.add(&at(&batch), LogAddress::new((e * per_entry * 64).saturating_sub(per_entry * 64))).unwrap();
        }
        let kept = withdrawn.addresses();
        assert!(kept.len() < ((entries + 1) * per_entry) as usize, "older addresses were left out: {}", kept.len());
        assert_eq!(kept.last(), Some(&LogAddress::new(((entries + 1) * per_entry - 1) * 64)));
        assert_eq!(Withdrawn::open(dir.path()).unwrap().addresses(), kept);
    }

    #[test]
    fn reads_see_listed_records_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let withdrawn = Withdrawn::open(dir.path()).unwrap();
        let mut page = vec![0u8; 64];
        page[0..8].copy_from_slice(&header(24));
        page[24..32].copy_from_slice(&header(16));
        page[40..48].copy_from_slice(&header(24));
        let untouched = page.clone();
        withdrawn.mask(LogAddress::new(1000), &mut page);
        assert_eq!(page, untouched, "nothing listed");
        withdrawn.add(&at(&[1024, 1040 + 8 * 100]), LogAddress::ZERO).unwrap();
        withdrawn.mask(LogAddress::new(1000), &mut page);
        let at = |bytes: &[u8], i: usize| RecordHeader(u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()));
        assert!(!at(&page, 0).is_invalid() && at(&page, 24).is_invalid() && !at(&page, 40).is_invalid());
        assert_eq!(at(&page, 24).size(), 16);
        // A read that holds only part of a header leaves it.
        let mut part = untouched[24..28].to_vec();
        withdrawn.mask(LogAddress::new(1024), &mut part);
        assert_eq!(part, &untouched[24..28]);
    }
}
