//! Anonymous memory that costs nothing until it is used: the page ring of the hybrid log
//! and the hash index's main buckets are mapped zero-filled by the kernel and faulted in
//! as they are touched (or, for the ring, frame by frame in one call), so that an empty
//! table holds a few MiB instead of its whole memory budget (it was 272 MB resident per
//! empty table when both were populated at creation).

use std::marker::PhantomData;
use std::ops::Deref;

use crate::error::{Error, Result};

/// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14): fault a range in, writable, in one call.
/// Not in the `libc` crate's list yet; the value is the kernel's ABI.
#[cfg(target_os = "linux")]
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// One private anonymous mapping of `len` bytes, page-aligned, zero-filled on first
/// touch; unmapped on drop.
pub(crate) struct AnonymousMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; callers synchronise access to
// its contents (the log by page ownership and epochs, the index by atomics).
unsafe impl Send for AnonymousMemory {}
// SAFETY: as above; `&AnonymousMemory` hands out only raw pointers.
unsafe impl Sync for AnonymousMemory {}

impl AnonymousMemory {
    /// Maps `len` bytes (> 0) without touching them.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `what` when the kernel refuses the mapping.
    pub(crate) fn new(len: usize, what: &str) -> Result<Self> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(Error::InvalidConfig(format!(
                "could not map {len} bytes for {what}: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self { ptr: ptr.cast(), len })
    }

    /// Faults in `len` bytes at `offset` in one system call (as `MAP_POPULATE` does for a
    /// whole mapping; faulting page by page on first write was measured 1.5–2× slower on
    /// the ring's first pass). A kernel without `MADV_POPULATE_WRITE` faults lazily instead.
    pub(crate) fn populate(&self, offset: usize, len: usize) {
        debug_assert!(offset + len <= self.len);
        #[cfg(target_os = "linux")]
        // SAFETY: the range lies within this mapping; populating changes no contents.
        unsafe {
            libc::madvise(self.ptr.add(offset).cast(), len, MADV_POPULATE_WRITE);
        }
    }

    /// The first byte of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for AnonymousMemory {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length; no reference outlives the owner.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A fixed-length array of `T` in [`AnonymousMemory`]: its elements start as all-zero
/// bytes and take memory only when touched. (The allocator's `alloc_zeroed` writes every
/// byte for types aligned above 16 bytes, such as cache-line-aligned hash buckets.)
pub(crate) struct ZeroedArray<T> {
    memory: AnonymousMemory,
    count: usize,
    _elements: PhantomData<T>,
}

impl<T> ZeroedArray<T> {
    /// `count` (> 0) elements of all-zero bytes.
    ///
    /// # Safety
    /// An all-zero bit pattern must be a valid `T`, and `T`'s alignment at most 4096.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the size overflows or the mapping is refused.
    pub(crate) unsafe fn new(count: usize, what: &str) -> Result<Self> {
        debug_assert!(count > 0 && std::mem::align_of::<T>() <= 4096);
        let len = count
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidConfig(format!("{what}: {count} elements are too many")))?;
        Ok(Self { memory: AnonymousMemory::new(len, what)?, count, _elements: PhantomData })
    }

    /// Faults in every element at once, writable ([`AnonymousMemory::populate`]): for an
    /// array about to be touched all over, which otherwise costs two faults per 4 KiB
    /// page (a read maps the shared zero page, the first write copies it and shoots down
    /// the other cores' TLB entries).
    pub(crate) fn populate(&self) {
        self.memory.populate(0, self.count * std::mem::size_of::<T>());
    }
}

impl<T> Deref for ZeroedArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `count` initialised (all-zero, valid per `new`'s
        // contract, or since written through shared references) elements, page-aligned.
        unsafe { std::slice::from_raw_parts(self.memory.as_ptr().cast::<T>(), self.count) }
    }
}

impl<T> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            // SAFETY: the elements are initialised and dropped once, before the unmap.
            unsafe {
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.memory.as_ptr().cast::<T>(), self.count));
            }
        }
    }
}

// SAFETY: a `ZeroedArray<T>` owns its `T`s as a `Box<[T]>` would.
unsafe impl<T: Send> Send for ZeroedArray<T> {}
// SAFETY: as above; shared access gives `&[T]` only.
unsafe impl<T: Sync> Sync for ZeroedArray<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn zeroed_array_starts_zero_and_keeps_writes() {
        // SAFETY: an all-zero AtomicU64 is 0.
        let array = unsafe { ZeroedArray::<AtomicU64>::new(1 << 16, "test") }.unwrap();
        assert_eq!(array.len(), 1 << 16);
        assert!(array.iter().all(|v| v.load(Ordering::Relaxed) == 0));
        array[12345].store(7, Ordering::Relaxed);
        assert_eq!(array[12345].load(Ordering::Relaxed), 7);
    }
}
