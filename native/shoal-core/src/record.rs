//! Record layout on the hybrid log (FishStore §5.2, Fig. 6).
//!
//! ```text
//! offset  size        field
//! 0       8           header (RecordHeader, bits below)
//! 8       4           payload length in bytes (u32 LE)
//! 12      4           value-region length in bytes (u32 LE)
//! 16      24 × k      key pointers (KeyPointer), k = header.key_pointer_count
//! ..      value_len   optional value region: PSF values that are not in the payload
//!                     (unescaped strings, composite tuples)
//! ..      payload_len the exact input bytes of the record
//! ..      0..7        zero padding to a multiple of 8 bytes
//! ```
//!
//! Header bits (u64, little endian):
//! ```text
//! 0..=31   record size in bytes, padding included (a multiple of 8)
//! 32..=43  number of key pointers (up to 4095)
//! 44..=59  checkpoint version (16 bits; FASTER's CPR version, used by recovery)
//! 60       filler: not a record, the unused end of a page
//! 61       invalid: allocated but abandoned (never visible)
//! 62       visible: every key pointer is linked into its chain; readers may use it
//! 63       control: a writer-session marker (see `session.rs`), never a data record;
//!          always written together with the invalid bit, so scans skip it
//! ```
//! A header that reads as 0 belongs to a record whose allocation is in flight.
//!
//! Key pointer (24 bytes, three u64 LE words):
//! ```text
//! word 0: bits 0..=47 previous address (the next-older key pointer of the chain, 0 = end)
//!         bits 48..=59 index of this key pointer within its record
//!         bits 60..=61 mode: 0 inline value, 1 value in the payload, 2 value in the value region
//! word 1: bits 0..=31 PSF id; bits 32..=39 canonical type tag (crate::value::tag)
//! word 2: inline: the value's data (i64/f64 bits/bucket number; 0 for null/bool)
//!         otherwise: bits 0..=31 offset, bits 32..=63 length, in bytes, within the
//!         payload (string content, without quotes) or within the value region
//!         (a whole canonical encoding, tag byte included)
//! ```
//! Chains link key pointers, not records (FishStore §4): the hash index and every
//! previous address hold the address of a key pointer; the record starts
//! `16 + 24 × index` bytes before it.

use crate::address::LogAddress;
use crate::value::tag;

/// Size of the fixed record prefix (header and the two lengths), in bytes.
pub const RECORD_PREFIX: usize = 16;
/// Size of one key pointer in bytes.
pub const KEY_POINTER_SIZE: usize = 24;
/// Largest number of key pointers a record can carry.
pub const MAX_KEY_POINTERS: usize = 0xFFF;
/// Mask of a 48-bit logical address.
pub const ADDRESS_MASK: u64 = (1 << 48) - 1;

const SIZE_MASK: u64 = 0xFFFF_FFFF;
const COUNT_SHIFT: u32 = 32;
const COUNT_MASK: u64 = 0xFFF;
const VERSION_SHIFT: u32 = 44;
const VERSION_MASK: u64 = 0xFFFF;
const FILLER_BIT: u64 = 1 << 60;
const INVALID_BIT: u64 = 1 << 61;
const VISIBLE_BIT: u64 = 1 << 62;
const CONTROL_BIT: u64 = 1 << 63;

/// The 8-byte record header. See the module documentation for its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader(pub u64);

impl RecordHeader {
    /// A header for a record of `size` bytes with `key_pointers` key pointers, not yet visible.
    #[must_use]
    pub fn new(size: u32, key_pointers: u16, checkpoint_version: u16) -> Self {
        Self(
            u64::from(size)
                | ((u64::from(key_pointers) & COUNT_MASK) << COUNT_SHIFT)
                | ((u64::from(checkpoint_version) & VERSION_MASK) << VERSION_SHIFT),
        )
    }

    /// A filler header covering `size` unused bytes at the end of a page.
    #[must_use]
    pub fn filler(size: u32) -> Self {
        Self(u64::from(size) | FILLER_BIT)
    }

    /// Record size in bytes, padding included.
    #[must_use]
    pub fn size(self) -> usize {
        (self.0 & SIZE_MASK) as usize
    }

    /// Number of key pointers.
    #[must_use]
    pub fn key_pointer_count(self) -> usize {
        ((self.0 >> COUNT_SHIFT) & COUNT_MASK) as usize
    }

