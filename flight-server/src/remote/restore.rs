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

use super::manifest::{self, Manifest};
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
pub async fn restore(store: &dyn ObjectStore, prefix: &Path, manifest: &Manifest, dir: &FsPath) -> Result<Restored, String> {
    use futures::StreamExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let page_size = usize::try_from(manifest.page_size).map_err(|e| e.to_string())?;
    let pages_per_segment = manifest.pages_per_segment.max(1);
    // What to write where: (object, crc, how to place it).
    let mut reads: Vec<(String, u32, Place)> = Vec::new();
    for run in &manifest.runs {
        reads.push((run.object.clone(), run.crc32, Place::Pages { first: run.first, end: run.end }));
    }
    if let Some(open) = &manifest.open_page {
        for chunk in &open.chunks {
            reads.push((chunk.object.clone(), chunk.crc32, Place::Chunk { page: open.page, from: chunk.from, to: chunk.to }));
        }
    }
    for (name, file) in &manifest.files {
        reads.push((file.object.clone(), file.crc32, Place::File(name.clone())));
    }
    let mut restored = Restored::default();
    let mut gets = futures::stream::iter(reads.into_iter().map(|(object, crc32, place)| {
        let path = manifest::object_path(prefix, &object);
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
