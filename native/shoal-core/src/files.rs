//! Small JSON files written atomically (a table's metadata and checkpoint, the columnar
//! tier's manifest, transactions' state): written to `NAME.tmp`, synced, renamed over
//! `NAME`, and the directory synced, so that a crash leaves either the old or the new
//! version (FASTER §6.5's checkpoint files).

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
    let text = serde_json::to_vec_pretty(value).map_err(|e| Error::InvalidConfig(format!("encoding {name}: {e}")))?;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| Error::io(&path, e))
}

/// Reads `dir/name` as JSON; `Ok(None)` when the file does not exist.
///
/// # Errors
/// [`Error::Io`] when it cannot be read; [`Error::InvalidConfig`] naming the file when
/// it is not the expected JSON.
pub fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::InvalidConfig(format!("{} is damaged or not a shoal file: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&path, e)),
    }
}
