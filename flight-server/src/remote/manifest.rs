//! A table's manifests in the remote store: what objects make the table, and who owns it.
//!
//! Layout under the store's prefix (`[storage] remote`):
//!
//! ```text
//! tables/<table>/manifest/<seq:020>.json   the table's manifests, one per commit, never rewritten
//! tables/<table>/data/e<epoch>-s<seq>/...  the objects a manifest names (pages, chunks, files)
//! ```
//!
//! A manifest names its objects relative to the store's prefix, so that a clone's manifest
//! names the objects of the table it was cloned from (`shoal restore --as`).
//!
//! A manifest is written only with a conditional create (`PutMode::Create`: S3's
//! `If-None-Match: *`), at the sequence number after the newest one: the write of number
//! `n + 1` succeeds for exactly one process. A process that claims a table (opens it, or
//! takes it over) writes the next manifest with the newest epoch + 1; a process whose
//! next write finds that number taken by a manifest of a newer epoch is fenced: it
//! acknowledges nothing more of the table (SlateDB's manifest fencing). Each manifest is
//! checksummed (`shoal_core::checkpoint::encode_checksummed`), and so is every object it names
//! (`crc32`): a damaged object is named and never served.

use std::collections::BTreeMap;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

/// The objects that hold a table at one commit, and its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The table's name.
    pub table: String,
    /// The owner epoch: raised by one by every claim.
    pub epoch: u64,
    /// Who wrote it (host name, process id, node id): for operators.
    pub owner: String,
    /// The table was dropped: a daemon that starts does not open it.
    #[serde(default)]
    pub dropped: bool,
    /// The log's page size in bytes.
    pub page_size: u64,
    /// Pages per segment file.
    pub pages_per_segment: u64,
    /// Closed pages (whole page images, footers included), in page order, not overlapping.
    pub runs: Vec<PageRun>,
    /// The open page's proven bytes, as appended chunks (none when no page is open).
    pub open_page: Option<OpenPage>,
    /// The table directory's other files (`table.json`, `checkpoint.json`, index
    /// checkpoints, `withdrawn.bin`, columnar files, backfill runs, transactions), by path
    /// relative to the table's directory.
    pub files: BTreeMap<String, FileObject>,
    /// Every byte of the log below this address is in `runs` and `open_page` (a log address).
    pub log_end: u64,
}

/// Pages `[first, end)`, closed, as one object (`end - first` page images).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageRun {
    /// The first page's number.
    pub first: u64,
    /// One past the last page's number.
    pub end: u64,
    /// The object's name, relative to the store's prefix.
    pub object: String,
    /// CRC-32 (IEEE) of the object's bytes.
    pub crc32: u32,
}

/// The open page in the store: its record area's proven prefix as chunks `[from, to)`,
/// each object holding those bytes followed by the page's 16-byte footer as it was when
/// `to` bytes were proven (the last chunk's footer proves the whole prefix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenPage {
    /// The page's number.
    pub page: u64,
    /// The chunks, in order, each starting where the previous ended (the first at 0).
    pub chunks: Vec<Chunk>,
}

/// Bytes `[from, to)` of the open page's record area, then its footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    /// Offset in the page of the first byte.
    pub from: u64,
    /// Offset one past the last byte.
    pub to: u64,
    /// The object's name, relative to the store's prefix.
    pub object: String,
    /// CRC-32 (IEEE) of the object's bytes.
    pub crc32: u32,
}

/// A file of the table's directory in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileObject {
    /// The object's name, relative to the store's prefix.
    pub object: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of its bytes.
    pub crc32: u32,
}

impl Manifest {
    /// The open page's proven length in bytes (0 without an open page).
    #[must_use]
    pub fn open_len(&self) -> u64 {
        self.open_page.as_ref().and_then(|p| p.chunks.last()).map_or(0, |c| c.to)
    }
}

/// Why a manifest could not be committed.
#[derive(Debug)]
pub enum CommitError {
    /// This owner's own earlier manifest holds the number: a write whose answer was lost
    /// (a timeout after the store had written it). The caller goes on from it.
    Taken(Box<Manifest>),
    /// Another process holds the sequence number with a newer (or another) epoch.
    Fenced {
        /// Its epoch.
        epoch: u64,
        /// Its owner.
        owner: String,
    },
    /// The store failed (unavailable, refused, timed out): the commit may be retried.
    Store(String),
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Taken(m) => write!(f, "this owner's earlier manifest (epoch {}) holds the number", m.epoch),
            Self::Fenced { epoch, owner } => write!(f, "fenced by epoch {epoch} (owner {owner})"),
            Self::Store(e) => f.write_str(e),
        }
    }
}

