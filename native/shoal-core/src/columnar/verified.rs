//! Columnar files read back checked, every time: the CRC-32 of each [`BLOCK_SIZE`]-byte
//! block of a file is taken when the file is loaded (its bytes then match the manifest's
//! whole-file CRC-32, or were just written), and every later read from disk — footers, page
//! headers, data pages, for row groups and pages alike — reads whole blocks and checks them
//! before the Parquet decoder sees a byte ([`VerifiedFile`], a `parquet` [`ChunkReader`]).
//!
//! Why not Parquet's own page CRC: the `parquet` crate (60.x) verifies a page header's `crc`
//! when one is there but does not write it, and a file damaged after it was written would
//! still be decoded where the damage falls outside a page body (headers, footer). Blocks
//! cover every byte. A mismatch marks the file damaged ([`FileChecks::damaged`]): the scan
//! that found it answers the rest of the file's range from the log and the store drops the
//! file, which the compactor builds again from the log.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

/// Bytes per checked block: reads are widened to whole blocks (at most two partial blocks
/// more per read), and a file costs 4 bytes of checksum per block in memory.
pub(crate) const BLOCK_SIZE: usize = 64 << 10;

/// The block checksums of one file and whether a read found it damaged.
#[derive(Debug)]
pub(crate) struct FileChecks {
    path: PathBuf,
    len: u64,
    blocks: Vec<u32>,
    damaged: AtomicBool,
}

impl FileChecks {
    /// The checksums of `bytes`, the whole file at `path` as it must stay.
    pub(crate) fn of(path: PathBuf, bytes: &[u8]) -> Arc<Self> {
        Arc::new(Self {
            path,
            len: bytes.len() as u64,
            blocks: bytes.chunks(BLOCK_SIZE).map(crc32fast::hash).collect(),
            damaged: AtomicBool::new(false),
        })
    }

    /// Whether a read found the file different from what was loaded.
    pub(crate) fn damaged(&self) -> bool {
        self.damaged.load(Ordering::Acquire)
    }

    /// Reads the blocks holding `[start, end)` from `file` and checks them; returns their
    /// bytes and the offset of the first.
    fn read_blocks(&self, file: &File, start: u64, end: u64) -> std::io::Result<(u64, Vec<u8>)> {
        let block = BLOCK_SIZE as u64;
        let (first, last) = (start / block, end.div_ceil(block).max(start / block + 1));
        let from = first * block;
        let to = (last * block).min(self.len);
        let mut bytes = vec![0u8; usize::try_from(to.saturating_sub(from)).unwrap_or(0)];
        if let Err(e) = file.read_exact_at(&mut bytes, from) {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                // Shorter than when it was written: damaged too.
                self.damaged.store(true, Ordering::Release);
            }
            return Err(e);
        }
        for (i, chunk) in bytes.chunks(BLOCK_SIZE).enumerate() {
            let index = usize::try_from(first).unwrap_or(usize::MAX).saturating_add(i);
            let expected = self.blocks.get(index).copied();
            let computed = crc32fast::hash(chunk);
            if expected != Some(computed) {
                self.damaged.store(true, Ordering::Release);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: bytes [{}, {}) changed since the file was written (CRC-32 {computed:#010x}, expected {})",
                        self.path.display(),
                        from + (i * BLOCK_SIZE) as u64,
                        from + (i * BLOCK_SIZE + chunk.len()) as u64,
                        expected.map_or_else(|| "no block there".to_owned(), |e| format!("{e:#010x}"))
                    ),
                ));
            }
        }
        Ok((from, bytes))
    }
}

/// A columnar file on disk whose every read is checked against its [`FileChecks`].
pub(crate) struct VerifiedFile {
    file: File,
    checks: Arc<FileChecks>,
}

impl VerifiedFile {
    pub(crate) fn new(file: File, checks: Arc<FileChecks>) -> Self {
        Self { file, checks }
    }
}

impl Length for VerifiedFile {
    fn len(&self) -> u64 {
        self.checks.len
    }
}

fn parquet_error(e: std::io::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl ChunkReader for VerifiedFile {
    type T = VerifiedRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<VerifiedRead> {
        let file = self.file.try_clone().map_err(parquet_error)?;
        Ok(VerifiedRead { file, checks: Arc::clone(&self.checks), position: start, block: (0, Vec::new()) })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start + length as u64;
        if end > self.checks.len {
            return Err(ParquetError::EOF(format!("a read of [{start}, {end}) past the end of a {}-byte file", self.checks.len)));
        }
        let (from, bytes) = self.checks.read_blocks(&self.file, start, end).map_err(parquet_error)?;
        let at = usize::try_from(start - from).unwrap_or(0);
        Ok(Bytes::from(bytes).slice(at..at + length))
    }
}

/// A sequential reader from some offset to the end of a [`VerifiedFile`], a checked block
/// at a time.
pub(crate) struct VerifiedRead {
    file: File,
    checks: Arc<FileChecks>,
    position: u64,
    /// The checked block last read: its offset and bytes.
    block: (u64, Vec<u8>),
}

impl Read for VerifiedRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.position >= self.checks.len || buf.is_empty() {
            return Ok(0);
        }
        let (offset, bytes) = &self.block;
        if self.position < *offset || self.position >= offset + bytes.len() as u64 {
            self.block = self.checks.read_blocks(&self.file, self.position, self.position + 1)?;
        }
        let (offset, bytes) = &self.block;
        let at = usize::try_from(self.position - offset).unwrap_or(0);
        let n = buf.len().min(bytes.len() - at);
        buf[..n].copy_from_slice(&bytes[at..at + n]);
        self.position += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_checked_whole_blocks_and_a_flipped_bit_is_found_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let bytes: Vec<u8> = (0..(3 * BLOCK_SIZE + 100)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let checks = FileChecks::of(path.clone(), &bytes);
        let file = VerifiedFile::new(File::open(&path).unwrap(), Arc::clone(&checks));
        assert_eq!(&file.get_bytes(10, 100).unwrap()[..], &bytes[10..110]);
        let across = BLOCK_SIZE as u64 - 5;
        assert_eq!(&file.get_bytes(across, 20).unwrap()[..], &bytes[BLOCK_SIZE - 5..BLOCK_SIZE + 15]);
        let mut rest = Vec::new();
        file.get_read(across).unwrap().read_to_end(&mut rest).unwrap();
        assert_eq!(rest, &bytes[BLOCK_SIZE - 5..]);
        assert!(file.get_bytes(bytes.len() as u64 - 1, 2).is_err(), "past the end");
        assert!(!checks.damaged());

        // One bit flipped in the second block: reads of the first still pass, every read
        // touching the second fails and names the bytes.
        let mut damaged = bytes.clone();
        damaged[BLOCK_SIZE + 17] ^= 0x04;
        std::fs::write(&path, &damaged).unwrap();
        let file = VerifiedFile::new(File::open(&path).unwrap(), Arc::clone(&checks));
        assert_eq!(&file.get_bytes(0, 50).unwrap()[..], &bytes[..50]);
        assert!(!checks.damaged());
        let error = file.get_bytes(BLOCK_SIZE as u64 + 100, 4).unwrap_err().to_string();
        assert!(error.contains(&format!("bytes [{BLOCK_SIZE}, {})", 2 * BLOCK_SIZE)), "{error}");
        assert!(checks.damaged());
        let mut rest = Vec::new();
        assert!(file.get_read(0).unwrap().read_to_end(&mut rest).is_err());
    }
}
