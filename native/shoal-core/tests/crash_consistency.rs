//! Crash consistency of the log's segment files, deterministically: a fault-injecting
//! device ([`CrashPoint`], the model of redb's `crash_consistency` tests) stops the
//! process's writes after every prefix that matters — at each write's first byte, one
//! byte in, half-way, one byte short of its end, and at every 4 KiB boundary inside it —
//! of a workload of acknowledged batches (`fsync` durability: each batch is acknowledged
//! once its group commit of the open page returned), and after each simulated crash
//! recovery must hold every acknowledged record exactly once and nothing that was never
//! sent, index scans must agree with full scans, and the recovered table must take new
//! records and recover them again (the page recovery cut is itself appended to, never
//! rewritten in place).
//!
//! Before the commit slots of `log/device.rs`, a group commit rewrote the whole open
//! page with its footer: a crash in that write left new bytes under the old footer and
//! recovery dropped the page with every acknowledged record on it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use shoal_core::log::CrashPoint;
use shoal_core::psf::PsfSpec;
use shoal_core::table::{DurabilityPolicy, Table, TableConfig};
use shoal_core::FieldPath;

mod common;

/// Batches of the workload; every fourth is not waited for (the next group commit
/// carries it), so that commits of several batches are cut too.
const BATCHES: u64 = 36;

fn config(dir: &Path) -> TableConfig {
    let mut config = TableConfig::on_disk(dir).with_durability(DurabilityPolicy::Fsync);
    config.log.page_size_bits = 12;
    config.log.memory_budget_bytes = 16 << 12;
    config.log.pages_per_segment = 4;
    config.index_size_bits = 10;
    config.columnar.enabled = false;
    config
}

/// Record `id`: a few hundred bytes, of one of three types.
fn record(id: u64) -> String {
    let pad = "x".repeat(((id * 37) % 300) as usize);
    format!(r#"{{"id":"r{id:05}","type":"T{}","pad":"{pad}"}}"#, id % 3)
}

/// The workload against `table`, whose device crashes at `crash`. Returns (records sent,
/// records acknowledged).
fn run_workload(table: &Table, crash: &CrashPoint) -> (u64, u64) {
    let (mut sent, mut acknowledged) = (0u64, 0u64);
    for batch in 0..BATCHES {
        let count = 1 + (batch * 7) % 4;
        let records: Vec<String> = (sent..sent + count).map(record).collect();
        let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
        if table.ingest(&refs).is_err() {
            break;
        }
        sent += count;
        if batch % 4 == 3 {
            continue;
        }
        let end = table.log().tail_address();
        match table.wait_durable_while(end, Duration::from_secs(20), &|| !crash.crashed()) {
            Ok(_) => acknowledged = sent,
            Err(_) => break,
        }
    }
    (sent, acknowledged)
}

/// The ids in the table, sorted, and whether the index agrees with a full scan.
fn ids(table: &Table) -> Vec<u64> {
    if table.schema().arrow_field(&FieldPath::parse("id").expect("path")).is_none() {
        return Vec::new(); // no record yet: the column is unknown
    }
    for ty in ["T0", "T1", "T2"] {
        let (planned, full) = common::planned_and_full_ids(table, &format!("type = '{ty}'"));
        assert_eq!(planned, full, "index scan and full scan differ for type = {ty}");
    }
    let (_, all) = common::planned_and_full_ids(table, "id LIKE 'r%'");
    let mut ids: Vec<u64> = all.iter().map(|id| id[1..].parse().expect("id")).collect();
    ids.sort_unstable();
    ids
}

/// A table with the workload's PSF, its device armed with `crash`.
fn create(dir: &Path, crash: &Arc<CrashPoint>) -> Arc<Table> {
    let table = Table::create(config(dir)).expect("create");
    table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).expect("register");
    table.log().arm_crash(Arc::clone(crash));
    table
}

/// One crash at `budget` bytes: the workload, the crash, recovery and its checks.
/// Returns the number of writes the device admitted.
fn crash_and_recover(root: &Path, budget: u64) -> usize {
    let dir = tempfile::tempdir_in(root).expect("dir");
    let crash = CrashPoint::after_bytes(budget);
    let table = create(dir.path(), &crash);
    let (sent, acknowledged) = run_workload(&table, &crash);
    // The process dies: nothing more reaches the files (its threads end, every write fails).
    let log = Arc::clone(table.log());
    drop(table);
    log.shutdown();
    drop(log);

    let (table, report) = Table::open(config(dir.path())).expect("recovery");
    let present = ids(&table);
    let end = present.len() as u64;
    let context = || format!("crash after {budget} bytes: sent {sent}, acknowledged {acknowledged}, {report:?}");
    assert!(present.iter().copied().eq(0..end), "ids present are not 0..{end} exactly once; {}", context());
    assert!(end >= acknowledged, "acknowledged records lost; {}", context());
    assert!(end <= sent, "records that were never sent; {}", context());

    // The recovered log takes new records and recovers them too.
    let more: Vec<String> = (end..end + 5).map(record).collect();
    let refs: Vec<&[u8]> = more.iter().map(String::as_bytes).collect();
    table.ingest(&refs).expect("ingest after recovery");
    table.wait_durable(table.log().tail_address(), Duration::from_secs(20)).expect("durable after recovery");
    drop(table);
    let (table, report) = Table::open(config(dir.path())).expect("second recovery");
    let present = ids(&table);
    assert!(present.iter().copied().eq(0..end + 5), "after the second recovery: {present:?}; {report:?}");
    table.close().expect("close");
    crash.writes().len()
}

