//! The hash index (FASTER §3), shared by all PSFs of a table (FishStore §4).
//!
//! An array of 2^k cache-line [`HashBucket`]s. The hash of a property `(f, v)` selects
//! a bucket (low bits) and a 14-bit *tag* (high bits); the bucket's entry with that tag
//! points at the newest key pointer of the chain for `(f, v)` — or of several
//! properties whose hashes collide in bucket and tag, which is why readers re-check
//! every key pointer. Full buckets link to overflow buckets. Entries change by CAS only.
//!
//! Entry bits (u64):
//! ```text
//! 0..=47   address of the newest key pointer of the chain (0 = empty chain)
//! 48..=61  tag
//! 62       in use (an entry whose word is 0 is free)
//! 63       tentative (FASTER's two-phase insert: invisible to readers until cleared)
//! ```

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::record::ADDRESS_MASK;
use crate::mem::ZeroedArray;

const TAG_SHIFT: u32 = 48;
const TAG_MASK: u64 = 0x3FFF;
const IN_USE: u64 = 1 << 62;
const TENTATIVE: u64 = 1 << 63;
/// Entries per bucket; the eighth word is the overflow pointer.
pub const ENTRIES_PER_BUCKET: usize = 7;

/// One cache line: seven entries and an overflow pointer (index + 1 of the overflow
/// bucket, 0 = none).
#[repr(C, align(64))]
#[derive(Default)]
pub struct HashBucket {
    entries: [AtomicU64; ENTRIES_PER_BUCKET],
    overflow: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<HashBucket>() == 64);
const _: () = assert!(std::mem::align_of::<HashBucket>() == 64);

const OVERFLOW_CHUNK: usize = 1024;
const OVERFLOW_CHUNKS: usize = 16 * 1024;

/// A handle to one index entry, returned by [`HashIndex::find_or_create_entry`].
#[derive(Clone, Copy)]
pub struct EntrySlot<'a> {
    word: &'a AtomicU64,
    tag: u64,
}

impl EntrySlot<'_> {
    /// The chain's newest key-pointer address (0 = empty).
    #[must_use]
    pub fn address(&self) -> u64 {
        self.word.load(Ordering::Acquire) & ADDRESS_MASK
    }

    /// The entry's current word (address in the low 48 bits).
    #[must_use]
    pub fn load(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// CAS the entry from `current` (a word from [`Self::load`]) to point at
    /// `new_address`; on failure returns the entry's actual word.
    ///
    /// # Errors
    /// The actual word, when the entry changed since `current` was read.
    pub fn swing(&self, current: u64, new_address: u64) -> std::result::Result<(), u64> {
        let desired = IN_USE | (self.tag << TAG_SHIFT) | (new_address & ADDRESS_MASK);
        self.word.compare_exchange(current, desired, Ordering::AcqRel, Ordering::Acquire).map(|_| ())
    }
}

/// The hash index: a power-of-two array of buckets plus overflow buckets.
pub struct HashIndex {
    /// Main buckets, zero-filled by the kernel as they are first touched: an empty
    /// table's index (2^18 buckets, 16 MiB) takes almost no memory.
    buckets: ZeroedArray<HashBucket>,
    /// The main buckets were faulted in, at the first insert: random hashing touches
    /// them all soon after, one read fault and one write fault per page otherwise
    /// (`shoal-bench --cases memory`: ~5% of ingestion time in those faults).
    populated: std::sync::atomic::AtomicBool,
    mask: u64,
    overflow_chunks: Box<[AtomicPtr<HashBucket>]>,
    overflow_next: AtomicU64,
}

impl std::fmt::Debug for HashIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashIndex")
            .field("buckets", &self.buckets.len())
            .field("overflow_buckets", &self.overflow_next.load(Ordering::Relaxed))
            .finish()
    }
}

fn tag_of(hash: u64) -> u64 {
    (hash >> TAG_SHIFT) & TAG_MASK
}