/// The folder of table `name` under the store's `root`: `root/tables/<name>`.
#[must_use]
pub fn table_prefix(root: &Path, name: &str) -> Path {
    root.clone().join("tables").join(name)
}

/// The folder of a table's manifests.
fn manifest_dir(table_prefix: &Path) -> Path {
    table_prefix.clone().join("manifest")
}

/// The object of manifest number `seq`.
fn manifest_path(table_prefix: &Path, seq: u64) -> Path {
    manifest_dir(table_prefix).join(format!("{seq:020}.json"))
}

/// The newest manifest of the table under `table_prefix` and its number, `None` when it
/// has none.
///
/// # Errors
/// The store's error, or a damaged manifest (named).
pub async fn latest(store: &dyn ObjectStore, table_prefix: &Path) -> Result<Option<(u64, Manifest)>, String> {
    use futures::TryStreamExt;
    let dir = manifest_dir(table_prefix);
    let listed: Vec<object_store::ObjectMeta> =
        store.list(Some(&dir)).try_collect().await.map_err(|e| format!("listing {dir}: {e}"))?;
    let newest = listed
        .iter()
        .filter_map(|meta| meta.location.filename()?.strip_suffix(".json")?.parse::<u64>().ok())
        .max();
    let Some(seq) = newest else { return Ok(None) };
    read(store, table_prefix, seq).await.map(|m| Some((seq, m)))
}

/// Manifest number `seq`, checked.
///
/// # Errors
/// The store's error, or a damaged manifest (named).
pub async fn read(store: &dyn ObjectStore, table_prefix: &Path, seq: u64) -> Result<Manifest, String> {
    let path = manifest_path(table_prefix, seq);
    let bytes = get(store, &path).await?;
    shoal_core::checkpoint::decode_checksummed(&bytes, &format!("remote object {path}")).map_err(|e| e.to_string())
}

/// Writes `manifest` as number `seq` if no process has (conditional create). A number
/// taken already by this very manifest (a retried write that had succeeded) counts as
/// written.
///
/// # Errors
/// [`CommitError::Taken`] when another manifest of the same owner epoch holds the number
/// (an earlier write of this owner whose answer was lost); [`CommitError::Fenced`] when a
/// manifest of another epoch does; [`CommitError::Store`].
pub async fn commit(store: &dyn ObjectStore, table_prefix: &Path, seq: u64, manifest: &Manifest) -> Result<(), CommitError> {
    let path = manifest_path(table_prefix, seq);
    let bytes = shoal_core::checkpoint::encode_checksummed("manifest", manifest).map_err(|e| CommitError::Store(e.to_string()))?;
    let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    match store.put_opts(&path, PutPayload::from(Bytes::from(bytes)), options).await {
        Ok(_) => Ok(()),
        Err(object_store::Error::AlreadyExists { .. }) => {
            let theirs = read(store, table_prefix, seq).await.map_err(CommitError::Store)?;
            if theirs == *manifest {
                return Ok(());
            }
            if theirs.epoch == manifest.epoch && theirs.owner == manifest.owner {
                return Err(CommitError::Taken(Box::new(theirs)));
            }
            Err(CommitError::Fenced { epoch: theirs.epoch, owner: theirs.owner })
        }
        Err(e) => Err(CommitError::Store(format!("writing {path}: {e}"))),
    }
}

/// An object's bytes.
///
/// # Errors
/// The store's error, naming the object.
pub async fn get(store: &dyn ObjectStore, path: &Path) -> Result<Bytes, String> {
    let result = store.get(path).await.map_err(|e| format!("reading {path}: {e}"))?;
    result.bytes().await.map_err(|e| format!("reading {path}: {e}"))
}

