//! What the engine offers a process that mirrors a table into a remote store (the daemon's
//! `remote/`, issue 47): durability `remote` (acknowledged once the mirror says the bytes are
//! in the store), page snapshots that a copy of the log is made of, fencing, and the store's
//! failures turned into refusals.

mod common;

use std::time::Duration;

use shoal_core::scan::ScanRequest;
use shoal_core::table::{page_location, DurabilityPolicy, Table, TableConfig};
use shoal_core::{Error, FieldPath, LogAddress};

fn records(from: usize, to: usize) -> Vec<String> {
    (from..to).map(|i| format!(r#"{{"id": {i}, "type": "T{}", "pad": "{}"}}"#, i % 3, "x".repeat(i % 200))).collect()
}

fn ingest(table: &Table, lines: &[String]) -> shoal_core::Result<LogAddress> {
    let batch: Vec<&[u8]> = lines.iter().map(String::as_bytes).collect();
    Ok(table.ingest(&batch)?.end_address)
}

fn ids(table: &Table) -> Vec<i64> {
    let request = ScanRequest { columns: vec![FieldPath::parse("id").unwrap()], ..ScanRequest::default() };
    let mut ids: Vec<i64> = table
        .scan(&request)
        .unwrap()
        .0
        .iter()
        .flat_map(|b| {
            let column = arrow_cast::cast(b.column(0), &arrow_schema::DataType::Int64).unwrap();
            column.as_any().downcast_ref::<arrow_array::Int64Array>().unwrap().values().to_vec()
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn remote_table(dir: &std::path::Path) -> std::sync::Arc<Table> {
    let mut config = TableConfig::on_disk(dir).with_durability(DurabilityPolicy::Remote { interval_ms: 2 });
    config.log.page_size_bits = 14;
    Table::create(config).unwrap()
}

#[test]
fn durability_remote_acknowledges_only_what_the_mirror_reports_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let table = remote_table(dir.path());
    let end = ingest(&table, &records(0, 300)).unwrap();
    // Flushed locally (the interval's flushes), but nothing is in the store yet.
    assert!(table.log().wait_flushed(end, Duration::from_secs(10)) >= end);
    assert_eq!(table.durable_address(), LogAddress::ZERO);
    assert!(table.wait_durable(end, Duration::from_millis(100)).is_err());
    assert_eq!(table.stats().remote_lag_bytes, None, "no mirror yet: no lag reported");
    table.advance_remote_durable(LogAddress::new(end.get() / 2));
    assert_eq!(table.durable_address(), LogAddress::new(end.get() / 2));
    assert_eq!(table.stats().remote_lag_bytes, Some(table.tail_address().get() - end.get() / 2));
    table.advance_remote_durable(end);
    assert_eq!(table.wait_durable(end, Duration::from_secs(1)).unwrap(), end);
    // Never back.
    table.advance_remote_durable(LogAddress::ZERO);
    assert_eq!(table.remote_durable_address(), end);
}

#[test]
fn a_fenced_table_refuses_batches_and_fails_waits_but_serves_reads() {
    let dir = tempfile::tempdir().unwrap();
    let table = remote_table(dir.path());
    let end = ingest(&table, &records(0, 50)).unwrap();
    table.advance_remote_durable(end);
    let more = ingest(&table, &records(50, 60)).unwrap();
    table.fence("fenced by epoch 7: another process owns this table now");
    table.fence("a second reason is not kept");
    match table.wait_durable(more, Duration::from_secs(5)) {
        Err(Error::Fenced(reason)) => assert!(reason.starts_with("fenced by epoch 7"), "{reason}"),
        other => panic!("expected a fence, got {other:?}"),
    }
    match ingest(&table, &records(60, 70)) {
        Err(Error::Fenced(reason)) => assert_eq!(reason, "fenced by epoch 7: another process owns this table now"),
        other => panic!("expected a fence, got {other:?}"),
    }
    assert_eq!(ids(&table), (0..60).collect::<Vec<_>>());
}

#[test]
fn a_failing_store_refuses_batches_after_the_grace_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let table = remote_table(dir.path());
    let end = ingest(&table, &records(0, 20)).unwrap();
    table.advance_remote_durable(end);
    table.set_remote_failure(Some("writing s3://b/t: connection refused".into()));
    // Within the grace: batches are taken (the store may come back at the next round).
    ingest(&table, &records(20, 30)).unwrap();
    std::thread::sleep(shoal_core::table::REMOTE_FAILURE_GRACE + Duration::from_millis(100));
    match ingest(&table, &records(30, 40)) {
        Err(e @ Error::RemoteUnavailable(_)) => assert!(e.to_string().contains("connection refused"), "{e}"),
        other => panic!("expected the store's failure, got {other:?}"),
    }
    table.set_remote_failure(None);
    ingest(&table, &records(40, 50)).unwrap();
}

#[test]
fn page_snapshots_written_back_at_their_places_recover_the_table() {
    let source = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(source.path()).with_durability(DurabilityPolicy::GroupCommit { interval_ms: 1 });
    config.log.page_size_bits = 14;
    let table = Table::create(config.clone()).unwrap();
    let mut expected = Vec::new();
    let mut middle = None;
    for round in 0..6 {
        let lines = records(round * 40, round * 40 + 40);
        let end = ingest(&table, &lines).unwrap();
        table.wait_durable(end, Duration::from_secs(10)).unwrap();
        expected.extend((round * 40) as i64..(round * 40 + 40) as i64);
        if round == 2 {
            middle = Some((end, expected.clone()));
        }
    }
    let flushed = table.flushed_address();
    let last = table.page_of(flushed);
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(source.path().join("table.json"), copy.path().join("table.json")).unwrap();
    let page_size = 1usize << 14;
    let mut closed = 0;
    for page in 0..=last {
        let Some(snapshot) = table.snapshot_page(page).unwrap() else { continue };
        assert_eq!(snapshot.image.len(), page_size);
        closed += usize::from(snapshot.is_closed());
        if page < last {
            assert!(snapshot.is_closed(), "page {page} is below the open page");
        }
        let (name, offset) = page_location(page, page_size, config.log.pages_per_segment);
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(copy.path().join(name)).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &snapshot.image, offset).unwrap();
    }
    assert!(closed >= 2, "the workload spans several pages ({closed} closed)");
    // The copy is the table as of the snapshots: every acknowledged record, once.
    let (copied, _) = Table::open(TableConfig::on_disk(copy.path())).unwrap();
    assert_eq!(ids(&copied), expected);
    // Cut at a batch's end (`shoal restore --until-address`): the pages before it whole, its
    // page's bytes before it with a footer proving just them.
    let (cut, expected_then) = middle.unwrap();
    let cut_page = table.page_of(cut);
    let cut_copy = tempfile::tempdir().unwrap();
    std::fs::copy(source.path().join("table.json"), cut_copy.path().join("table.json")).unwrap();
    for page in 0..=cut_page {
        let Some(snapshot) = table.snapshot_page(page).unwrap() else { continue };
        let mut image = snapshot.image.clone();
        if page == cut_page {
            let proven = (cut.get() % page_size as u64) as usize;
            image[proven..].fill(0);
            let footer = shoal_core::table::PageSnapshot::footer_proving(page, &image[..proven]);
            image[page_size - footer.len()..].copy_from_slice(&footer);
        }
        let (name, offset) = page_location(page, page_size, config.log.pages_per_segment);
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(cut_copy.path().join(name)).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &image, offset).unwrap();
    }
    let (cut_table, _) = Table::open(TableConfig::on_disk(cut_copy.path())).unwrap();
    assert_eq!(ids(&cut_table), expected_then);
    // A page never written has no snapshot.
    assert_eq!(table.snapshot_page(last + 5).unwrap(), None);
}

/// Closed page images held in memory: the remote copy of a log, as a page source.
struct Images {
    pages: std::collections::HashMap<u64, Vec<u8>>,
    fetches: std::sync::atomic::AtomicU64,
    failing: std::sync::atomic::AtomicBool,
    damaged: std::sync::atomic::AtomicBool,
}

impl shoal_core::table::PageSource for Images {
    fn fetch_page(&self, page: u64, buf: &mut [u8]) -> Result<bool, String> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.failing.load(Relaxed) {
            return Err("the store is down".into());
        }
        let Some(image) = self.pages.get(&page) else {
            return Ok(false);
        };
        self.fetches.fetch_add(1, Relaxed);
        buf.copy_from_slice(image);
        if self.damaged.load(Relaxed) {
            buf[100] ^= 1;
        }
        Ok(true)
    }
}

