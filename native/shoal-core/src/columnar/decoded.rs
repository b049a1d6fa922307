//! Decoded columns kept in memory: the Arrow arrays that scans decoded from columnar
//! files, per (file, row group, leaf column), up to a byte budget, evicted least recently
//! used first.
//!
//! TellStore (Pilman et al., VLDB 2017, §4) scans a ColumnMap held in memory; shoal's
//! durable columnar form is Parquet (compressed, encoded), whose decoding dominated the
//! cost of repeated scans of cold data (zstd pages, dictionary strings materialised into
//! `StringArray`s for every query). The cache keeps the decoded form of the columns that
//! queries actually read, so a repeated query over cold data reads memory as TellStore's
//! does, while columns no query reads stay compressed. Files are immutable, so an entry
//! never goes stale; a dropped file's entries are forgotten with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, StringArray};
use parking_lot::Mutex;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::error::Result;

/// A cached array's key: the file's id ([`super::ColumnarFile::id`]), the row group and
/// the Parquet leaf column.
type Key = (u64, usize, usize);

#[derive(Debug)]
struct Entry {
    array: ArrayRef,
    bytes: u64,
    used_at: u64,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Bytes of the arrays held.
    used: u64,
    /// Logical clock of uses (least recently used goes first).
    clock: u64,
}

/// Marks a key's leaf as the instants its strings name ([`DecodedColumns::instants`]),
/// kept beside the strings themselves; no Parquet file has that many leaves.
const INSTANTS: usize = 1 << (usize::BITS - 1);

/// The instants `strings` name ([`crate::timestamp::parse_timestamp`]), row by row; null
/// where a string is null or names none.
pub(crate) fn instants_of(strings: &StringArray) -> Int64Array {
    strings.iter().map(|s| s.and_then(crate::timestamp::parse_timestamp)).collect()
}

/// A table's cache of decoded columns (see the module's documentation).
#[derive(Debug)]
pub(crate) struct DecodedColumns {
    /// Bytes of arrays held at most: three quarters of
    /// [`super::ColumnarConfig::cache_bytes`]; 0 keeps none.
    capacity: u64,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// The parsed footers of the files decoded last, most recent first, with their bytes
    /// (`ParquetMetaData::memory_size`), together at most [`Self::footer_capacity`]: a
    /// file keeps only its statistics and layout in memory — a parsed footer of ~630
    /// columns takes ~0.8 MiB, and held for every file it grew the daemon's memory with the
    /// log (~1.6 MiB per 64 MiB file in the soak; 194 files of 1 MiB: 225 → 73 MiB at open).
    footers: Mutex<Footers>,
    /// A quarter of `cache_bytes`: the parsed footers' share.
    footer_capacity: u64,
}

/// Parsed footers held, most recent first — `(file id, footer, its bytes)` — and their
/// bytes together.
type Footers = (std::collections::VecDeque<(u64, ArrowReaderMetadata, u64)>, u64);

