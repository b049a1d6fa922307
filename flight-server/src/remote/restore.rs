//! Opening tables from the remote store: a table's objects written back into a local
//! directory (page runs and the open page's chunks into segment files at their pages'
//! places, the other files as they were), every object checked against its manifest's
//! checksum first. The engine then opens the directory as after a crash.

use std::os::unix::fs::FileExt;
use std::path::Path as FsPath;

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use shoal_core::table::PAGE_FOOTER_SIZE;

use super::manifest::{self, Chunk, Manifest, OpenPage, PageRun};
use super::mirror::{LocalState, LOCAL_STATE_FILE};

/// Most objects read at once.
const CONCURRENT_GETS: usize = 8;

/// What a restore wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct Restored {
    /// Objects read.
    pub objects: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// Writes the table `manifest` describes into `dir` (created; it must not hold another
/// table), with `remote.json` naming the manifest's epoch.
///
/// # Errors
/// The store's error, a damaged object (named), or the local files'.
/// Objects are named relative to the store's prefix `root`.
/// Without `whole`, the page runs and the columnar files are not read (the table reads them
/// from the store when it needs them: `local_cache_bytes`); the open page's chunks and the
/// other files are.
pub async fn restore(store: &dyn ObjectStore, root: &Path, manifest: &Manifest, dir: &FsPath, whole: bool) -> Result<Restored, String> {
    use futures::StreamExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let page_size = usize::try_from(manifest.page_size).map_err(|e| e.to_string())?;
    let pages_per_segment = manifest.pages_per_segment.max(1);
    // What to write where: (object, crc, how to place it).
    let mut reads: Vec<(String, u32, Place)> = Vec::new();
    for run in manifest.runs.iter().filter(|_| whole) {
        reads.push((run.object.clone(), run.crc32, Place::Pages { first: run.first, end: run.end }));
    }
    if let Some(open) = &manifest.open_page {
        for chunk in &open.chunks {
            reads.push((chunk.object.clone(), chunk.crc32, Place::Chunk { page: open.page, from: chunk.from, to: chunk.to }));
        }
    }
    for (name, file) in manifest.files.iter().filter(|(name, _)| whole || !super::cache::is_columnar_file(name)) {
        reads.push((file.object.clone(), file.crc32, Place::File(name.clone())));
    }
    let mut restored = Restored::default();
    let mut gets = futures::stream::iter(reads.into_iter().map(|(object, crc32, place)| {
        let path = manifest::object_path(root, &object);
        async move { manifest::get_checked(store, &path, crc32).await.map(|bytes| (bytes, place)) }
    }))
    .buffered(CONCURRENT_GETS);
    // `buffered` keeps the order: the open page's chunks are written in order, the last
    // chunk's footer last.
    while let Some(result) = gets.next().await {
        let (bytes, place) = result?;
        restored.objects += 1;
        restored.bytes += bytes.len() as u64;
        place.write(dir, &bytes, page_size, pages_per_segment)?;
    }
    shoal_core::checkpoint::write_json_atomic(dir, LOCAL_STATE_FILE, &LocalState { epoch: manifest.epoch }).map_err(|e| e.to_string())?;
    Ok(restored)
}

/// Where an object's bytes go.
enum Place {
    /// Whole page images `[first, end)`.
    Pages { first: u64, end: u64 },
    /// Bytes `[from, to)` of a page's record area, then its footer.
    Chunk { page: u64, from: u64, to: u64 },
    /// A file of the table's directory.
    File(String),
}

impl Place {
    fn write(&self, dir: &FsPath, bytes: &Bytes, page_size: usize, pages_per_segment: u64) -> Result<(), String> {
        let write_at = |page: u64, offset_in_page: u64, data: &[u8]| -> Result<(), String> {
            let (name, offset) = shoal_core::table::page_location(page, page_size, pages_per_segment);
            let path = dir.join(name);
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            file.write_all_at(data, offset + offset_in_page).map_err(|e| format!("writing {}: {e}", path.display()))
        };
        match self {
            Self::Pages { first, end } => {
                let expected = (end - first) as usize * page_size;
                if bytes.len() != expected {
                    return Err(format!("a page run of pages {first}..{end} holds {} bytes, not {expected}", bytes.len()));
                }
                for (i, image) in bytes.chunks(page_size).enumerate() {
                    write_at(first + i as u64, 0, image)?;
                }
                Ok(())
            }
            Self::Chunk { page, from, to } => {
                let data = (to - from) as usize;
                if bytes.len() != data + PAGE_FOOTER_SIZE {
                    return Err(format!("a chunk of page {page} ({from}..{to}) holds {} bytes, not {}", bytes.len(), data + PAGE_FOOTER_SIZE));
                }
                write_at(*page, *from, &bytes[..data])?;
                write_at(*page, (page_size - PAGE_FOOTER_SIZE) as u64, &bytes[data..])
            }
            Self::File(name) => {
                // A manifest names files inside the table's directory only.
                let inside = std::path::Path::new(name).components().all(|c| matches!(c, std::path::Component::Normal(_)));
                if !inside || name.is_empty() {
                    return Err(format!("the manifest names a file {name:?} outside the table's directory; refused"));
                }
                let path = dir.join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
                }
                std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
            }
        }
    }
}

/// What [`restore_as`] wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cloned {
    /// The table written.
    pub table: String,
    /// Its manifest's number.
    pub seq: u64,
    /// Its owner epoch (a daemon's claim raises it).
    pub epoch: u64,
    /// Where its log ends (a log address).
    pub log_end: u64,
    /// Objects of the source the new manifest names without a copy.
    pub objects_shared: usize,
    /// Objects written (the page holding the cut, and the pages of its run before it).
    pub objects_written: usize,
}