#[test]
fn a_log_with_a_page_source_fetches_missing_pages_evicts_them_and_never_serves_a_damaged_one() {
    use std::sync::atomic::Ordering::Relaxed;
    let source = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(source.path()).with_durability(DurabilityPolicy::GroupCommit { interval_ms: 1 });
    config.log.page_size_bits = 14;
    let table = Table::create(config.clone()).unwrap();
    let end = ingest(&table, &records(0, 1500)).unwrap();
    table.wait_durable(end, Duration::from_secs(10)).unwrap();
    let last = table.page_of(table.flushed_address());
    assert!(last >= 8, "the workload spans pages ({last})");
    // The store holds the closed pages; the copy holds the metadata and the open page only.
    let mut pages = std::collections::HashMap::new();
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(source.path().join("table.json"), copy.path().join("table.json")).unwrap();
    for page in 0..=last {
        let snapshot = table.snapshot_page(page).unwrap().unwrap();
        if snapshot.is_closed() {
            pages.insert(page, snapshot.image);
        } else {
            let (name, offset) = page_location(page, 1 << 14, config.log.pages_per_segment);
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(copy.path().join(name)).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, &snapshot.image, offset).unwrap();
        }
    }
    let images = std::sync::Arc::new(Images { pages, fetches: 0.into(), failing: false.into(), damaged: false.into() });
    let open = |images: &std::sync::Arc<Images>| {
        let mut config = TableConfig::on_disk(copy.path());
        config.log.memory_budget_bytes = 4 << 14; // reads below the ring's four pages go to the files
        config.log.page_source = Some(shoal_core::table::PageSourceRef(images.clone()));
        Table::open(config)
    };

    // A store that fails while recovery needs it: the open fails, it does not cut the log.
    images.failing.store(true, Relaxed);
    let refused = open(&images).map(|_| ()).unwrap_err();
    assert!(matches!(refused, Error::RemoteUnavailable(_)), "{refused}");
    images.failing.store(false, Relaxed);
    // A damaged page from the store is refused by its footer's checksum.
    images.damaged.store(true, Relaxed);
    let damaged = open(&images).map(|_| ()).unwrap_err();
    assert!(matches!(damaged, Error::CorruptPage { .. }), "{damaged}");
    images.damaged.store(false, Relaxed);

    let (copied, _) = open(&images).unwrap();
    assert_eq!(ids(&copied), (0..1500).collect::<Vec<i64>>());
    drop(copied);
    // A bit flipped in a page cached here: recovery takes the source's copy, cuts nothing.
    let (name, offset) = page_location(3, 1 << 14, config.log.pages_per_segment);
    let segment = std::fs::OpenOptions::new().read(true).write(true).open(copy.path().join(name)).unwrap();
    let mut byte = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&segment, &mut byte, offset + 200).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&segment, &[byte[0] ^ 0x10], offset + 200).unwrap();
    let (copied, report) = open(&images).unwrap();
    assert_eq!(report.corrupt_page, None, "{report:?}");
    assert_eq!(ids(&copied), (0..1500).collect::<Vec<i64>>());
    assert!(images.fetches.load(Relaxed) > 0);
    let disk = copied.log_disk_bytes().unwrap();
    // Nothing is evicted before the store is said to hold it.
    assert_eq!(copied.evict_cached_pages(u64::MAX).unwrap(), 0);
    // The store holds the pages before the last (recovery closed the last one here).
    let held = LogAddress::new(last << 14);
    copied.advance_remote_durable(held);
    // The hand passes every page once (clearing the reads' reference bits), then takes them.
    let evicted = copied.evict_cached_pages(u64::MAX).unwrap();
    assert_eq!(evicted, last, "every page the store holds is evicted");
    assert!(copied.log_disk_bytes().unwrap() < disk / 2, "{} of {disk} bytes left", copied.log_disk_bytes().unwrap());
    let before = images.fetches.load(Relaxed);
    assert_eq!(ids(&copied), (0..1500).collect::<Vec<i64>>(), "evicted pages are fetched again");
    assert!(images.fetches.load(Relaxed) > before);
    let stats = copied.stats().page_cache.unwrap();
    assert_eq!(stats.evicted_pages, evicted);
    // A bit flipped in a cached page while the table is open: the scan reads the source's
    // copy and writes it back here.
    let (name, offset) = page_location(2, 1 << 14, config.log.pages_per_segment);
    let segment = std::fs::OpenOptions::new().read(true).write(true).open(copy.path().join(name)).unwrap();
    let mut byte = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&segment, &mut byte, offset + 300).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&segment, &[byte[0] ^ 0x04], offset + 300).unwrap();
    assert_eq!(ids(&copied), (0..1500).collect::<Vec<i64>>(), "a page damaged here is read from the source");
    let mut repaired = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&segment, &mut repaired, offset + 300).unwrap();
    assert_eq!(repaired, byte, "the source's copy is written back");
    // A store that fails now fails the read, naming it; it never answers with less.
    copied.evict_cached_pages(u64::MAX).unwrap();
    images.failing.store(true, Relaxed);
    let request = ScanRequest { columns: vec![shoal_core::FieldPath::parse("id").unwrap()], ..ScanRequest::default() };
    let failed = copied.scan(&request).map(|_| ()).unwrap_err();
    assert!(failed.to_string().contains("the store is down"), "{failed}");
}

