//! Log addresses (FASTER §5.1, FishStore §5.2): the one logical address space of the
//! hybrid log, in bytes from its start — a page number times the page size plus an offset
//! in the page. The tail, the begin (head after truncation), flushed and observed marks,
//! record positions, PSF boundaries, scan ranges and keyed snapshots are all addresses.
//!
//! [`LogAddress`] is the type addresses have where they cross the engine's module
//! boundaries and in its public API. Inside the log's page arithmetic, the record layout
//! (key pointers hold 48-bit previous addresses) and the hash index's packed entries the
//! value is a raw `u64`, converted at the boundary with [`LogAddress::new`] and
//! [`LogAddress::get`]: the type is `repr(transparent)` over `u64`, so these are free.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The first address a record can have (the log's first page starts with this many
/// unused bytes); addresses below it stay unused so that 0 can mean "no address" in
/// chains and index entries.
pub const FIRST_ADDRESS: u64 = 64;

/// A position in the hybrid log's address space, in bytes (FASTER §5.1). Ordered as the
/// log is: a lower address was allocated earlier. In JSON (protocol bodies, plans,
/// checkpoints) it is a plain number, as before it had a type.
///
/// Two values have a meaning of their own: [`LogAddress::FIRST`], the first address a
/// record can have (the bytes below it are never written, so `0` can mean "no address"
/// in chains), and [`LogAddress::MAX`], "unbounded" or "not yet" (a range that runs to
/// the tail, a PSF boundary that is not set).
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LogAddress(u64);

impl LogAddress {
    /// Address 0, below every record ("no address" in chains).
    pub const ZERO: LogAddress = LogAddress(0);
    /// The first address a record can have: the log's first page starts with this many
    /// unused bytes. A begin address above it means the log's head was truncated.
    pub const FIRST: LogAddress = LogAddress(FIRST_ADDRESS);
    /// The largest address: "unbounded" as a range end, "not yet" as a boundary.
    pub const MAX: LogAddress = LogAddress(u64::MAX);

    /// The address `raw` bytes from the log's start.
    #[inline]
    #[must_use]
    pub const fn new(raw: u64) -> LogAddress {
        LogAddress(raw)
    }

    /// Its offset from the log's start, in bytes.
    #[inline]
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The address `bytes` further on, saturating at [`LogAddress::MAX`].
    #[inline]
    #[must_use]
    pub const fn add_bytes(self, bytes: u64) -> LogAddress {
        LogAddress(self.0.saturating_add(bytes))
    }

    /// The address `bytes` before, saturating at address 0.
    #[inline]
    #[must_use]
    pub const fn sub_bytes(self, bytes: u64) -> LogAddress {
        LogAddress(self.0.saturating_sub(bytes))
    }

    /// The bytes from `earlier` up to this address; 0 when `earlier` is not below it.
    #[inline]
    #[must_use]
    pub const fn bytes_since(self, earlier: LogAddress) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// The address `bytes` further on (overflow panics in debug builds, as `u64` addition does).
impl std::ops::Add<u64> for LogAddress {
    type Output = LogAddress;
    #[inline]
    fn add(self, bytes: u64) -> LogAddress {
        LogAddress(self.0 + bytes)
    }
}

/// Moves the address `bytes` further on (overflow panics in debug builds).
impl std::ops::AddAssign<u64> for LogAddress {
    #[inline]
    fn add_assign(&mut self, bytes: u64) {
        self.0 += bytes;
    }
}

/// The address `bytes` before (underflow panics in debug builds, as `u64` subtraction does).
impl std::ops::Sub<u64> for LogAddress {
    type Output = LogAddress;
    #[inline]
    fn sub(self, bytes: u64) -> LogAddress {
        LogAddress(self.0 - bytes)
    }
}

/// The bytes between two addresses, `self` not below `earlier` (else it panics in debug
/// builds, as `u64` subtraction does; [`LogAddress::bytes_since`] saturates).
impl std::ops::Sub<LogAddress> for LogAddress {
    type Output = u64;
    #[inline]
    fn sub(self, earlier: LogAddress) -> u64 {
        self.0 - earlier.0
    }
}

impl From<LogAddress> for u64 {
    #[inline]
    fn from(address: LogAddress) -> u64 {
        address.0
    }
}

/// Printed as its number, as addresses were before they had a type (plans, logs, errors).
impl fmt::Display for LogAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// As the `u64` it wraps (`{:?}` is its number, `{:x?}` in hex).
impl fmt::Debug for LogAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

// `raw_slice` relies on the layout being exactly `u64`'s.
const _: () = assert!(
    std::mem::size_of::<LogAddress>() == std::mem::size_of::<u64>()
        && std::mem::align_of::<LogAddress>() == std::mem::align_of::<u64>()
);

/// Converts a slice of addresses to raw offsets for the log's internals (no copy:
/// `LogAddress` is `repr(transparent)` over `u64`).
#[must_use]
pub(crate) fn raw_slice(addresses: &[LogAddress]) -> &[u64] {
    // SAFETY: `LogAddress` is `#[repr(transparent)]` over `u64`: same size, alignment and
    // validity, so a slice of one is a slice of the other.
    unsafe { std::slice::from_raw_parts(addresses.as_ptr().cast::<u64>(), addresses.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_a_plain_number_in_json_and_in_text() {
        let a = LogAddress::new(4096);
        assert_eq!(serde_json::to_string(&a).unwrap(), "4096");
        assert_eq!(serde_json::from_str::<LogAddress>("4096").unwrap(), a);
        assert_eq!(format!("{a} {a:?}"), "4096 4096");
        assert!(serde_json::from_str::<LogAddress>("-1").is_err());
    }

    #[test]
    fn arithmetic_saturates_and_orders_as_the_log() {
        assert_eq!(LogAddress::MAX.add_bytes(1), LogAddress::MAX);
        assert_eq!(LogAddress::new(10).sub_bytes(11), LogAddress::ZERO);
        assert_eq!(LogAddress::new(100).bytes_since(LogAddress::FIRST), 36);
        assert_eq!(LogAddress::FIRST.bytes_since(LogAddress::new(100)), 0);
        assert!(LogAddress::FIRST < LogAddress::new(65));
        assert_eq!(raw_slice(&[LogAddress::new(7), LogAddress::FIRST]), &[7, 64]);
        assert_eq!(std::mem::size_of::<LogAddress>(), 8);
    }
}