impl HashIndex {
    /// An empty index of `2^size_bits` buckets (64 bytes each).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `size_bits` is outside 4..=30.
    pub fn new(size_bits: u32) -> Result<Self> {
        if !(4..=30).contains(&size_bits) {
            return Err(Error::InvalidConfig(format!("index size_bits must be within 4..=30, got {size_bits}")));
        }
        let count = 1usize << size_bits;
        Ok(Self {
            // SAFETY: an all-zero bucket is an empty one (atomics of 0); align 64.
            buckets: unsafe { ZeroedArray::new(count, "the hash index") }?,
            mask: (count as u64) - 1,
            populated: std::sync::atomic::AtomicBool::new(false),
            overflow_chunks: (0..OVERFLOW_CHUNKS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            overflow_next: AtomicU64::new(0),
        })
    }

    /// Number of main buckets.
    #[must_use]
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Number of overflow buckets allocated.
    #[must_use]
    pub fn overflow_bucket_count(&self) -> u64 {
        self.overflow_next.load(Ordering::Relaxed)
    }

    /// Memory used by buckets, in bytes.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        let chunks = self.overflow_chunks.iter().filter(|c| !c.load(Ordering::Relaxed).is_null()).count();
        (self.buckets.len() + chunks * OVERFLOW_CHUNK) * 64
    }

    /// Memory the index holds now, in bytes: its main buckets once they were faulted in
    /// (at the first insert; 0 before), and its overflow buckets' chunks.
    #[must_use]
    pub fn populated_bytes(&self) -> u64 {
        let main = if self.populated.load(Ordering::Relaxed) { self.buckets.len() as u64 * 64 } else { 0 };
        let chunks = self.overflow_chunks.iter().filter(|c| !c.load(Ordering::Relaxed).is_null()).count();
        main + (chunks * OVERFLOW_CHUNK * 64) as u64
    }

    /// Bytes the next insert faults in: the main buckets until the first insert, then 0.
    #[must_use]
    pub fn populated_growth(&self) -> u64 {
        if self.populated.load(Ordering::Relaxed) { 0 } else { self.buckets.len() as u64 * 64 }
    }

    fn overflow_bucket(&self, pointer: u64) -> &HashBucket {
        let index = (pointer - 1) as usize;
        let chunk = self.overflow_chunks[index / OVERFLOW_CHUNK].load(Ordering::Acquire);
        // SAFETY: a non-zero overflow pointer is only published after its chunk was
        // installed (release CAS), and chunks are never freed while the index lives.
        unsafe { &*chunk.add(index % OVERFLOW_CHUNK) }
    }

    fn allocate_overflow(&self) -> Result<u64> {
        let index = self.overflow_next.fetch_add(1, Ordering::AcqRel) as usize;
        let chunk_index = index / OVERFLOW_CHUNK;
        if chunk_index >= OVERFLOW_CHUNKS {
            return Err(Error::InvalidConfig(format!(
                "hash index overflow area is full ({} overflow buckets); raise the index size",
                OVERFLOW_CHUNK * OVERFLOW_CHUNKS
            )));
        }
        let slot = &self.overflow_chunks[chunk_index];
        if slot.load(Ordering::Acquire).is_null() {
            let chunk: Box<[HashBucket]> = (0..OVERFLOW_CHUNK).map(|_| HashBucket::default()).collect();
            let ptr = Box::into_raw(chunk).cast::<HashBucket>();
            if slot.compare_exchange(std::ptr::null_mut(), ptr, Ordering::AcqRel, Ordering::Acquire).is_err() {
                // SAFETY: `ptr` came from Box::into_raw of a slice of this length and
                // was never shared.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, OVERFLOW_CHUNK)) });
            }
        }
        Ok(index as u64 + 1)
    }

