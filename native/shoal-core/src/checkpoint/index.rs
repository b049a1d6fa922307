//! The fuzzy index checkpoint file (FASTER §6.5): the hash index's entries copied while
//! ingestion continues, with the log tail read before the copy started (`start`) and
//! after it ended (`end`). Recovery loads it and replays the log from `start`: every
//! chain head that changed during the copy is set again from the log.
//!
//! Format (little endian): magic `SHIX` (u32), format version (u32), index size bits
//! (u32), reserved (u32), `start` (u64), `end` (u64), entry count (u64); per entry the
//! main bucket index | tag << 32 (u64) and the address (u64); a CRC-32 (u32) of
//! everything before it. Written to a temporary file, synced and renamed into
//! `index-<end>.checkpoint`, so a crash leaves either no file or a complete one.

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::index::HashIndex;
use crate::LogAddress;

const MAGIC: u32 = 0x5849_4853; // "SHIX"
const VERSION: u32 = 1;
const HEADER: usize = 40;

/// What an index checkpoint file says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexCheckpointHeader {
    /// log2 of the index's bucket count.
    pub size_bits: u32,
    /// Log tail before the copy began.
    pub start: LogAddress,
    /// Log tail after the copy ended.
    pub end: LogAddress,
    /// Entries in the file.
    pub entries: u64,
}

/// The file name of the index checkpoint that ends at `end`.
#[must_use]
pub fn file_name(end: LogAddress) -> String {
    format!("index-{:016x}.checkpoint", end.get())
}

/// Copies `index` into `dir/<file_name(end)>`; `start` was read before the call and
/// `end()` is read after the copy. Returns the header written.
///
/// # Errors
/// [`Error::Io`] naming the file.
pub fn write(dir: &Path, index: &HashIndex, size_bits: u32, start: LogAddress, end: impl FnOnce() -> LogAddress) -> Result<IndexCheckpointHeader> {
    let mut body = vec![0u8; HEADER];
    let mut entries = 0u64;
    index.for_each_entry_in_bucket(|bucket, tag, address| {
        body.extend_from_slice(&(bucket | tag << 32).to_le_bytes());
        body.extend_from_slice(&address.to_le_bytes());
        entries += 1;
    });
    let end = end();
    body[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    body[4..8].copy_from_slice(&VERSION.to_le_bytes());
    body[8..12].copy_from_slice(&size_bits.to_le_bytes());
    body[16..24].copy_from_slice(&start.get().to_le_bytes());
    body[24..32].copy_from_slice(&end.get().to_le_bytes());
    body[32..40].copy_from_slice(&entries.to_le_bytes());
    let crc = crc32fast::hash(&body);
    let name = file_name(end);
    let path = dir.join(&name);
    let temporary = dir.join(format!("{name}.tmp"));
    let write = || -> std::io::Result<()> {
        let file = std::fs::File::create(&temporary)?;
        let mut writer = BufWriter::new(file);
        writer.write_all(&body)?;
        writer.write_all(&crc.to_le_bytes())?;
        let file = writer.into_inner().map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| Error::io(&path, e))?;
    Ok(IndexCheckpointHeader { size_bits, start, end, entries })
}

/// Loads `path` into the (empty) `index`.
///
/// # Errors
/// [`Error::Io`]; [`Error::InvalidConfig`] naming the file when it is damaged or was
/// written for another index size.
pub fn load(path: &Path, index: &HashIndex, size_bits: u32) -> Result<IndexCheckpointHeader> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let damaged = |why: &str| Error::InvalidConfig(format!("index checkpoint {} is unusable: {why}", path.display()));
    if bytes.len() < HEADER + 4 || !(bytes.len() - HEADER - 4).is_multiple_of(16) {
        return Err(damaged("truncated"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().unwrap_or_default());
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().unwrap_or_default());
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().unwrap_or_default()) {
        return Err(damaged("checksum mismatch"));
    }
    if u32_at(0) != MAGIC || u32_at(4) != VERSION {
        return Err(damaged("not an index checkpoint of this format version"));
    }
    if u32_at(8) != size_bits {
        return Err(damaged(&format!("written for 2^{} buckets, the table has 2^{size_bits}", u32_at(8))));
    }
    let header = IndexCheckpointHeader { size_bits, start: LogAddress::new(u64_at(16)), end: LogAddress::new(u64_at(24)), entries: u64_at(32) };
    if (body.len() - HEADER) as u64 / 16 != header.entries {
        return Err(damaged("entry count does not match the file size"));
    }
    for entry in body[HEADER..].chunks_exact(16) {
        let key = u64::from_le_bytes(entry[0..8].try_into().unwrap_or_default());
        let address = u64::from_le_bytes(entry[8..16].try_into().unwrap_or_default());
        index.restore_entry(key & 0xFFFF_FFFF, key >> 32, address)?;
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let index = HashIndex::new(6).unwrap();
        for hash in [1u64, 2, 7, 0xABCD_0000_0000_0003, 0x1234_0000_0000_0003] {
            index.raise_entry(hash, 64 + hash % 1000).unwrap();
        }
        let header = write(dir.path(), &index, 6, LogAddress::FIRST, || LogAddress::new(4096)).unwrap();
        assert_eq!(header.entries, 5);
        let path = dir.path().join(file_name(LogAddress::new(4096)));
        let copy = HashIndex::new(6).unwrap();
        assert_eq!(load(&path, &copy, 6).unwrap(), header);
        for hash in [1u64, 2, 7, 0xABCD_0000_0000_0003, 0x1234_0000_0000_0003] {
            assert_eq!(copy.find_entry(hash), index.find_entry(hash), "{hash:#x}");
        }
        assert!(load(&path, &HashIndex::new(7).unwrap(), 7).unwrap_err().to_string().contains("2^6"));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER + 3] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(load(&path, &HashIndex::new(6).unwrap(), 6).unwrap_err().to_string().contains("checksum"));
    }
}