/// Files a table cut at an address keeps: the others describe the log beyond the cut
/// (checkpoints, columnar files, backfill runs, transactions) and are rebuilt from the log.
const KEPT_AT_AN_ADDRESS: &[&str] = &["table.json", "withdrawn.bin"];

/// `shoal restore`: writes table `target`'s next manifest in the store as table `source`
/// is now, or as it was when its log ended at `until` (a log address: a batch's
/// `end_address` or `durable_address`). The new manifest names `source`'s objects (a clone
/// costs metadata); only the page holding the cut is written anew (with a footer proving the
/// bytes before the cut), and the pages before it in the same run object. With `target` =
/// `source` the table is rolled back in place: the owner epoch is raised, which fences the
/// daemon that owns it (stop it first; its next start opens the rolled-back table).
///
/// # Errors
/// No such table, a target that exists already (other than the source), an address beyond
/// what the store holds, the store's error, or a damaged object (named).
pub async fn restore_as(store: &dyn ObjectStore, root: &Path, source: &str, target: &str, until: Option<u64>, owner: &str) -> Result<Cloned, String> {
    let Some((_, from)) = manifest::latest(store, &manifest::table_prefix(root, source)).await? else {
        return Err(format!("the store holds no table {source:?}"));
    };
    if from.dropped {
        return Err(format!("table {source:?} was dropped"));
    }
    if source == target && until.is_none() {
        return Err("nothing to do: give --as NEW (a clone) or --until-address A (a point in time), or both".into());
    }
    let target_prefix = manifest::table_prefix(root, target);
    let (seq, epoch) = match manifest::latest(store, &target_prefix).await? {
        None => (0, 1),
        Some((seq, existing)) if existing.dropped || source == target => (seq + 1, existing.epoch + 1),
        Some(_) => return Err(format!("the store holds a table {target:?} already: choose another name, or drop it first")),
    };
    let mut next = Manifest { table: target.to_owned(), epoch, owner: owner.to_owned(), ..from.clone() };
    let mut puts: Vec<(String, Bytes)> = Vec::new();
    if let Some(address) = until {
        if address > from.log_end {
            return Err(format!("address {address} is beyond what the store holds of table {source:?} (its log ends at {})", from.log_end));
        }
        let page_size = from.page_size;
        let (cut_page, offset) = (address / page_size, (address % page_size) as usize);
        let folder = format!("tables/{target}/data/restore-e{epoch}-s{seq}");
        // The bytes of the page holding the cut, up to the cut.
        let mut page_bytes: Option<Vec<u8>> = None;
        next.runs.retain(|r| r.first <= cut_page);
        if let Some(run) = next.runs.pop_if(|r| r.end > cut_page) {
            let bytes = manifest::get_checked(store, &manifest::object_path(root, &run.object), run.crc32).await?;
            let ps = page_size as usize;
            if run.first < cut_page {
                let object = format!("{folder}/pages-{:012}-{cut_page:012}", run.first);
                let kept = bytes.slice(..(cut_page - run.first) as usize * ps);
                next.runs.push(PageRun { first: run.first, end: cut_page, object: object.clone(), crc32: crc32fast::hash(&kept) });
                puts.push((object, kept));
            }
            let at = (cut_page - run.first) as usize * ps;
            page_bytes = Some(bytes[at..at + offset].to_vec());
        } else if let Some(open) = from.open_page.as_ref().filter(|p| p.page == cut_page) {
            let mut bytes = Vec::new();
            for chunk in open.chunks.iter().filter(|c| (c.from as usize) < offset) {
                let got = manifest::get_checked(store, &manifest::object_path(root, &chunk.object), chunk.crc32).await?;
                bytes.extend_from_slice(&got[..(chunk.to - chunk.from) as usize]);
            }
            bytes.truncate(offset);
            page_bytes = Some(bytes);
        }
        next.open_page = None;
        if offset > 0 {
            let bytes = page_bytes.filter(|b| b.len() == offset).ok_or_else(|| format!("the store holds no bytes of page {cut_page} up to address {address}"))?;
            let mut object_bytes = bytes.clone();
            object_bytes.extend_from_slice(&shoal_core::table::PageSnapshot::footer_proving(cut_page, &bytes));
            let object_bytes = Bytes::from(object_bytes);
            let object = format!("{folder}/chunk-{cut_page:012}-0-{offset}");
            next.open_page = Some(OpenPage {
                page: cut_page,
                chunks: vec![Chunk { from: 0, to: offset as u64, object: object.clone(), crc32: crc32fast::hash(&object_bytes) }],
            });
            puts.push((object, object_bytes));
        }
        next.files.retain(|name, _| KEPT_AT_AN_ADDRESS.contains(&name.as_str()));
        next.log_end = address;
    }
    let written = puts.len();
    for (object, bytes) in puts {
        manifest::put(store, &manifest::object_path(root, &object), bytes).await?;
    }
    let shared = next.runs.len() + next.files.len() + next.open_page.as_ref().map_or(0, |p| p.chunks.len()) - written;
    match manifest::commit(store, &target_prefix, seq, &next).await {
        Ok(()) => Ok(Cloned { table: target.to_owned(), seq, epoch, log_end: next.log_end, objects_shared: shared, objects_written: written }),
        Err(e) => Err(format!("table {target:?} changed in the store meanwhile ({e}); run the restore again")),
    }
}