    /// Checkpoint version the record was written under.
    #[must_use]
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn checkpoint_version(self) -> u16 {
        ((self.0 >> VERSION_SHIFT) & VERSION_MASK) as u16
    }

    /// True for the filler at the end of a page.
    #[must_use]
    pub fn is_filler(self) -> bool {
        self.0 & FILLER_BIT != 0
    }

    /// True when the record was abandoned.
    #[must_use]
    pub fn is_invalid(self) -> bool {
        self.0 & INVALID_BIT != 0
    }

    /// True when the record is complete and linked.
    #[must_use]
    pub fn is_visible(self) -> bool {
        self.0 & VISIBLE_BIT != 0
    }

    /// True when the header was not written yet (allocation in flight).
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The same header with the visible bit set.
    #[must_use]
    pub fn with_visible(self) -> Self {
        Self(self.0 | VISIBLE_BIT)
    }

    /// The same header with the invalid bit set.
    #[must_use]
    pub fn with_invalid(self) -> Self {
        Self(self.0 | INVALID_BIT)
    }

    /// A complete control record of `size` bytes (no key pointers): invalid for every
    /// reader of data, recognised by recovery.
    #[must_use]
    pub fn control(size: u32) -> Self {
        Self(u64::from(size) | INVALID_BIT | CONTROL_BIT)
    }

    /// True for a control record (a writer-session marker).
    #[must_use]
    pub fn is_control(self) -> bool {
        self.0 & CONTROL_BIT != 0
    }
}

/// Where a key pointer's value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueMode {
    /// In word 2 itself.
    Inline = 0,
    /// A string's content inside the payload.
    Payload = 1,
    /// A canonical encoding inside the value region.
    ValueRegion = 2,
}

/// A decoded key pointer. See the module documentation for its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPointer {
    /// Address of the next-older key pointer in the same chain (0 = none).
    pub previous: u64,
    /// Position of this key pointer in its record.
    pub index: u16,
    /// Where the value is.
    pub mode: ValueMode,
    /// The PSF this key pointer belongs to.
    pub psf_id: u32,
    /// Canonical type tag of the value ([`crate::value::tag`]).
    pub value_tag: u8,
    /// Inline data, or offset (low 32 bits) and length (high 32 bits).
    pub value_word: u64,
}

impl KeyPointer {
    /// Encodes into three words.
    #[must_use]
    pub fn encode(&self) -> [u64; 3] {
        [
            (self.previous & ADDRESS_MASK) | (u64::from(self.index) & 0xFFF) << 48 | (self.mode as u64) << 60,
            u64::from(self.psf_id) | u64::from(self.value_tag) << 32,
            self.value_word,
        ]
    }

    /// Decodes three words.
    #[must_use]
    pub fn decode(words: [u64; 3]) -> Self {
        let mode = match (words[0] >> 60) & 0b11 {
            0 => ValueMode::Inline,
            1 => ValueMode::Payload,
            _ => ValueMode::ValueRegion,
        };
        Self {
            previous: words[0] & ADDRESS_MASK,
            index: ((words[0] >> 48) & 0xFFF) as u16,
            mode,
            psf_id: (words[1] & 0xFFFF_FFFF) as u32,
            value_tag: ((words[1] >> 32) & 0xFF) as u8,
            value_word: words[2],
        }
    }

    /// Byte offset of this key pointer from the start of its record.
    #[must_use]
    #[inline]
    pub const fn offset_in_record(index: usize) -> usize {
        RECORD_PREFIX + index * KEY_POINTER_SIZE
    }

    /// The log address of key pointer `index` of the record at `record` (what chains and
    /// the hash index hold).
    #[must_use]
    #[inline]
    pub fn address_in(record: LogAddress, index: usize) -> LogAddress {
        record + Self::offset_in_record(index) as u64
    }

    /// The log address of the record holding the key pointer at `address` whose index is
    /// `index` (the inverse of [`Self::address_in`]).
    #[must_use]
    #[inline]
    pub fn record_of(address: LogAddress, index: usize) -> LogAddress {
        address - Self::offset_in_record(index) as u64
    }

