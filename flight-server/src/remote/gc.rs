//! Garbage collection of the remote store (`shoal gc`): deletes the manifests no process
//! needs any more and the objects no kept manifest names.
//!
//! Objects are never rewritten (a round writes new names, then a manifest naming them), so
//! what a table no longer uses stays behind: page runs retention dropped, files replaced,
//! the objects of an upload round whose manifest lost its commit, a dropped table's objects.
//! A manifest is **kept** when it is its table's newest, or younger than `keep` (a daemon or
//! a restore may still read the objects it names). An object is **named** when a kept
//! manifest of any table under the store's prefix names it — a clone's manifest names its
//! source's objects (`shoal restore --as`), and a shard moved to another node names the old
//! node's (`../node-<id>/tables/...`), so every table of every node is read before anything
//! is deleted. Deleted: the manifests not kept, then the objects of `tables/<t>/data/` that no
//! kept manifest names and that are older than `keep` (younger ones may belong to an upload
//! whose manifest is not committed yet). Nothing else under the prefix is touched (the
//! cluster's table definitions). A kept manifest that cannot be read stops the collection
//! before anything is deleted.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use super::manifest;

/// Objects deleted at once.
const CONCURRENT_DELETES: usize = 8;

/// What [`collect`] did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Collected {
    /// Tables found (of every node).
    pub tables: usize,
    /// Manifests kept (each table's newest, and those younger than `keep`).
    pub manifests_kept: usize,
    /// Manifests deleted.
    pub manifests_deleted: usize,
    /// Data objects a kept manifest names.
    pub objects_named: usize,
    /// Data objects no kept manifest names, kept because they are younger than `keep`.
    pub objects_young: usize,
    /// Data objects deleted, and their bytes.
    pub objects_deleted: usize,
    /// Bytes of the data objects deleted.
    pub bytes_deleted: u64,
    /// Whether nothing was deleted (`--dry-run`): the counts say what would be.
    pub dry_run: bool,
}

/// Where an object is: a table's manifest or data object, under the root of the node
/// (or the store's prefix) whose table it is.
enum Place {
    Manifest { table: (Path, String), seq: u64 },
    Data,
    Other,
}

/// Where `location` is under `root`: `[node-<id>/]tables/<t>/manifest/<seq>.json` or
/// `[node-<id>/]tables/<t>/data/...`.
fn place(root: &Path, location: &Path) -> Place {
    let Some(parts) = location.prefix_match(root) else { return Place::Other };
    let parts: Vec<String> = parts.map(|p| p.as_ref().to_owned()).collect();
    let (table_root, rest) = match parts.first().map(String::as_str) {
        Some("tables") => (root.clone(), &parts[..]),
        Some(node) if node.starts_with("node-") && parts.get(1).is_some_and(|p| p == "tables") => (root.clone().join(node), &parts[1..]),
        _ => return Place::Other,
    };
    match rest {
        [_, table, kind, seq] if kind == "manifest" => match seq.strip_suffix(".json").and_then(|s| s.parse().ok()) {
            Some(seq) => Place::Manifest { table: (table_root, table.clone()), seq },
            None => Place::Other,
        },
        [_, _, kind, _, ..] if kind == "data" => Place::Data,
        _ => Place::Other,
    }
}

