//! Small JSON files written atomically (a table's metadata and checkpoint, the columnar
//! tier's manifest, transactions' state): written to `NAME.tmp`, synced, renamed over
//! `NAME`, and the directory synced, so that a crash leaves either the old or the new
//! version (FASTER §6.5's checkpoint files).
//!
//! Every file carries a checksum and is checked before it is trusted: its text is
//! `{"crc32": C, "content": V}`, `V` the value as pretty-printed JSON and `C` the CRC-32
//! (IEEE) of `V`'s exact bytes. A flipped bit anywhere in `V` (a file's address bounds in
//! the columnar manifest, a PSF's boundary in `table.json`) fails the read with an error
//! naming the file, instead of being believed; each caller decides what a damaged file
//! costs (derived files are rebuilt from the log, `table.json` stops the table's open).
//! Files written before the checksum (the bare value) are still read, unchecked, and get
//! it when next written.

use std::io::Write;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// Writes `value` as JSON to `dir/name`, atomically (temporary file, sync, rename,
/// directory sync).
///
/// # Errors
/// [`Error::Io`] naming the file.
pub fn write_json_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    let path = dir.join(name);
    let temporary = dir.join(format!("{name}.tmp"));
    let text = encode_checksummed(name, value)?;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| Error::io(&path, e))
}

/// The checksummed form of a file ([module documentation](self)).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Checksummed<'a> {
    crc32: u32,
    #[serde(borrow)]
    content: &'a serde_json::value::RawValue,
}

/// Reads `dir/name` as JSON written by [`write_json_atomic`], checking its checksum;
/// `Ok(None)` when the file does not exist.
///
/// # Errors
/// [`Error::Io`] when it cannot be read; [`Error::InvalidConfig`] naming the file when
/// its checksum does not match its content or it is not the expected JSON.
pub fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>> {
    let path = dir.join(name);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    decode_checksummed(&bytes, &path.display().to_string()).map(Some)
}

/// `value` in the checksummed form of these files ([module documentation](self)):
/// `{"crc32": C, "content": V}` and a newline. `name` is for the error only. Also the
/// form of the objects of the daemon's remote store that describe a table (its manifests).
///
/// # Errors
/// [`Error::InvalidConfig`] when `value` cannot be encoded.
pub fn encode_checksummed<T: Serialize>(name: &str, value: &T) -> Result<Vec<u8>> {
    let content = serde_json::to_vec_pretty(value).map_err(|e| Error::InvalidConfig(format!("encoding {name}: {e}")))?;
    let mut text = format!("{{\"crc32\": {}, \"content\": ", crc32fast::hash(&content)).into_bytes();
    text.extend_from_slice(&content);
    text.extend_from_slice(b"}\n");
    Ok(text)
}

/// Decodes `bytes` written by [`encode_checksummed`] (or a bare value written before the
/// checksum), checking the checksum; `what_file` names the file or object in errors.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `what_file` when the checksum does not match the
/// content or it is not the expected JSON.
pub fn decode_checksummed<T: DeserializeOwned>(bytes: &[u8], what_file: &str) -> Result<T> {
    let damaged = |what: String| Error::InvalidConfig(format!("{what_file} is damaged or not a shoal file: {what}"));
    let content: &[u8] = match serde_json::from_slice::<Checksummed>(bytes) {
        Ok(file) => {
            let computed = crc32fast::hash(file.content.get().as_bytes());
            if computed != file.crc32 {
                return Err(damaged(format!("checksum mismatch (stored {:#010x}, computed {computed:#010x})", file.crc32)));
            }
            file.content.get().as_bytes()
        }
        Err(e) => {
            // Written before files carried a checksum: the bare value — unless the file
            // names either member of the checksummed form (then it is one, damaged: a
            // flipped bit changes one name at most).
            let legacy = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(bytes)
                .is_ok_and(|members| !members.contains_key("crc32") && !members.contains_key("content"));
            if !legacy {
                return Err(damaged(e.to_string()));
            }
            bytes
        }
    };
    serde_json::from_slice(content).map_err(|e| damaged(e.to_string()))
}
