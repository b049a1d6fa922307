//! A path's columns built whole from its values (`shred.rs`): while a file's records are
//! shredded, each path keeps only the values it held, each with its row (a [`Cell`]), and
//! its strings' bytes one after the other; at the end each column is allocated once at its
//! full length (zeroed, nulls) and the values are written at their rows (the strings' bytes
//! are already the string column's values). A sparse path costs its values, not the file's rows: padding
//! every column with a null per row, and growing every column's buffers by doubling, was
//! most of the compactor's time (bench/README.md, "Issue 16: compaction, values kept per
//! path") — GitHub events spread ~690 paths over ~33,000 rows per file, ~40 values a row.

use std::sync::Arc;

use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, BooleanArray, PrimitiveArray, StringArray};
use arrow_buffer::{bit_util, ArrowNativeType, BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};

use crate::error::{Error, Result};

/// One value of a record at a path, as the shredder keeps it until the file's columns are
/// built: strings are where they are (the record's bytes, or the shredder's arena of
/// unescaped strings), not copies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    /// JSON `null` (only kept as an array's item).
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integral number in `i64` range.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// While a record is shredded, a string without escapes: bytes `from .. from + len` of
    /// the record.
    Text { from: u32, len: u32 },
    /// While a record is shredded, a string with escapes, unescaped: bytes `from .. from +
    /// len` of the shredder's scratch buffer.
    Unescaped { from: u32, len: u32 },
    /// In a path's cells, a string of `len` bytes, the next in the path's string bytes.
    Str { len: u32 },
    /// An object (its values are its children's).
    Object,
    /// An array whose items are kept as a list (they follow as items).
    Array,
}

/// A value and the row (record) it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cell {
    /// The row, from 0 in the file.
    pub row: u32,
    pub value: Scalar,
}

/// The columns of one path (or of its arrays' items), `len` long.
pub(crate) struct Built {
    /// In `ScalarType::ALL` order (bool, int, float, string); `None` for a type no cell held.
    pub columns: [Option<ArrayRef>; 4],
    /// When asked for: `true` where a cell is an object, null elsewhere (`None` if none is).
    pub objects: Option<ArrayRef>,
}

/// Builds the columns of `cells` — `(position, cell)` at ascending positions below `len`,
/// at most one per position — with nulls at every other position; the objects' column
/// too when `objects` is set. Rows of a path's values are its positions; an array item's
/// position is its index among the path's items. `strings` holds the bytes of the cells'
/// strings ([`Scalar::Str`]), in order.
///
/// # Errors
/// [`Error::Columnar`] when a column's strings exceed 2 GiB (32-bit offsets; lower the
/// file's size, `columnar.file_log_bytes`), or are not the cells' strings.
pub(crate) fn build<'c>(
    cells: impl Iterator<Item = (usize, &'c Cell)> + Clone,
    len: usize,
    strings: Vec<u8>,
    objects: bool,
) -> Result<Built> {
    // A first pass finds which types occur.
    let mut present = [false; 5];
    for (_, cell) in cells.clone() {
        match cell.value {
            Scalar::Bool(_) => present[0] = true,
            Scalar::Int(_) => present[1] = true,
            Scalar::Float(_) => present[2] = true,
            Scalar::Str { .. } => present[3] = true,
            Scalar::Object => present[4] = true,
            Scalar::Null | Scalar::Array | Scalar::Text { .. } | Scalar::Unescaped { .. } => {}
        }
    }
    if strings.len() > i32::MAX as usize {
        return Err(Error::Columnar(format!(
            "a column's strings take {} bytes, more than 32-bit offsets address; lower columnar.file_log_bytes",
            strings.len()
        )));
    }
    let mut bools = present[0].then(|| (Bits::new(len), Bits::new(len)));
    let mut ints = present[1].then(|| Dense::<i64>::new(len));
    let mut floats = present[2].then(|| Dense::<f64>::new(len));
    let mut texts = present[3].then(|| DenseStrings::new(len, strings));
    let mut marks = (objects && present[4]).then(|| Bits::new(len));
    for (position, cell) in cells {
        match (cell.value, &mut bools, &mut ints, &mut floats, &mut texts, &mut marks) {
            (Scalar::Bool(b), Some((values, valid)), ..) => {
                if b {
                    values.set(position);
                }
                valid.set(position);
            }
            (Scalar::Int(i), _, Some(ints), ..) => ints.set(position, i),
            (Scalar::Float(f), _, _, Some(floats), ..) => floats.set(position, f),
            (Scalar::Str { len }, _, _, _, Some(texts), _) => texts.set(position, len as usize),
            (Scalar::Object, _, _, _, _, Some(marks)) => marks.set(position),
            _ => {}
        }
    }
    let columns = [
        bools.map(|(values, valid)| Arc::new(BooleanArray::new(values.finish(), valid.nulls())) as ArrayRef),
        ints.map(|d| Arc::new(d.finish::<Int64Type>()) as ArrayRef),
        floats.map(|d| Arc::new(d.finish::<Float64Type>()) as ArrayRef),
        texts.map(|d| d.finish()).transpose()?,
    ];
    let objects = marks.map(|marks| {
        let nulls = marks.nulls();
        Arc::new(BooleanArray::new(BooleanBuffer::new_set(len), nulls)) as ArrayRef
    });
    Ok(Built { columns, objects })
}