    /// Writes the value's canonical encoding into `out` given the record's value region
    /// and payload. Returns `false` if the offsets do not fit (corrupt record).
    pub fn canonical_value(&self, value_region: &[u8], payload: &[u8], out: &mut Vec<u8>) -> bool {
        let range = || {
            let offset = (self.value_word & 0xFFFF_FFFF) as usize;
            let length = (self.value_word >> 32) as usize;
            offset..offset + length
        };
        match self.mode {
            ValueMode::Inline => {
                out.push(self.value_tag);
                match self.value_tag {
                    tag::INT | tag::FLOAT => out.extend_from_slice(&self.value_word.to_le_bytes()),
                    tag::BUCKET => out.extend_from_slice(&((self.value_word & 0xFFFF_FFFF) as u32).to_le_bytes()),
                    _ => {}
                }
                true
            }
            ValueMode::Payload => match payload.get(range()) {
                Some(bytes) => {
                    out.push(tag::STR);
                    out.extend_from_slice(bytes);
                    true
                }
                None => false,
            },
            ValueMode::ValueRegion => match value_region.get(range()) {
                Some(bytes) => {
                    out.extend_from_slice(bytes);
                    true
                }
                None => false,
            },
        }
    }
}

/// Total encoded size of a record, padded to 8 bytes.
#[must_use]
pub fn record_size(key_pointers: usize, value_region: usize, payload: usize) -> usize {
    RecordLayout::new(key_pointers, value_region, payload).size()
}

/// The writer beside [`RecordView`]: one record's parts and where each goes (the layout
/// at the top of this module). The header is the caller's (it is written first, as a
/// record in flight, and last, visible or invalid, by the log's protocol); this writes
/// the lengths, the key pointers, the value region and the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayout {
    key_pointers: usize,
    value_region: usize,
    payload: usize,
}

impl RecordLayout {
    /// A record of `key_pointers` key pointers, a value region of `value_region` bytes and
    /// a payload of `payload` bytes.
    #[must_use]
    #[inline]
    pub const fn new(key_pointers: usize, value_region: usize, payload: usize) -> Self {
        Self { key_pointers, value_region, payload }
    }

    /// Its size in bytes, padding included ([`record_size`]).
    #[must_use]
    #[inline]
    pub const fn size(self) -> usize {
        (RECORD_PREFIX + self.key_pointers * KEY_POINTER_SIZE + self.value_region + self.payload + 7) & !7
    }

    /// Writes the two lengths, then the value region and the payload after the key
    /// pointers' room (the key pointers themselves: [`Self::write_key_pointer`]).
    ///
    /// # Safety
    /// `base` is the start of [`Self::size`] writable bytes, 8-byte aligned, that no other
    /// thread reads or writes meanwhile; `value_region` and `payload` have this layout's
    /// lengths, which fit in a `u32` each (checked by the caller against the page size).
    #[inline]
    pub unsafe fn write_body(self, base: *mut u8, value_region: &[u8], payload: &[u8]) {
        debug_assert_eq!((value_region.len(), payload.len()), (self.value_region, self.payload));
        #[allow(clippy::cast_possible_truncation)]
        // SAFETY: per the contract, [base, base + size) is ours; 8 and 12 are within the prefix.
        unsafe {
            base.add(8).cast::<u32>().write_unaligned(self.payload as u32);
            base.add(12).cast::<u32>().write_unaligned(self.value_region as u32);
            let region_at = base.add(KeyPointer::offset_in_record(self.key_pointers));
            std::ptr::copy_nonoverlapping(value_region.as_ptr(), region_at, value_region.len());
            std::ptr::copy_nonoverlapping(payload.as_ptr(), region_at.add(value_region.len()), payload.len());
        }
    }

    /// Writes key pointer `index` ([`KeyPointer::encode`]'s words), word 0 (the chain's
    /// previous address, which a linking CAS replaces) last.
    ///
    /// # Safety
    /// As [`Self::write_body`]; `index` is below the layout's key pointer count.
    #[inline]
    pub unsafe fn write_key_pointer(self, base: *mut u8, index: usize, words: [u64; 3]) {
        debug_assert!(index < self.key_pointers);
        // SAFETY: per the contract; key pointers are 8-byte aligned within an aligned record.
        unsafe {
            let at = base.add(KeyPointer::offset_in_record(index)).cast::<u64>();
            at.add(1).write(words[1]);
            at.add(2).write(words[2]);
            at.write(words[0]);
        }
    }
}

