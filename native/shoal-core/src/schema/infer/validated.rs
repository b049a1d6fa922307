//! The fast way of observing a record the ingest parser has already validated: one pass
//! of a cursor over its bytes, no document.

use super::{Node, TypeSet, MAX_INFERRED_DEPTH};

/// A cursor over a record that the ingest parser has already validated (every record in
/// the log was, FishStore §5.1), for [`merge_validated`]: one pass over the bytes, no
/// document, no allocation except for keys seen for the first time. Any byte it does not
/// expect makes it give up (`None`), never panic: its callers then take the general path.
pub(crate) struct Cursor<'a> {
    text: &'a [u8],
    pub(crate) at: usize,
    /// The first backslash at or after the last string scanned (or `text.len()`): strings
    /// come in order, so finding escapes costs about one pass over the record instead of a
    /// search per string.
    next_backslash: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a [u8]) -> Self {
        Self { text, at: 0, next_backslash: 0 }
    }

    pub(crate) fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    /// The next non-whitespace byte, consumed.
    pub(crate) fn next_byte(&mut self) -> Option<u8> {
        self.skip_whitespace();
        let byte = *self.text.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    pub(crate) fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.text.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// Skips a string whose opening quote was consumed; returns its raw bytes when it has
    /// no escapes.
    pub(crate) fn string(&mut self) -> Option<Option<&'a [u8]>> {
        let start = self.at;
        if self.next_backslash < start {
            self.next_backslash = memchr::memchr(b'\\', self.text.get(start..)?).map_or(self.text.len(), |o| start + o);
        }
        let quote = find_byte(self.text, start, b'"')?;
        if quote < self.next_backslash {
            self.at = quote + 1;
            return Some(Some(&self.text[start..quote]));
        }
        loop {
            let offset = memchr::memchr2(b'"', b'\\', self.text.get(self.at..)?)?;
            self.at += offset;
            if self.text[self.at] == b'"' {
                self.at += 1;
                return Some(None);
            }
            self.at += 2;
        }
    }

    /// A number whose first byte was consumed: `INT` for an integer that fits an `i64`,
    /// else `FLOAT` (as serde_json and sonic-rs type them).
    pub(crate) fn number(&mut self) -> Option<TypeSet> {
        let start = self.at - 1;
        let mut integer = true;
        while let Some(&byte) = self.text.get(self.at) {
            match byte {
                b'0'..=b'9' => {}
                b'.' | b'e' | b'E' | b'+' => integer = false,
                b'-' if !integer => {}
                _ => break,
            }
            self.at += 1;
        }
        let digits = &self.text[start..self.at];
        // `-0` is a float to both parsers (it has no i64 representation of its own).
        if !integer || digits == b"-0" {
            return Some(TypeSet::FLOAT);
        }
        if digits.len() <= 18 {
            return Some(TypeSet::INT);
        }
        let fits = std::str::from_utf8(digits).ok()?.parse::<i64>().is_ok();
        Some(if fits { TypeSet::INT } else { TypeSet::FLOAT })
    }

    /// Skips the rest of a container whose opening bracket was consumed.
    pub(crate) fn skip_container(&mut self) -> Option<()> {
        let mut open = 1usize;
        while open > 0 {
            match *self.text.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => open += 1,
                b'}' | b']' => open -= 1,
                _ => {}
            }
            self.at += 1;
        }
        Some(())
    }
}

/// The position of the first `byte` in `text` at or after `from`. Strings in JSON records
/// are mostly short, so the first 32 bytes are checked eight at a time in a register
/// (SWAR: a byte of `word ^ pattern` is zero where `byte` is) before `memchr`, whose call
/// costs more than that on short strings.
pub(super) fn find_byte(text: &[u8], from: usize, byte: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let rest = text.get(from..)?;
    let pattern = ONES * u64::from(byte);
    let mut at = 0;
    while at < 32 {
        let Some(chunk) = rest.get(at..at + 8) else { break };
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word) ^ pattern;
        // The lowest set high bit marks the first zero byte (borrows only make bytes above
        // it look zero too).
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        if zeros != 0 {
            return Some(from + at + (zeros.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    memchr::memchr(byte, &rest[at..]).map(|i| from + at + i)
}

/// Merges the value at the cursor (nesting depth `depth`) into `node`; the same result
/// as [`merge_sonic_value`] on valid JSON. `None` when the text is not what it expects
/// (invalid JSON, or a key with escapes): part of the value may have been merged.
pub(super) fn merge_validated(node: &mut Node, cursor: &mut Cursor<'_>, depth: usize) -> Option<()> {
    let types = match cursor.next_byte()? {
        b'{' if depth >= MAX_INFERRED_DEPTH => {
            cursor.skip_container()?;
            TypeSet::OBJECT | TypeSet::TOO_DEEP
        }
        b'[' if depth >= MAX_INFERRED_DEPTH => {
            cursor.skip_container()?;
            TypeSet::ARRAY | TypeSet::TOO_DEEP
        }
        b'{' => {
            cursor.skip_whitespace();
            if cursor.text.get(cursor.at) == Some(&b'}') {
                cursor.at += 1;
            } else {
                // Where the next key is expected: after the previous one (keys of later
                // records mostly come in the order first seen, some of them missing).
                let mut hint = 0;
                loop {
                    if cursor.next_byte()? != b'"' {
                        return None;
                    }
                    let key = cursor.string()??;
                    if cursor.next_byte()? != b':' {
                        return None;
                    }
                    let position = node.child_position_bytes(key, hint)?;
                    match node.children.get_mut(position) {
                        Some(child) => {
                            merge_validated(child, cursor, depth + 1)?;
                            hint = position + 1;
                        }
                        // A new key of a truncated node: parsed past, into nothing kept.
                        None => merge_validated(&mut Node::default(), cursor, depth + 1)?,
                    }
                    match cursor.next_byte()? {
                        b',' => {}
                        b'}' => break,
                        _ => return None,
                    }
                }
            }
            TypeSet::OBJECT
        }
        b'[' => {
            // Even an empty array has an (empty) items node, as in the other paths (not a
            // truncated one: its items are parsed past, into nothing kept).
            let mut discarded = None;
            let items: &mut Node = if node.truncated && node.items.is_none() {
                discarded.insert(Node::default())
            } else {
                node.items.get_or_insert_with(Box::default)
            };
            cursor.skip_whitespace();
            if cursor.text.get(cursor.at) == Some(&b']') {
                cursor.at += 1;
            } else {
                loop {
                    merge_validated(items, cursor, depth + 1)?;
                    match cursor.next_byte()? {
                        b',' => {}
                        b']' => break,
                        _ => return None,
                    }
                }
            }
            TypeSet::ARRAY
        }
        b'"' => {
            cursor.string()?;
            TypeSet::STRING
        }
        b't' => cursor.literal(b"rue").map(|()| TypeSet::BOOL)?,
        b'f' => cursor.literal(b"alse").map(|()| TypeSet::BOOL)?,
        b'n' => cursor.literal(b"ull").map(|()| TypeSet::NULL)?,
        b'-' | b'0'..=b'9' => cursor.number()?,
        _ => return None,
    };
    node.types.insert(types);
    Some(())
}
