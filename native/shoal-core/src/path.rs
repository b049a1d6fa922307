//! Dotted JSON paths (`actor.login`, `payload."key.with.dots"`), the names of fields of
//! interest, PSF inputs and scan columns.

use std::fmt;

use crate::error::{Error, Result};

/// A path from the root object of a record to one of its fields: a list of object keys.
///
/// Written as dotted text (`payload.pull_request.head.repo.language`); a segment that
/// contains a dot, a space, a quote or is empty is written in double quotes with `""`
/// standing for a literal quote (`payload."a.b"`), as in SQL quoted identifiers.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath {
    segments: Vec<String>,
}

impl FieldPath {
    /// Builds a path from its keys. Errors with [`Error::InvalidPath`] when `segments` is empty.
    pub fn from_segments<I, S>(segments: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let segments: Vec<String> = segments.into_iter().map(Into::into).collect();
        if segments.is_empty() {
            return Err(Error::InvalidPath {
                path: String::new(),
                reason: "a path needs at least one key".into(),
            });
        }
        Ok(Self { segments })
    }

    /// Parses dotted text such as `actor.login` or `payload."a.b".c`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an empty path, an empty unquoted segment (`a..b`) or an
    /// unterminated quote.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidPath { path: text.to_owned(), reason: reason.to_owned() };
        let mut segments = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            let mut segment = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            segment.push('"');
                        }
                        Some('"') => break,
                        Some(c) => segment.push(c),
                        None => return Err(invalid("unterminated quoted segment")),
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c == '.' {
                        break;
                    }
                    segment.push(c);
                    chars.next();
                }
                if segment.is_empty() {
                    return Err(invalid("empty segment (use \"\" for an empty key)"));
                }
            }
            segments.push(segment);
            match chars.next() {
                None => break,
                Some('.') => {}
                Some(c) => return Err(invalid(&format!("unexpected character {c:?} after a quoted segment"))),
            }
        }
        Self::from_segments(segments)
    }

    /// The keys from the root, outermost first.
    #[must_use]
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// True when `self` is `other` or lies inside it (`actor.login` is within `actor`).
    #[must_use]
    pub fn starts_with(&self, other: &FieldPath) -> bool {
        self.segments.starts_with(&other.segments)
    }
}

fn needs_quotes(segment: &str) -> bool {
    segment.is_empty() || segment.chars().any(|c| matches!(c, '.' | '"' | ' ' | '\t' | '\n'))
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            if needs_quotes(segment) {
                write!(f, "\"{}\"", segment.replace('"', "\"\""))?;
            } else {
                f.write_str(segment)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FieldPath({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_text_round_trips_through_display() {
        for text in ["actor.login", "payload.\"a.b\".c", "\"\"", "\"say \"\"hi\"\"\""] {
            let path = FieldPath::parse(text).unwrap();
            assert_eq!(path.to_string(), text);
            assert_eq!(FieldPath::parse(&path.to_string()).unwrap(), path);
        }
        assert_eq!(FieldPath::parse("payload.\"a.b\".c").unwrap().segments(), ["payload", "a.b", "c"]);
    }

    #[test]
    fn malformed_paths_are_rejected_with_the_reason() {
        for text in ["", "a..b", "a.", "\"open", "\"a\"b"] {
            assert!(matches!(FieldPath::parse(text), Err(Error::InvalidPath { .. })), "{text}");
        }
    }
}