/// A read-only view of one encoded record.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Wraps the bytes of one record starting at its header. `None` if the bytes are
    /// shorter than the sizes the record declares.
    #[must_use]
    pub fn new(bytes: &'a [u8]) -> Option<Self> {
        let view = Self { bytes };
        let header = view.header_checked()?;
        let payload_len = view.u32_at(8)? as usize;
        let value_len = view.u32_at(12)? as usize;
        let needed = record_size(header.key_pointer_count(), value_len, payload_len);
        (needed <= bytes.len() && needed == header.size()).then_some(view)
    }

    fn u32_at(&self, offset: usize) -> Option<u32> {
        let b = self.bytes.get(offset..offset + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64_at(&self, offset: usize) -> Option<u64> {
        let b = self.bytes.get(offset..offset + 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }

    fn header_checked(&self) -> Option<RecordHeader> {
        self.u64_at(0).map(RecordHeader)
    }

    /// The header.
    #[must_use]
    pub fn header(&self) -> RecordHeader {
        self.header_checked().unwrap_or(RecordHeader(0))
    }

    /// Key pointer `index`.
    #[must_use]
    pub fn key_pointer(&self, index: usize) -> Option<KeyPointer> {
        let at = KeyPointer::offset_in_record(index);
        Some(KeyPointer::decode([self.u64_at(at)?, self.u64_at(at + 8)?, self.u64_at(at + 16)?]))
    }

    fn value_region_start(&self) -> usize {
        RECORD_PREFIX + self.header().key_pointer_count() * KEY_POINTER_SIZE
    }

    /// The optional value region.
    #[must_use]
    pub fn value_region(&self) -> &'a [u8] {
        let start = self.value_region_start();
        let len = self.u32_at(12).unwrap_or(0) as usize;
        self.bytes.get(start..start + len).unwrap_or(&[])
    }

    /// The record's payload: the exact bytes that were ingested.
    #[must_use]
    pub fn payload(&self) -> &'a [u8] {
        let start = self.value_region_start() + self.u32_at(12).unwrap_or(0) as usize;
        let len = self.u32_at(8).unwrap_or(0) as usize;
        self.bytes.get(start..start + len).unwrap_or(&[])
    }
}

const _: () = assert!(KEY_POINTER_SIZE == 3 * 8);

pub use crate::address::FIRST_ADDRESS;

/// The records of a page's bytes in address order (FishStore §5.2's layout): each item is
/// the record's offset in the page and its view. The walk starts at offset 0 (an empty
/// header there, the reserved start of page 0, skips to [`FIRST_ADDRESS`]) and
/// stops at the end of `bytes`, at a filler (the unused end of a closed page), or at a
/// header that was never written or does not parse (the rest of an open page). Records
/// of every state are yielded: callers check [`RecordHeader::is_visible`] and
/// [`RecordHeader::is_invalid`].
pub(crate) struct PageRecords<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> PageRecords<'a> {
    /// The records of `bytes` (a page, or its prefix up to its capacity or end).
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, offset: 0 }
    }
}

impl<'a> Iterator for PageRecords<'a> {
    type Item = (usize, RecordView<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        while self.offset + 8 <= self.bytes.len() {
            let Some(view) = RecordView::new(&self.bytes[self.offset..]) else {
                // Empty header (never written) or a header that does not parse.
                if self.offset == 0 {
                    self.offset = FIRST_ADDRESS as usize;
                    continue;
                }
                self.offset = self.bytes.len();
                return None;
            };
            let header = view.header();
            if header.is_filler() {
                self.offset = self.bytes.len();
                return None;
            }
            let offset = self.offset;
            self.offset += header.size();
            return Some((offset, view));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_round_trip() {
        let h = RecordHeader::new(4096, 7, 3);
        assert_eq!((h.size(), h.key_pointer_count(), h.checkpoint_version()), (4096, 7, 3));
        assert!(!h.is_visible() && !h.is_invalid() && !h.is_filler() && !h.is_empty());
        assert!(h.with_visible().is_visible());
        assert_eq!(h.with_visible().size(), 4096);
        assert!(RecordHeader::filler(100).is_filler());
    }

    #[test]
    fn key_pointer_round_trips() {
        let kp = KeyPointer {
            previous: ADDRESS_MASK,
            index: 4095,
            mode: ValueMode::ValueRegion,
            psf_id: u32::MAX,
            value_tag: tag::COMPOSITE,
            value_word: u64::MAX,
        };
        assert_eq!(KeyPointer::decode(kp.encode()), kp);
    }

    #[test]
    fn sizes_are_padded_to_eight_bytes() {
        assert_eq!(record_size(0, 0, 1), 24);
        assert_eq!(record_size(2, 3, 5), 16 + 48 + 8);
    }
}
