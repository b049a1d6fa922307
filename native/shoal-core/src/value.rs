//! Field values extracted from a record, and the canonical encoding of PSF values
//! (the `v` of a property `(f, v)`, FishStore §3) that is hashed into the index and
//! compared when chains are re-checked.

use std::borrow::Cow;
use std::cmp::Ordering;

/// The value of one field of interest in one record, borrowed from the record's bytes.
///
/// Numbers that fit an `i64` are [`FieldValue::Int`]; other numbers are
/// [`FieldValue::Float`]. Strings are unescaped; they borrow the payload when the JSON
/// text had no escape sequences. Objects and arrays keep their raw JSON text.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue<'a> {
    /// The path does not exist in the record (or the record is not an object).
    Missing,
    /// JSON `null`.
    Null,
    /// JSON `true` / `false`.
    Bool(bool),
    /// An integral JSON number in `i64` range.
    Int(i64),
    /// Any other JSON number.
    Float(f64),
    /// A JSON string, unescaped.
    Str(Cow<'a, str>),
    /// A JSON object, as its raw text.
    Object(&'a str),
    /// A JSON array, as its raw text.
    Array(&'a str),
}

impl FieldValue<'_> {
    /// The value as `f64` if it is a number.
    #[must_use]
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            #[allow(clippy::cast_precision_loss)]
            FieldValue::Int(i) => Some(*i as f64),
            FieldValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// True for [`FieldValue::Missing`] and [`FieldValue::Null`], which SQL treats alike.
    #[must_use]
    pub fn is_null(&self) -> bool {
        matches!(self, FieldValue::Missing | FieldValue::Null)
    }

    /// An owned copy that no longer borrows the record.
    #[must_use]
    pub fn into_owned(self) -> FieldValue<'static> {
        match self {
            FieldValue::Missing => FieldValue::Missing,
            FieldValue::Null => FieldValue::Null,
            FieldValue::Bool(b) => FieldValue::Bool(b),
            FieldValue::Int(i) => FieldValue::Int(i),
            FieldValue::Float(f) => FieldValue::Float(f),
            FieldValue::Str(s) => FieldValue::Str(Cow::Owned(s.into_owned())),
            FieldValue::Object(s) => FieldValue::Str(Cow::Owned(s.to_owned())),
            FieldValue::Array(s) => FieldValue::Str(Cow::Owned(s.to_owned())),
        }
    }

    /// SQL comparison: numbers with numbers (integers and floats compare numerically),
    /// strings with strings (byte order), booleans with booleans. Anything else — a null,
    /// a missing field, mismatched types, objects, arrays — is `None` (SQL unknown).
    #[must_use]
    pub fn sql_cmp(&self, other: &FieldValue<'_>) -> Option<Ordering> {
        match (self, other) {
            (FieldValue::Int(a), FieldValue::Int(b)) => Some(a.cmp(b)),
            (FieldValue::Str(a), FieldValue::Str(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
            (FieldValue::Bool(a), FieldValue::Bool(b)) => Some(a.cmp(b)),
            _ => {
                let (a, b) = (self.as_f64()?, other.as_f64()?);
                a.partial_cmp(&b)
            }
        }
    }
}

/// Type tags of the canonical encoding ([`encode_canonical`]).
pub mod tag {
    /// JSON null.
    pub const NULL: u8 = 0;
    /// `false`.
    pub const FALSE: u8 = 1;
    /// `true`.
    pub const TRUE: u8 = 2;
    /// An `i64` (8 bytes little endian); integral floats in range are encoded as this.
    pub const INT: u8 = 3;
    /// An `f64` (8 bytes little endian of its bits).
    pub const FLOAT: u8 = 4;
    /// A string: its UTF-8 bytes follow.
    pub const STR: u8 = 5;
    /// A range-PSF bucket number (`u32` little endian).
    pub const BUCKET: u8 = 6;
    /// A composite: for each element, its length (`u32` LE) then its canonical encoding.
    pub const COMPOSITE: u8 = 7;
    /// Raw JSON text of an object or array.
    pub const RAW: u8 = 8;
}

/// Writes the canonical encoding of `value` into `out`: one tag byte ([`tag`]) then the
/// data. Equal JSON values get equal bytes (`1`, `1.0` and `1e0` all encode as the
/// integer 1; `"a\u0062"` and `"ab"` are the same string). Returns `false` (writing
/// nothing) for [`FieldValue::Missing`], which has no property.
pub fn encode_canonical(value: &FieldValue<'_>, out: &mut Vec<u8>) -> bool {
    match value {
        FieldValue::Missing => return false,
        FieldValue::Null => out.push(tag::NULL),
        FieldValue::Bool(false) => out.push(tag::FALSE),
        FieldValue::Bool(true) => out.push(tag::TRUE),
        FieldValue::Int(i) => {
            out.push(tag::INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        FieldValue::Float(f) => {
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
            let as_int = *f as i64;
            #[allow(clippy::cast_precision_loss, clippy::float_cmp)]
            if f.fract() == 0.0 && as_int as f64 == *f && as_int != i64::MAX && as_int != i64::MIN {
                out.push(tag::INT);
                out.extend_from_slice(&as_int.to_le_bytes());
            } else {
                out.push(tag::FLOAT);
                let normalized = if *f == 0.0 { 0.0_f64 } else { *f };
                out.extend_from_slice(&normalized.to_bits().to_le_bytes());
            }
        }
        FieldValue::Str(s) => {
            out.push(tag::STR);
            out.extend_from_slice(s.as_bytes());
        }
        FieldValue::Object(raw) | FieldValue::Array(raw) => {
            out.push(tag::RAW);
            out.extend_from_slice(raw.as_bytes());
        }
    }
    true
}

/// Canonical encoding of a range-PSF bucket number.
pub fn encode_bucket(bucket: u32, out: &mut Vec<u8>) {
    out.push(tag::BUCKET);
    out.extend_from_slice(&bucket.to_le_bytes());
}

/// Canonical encoding of a composite (tuple) value; `None` if any element is missing.
pub fn encode_composite<'v, I>(values: I, out: &mut Vec<u8>) -> bool
where
    I: IntoIterator<Item = &'v FieldValue<'v>>,
{
    let start = out.len();
    out.push(tag::COMPOSITE);
    let mut element = Vec::new();
    for value in values {
        element.clear();
        if !encode_canonical(value, &mut element) {
            out.truncate(start);
            return false;
        }
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(element.len() as u32).to_le_bytes());
        out.extend_from_slice(&element);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &FieldValue<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(encode_canonical(v, &mut out));
        out
    }

    #[test]
    fn equal_json_numbers_encode_equally() {
        assert_eq!(enc(&FieldValue::Int(1)), enc(&FieldValue::Float(1.0)));
        assert_ne!(enc(&FieldValue::Int(1)), enc(&FieldValue::Float(1.5)));
        assert_eq!(enc(&FieldValue::Float(0.0)), enc(&FieldValue::Float(-0.0)));
    }

    #[test]
    fn sql_comparison_is_unknown_across_types() {
        assert_eq!(FieldValue::Int(2).sql_cmp(&FieldValue::Float(2.5)), Some(Ordering::Less));
        assert_eq!(FieldValue::Int(2).sql_cmp(&FieldValue::Str("2".into())), None);
        assert_eq!(FieldValue::Null.sql_cmp(&FieldValue::Null), None);
    }

    #[test]
    fn composite_of_missing_has_no_property() {
        let mut out = vec![9];
        assert!(!encode_composite([&FieldValue::Int(1), &FieldValue::Missing], &mut out));
        assert_eq!(out, vec![9]);
    }
}
