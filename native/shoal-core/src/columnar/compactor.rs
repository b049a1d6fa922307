//! The compactor: background threads per table (`columnar.threads`, one by default) that
//! turn runs of whole flushed pages into columnar files, oldest first — each thread takes
//! the oldest run no file covers and no other thread holds — at the page observer's
//! lowered priority (like an LSM store's compactions, they yield to ingestion and reads).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{write, ColumnarStore};
use crate::error::Result;
use crate::log::HybridLog;
use crate::LogAddress;

/// How often an idle compactor looks at the log.
const POLL: Duration = Duration::from_millis(100);

/// Starts the compactor threads of `store` over `log` (none when the tier is off).
///
/// # Errors
/// [`crate::Error::Io`] when a thread cannot be started (those started are stopped).
pub(crate) fn start(store: &Arc<ColumnarStore>, log: &Arc<HybridLog>) -> Result<()> {
    if !store.config.enabled {
        return Ok(());
    }
    for i in 0..store.config.threads.clamp(1, super::MAX_COMPACTOR_THREADS) {
        let (store_ref, log) = (Arc::clone(store), Arc::clone(log));
        let name = if i == 0 { "shoal-compactor".to_owned() } else { format!("shoal-compactor-{i}") };
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            crate::log::lower_priority(crate::log::OBSERVER_NICE);
            run(&store_ref, &log);
        });
        match spawned {
            Ok(handle) => store.threads.lock().push(handle),
            Err(e) => {
                // The table is not opened: the threads already started stop with it.
                store.shutdown();
                return Err(crate::Error::io("compactor thread", e));
            }
        }
    }
    Ok(())
}

fn run(store: &ColumnarStore, log: &HybridLog) {
    let mut page_bytes = Vec::new();
    let mut payloads = Vec::new();
    let mut last_tail = (log.tail_address(), Instant::now());
    let file_bytes = store.config.file_log_bytes.max(log.page_size() as u64).next_multiple_of(log.page_size() as u64);
    let idle = Duration::from_millis(store.config.idle_ms);
    let mut failures = 0u32;
    while !store.stopped() {
        let tail = log.tail_address();
        if tail != last_tail.0 {
            last_tail = (tail, Instant::now());
        }
        let begin_page = log.page_start(log.page_of(log.begin_address()));
        let whole = log.page_start(log.page_of(log.flushed_until()));
        let Some((from, end)) = store.claim_next(begin_page, whole, file_bytes, last_tail.1.elapsed() >= idle) else {
            // Nothing to do: the run's buffers (up to a file's log bytes) are not kept idle.
            payloads = Vec::new();
            store.wait(POLL);
            continue;
        };
        let compacted = compact(store, log, &mut page_bytes, &mut payloads, from, end);
        store.release(from);
        match compacted {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                store.compaction_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(from = from.get(), to = end.get(), error = %e, "compaction failed; retrying");
                store.wait(POLL * 10 * failures.min(50));
            }
        }
    }
}

/// Compacts the visible records of the pages of `[from, to)` into one file.
fn compact(
    store: &ColumnarStore,
    log: &HybridLog,
    page_bytes: &mut Vec<u8>,
    payloads: &mut Vec<u8>,
    from: LogAddress,
    to: LogAddress,
) -> Result<()> {
    let started = Instant::now();
    let cpu_started = thread_cpu_nanos();
    // Records withdrawn while the pages are read may be in them valid (the withdrawal
    // drops only the files that exist by then): such a file is not kept.
    let withdrawals = log.withdrawn_generation();
    // The run's payloads, one after the other: at most the run's log bytes, reserved at
    // once (growing a 64 MiB buffer by doubling copied it ~twice over) and kept for the next.
    payloads.clear();
    payloads.reserve(usize::try_from(to - from).unwrap_or(usize::MAX));
    let mut spans: Vec<(LogAddress, std::ops::Range<usize>)> = Vec::new();
    let begin = log.begin_address();
    for page in log.page_of(from)..log.page_of(to) {
        let Some(end) = log.read_page(page, page_bytes)? else { continue };
        let page_start = log.page_start(page);
        for (offset, view) in crate::record::PageRecords::new(&page_bytes[..end.min(log.page_capacity())]) {
            let header = view.header();
            let address = page_start + offset as u64;
            // A keyed table's tombstone (empty payload) is no row.
            if header.is_visible() && !header.is_invalid() && address >= begin && !view.payload().is_empty() {
                let start = payloads.len();
                payloads.extend_from_slice(view.payload());
                spans.push((address, start..payloads.len()));
            }
        }
    }
    let records: Vec<(LogAddress, &[u8])> = spans.iter().map(|(a, r)| (*a, &payloads[r.clone()])).collect();
    let written = write::write_file(&records, &store.config)?;
    let (json_bytes, [shred, encode]) = (written.json_bytes, written.phases.map(|d| d.as_millis() as u64));
    store.add(from, to, written, || to > log.begin_address() && log.withdrawn_generation() == withdrawals)?;
    store.compacted_json_bytes.fetch_add(json_bytes, Ordering::Relaxed);
    store.compaction_nanos.fetch_add(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    store.compaction_cpu_nanos.fetch_add(thread_cpu_nanos().saturating_sub(cpu_started), Ordering::Relaxed);
    tracing::debug!(from = from.get(), to = to.get(), records = records.len(), json_bytes, ms = started.elapsed().as_millis() as u64, shred, encode, "compacted");
    Ok(())
}

/// The calling thread's CPU time so far, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`): what
/// the compactor costs a core, apart from the time it waits for one on a busy machine.
fn thread_cpu_nanos() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for the call to fill; the clock id is a constant.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } == 0;
    if !ok {
        return 0;
    }
    u64::try_from(now.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0))
}