    /// Asks the CPU to bring the main bucket of `hash` into its cache (a hint; no effect
    /// on other architectures than x86-64). Ingestion calls it a few records ahead of
    /// [`Self::find_or_create_entry`]: the index is much larger than the caches, so
    /// each lookup would otherwise wait for one miss to memory per key pointer.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let bucket: *const HashBucket = &self.buckets[(hash & self.mask) as usize];
            // SAFETY: a prefetch has no architectural effect; the address is valid.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(bucket.cast::<i8>()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = hash;
    }

    /// The buckets of `hash`'s chain of buckets, main bucket first.
    fn bucket_chain(&self, hash: u64) -> impl Iterator<Item = &HashBucket> {
        let mut next = Some(&self.buckets[(hash & self.mask) as usize]);
        std::iter::from_fn(move || {
            let bucket = next?;
            let overflow = bucket.overflow.load(Ordering::Acquire);
            next = (overflow != 0).then(|| self.overflow_bucket(overflow));
            Some(bucket)
        })
    }

    /// The newest key-pointer address of the chain for `hash`, if the entry exists.
    #[must_use]
    pub fn find_entry(&self, hash: u64) -> Option<u64> {
        let tag = tag_of(hash);
        for bucket in self.bucket_chain(hash) {
            for entry in &bucket.entries {
                let word = entry.load(Ordering::Acquire);
                if word & IN_USE != 0 && word & TENTATIVE == 0 && (word >> TAG_SHIFT) & TAG_MASK == tag {
                    return Some(word & ADDRESS_MASK);
                }
            }
        }
        None
    }

    /// Finds the entry for `hash`, creating it with FASTER's two-phase tentative
    /// insert if absent: claim a free slot with the tentative bit, then look for another
    /// entry with the same tag in the bucket chain; if there is one, back off and
    /// retry, otherwise clear the tentative bit. Guarantees one entry per (bucket, tag).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the overflow area is exhausted.
    pub fn find_or_create_entry(&self, hash: u64) -> Result<EntrySlot<'_>> {
        if !self.populated.load(Ordering::Relaxed) && !self.populated.swap(true, Ordering::Relaxed) {
            self.buckets.populate();
        }
        let tag = tag_of(hash);
        loop {
            let mut free: Option<&AtomicU64> = None;
            let mut last: Option<&HashBucket> = None;
            for bucket in self.bucket_chain(hash) {
                for entry in &bucket.entries {
                    let word = entry.load(Ordering::Acquire);
                    if word == 0 {
                        if free.is_none() {
                            free = Some(entry);
                        }
                    } else if word & TENTATIVE == 0 && (word >> TAG_SHIFT) & TAG_MASK == tag {
                        return Ok(EntrySlot { word: entry, tag });
                    }
                }
                last = Some(bucket);
            }
            let Some(slot) = free else {
                // Every slot is taken: append an overflow bucket and search again.
                if let Some(last) = last {
                    if last.overflow.load(Ordering::Acquire) == 0 {
                        let pointer = self.allocate_overflow()?;
                        // A lost race leaves the new bucket unused; acceptable waste.
                        let _ = last.overflow.compare_exchange(0, pointer, Ordering::AcqRel, Ordering::Acquire);
                    }
                }
                continue;
            };
            let tentative = IN_USE | TENTATIVE | (tag << TAG_SHIFT);
            if slot.compare_exchange(0, tentative, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            let duplicate = self.bucket_chain(hash).any(|bucket| {
                bucket.entries.iter().any(|entry| {
                    !std::ptr::eq(entry, slot) && {
                        let word = entry.load(Ordering::Acquire);
                        word & IN_USE != 0 && (word >> TAG_SHIFT) & TAG_MASK == tag
                    }
                })
            });
            if duplicate {
                slot.store(0, Ordering::Release);
                std::thread::yield_now();
                continue;
            }
            slot.store(IN_USE | (tag << TAG_SHIFT), Ordering::Release);
            return Ok(EntrySlot { word: slot, tag });
        }
    }

    /// Every in-use, non-tentative entry with a non-zero address, as `(main bucket
    /// index, tag, address)`; entries of overflow buckets report their main bucket. A
    /// fuzzy snapshot when entries change meanwhile (each entry is read atomically) —
    /// what a fuzzy index checkpoint records (FASTER §6.5).
    pub fn for_each_entry_in_bucket(&self, mut visit: impl FnMut(u64, u64, u64)) {
        for (index, bucket) in self.buckets.iter().enumerate() {
            let mut current = Some(bucket);
            while let Some(b) = current {
                for entry in &b.entries {
                    let word = entry.load(Ordering::Acquire);
                    if word & IN_USE != 0 && word & TENTATIVE == 0 && word & ADDRESS_MASK != 0 {
                        visit(index as u64, (word >> TAG_SHIFT) & TAG_MASK, word & ADDRESS_MASK);
                    }
                }
                let overflow = b.overflow.load(Ordering::Acquire);
                current = (overflow != 0).then(|| self.overflow_bucket(overflow));
            }
        }
    }

    /// Sets the entry of `(bucket, tag)` to `address` unless it already holds a newer
    /// (higher) one: loading a snapshot from [`Self::for_each_entry_in_bucket`] and
    /// replaying the log after it.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bucket outside this index or a full overflow area.
    pub fn restore_entry(&self, bucket: u64, tag: u64, address: u64) -> Result<()> {
        if bucket > self.mask || tag > TAG_MASK {
            return Err(Error::InvalidConfig(format!(
                "index checkpoint entry (bucket {bucket}, tag {tag}) does not fit an index of {} buckets",
                self.buckets.len()
            )));
        }
        self.raise_entry(bucket | (tag << TAG_SHIFT), address)
    }

    /// Sets the entry of `hash` to `address` unless it already holds a higher address.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the overflow area is exhausted.
    pub fn raise_entry(&self, hash: u64, address: u64) -> Result<()> {
        let slot = self.find_or_create_entry(hash)?;
        let mut current = slot.load();
        while current & ADDRESS_MASK < address {
            match slot.swing(current, address) {
                Ok(()) => break,
                Err(actual) => current = actual,
            }
        }
        Ok(())
    }

    /// Every in-use, non-tentative entry as (bucket position, tag, address); for
    /// checkpoints and statistics.
    pub fn for_each_entry(&self, mut visit: impl FnMut(u64, u64)) {
        let visit_bucket = |bucket: &HashBucket, visit: &mut dyn FnMut(u64, u64)| {
            for entry in &bucket.entries {
                let word = entry.load(Ordering::Acquire);
                if word & IN_USE != 0 && word & TENTATIVE == 0 {
                    visit((word >> TAG_SHIFT) & TAG_MASK, word & ADDRESS_MASK);
                }
            }
        };
        for bucket in &*self.buckets {
            let mut current = Some(bucket);
            while let Some(b) = current {
                visit_bucket(b, &mut visit);
                let overflow = b.overflow.load(Ordering::Acquire);
                current = (overflow != 0).then(|| self.overflow_bucket(overflow));
            }
        }
    }
}