/// The budgets that cut each write of `writes` (lengths, in order) at its start, one
/// byte in, half-way, one byte short of its end and at every 4 KiB boundary inside it.
fn budgets(writes: &[usize]) -> Vec<u64> {
    let mut budgets = Vec::new();
    let mut start = 0u64;
    for &len in writes {
        let len = len as u64;
        let mut cuts = vec![0, 1, len / 2, len.saturating_sub(1)];
        cuts.extend((4096..len).step_by(4096));
        budgets.extend(cuts.into_iter().filter(|&c| c < len.max(1)).map(|c| start + c));
        start += len;
    }
    budgets.push(start);
    budgets.sort_unstable();
    budgets.dedup();
    budgets
}

#[test]
fn crash_at_every_write_prefix_keeps_every_acknowledged_record_exactly_once() {
    // A RAM file system where there is one: the model is a process crash, so syncs only cost time.
    let shm = Path::new("/dev/shm");
    let root = tempfile::tempdir_in(if shm.is_dir() { shm } else { Path::new(".") }).expect("root");
    let writes = {
        let dir = tempfile::tempdir_in(root.path()).expect("dir");
        let crash = CrashPoint::after_bytes(u64::MAX);
        let table = create(dir.path(), &crash);
        let (sent, acknowledged) = run_workload(&table, &crash);
        assert!(acknowledged > 0 && acknowledged < sent, "sent {sent}, acknowledged {acknowledged}");
        table.close().expect("close");
        crash.writes()
    };
    // A page's first write carries its whole footer (16 bytes), later commits one slot (8).
    let pages_written = writes.iter().filter(|&&len| len == 16).count();
    assert!(pages_written >= 4 && writes.len() >= 40, "the workload is too small to test much: {writes:?}");
    let budgets = budgets(&writes);
    // Each crash point is independent: as many at once as there are cores.
    let workers = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let (budgets, root) = (&budgets, root.path());
            scope.spawn(move || {
                for &budget in budgets.iter().skip(worker).step_by(workers) {
                    crash_and_recover(root, budget);
                }
            });
        }
    });
    eprintln!("{} crash points over {} writes of the segment files", budgets.len(), writes.len());
}

/// Recovery closes the page that was open by appending a filler and a commit slot; the
/// slot's checksum must be over the bytes as stored, not as read back with withdrawn
/// records masked — else the page stays proven only in part and the next recovery cuts
/// every page written after the first one.
#[test]
fn recovery_closes_an_open_page_holding_withdrawn_records_and_keeps_the_pages_after_it() {
    let dir = tempfile::tempdir().expect("dir");
    let crash = CrashPoint::after_bytes(u64::MAX);
    let table = create(dir.path(), &crash);
    let durable = |table: &Table| {
        table.wait_durable(table.log().tail_address(), Duration::from_secs(20)).expect("durable");
    };
    let put = |table: &Table, ids: std::ops::Range<u64>| {
        let records: Vec<String> = ids.map(record).collect();
        let refs: Vec<&[u8]> = records.iter().map(String::as_bytes).collect();
        table.ingest(&refs).expect("ingest")
    };
    put(&table, 0..3);
    durable(&table);
    // A batch written to the open page, then withdrawn (as a batch that failed to become
    // durable is), then one more batch after it.
    let withdrawn = put(&table, 3..5);
    durable(&table);
    let _ = table.withdraw(&withdrawn.addresses);
    put(&table, 5..6);
    durable(&table);
    let kill = |table: Arc<Table>| {
        let log = Arc::clone(table.log());
        drop(table);
        log.shutdown();
    };
    kill(table);

    let (table, _) = Table::open(config(dir.path())).expect("first recovery");
    assert_eq!(ids(&table), vec![0, 1, 2, 5]);
    // Enough records to fill several pages after the one recovery closed.
    put(&table, 6..60);
    durable(&table);
    kill(table);
    let (table, report) = Table::open(config(dir.path())).expect("second recovery");
    let expected: Vec<u64> = [0, 1, 2].into_iter().chain(5..60).collect();
    assert_eq!(ids(&table), expected, "{report:?}");
    assert!(report.corrupt_page.is_none() && report.torn_write.is_none(), "{report:?}");
    table.close().expect("close");
}