impl DecodedColumns {
    /// An empty cache holding at most `cache_bytes`: three quarters for arrays, a quarter
    /// for parsed footers.
    pub(crate) fn new(cache_bytes: u64) -> Self {
        Self {
            capacity: cache_bytes - cache_bytes / 4,
            state: Mutex::new(State::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            footers: Mutex::default(),
            footer_capacity: cache_bytes / 4,
        }
    }

    /// The parsed footer of `file`: kept from an earlier read, else `load`ed (outside the
    /// lock) and kept, the least recently used let go beyond the footers' share.
    ///
    /// # Errors
    /// `load`'s.
    pub(crate) fn footer(&self, file: u64, load: impl FnOnce() -> Result<ArrowReaderMetadata>) -> Result<ArrowReaderMetadata> {
        {
            let mut footers = self.footers.lock();
            if let Some(at) = footers.0.iter().position(|(id, _, _)| *id == file) {
                let entry = footers.0.remove(at).unwrap_or_else(|| unreachable!("position found"));
                let metadata = entry.1.clone();
                footers.0.push_front(entry);
                return Ok(metadata);
            }
        }
        let metadata = load()?;
        let bytes = metadata.metadata().memory_size() as u64;
        let mut footers = self.footers.lock();
        if bytes <= self.footer_capacity && !footers.0.iter().any(|(id, _, _)| *id == file) {
            footers.0.push_front((file, metadata.clone(), bytes));
            footers.1 += bytes;
            while footers.1 > self.footer_capacity {
                let Some((_, _, freed)) = footers.0.pop_back() else { break };
                footers.1 -= freed;
            }
        }
        Ok(metadata)
    }

    /// Bytes of parsed footers held.
    pub(crate) fn footer_bytes(&self) -> u64 {
        self.footers.lock().1
    }

    /// Whether the array of `key` is held (not a use, not counted as a hit or miss).
    pub(crate) fn contains(&self, file: u64, row_group: usize, leaf: usize) -> bool {
        self.state.lock().entries.contains_key(&(file, row_group, leaf))
    }

    /// The array of `key`, if held (a use: it becomes the most recently used).
    pub(crate) fn get(&self, file: u64, row_group: usize, leaf: usize) -> Option<ArrayRef> {
        let mut state = self.state.lock();
        state.clock += 1;
        let clock = state.clock;
        let found = state.entries.get_mut(&(file, row_group, leaf)).map(|entry| {
            entry.used_at = clock;
            entry.array.clone()
        });
        drop(state);
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `array` for `key`, evicting the least recently used arrays to make room; an
    /// array larger than the whole capacity is not kept.
    pub(crate) fn insert(&self, file: u64, row_group: usize, leaf: usize, array: &ArrayRef) {
        let bytes = array.get_array_memory_size() as u64;
        if bytes > self.capacity {
            return;
        }
        let mut state = self.state.lock();
        if let Some(old) = state.entries.remove(&(file, row_group, leaf)) {
            state.used -= old.bytes;
        }
        while state.used + bytes > self.capacity {
            let Some((&oldest, _)) = state.entries.iter().min_by_key(|(_, e)| e.used_at) else { break };
            if let Some(evicted) = state.entries.remove(&oldest) {
                state.used -= evicted.bytes;
            }
        }
        state.clock += 1;
        let used_at = state.clock;
        state.used += bytes;
        state.entries.insert((file, row_group, leaf), Entry { array: array.clone(), bytes, used_at });
    }

    /// The instants the strings of leaf `leaf` of a whole row group name, as microseconds
    /// since the epoch ([`crate::timestamp::parse_timestamp`]; null where a string names
    /// none or is null): kept from an earlier scan, else read from `strings` (the leaf's
    /// array, every row of the row group) and kept beside it. A `TIMESTAMP` comparison
    /// then compares integers ([`super::eval`]) instead of reading every string again per
    /// comparison and per query (30 % of a one-hour range query's time at 1 GB).
    pub(crate) fn instants(&self, file: u64, row_group: usize, leaf: usize, strings: &StringArray) -> Arc<Int64Array> {
        let key = leaf | INSTANTS;
        if let Some(array) = self.get(file, row_group, key) {
            if let Some(instants) = array.as_any().downcast_ref::<Int64Array>() {
                return Arc::new(instants.clone());
            }
        }
        let instants = Arc::new(instants_of(strings));
        self.insert(file, row_group, key, &(instants.clone() as ArrayRef));
        instants
    }

    /// Drops every array of `file` (a file deleted by retention).
    pub(crate) fn forget(&self, file: u64) {
        {
            let mut footers = self.footers.lock();
            let freed: u64 = footers.0.iter().filter(|(id, _, _)| *id == file).map(|(_, _, b)| b).sum();
            footers.0.retain(|(id, _, _)| *id != file);
            footers.1 -= freed;
        }
        let mut state = self.state.lock();
        let before = state.used;
        let mut freed = 0;
        state.entries.retain(|key, entry| {
            let keep = key.0 != file;
            if !keep {
                freed += entry.bytes;
            }
            keep
        });
        state.used = before - freed;
    }

    /// Lets go of every array and parsed footer held (the daemon's memory is needed for
    /// data: [`crate::Table::release_cache`]); returns the bytes freed. Scans refill it.
    pub(crate) fn release(&self) -> u64 {
        let footers = std::mem::take(&mut *self.footers.lock()).1;
        let mut state = self.state.lock();
        let arrays = state.used;
        state.entries.clear();
        state.used = 0;
        arrays + footers
    }

    /// Bytes of arrays held.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.state.lock().used
    }

    /// Lookups that found their array, and those that did not.
    pub(crate) fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::Int64Array;

    use super::*;

    fn array(len: usize) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(0..len as i64))
    }

    fn footer_of(columns: usize) -> ArrowReaderMetadata {
        use arrow_array::RecordBatch;
        let arrays: Vec<(String, ArrayRef)> = (0..columns).map(|i| (format!("c{i}"), array(10))).collect();
        let batch = RecordBatch::try_from_iter(arrays).unwrap();
        let mut bytes = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        ArrowReaderMetadata::load(&bytes::Bytes::from(bytes), parquet::arrow::arrow_reader::ArrowReaderOptions::new()).unwrap()
    }

    #[test]
    fn footers_are_kept_within_a_quarter_of_the_cache_least_recently_used_first() {
        let footer = footer_of(50);
        let size = footer.metadata().memory_size() as u64;
        // Room for two footers.
        let cache = DecodedColumns::new(4 * (2 * size + size / 2));
        let loads = std::cell::Cell::new(0);
        let load = || {
            loads.set(loads.get() + 1);
            Ok(footer.clone())
        };
        for file in [1, 2, 1, 3, 1, 2] {
            cache.footer(file, load).unwrap();
        }
        // 1, 2, (1 kept), 3 evicts 2, (1 kept), 2 evicts 3.
        assert_eq!(loads.get(), 4);
        assert_eq!(cache.footer_bytes(), 2 * size);
        cache.forget(2);
        assert_eq!(cache.footer_bytes(), size);
        // A cache of 0 bytes keeps none.
        let none = DecodedColumns::new(0);
        none.footer(1, load).unwrap();
        assert_eq!(none.footer_bytes(), 0);
    }

    #[test]
    fn evicts_the_least_recently_used_and_stays_within_capacity() {
        let one = array(1000).get_array_memory_size() as u64;
        // Three quarters of the cache's bytes are for arrays.
        let cache = DecodedColumns::new(4 * one);
        for leaf in 0..3 {
            cache.insert(1, 0, leaf, &array(1000));
        }
        assert_eq!(cache.used_bytes(), 3 * one);
        // Leaf 0 used: leaf 1 is now the least recently used, and goes first.
        assert!(cache.get(1, 0, 0).is_some());
        cache.insert(2, 0, 0, &array(1000));
        assert!(cache.used_bytes() <= 3 * one);
        assert!(cache.get(1, 0, 1).is_none());
        assert!(cache.get(1, 0, 0).is_some() && cache.get(1, 0, 2).is_some() && cache.get(2, 0, 0).is_some());
        assert_eq!(cache.hits_and_misses(), (4, 1));
        // Too large for the whole cache: not kept, nothing evicted.
        cache.insert(3, 0, 0, &array(10_000));
        assert!(cache.get(3, 0, 0).is_none());
        assert_eq!(cache.used_bytes(), 3 * one);
        // A file's arrays go with it.
        cache.forget(1);
        assert_eq!(cache.used_bytes(), one);
        let kept = DecodedColumns::new(4 * one);
        kept.insert(1, 0, 0, &array(1000));
        assert_eq!((kept.release(), kept.used_bytes()), (one, 0));
        assert!(kept.get(1, 0, 0).is_none());
        assert!(cache.get(2, 0, 0).is_some());
        // Capacity 0 keeps nothing.
        let none = DecodedColumns::new(0);
        none.insert(1, 0, 0, &array(1));
        assert_eq!(none.used_bytes(), 0);
    }
}