#[test]
fn a_table_closed_to_writes_refuses_new_batches_whole_and_opens_again() {
    let dir = tempfile::tempdir().unwrap();
    let table = remote_table(dir.path());
    table.advance_remote_durable(LogAddress::new(u64::MAX >> 1));
    ingest(&table, &records(0, 10)).unwrap();
    table.close_to_writes(Some("moving to node 2".into()));
    let refused = ingest(&table, &records(10, 20)).unwrap_err();
    assert!(matches!(&refused, Error::Moving(reason) if reason == "moving to node 2"), "{refused}");
    assert_eq!(ids(&table), (0..10).collect::<Vec<i64>>(), "a refused batch writes nothing");
    assert!(matches!(table.hold_writable().map(|_| ()), Err(Error::Moving(_))), "a write outside batches is refused too");
    table.close_to_writes(None);
    ingest(&table, &records(10, 20)).unwrap();
    assert_eq!(ids(&table), (0..20).collect::<Vec<i64>>());

    // Closing waits for a write outside batches under way (a transaction's staging), which
    // may itself ingest: it is whole in the files a hand-over reads next, or refused.
    let (held, released) = (std::sync::Barrier::new(2), std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let writing = table.hold_writable().unwrap();
            held.wait();
            std::thread::sleep(Duration::from_millis(200));
            ingest(&table, &records(20, 30)).unwrap();
            released.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(writing);
        });
        held.wait();
        table.close_to_writes(Some("moving to node 3".into()));
        assert!(released.load(std::sync::atomic::Ordering::SeqCst), "closing returned while a write held the table");
    });
    assert_eq!(ids(&table), (0..30).collect::<Vec<i64>>());
    assert!(matches!(ingest(&table, &records(30, 31)), Err(Error::Moving(_))));
}