/// Collects the garbage of the store under `root` (the daemons' `[storage] remote` prefix,
/// not a node's `node-<id>/`): see the module's documentation. Logs its progress.
///
/// # Errors
/// A `root` that is a node's prefix; the store's error; a kept manifest that cannot be
/// read (named) — then nothing was deleted.
pub async fn collect(store: &dyn ObjectStore, root: &Path, keep: Duration, dry_run: bool) -> Result<Collected, String> {
    use futures::{StreamExt, TryStreamExt};
    if root.filename().is_some_and(|last| last.starts_with("node-")) {
        return Err(format!(
            "{root} is a cluster node's prefix: give the prefix the nodes were started with (its tables may be named by other nodes' manifests)"
        ));
    }
    let listed: Vec<ObjectMeta> = store.list(Some(root)).try_collect().await.map_err(|e| format!("listing {root}: {e}"))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let young = |meta: &ObjectMeta| {
        let modified = Duration::from_millis(u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0));
        now.saturating_sub(modified) < keep
    };
    let mut manifests: BTreeMap<(Path, String), Vec<(u64, &ObjectMeta)>> = BTreeMap::new();
    let mut data = Vec::new();
    for meta in &listed {
        match place(root, &meta.location) {
            Place::Manifest { table, seq } => manifests.entry(table).or_default().push((seq, meta)),
            Place::Data => data.push(meta),
            Place::Other => {}
        }
    }
    let mut collected = Collected { tables: manifests.len(), dry_run, ..Collected::default() };
    // Every kept manifest of every table is read before anything is deleted.
    let mut named: HashSet<Path> = HashSet::new();
    let mut unkept = Vec::new();
    for ((table_root, table), mut seqs) in manifests {
        seqs.sort_unstable_by_key(|(seq, _)| *seq);
        let newest = seqs.last().map(|(seq, _)| *seq);
        let prefix = manifest::table_prefix(&table_root, &table);
        for (seq, meta) in seqs {
            if Some(seq) != newest && !young(meta) {
                unkept.push(meta.location.clone());
                continue;
            }
            let kept = manifest::read(store, &prefix, seq).await.map_err(|e| format!("{e}; nothing was deleted"))?;
            collected.manifests_kept += 1;
            let objects = kept
                .runs
                .iter()
                .map(|r| &r.object)
                .chain(kept.open_page.iter().flat_map(|p| p.chunks.iter().map(|c| &c.object)))
                .chain(kept.files.values().map(|f| &f.object));
            named.extend(objects.map(|object| manifest::object_path(&table_root, object)));
        }
    }
    let mut garbage = Vec::new();
    for meta in data {
        if named.contains(&meta.location) {
            collected.objects_named += 1;
        } else if young(meta) {
            collected.objects_young += 1;
        } else {
            garbage.push(meta.location.clone());
            collected.objects_deleted += 1;
            collected.bytes_deleted += meta.size;
        }
    }
    collected.manifests_deleted = unkept.len();
    tracing::info!(
        tables = collected.tables,
        manifests_kept = collected.manifests_kept,
        manifests = unkept.len(),
        objects = garbage.len(),
        bytes = collected.bytes_deleted,
        dry_run,
        "remote store: garbage found"
    );
    if dry_run {
        return Ok(collected);
    }
    // The manifests first: a collection cut short leaves objects no manifest names (the
    // next one deletes them), never a manifest naming a deleted object.
    let total = unkept.len() + garbage.len();
    let mut deletes = futures::stream::iter(unkept.into_iter().chain(garbage).map(|location| async move {
        match store.delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(format!("deleting {location}: {e}")),
        }
    }))
    .buffered(CONCURRENT_DELETES);
    let mut done = 0usize;
    while let Some(result) = deletes.next().await {
        result?;
        done += 1;
        if done.is_multiple_of(1000) {
            tracing::info!(deleted = done, of = total, "remote store: collecting garbage");
        }
    }
    tracing::info!(deleted = done, bytes = collected.bytes_deleted, "remote store: garbage collected");
    Ok(collected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::manifest::{FileObject, Manifest, PageRun};
    use object_store::PutPayload;

    async fn put(store: &dyn ObjectStore, path: &str) {
        store.put(&Path::from(path), PutPayload::from_static(b"bytes")).await.unwrap();
    }

    async fn exists(store: &dyn ObjectStore, path: &str) -> bool {
        store.head(&Path::from(path)).await.is_ok()
    }

    fn manifest(table: &str, runs: &[&str], files: &[&str]) -> Manifest {
        Manifest {
            table: table.into(),
            epoch: 1,
            owner: "test".into(),
            page_size: 1 << 14,
            pages_per_segment: 16,
            runs: runs.iter().enumerate().map(|(i, o)| PageRun { first: i as u64, end: i as u64 + 1, object: (*o).into(), crc32: 0 }).collect(),
            files: files.iter().map(|o| ((*o).to_owned(), FileObject { object: (*o).into(), bytes: 5, crc32: 0 })).collect(),
            ..Manifest::default()
        }
    }

    #[tokio::test]
    async fn only_what_no_kept_manifest_of_any_node_names_is_deleted() {
        let store = object_store::memory::InMemory::new();
        let root = Path::from("p");
        // Node 1's table: two manifests, the older naming a run retention dropped since.
        let t1 = manifest::table_prefix(&Path::from("p/node-1"), "t");
        manifest::commit(&store, &t1, 0, &manifest("t", &["tables/t/data/a/pages-0", "tables/t/data/a/pages-1"], &[])).await.unwrap();
        manifest::commit(&store, &t1, 1, &manifest("t", &["tables/t/data/a/pages-1"], &["tables/t/data/b/f/table.json"])).await.unwrap();
        for object in ["pages-0", "pages-1"] {
            put(&store, &format!("p/node-1/tables/t/data/a/{object}")).await;
        }
        put(&store, "p/node-1/tables/t/data/b/f/table.json").await;
        put(&store, "p/node-1/tables/t/data/lost-round/pages-7").await;
        // A shard moved to node 2: its manifest names node 1's objects.
        let moved = manifest::table_prefix(&Path::from("p/node-2"), "m");
        manifest::commit(&store, &moved, 0, &manifest("m", &["../node-1/tables/m/data/x/pages-0"], &[])).await.unwrap();
        put(&store, "p/node-1/tables/m/data/x/pages-0").await;
        put(&store, "p/node-1/tables/m/data/x/pages-9").await;
        // A clone (no node) naming its source's objects.
        let clone = manifest::table_prefix(&root, "c");
        manifest::commit(&store, &clone, 0, &manifest("c", &["tables/s/data/y/pages-0"], &[])).await.unwrap();
        put(&store, "p/tables/s/data/y/pages-0").await;
        // Not a table's data: never touched.
        put(&store, "p/cluster/definitions.json").await;

        let refused = collect(&store, &Path::from("p/node-1"), Duration::ZERO, false).await.unwrap_err();
        assert!(refused.contains("is a cluster node's prefix"), "{refused}");

        let dry = collect(&store, &root, Duration::ZERO, true).await.unwrap();
        assert_eq!((dry.manifests_deleted, dry.objects_deleted), (1, 3), "{dry:?}");
        assert!(exists(&store, "p/node-1/tables/t/data/a/pages-0").await, "a dry run deletes nothing");

        // Young objects and manifests stay.
        let young = collect(&store, &root, Duration::from_secs(3600), false).await.unwrap();
        assert_eq!((young.manifests_deleted, young.objects_deleted, young.objects_young), (0, 0, 2), "{young:?}");

        let done = collect(&store, &root, Duration::ZERO, false).await.unwrap();
        assert_eq!(done.tables, 3);
        assert_eq!((done.manifests_kept, done.manifests_deleted, done.objects_named, done.objects_deleted), (3, 1, 4, 3), "{done:?}");
        for gone in ["p/node-1/tables/t/data/a/pages-0", "p/node-1/tables/t/data/lost-round/pages-7", "p/node-1/tables/m/data/x/pages-9"] {
            assert!(!exists(&store, gone).await, "{gone} is garbage");
        }
        for kept in [
            "p/node-1/tables/t/data/a/pages-1",
            "p/node-1/tables/t/data/b/f/table.json",
            "p/node-1/tables/m/data/x/pages-0",
            "p/tables/s/data/y/pages-0",
            "p/cluster/definitions.json",
        ] {
            assert!(exists(&store, kept).await, "{kept} is named");
        }
        assert!(manifest::read(&store, &t1, 0).await.is_err() && manifest::read(&store, &t1, 1).await.is_ok());

        // A kept manifest that cannot be read stops the collection before any delete.
        store.put(&Path::from("p/tables/c/manifest/00000000000000000001.json"), PutPayload::from_static(b"{")).await.unwrap();
        put(&store, "p/tables/s/data/z/pages-5").await;
        assert!(collect(&store, &root, Duration::ZERO, false).await.unwrap_err().contains("nothing was deleted"));
        assert!(exists(&store, "p/tables/s/data/z/pages-5").await);
    }
}