impl Drop for HashIndex {
    fn drop(&mut self) {
        for slot in &*self.overflow_chunks {
            let ptr = slot.load(Ordering::Acquire);
            if !ptr.is_null() {
                // SAFETY: installed by `allocate_overflow` from a boxed slice of this length.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, OVERFLOW_CHUNK)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    #[test]
    fn one_entry_per_tag_even_under_contention() {
        // 8 threads race to create entries for the same 2,000 hashes in a tiny index
        // (forcing overflow buckets); each hash must map to one slot for everyone.
        let index = Arc::new(HashIndex::new(4).unwrap());
        let hashes: Vec<u64> = (0..2_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let results: Vec<Vec<usize>> = (0..8)
            .map(|_| {
                let (index, hashes) = (Arc::clone(&index), hashes.clone());
                std::thread::spawn(move || {
                    hashes
                        .iter()
                        .map(|&h| std::ptr::from_ref(index.find_or_create_entry(h).unwrap().word) as usize)
                        .collect::<Vec<_>>()
                })
            })
            .map(|t| t.join().unwrap())
            .collect();
        for r in &results[1..] {
            assert_eq!(r, &results[0]);
        }
        assert!(index.overflow_bucket_count() > 0);
    }

    #[test]
    fn concurrent_swings_lose_no_key_pointer() {
        // Each thread links 10,000 "key pointers" (fake addresses) into 16 chains;
        // following the recorded previous addresses must visit every one exactly once.
        let index = Arc::new(HashIndex::new(8).unwrap());
        let previous: Arc<Vec<AtomicU64>> = Arc::new((0..40_001).map(|_| AtomicU64::new(0)).collect());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (index, previous) = (Arc::clone(&index), Arc::clone(&previous));
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        let address = t * 10_000 + i + 1;
                        let slot = index.find_or_create_entry(address % 16).unwrap();
                        let mut current = slot.load();
                        loop {
                            previous[address as usize].store(current & ADDRESS_MASK, Ordering::SeqCst);
                            match slot.swing(current, address) {
                                Ok(()) => break,
                                Err(actual) => current = actual,
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut seen = HashMap::new();
        for chain in 0..16u64 {
            let mut address = index.find_entry(chain).unwrap();
            while address != 0 {
                assert_eq!(address % 16, chain);
                *seen.entry(address).or_insert(0) += 1;
                address = previous[address as usize].load(Ordering::SeqCst);
            }
        }
        assert_eq!(seen.len(), 40_000);
        assert!(seen.values().all(|&n| n == 1));
    }
}