/// An object's bytes, checked against the CRC-32 its manifest gives.
///
/// # Errors
/// The store's error, or a checksum mismatch naming the object.
pub async fn get_checked(store: &dyn ObjectStore, path: &Path, crc32: u32) -> Result<Bytes, String> {
    let bytes = get(store, path).await?;
    let computed = crc32fast::hash(&bytes);
    if computed != crc32 {
        return Err(format!(
            "remote object {path} is damaged: checksum mismatch (manifest {crc32:#010x}, computed {computed:#010x}, {} bytes); it is not served",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// Writes an object (overwriting: data objects have names no other process uses).
///
/// # Errors
/// The store's error, naming the object.
pub async fn put(store: &dyn ObjectStore, path: &Path, bytes: Bytes) -> Result<(), String> {
    store.put(path, PutPayload::from(bytes)).await.map(|_| ()).map_err(|e| format!("writing {path}: {e}"))
}

/// The tables that have manifests under `root` (`root/tables/<name>/manifest/...`).
///
/// # Errors
/// The store's error.
pub async fn tables(store: &dyn ObjectStore, root: &Path) -> Result<Vec<String>, String> {
    let dir = root.clone().join("tables");
    let listed = store.list_with_delimiter(Some(&dir)).await.map_err(|e| format!("listing {dir}: {e}"))?;
    let mut names: Vec<String> = listed.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_owned)).collect();
    names.sort();
    Ok(names)
}

/// The object `relative` (a name with `/` between its parts) under `prefix`; a leading
/// `../` names a part of the prefix's parent (a shard moved from another node names that
/// node's objects as `../node-<id>/tables/...`), never above the store's root.
#[must_use]
pub fn object_path(prefix: &Path, relative: &str) -> Path {
    let mut parts: Vec<object_store::path::PathPart<'_>> = prefix.parts().collect();
    for part in relative.split('/').filter(|part| !part.is_empty() && *part != ".") {
        if part == ".." {
            parts.pop();
        } else {
            parts.push(part.into());
        }
    }
    parts.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(epoch: u64, owner: &str, log_end: u64) -> Manifest {
        Manifest { table: "t".into(), epoch, owner: owner.into(), page_size: 1 << 14, pages_per_segment: 256, log_end, ..Manifest::default() }
    }

    #[tokio::test]
    async fn a_manifest_number_is_written_once_and_the_loser_learns_why() {
        let store = object_store::memory::InMemory::new();
        let prefix = table_prefix(&Path::from("root"), "t");
        assert!(latest(&store, &prefix).await.unwrap().is_none());
        commit(&store, &prefix, 0, &manifest(1, "a", 10)).await.unwrap();
        // The same manifest again (a retry whose first answer was lost): written.
        commit(&store, &prefix, 0, &manifest(1, "a", 10)).await.unwrap();
        // Another manifest of the same owner and epoch: its own earlier write, handed back.
        match commit(&store, &prefix, 0, &manifest(1, "a", 20)).await {
            Err(CommitError::Taken(earlier)) => assert_eq!(earlier.log_end, 10),
            other => panic!("expected Taken, got {other:?}"),
        }
        // Another owner's: fenced by the epoch that holds the number.
        commit(&store, &prefix, 1, &manifest(2, "b", 30)).await.unwrap();
        match commit(&store, &prefix, 1, &manifest(1, "a", 20)).await {
            Err(CommitError::Fenced { epoch: 2, owner }) => assert_eq!(owner, "b"),
            other => panic!("expected Fenced, got {other:?}"),
        }
        assert_eq!(latest(&store, &prefix).await.unwrap().map(|(seq, m)| (seq, m.epoch)), Some((1, 2)));
    }

    #[tokio::test]
    async fn a_damaged_manifest_or_object_is_named() {
        let store = object_store::memory::InMemory::new();
        let prefix = table_prefix(&Path::from("root"), "t");
        commit(&store, &prefix, 0, &manifest(1, "a", 10)).await.unwrap();
        let path = manifest_path(&prefix, 0);
        let mut bytes = get(&store, &path).await.unwrap().to_vec();
        let at = bytes.iter().position(|&b| b == b'"').unwrap() + 1;
        bytes[at] ^= 0x20;
        store.put(&path, PutPayload::from(bytes)).await.unwrap();
        let error = latest(&store, &prefix).await.unwrap_err();
        assert!(error.contains("manifest/00000000000000000000.json") && error.contains("damaged"), "{error}");
        let object = object_path(&Path::from("root"), "tables/t/data/x");
        put(&store, &object, Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(&get_checked(&store, &object, crc32fast::hash(b"abc")).await.unwrap()[..], b"abc");
        let error = get_checked(&store, &object, 7).await.unwrap_err();
        assert!(error.contains("root/tables/t/data/x is damaged: checksum mismatch"), "{error}");
    }

    #[test]
    fn a_name_may_reach_a_sibling_prefix_but_not_above_the_root() {
        let node = Path::from("root/node-1");
        assert_eq!(object_path(&node, "tables/t/data/x").as_ref(), "root/node-1/tables/t/data/x");
        assert_eq!(object_path(&node, "../node-0/tables/t/data/x").as_ref(), "root/node-0/tables/t/data/x");
        assert_eq!(object_path(&node, "../../../../x").as_ref(), "x");
    }
}
