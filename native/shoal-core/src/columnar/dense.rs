//! A path's columns built whole while a file is shredded (`shred.rs`): the file's rows are
//! known before its first record, so each type's column of a path is allocated once at its
//! full length (zeroed: nulls) at the path's first value of that type, and each value is
//! written at its row. A sparse path costs its values, not the file's rows: padding every
//! column with a null per row, and growing every column's buffers by doubling, was the
//! larger half of the compactor's pass before (bench/README.md, "Columnar tier": columns
//! allocated whole, nulls not padded per row) — GitHub events spread ~690 paths over
//! ~33,000 rows per file, ~43 values a row. Arrays' items, whose count is not known
//! before, are kept as [`Cell`]s and built the same way at the end.

use std::sync::Arc;

use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, BooleanArray, PrimitiveArray, StringArray};
use arrow_buffer::{bit_util, ArrowNativeType, BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};

use crate::error::{Error, Result};

/// One value of a record at a path, as the shredder holds it until the record parsed to its
/// end (strings are where they are: the record's bytes, or the shredder's scratch buffer of
/// unescaped strings) and as a path keeps its arrays' items (strings as their lengths).
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

/// A value and the row (record) it belongs to (an array's item, kept until its path's
/// list is built).
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

/// The columns of one path (or of its arrays' items) while a file is built, `len` long:
/// each type's column is allocated whole (nulls, zeroed) at its first value, and values
/// are written at their positions (rows; an item's index among the path's items), in
/// ascending order, at most one per position.
pub(crate) struct Columns {
    len: usize,
    bools: Option<(Bits, Bits)>,
    ints: Option<Dense<i64>>,
    floats: Option<Dense<f64>>,
    strings: Option<DenseStrings>,
    objects: Option<Bits>,
}

impl Columns {
    /// Columns of `len` positions, none allocated yet.
    pub(crate) fn new(len: usize) -> Self {
        Self { len, bools: None, ints: None, floats: None, strings: None, objects: None }
    }

    /// Writes `value` at `position`; a string's text is `text` (ignored otherwise).
    /// Positions at or beyond the length, or not after the type's last one, are ignored
    /// (the shredder never writes them).
    pub(crate) fn set(&mut self, position: usize, value: Scalar, text: &str) {
        let len = self.len;
        if position >= len {
            return;
        }
        match value {
            Scalar::Bool(b) => {
                let (values, valid) = self.bools.get_or_insert_with(|| (Bits::new(len), Bits::new(len)));
                if b {
                    values.set(position);
                }
                valid.set(position);
            }
            Scalar::Int(i) => self.ints.get_or_insert_with(|| Dense::new(len)).set(position, i),
            Scalar::Float(f) => self.floats.get_or_insert_with(|| Dense::new(len)).set(position, f),
            Scalar::Str { .. } => self.strings.get_or_insert_with(|| DenseStrings::new(len)).set(position, text),
            Scalar::Object => self.objects.get_or_insert_with(|| Bits::new(len)).set(position),
            Scalar::Null | Scalar::Array | Scalar::Text { .. } | Scalar::Unescaped { .. } => {}
        }
    }

    /// The finished columns; the objects' column only when `objects` is set.
    ///
    /// # Errors
    /// [`Error::Columnar`] when a column's strings exceed 2 GiB (32-bit offsets; lower the
    /// file's size, `columnar.file_log_bytes`).
    pub(crate) fn finish(self, objects: bool) -> Result<Built> {
        let len = self.len;
        let columns = [
            self.bools.map(|(values, valid)| Arc::new(BooleanArray::new(values.finish(), valid.nulls())) as ArrayRef),
            self.ints.map(|d| Arc::new(d.finish::<Int64Type>()) as ArrayRef),
            self.floats.map(|d| Arc::new(d.finish::<Float64Type>()) as ArrayRef),
            self.strings.map(DenseStrings::finish).transpose()?,
        ];
        let objects = self.objects.filter(|_| objects).map(|marks| {
            let nulls = marks.nulls();
            Arc::new(BooleanArray::new(BooleanBuffer::new_set(len), nulls)) as ArrayRef
        });
        Ok(Built { columns, objects })
    }
}

/// The columns (`len` long) of `cells` — `(position, cell)` at ascending positions below
/// `len` — whose strings are `strings`, one after the other; see [`Columns`] (no
/// objects' column: its one use is arrays' items).
///
/// # Errors
/// As [`Columns::finish`].
pub(crate) fn build<'c>(cells: impl Iterator<Item = (usize, &'c Cell)>, len: usize, strings: &str) -> Result<Built> {
    let mut columns = Columns::new(len);
    let mut at = 0;
    for (position, cell) in cells {
        let text = match cell.value {
            Scalar::Str { len } => {
                let text = strings.get(at..at + len as usize).unwrap_or_default();
                at += len as usize;
                text
            }
            _ => "",
        };
        columns.set(position, cell.value, text);
    }
    columns.finish(false)
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

/// A string column: offsets for every position (a null's is empty) and the values'
/// bytes, in order.
struct DenseStrings {
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// Positions before it have their end offset written.
    next: usize,
    /// The bytes did not fit 32-bit offsets.
    overflow: bool,
    valid: Bits,
}

impl DenseStrings {
    fn new(len: usize) -> Self {
        Self { offsets: vec![0; len + 1], data: Vec::new(), next: 0, overflow: false, valid: Bits::new(len) }
    }

    /// `value` is the string at position `i`.
    fn set(&mut self, i: usize, value: &str) {
        if i < self.next || i + 1 >= self.offsets.len() {
            return;
        }
        let (Ok(start), Ok(end)) = (i32::try_from(self.data.len()), i32::try_from(self.data.len() + value.len())) else {
            self.overflow = true;
            return;
        };
        // The nulls since the last value end where it ended.
        self.offsets[self.next + 1..=i].fill(start);
        self.data.extend_from_slice(value.as_bytes());
        self.offsets[i + 1] = end;
        self.next = i + 1;
        self.valid.set(i);
    }

    fn finish(mut self) -> Result<ArrayRef> {
        if self.overflow {
            return Err(Error::Columnar(
                "a column's strings take more than 2 GiB, beyond 32-bit offsets; lower columnar.file_log_bytes".to_owned(),
            ));
        }
        let end = self.offsets[self.next];
        self.offsets[self.next + 1..].fill(end);
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        // SAFETY: the offsets are non-decreasing from 0 (`OffsetBuffer::new` checked it) and
        // end at the data's length (each value's end is written as the data grows); the data
        // is whole `&str`s one after the other (`set`), so it is valid UTF-8 and every
        // offset is at a character boundary.
        let array = unsafe { StringArray::new_unchecked(offsets, Buffer::from_vec(self.data), self.valid.nulls()) };
        Ok(Arc::new(array))
    }
}