/// A bitmap of `len` bits, all clear at first.
struct Bits {
    buffer: MutableBuffer,
    len: usize,
    set: usize,
}

impl Bits {
    fn new(len: usize) -> Self {
        Self { buffer: MutableBuffer::from_len_zeroed(len.div_ceil(8)), len, set: 0 }
    }

    fn set(&mut self, i: usize) {
        bit_util::set_bit(self.buffer.as_slice_mut(), i);
        self.set += 1;
    }

    fn finish(self) -> BooleanBuffer {
        BooleanBuffer::new(self.buffer.into(), 0, self.len)
    }

    /// As a validity bitmap: `None` when every bit is set (no nulls).
    fn nulls(self) -> Option<NullBuffer> {
        (self.set < self.len).then(|| NullBuffer::new(self.finish()))
    }
}

/// A primitive column: its values at their positions (zero elsewhere) and their validity.
struct Dense<T> {
    values: Vec<T>,
    valid: Bits,
}

impl<T: ArrowNativeType> Dense<T> {
    fn new(len: usize) -> Self {
        Self { values: vec![T::default(); len], valid: Bits::new(len) }
    }

    fn set(&mut self, i: usize, value: T) {
        if let Some(slot) = self.values.get_mut(i) {
            *slot = value;
            self.valid.set(i);
        }
    }

    fn finish<P: arrow_array::types::ArrowPrimitiveType<Native = T>>(self) -> PrimitiveArray<P> {
        PrimitiveArray::new(ScalarBuffer::from(self.values), self.valid.nulls())
    }
}

/// A string column: offsets for every position (a null's is empty) over its values'
/// bytes, which came in order.
struct DenseStrings {
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// Positions before it have their end offset written.
    next: usize,
    /// The end of the last value's bytes.
    end: usize,
    valid: Bits,
}

impl DenseStrings {
    fn new(len: usize, data: Vec<u8>) -> Self {
        Self { offsets: vec![0; len + 1], data, next: 0, end: 0, valid: Bits::new(len) }
    }

    /// The next `bytes` bytes are the value at position `i`.
    fn set(&mut self, i: usize, bytes: usize) {
        if i < self.next || i + 1 >= self.offsets.len() {
            return;
        }
        // The nulls since the last value end where it ended (every end fits i32: checked).
        self.offsets[self.next + 1..=i].fill(self.end as i32);
        self.end += bytes;
        self.offsets[i + 1] = self.end as i32;
        self.next = i + 1;
        self.valid.set(i);
    }

    fn finish(mut self) -> Result<ArrayRef> {
        if self.end != self.data.len() {
            return Err(Error::Columnar(format!("a string column's values take {} bytes, its strings {}", self.end, self.data.len())));
        }
        self.offsets[self.next + 1..].fill(self.end as i32);
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        // SAFETY: the offsets are non-decreasing from 0 (`OffsetBuffer::new` checked it) and
        // end at the data's length (checked above); the data is the values' `&str`s one
        // after the other (`shred.rs` copies each whole), so every offset is at a character
        // boundary of valid UTF-8.
        let array = unsafe { StringArray::new_unchecked(offsets, Buffer::from_vec(self.data), self.valid.nulls()) };
        Ok(Arc::new(array))
    }
}