/// A remote copy of a table's columnar files (and of none of its pages), as a page source.
struct ColumnarCopies {
    files: std::collections::HashMap<String, Vec<u8>>,
    fetches: std::sync::atomic::AtomicU64,
    damaged: std::sync::atomic::AtomicBool,
    failing: std::sync::atomic::AtomicBool,
}

impl shoal_core::table::PageSource for ColumnarCopies {
    fn fetch_page(&self, _: u64, _: &mut [u8]) -> Result<bool, String> {
        Ok(false)
    }

    fn fetch_columnar_file(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.failing.load(Relaxed) {
            return Err("the store is down".into());
        }
        let Some(bytes) = self.files.get(name) else { return Ok(None) };
        self.fetches.fetch_add(1, Relaxed);
        let mut bytes = bytes.clone();
        if self.damaged.load(Relaxed) {
            let middle = bytes.len() / 2;
            bytes[middle] ^= 1;
        }
        Ok(Some(bytes))
    }

    fn holds_columnar_file(&self, name: &str, crc32: u32) -> bool {
        self.files.get(name).is_some_and(|bytes| crc32fast::hash(bytes) == crc32)
    }
}

#[test]
fn columnar_files_of_a_remote_copy_are_fetched_when_read_evicted_and_never_served_damaged() {
    use std::sync::atomic::Ordering::Relaxed;
    let source = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(source.path()).with_durability(DurabilityPolicy::GroupCommit { interval_ms: 1 });
    config.log.page_size_bits = 14;
    // No decoded columns kept: every scan reads the files.
    config.columnar = shoal_core::columnar::ColumnarConfig { file_log_bytes: 4 << 14, row_group_rows: 100, idle_ms: 0, cache_bytes: 0, ..Default::default() };
    let table = Table::create(config.clone()).unwrap();
    ingest(&table, &records(0, 3000)).unwrap();
    table.flush().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while table.stats().columnar.backlog_bytes > 0 || table.stats().columnar.files == 0 {
        assert!(std::time::Instant::now() < deadline, "compaction did not catch up: {:?}", table.stats().columnar);
        std::thread::sleep(Duration::from_millis(20));
    }
    let files = table.columnar_file_names();
    assert!(files.len() >= 3, "{files:?}");
    drop(table);

    // A copy of the table whose columnar files are only in the "store".
    let copy = tempfile::tempdir().unwrap();
    let mut stored = std::collections::HashMap::new();
    for entry in walk(source.path()) {
        let relative = entry.strip_prefix(source.path()).unwrap().to_owned();
        let target = copy.path().join(&relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        let name = relative.to_string_lossy().into_owned();
        match name.strip_prefix("columnar/").filter(|n| n.ends_with(".parquet")) {
            Some(file) => drop(stored.insert(file.to_owned(), std::fs::read(&entry).unwrap())),
            None => drop(std::fs::copy(&entry, &target).unwrap()),
        }
    }
    assert_eq!(stored.len(), files.len());
    let copies = std::sync::Arc::new(ColumnarCopies { files: stored, fetches: 0.into(), damaged: false.into(), failing: true.into() });
    let mut opened = TableConfig::on_disk(copy.path());
    opened.log.page_source = Some(shoal_core::table::PageSourceRef(copies.clone()));
    // A store that fails while the open needs a file: the open fails, nothing is compacted again.
    let refused = Table::open(opened.clone()).map(|_| ()).unwrap_err();
    assert!(matches!(refused, Error::RemoteUnavailable(_)), "{refused}");
    copies.failing.store(false, Relaxed);
    let (table, _) = Table::open(opened).unwrap();
    let parquet_here = || std::fs::read_dir(copy.path().join("columnar")).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".parquet")).count();
    // The open read each file's footer from the store and kept none of them here.
    assert_eq!(table.columnar_file_names(), files, "the files are the table's, not compacted again");
    assert_eq!(parquet_here(), 0);
    assert_eq!(copies.fetches.load(Relaxed), files.len() as u64);

    let expected: Vec<i64> = (0..3000).collect();
    assert_eq!(ids(&table), expected);
    assert_eq!(parquet_here(), files.len(), "a scan fetched the files it read");
    let cache = table.stats().page_cache.unwrap();
    assert_eq!(cache.fetched_files, 2 * files.len() as u64, "once at the open, once read: {cache:?}");
    assert!(cache.columnar_disk_bytes > 0 && cache.columnar_disk_bytes == table.columnar_disk_bytes(), "{cache:?}");

    // Evicted, then fetched again when read.
    let evicted = table.evict_columnar_files(u64::MAX).unwrap();
    assert_eq!((evicted.files, parquet_here(), table.columnar_disk_bytes()), (files.len() as u64, 0, 0));
    assert_eq!(ids(&table), expected);
    assert_eq!(table.stats().page_cache.unwrap().fetched_files, 3 * files.len() as u64);
    // Eviction takes the least recently read first, and stops once enough is freed.
    let one = table.evict_columnar_files(1).unwrap();
    assert_eq!(one.files, 1);

    // A damaged copy in the store is refused by the manifest's checksum: never decoded.
    table.evict_columnar_files(u64::MAX).unwrap();
    copies.damaged.store(true, Relaxed);
    let request = ScanRequest { columns: vec![FieldPath::parse("id").unwrap()], ..ScanRequest::default() };
    let refused = table.scan(&request).map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("as fetched from the remote copy: size or checksum differs"), "{refused}");
    assert_eq!(parquet_here(), 0, "nothing damaged is written here");
    copies.damaged.store(false, Relaxed);
    assert_eq!(ids(&table), expected);
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn pages_evicted_and_fetched_again_do_not_make_a_sealed_segment_look_new() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TableConfig::on_disk(dir.path()).with_durability(DurabilityPolicy::GroupCommit { interval_ms: 1 });
    config.log.page_size_bits = 14;
    config.log.pages_per_segment = 4;
    config.log.memory_budget_bytes = 4 << 14;
    let table = Table::create(config.clone()).unwrap();
    let end = ingest(&table, &records(0, 1500)).unwrap();
    table.wait_durable(end, Duration::from_secs(10)).unwrap();
    let last = table.page_of(table.flushed_address());
    assert!(last >= 8, "the workload spans segments ({last} pages)");
    let pages = (0..last).map(|page| (page, table.snapshot_page(page).unwrap().unwrap().image)).collect();
    drop(table);
    // Segment 0 last written two days ago.
    let (name, _) = page_location(0, 1 << 14, 4);
    let two_days_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 86_400);
    let set_age = |when| std::fs::File::options().write(true).open(dir.path().join(&name)).unwrap().set_modified(when).unwrap();
    set_age(two_days_ago);
    let images = std::sync::Arc::new(Images { pages, fetches: 0.into(), failing: false.into(), damaged: false.into() });
    let mut opened = TableConfig::on_disk(dir.path());
    opened.log.page_source = Some(shoal_core::table::PageSourceRef(images.clone()));
    let (table, _) = Table::open(opened).unwrap();
    table.advance_remote_durable(LogAddress::new(last << 14));
    assert!(table.evict_cached_pages(u64::MAX).unwrap() >= 4);
    assert_eq!(ids(&table), (0..1500).collect::<Vec<i64>>(), "evicted pages are fetched again");
    assert!(images.fetches.load(std::sync::atomic::Ordering::Relaxed) >= 4);
    let modified = std::fs::metadata(dir.path().join(&name)).unwrap().modified().unwrap();
    assert_eq!(modified, two_days_ago, "the segment is as old as its last append");
}
