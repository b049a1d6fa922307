//! `shoal ingest`'s input: JSON records as people have them, one DoPut row per record.
//!
//! - **NDJSON** (one record per line): each non-blank line is sent as it is; the daemon
//!   checks it (a table's `on_invalid_json` policy decides what an invalid one does).
//! - **JSON documents**: pretty-printed or concatenated objects (`{…}{…}`, `{…}\n{…}`
//!   spanning lines), read as a stream of values (serde_json's `StreamDeserializer`, as
//!   simdjson's document stream).
//! - **A JSON array of records** (`[{…}, {…}]`): each element is a record (the file is not
//!   one record).
//! - **CSV with a header row**: each row a record of the header's fields, numbers and
//!   booleans typed by Arrow's CSV schema inference (the first 1,000 rows), the rest strings,
//!   empty cells left out; read as a stream, as the other forms are.
//!
//! `auto` (the default) takes CSV for a `.csv` file, an array when the input's first
//! character is `[`, JSON documents when its first value is not one whole line
//! (pretty-printed or concatenated), NDJSON otherwise.
//! Each record keeps the line it starts on, for messages ("events.json:12:5: …").

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use serde::de::{Error as _, SeqAccess, Visitor};
use serde::Deserializer as _;
use serde_json::value::RawValue;

/// `shoal ingest --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// By the file's extension (`.csv`) and first characters (module docs).
    Auto,
    /// One JSON record per line.
    Ndjson,
    /// JSON documents (pretty-printed or concatenated), or one array of records.
    Json,
    /// CSV with a header row.
    Csv,
}

/// The CSV rows whose values decide each column's type (Arrow's schema inference).
const CSV_INFERRED_ROWS: usize = 1000;

/// Non-blank lines `auto` reads to tell NDJSON from pretty-printed documents.
const SNIFFED_LINES: usize = 8;

/// One record and the line of the input it starts on (1-based).
pub struct Record {
    /// The record's JSON text.
    pub text: String,
    /// Its first line in the input.
    pub line: u64,
}

/// Counts the bytes and lines read through it (for progress and messages).
struct Counting<R> {
    inner: R,
    bytes: Rc<Cell<u64>>,
    lines: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + read as u64);
        self.lines.set(self.lines.get() + buf[..read].iter().filter(|&&b| b == b'\n').count() as u64);
        Ok(read)
    }
}

/// Reads every record of `reader` (named `name` in messages; `path` when it is a file, for
/// excerpts) in `format`, handing each to `emit` (which returns `false` to stop) and the
/// bytes read so far to `progress`. Returns the bytes read.
///
/// # Errors
/// `name:line:column: what is wrong`, with the line's text around the column when the input
/// is a file; an unreadable input.
pub fn read_records(
    reader: Box<dyn Read + Send>,
    name: &str,
    path: Option<&Path>,
    format: InputFormat,
    emit: &mut dyn FnMut(Record) -> bool,
    progress: &dyn Fn(u64),
) -> Result<u64, String> {
    let mut input = BufReader::with_capacity(1 << 20, reader);
    let csv = format == InputFormat::Csv
        || (format == InputFormat::Auto && path.and_then(Path::extension).is_some_and(|e| e.eq_ignore_ascii_case("csv")));
    if csv {
        return read_csv(input, name, emit, progress);
    }
    // The first non-blank lines decide between NDJSON and documents (auto); a leading `[`
    // means an array (auto and json).
    let mut first = String::new();
    let mut blank_lines = 0u64;
    let mut values = 0usize;
    while values < SNIFFED_LINES {
        let mut line = String::new();
        let read = input.read_line(&mut line).map_err(|e| format!("{name}: {e}"))?;
        if read == 0 {
            break;
        }
        if line.trim().is_empty() && values == 0 {
            blank_lines += 1;
            continue;
        }
        values += usize::from(!line.trim().is_empty());
        first.push_str(&line);
    }
    let starts_array = first.trim_start().starts_with('[');
    let lines = match format {
        InputFormat::Ndjson => true,
        InputFormat::Json => false,
        _ => !starts_array && !starts_documents(&first),
    };
    let rest = std::io::Cursor::new(first.into_bytes()).chain(input);
    if lines {
        return read_lines(rest, name, blank_lines, emit, progress);
    }
    // serde_json reads a byte at a time from its reader: the counts are where it stands.
    let (bytes, lines) = (Rc::new(Cell::new(0u64)), Rc::new(Cell::new(blank_lines)));
    let counting = Counting { inner: rest, bytes: Rc::clone(&bytes), lines: Rc::clone(&lines) };
    let mut deserializer = serde_json::Deserializer::from_reader(counting);
    let located = |error: &serde_json::Error| located_error(name, path, blank_lines, error);
    if starts_array {
        let mut elements = Elements { emit, lines: &lines, bytes: &bytes, progress };
        deserializer.deserialize_seq(&mut elements).map_err(|e| located(&e))?;
        deserializer.end().map_err(|e| located(&e) + " (after the array: an input holds one array of records)")?;
        return Ok(bytes.get());
    }
    let mut documents = deserializer.into_iter::<Box<RawValue>>();
    loop {
        let line = lines.get() + 1;
        match documents.next() {
            None => return Ok(bytes.get()),
            Some(Err(error)) => return Err(located(&error)),
            Some(Ok(value)) => {
                progress(bytes.get());
                if !emit(Record { text: compact(value.get()), line }) {
                    return Ok(bytes.get());
                }
            }
        }
    }
}

/// True when `text` (the input's first lines) starts with a JSON document that is not one
/// whole line: pretty-printed (its first value spans lines, does not end within `text`, or
/// has a mistake past its first line) or concatenated on a line (`{…}{…}`). A first line that is a whole value, or that is no
/// JSON at all, means NDJSON: its records go to the daemon as they are (the table's
/// `on_invalid_json` decides about a bad one).
fn starts_documents(text: &str) -> bool {
    let first_line = text.lines().next().unwrap_or("").trim();
    if serde_json::from_str::<serde::de::IgnoredAny>(first_line).is_ok() {
        return false;
    }
    match serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>().next() {
        Some(Ok(_)) => true,
        // A first value that runs past its first line (even to an error: a pretty document
        // with a mistake in it) is a document; an error on the first line, a bad NDJSON line.
        Some(Err(error)) => error.is_eof() || error.line() > 1,
        None => false,
    }
}

/// NDJSON: every non-blank line as it is.
fn read_lines(input: impl Read, name: &str, blank_lines: u64, emit: &mut dyn FnMut(Record) -> bool, progress: &dyn Fn(u64)) -> Result<u64, String> {
    let mut input = BufReader::with_capacity(1 << 20, input);
    let (mut line, mut number, mut bytes) = (String::new(), blank_lines, 0u64);
    loop {
        line.clear();
        let read = input.read_line(&mut line).map_err(|e| format!("{name}:{}: {e}", number + 1))?;
        if read == 0 {
            return Ok(bytes);
        }
        number += 1;
        bytes += read as u64;
        progress(bytes);
        let text = line.trim_end_matches(['\n', '\r']);
        if !text.trim().is_empty() && !emit(Record { text: text.to_owned(), line: number }) {
            return Ok(bytes);
        }
    }
}

/// The elements of one top-level array, each a record.
struct Elements<'a, 'e> {
    emit: &'a mut dyn FnMut(Record) -> bool,
    lines: &'a Rc<Cell<u64>>,
    bytes: &'a Rc<Cell<u64>>,
    progress: &'e dyn Fn(u64),
}

impl<'de> Visitor<'de> for &mut Elements<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of JSON records")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let line = self.lines.get() + 1;
            let Some(value) = seq.next_element::<Box<RawValue>>()? else { return Ok(()) };
            (self.progress)(self.bytes.get());
            if !(self.emit)(Record { text: compact(value.get()), line }) {
                return Err(A::Error::custom("stopped"));
            }
        }
    }
}

/// A JSON value's text without the whitespace between its tokens (a pretty-printed record
/// becomes one line, as NDJSON's are: `query --raw` writes records one per line). Keys keep
/// their order and strings their bytes; `raw` is valid JSON (serde_json checked it).
fn compact(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// `name:line:column: message`, and the line's text around the column for a file.
/// `skipped` blank lines came before what serde_json read.
fn located_error(name: &str, path: Option<&Path>, skipped: u64, error: &serde_json::Error) -> String {
    let (line, column) = (error.line() + usize::try_from(skipped).unwrap_or(0), error.column());
    let mut message = format!("{name}:{line}:{column}: {error}");
    if let Some(text) = path.and_then(|p| std::fs::File::open(p).ok()).and_then(|f| BufReader::new(f).lines().nth(line.saturating_sub(1)).and_then(Result::ok)) {
        message.push_str(&format!("\n  {}", excerpt(&text, column)));
    }
    message
}

/// Up to 60 characters of `line` around `column` (1-based), marked where it is cut.
fn excerpt(line: &str, column: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let at = column.saturating_sub(1).min(chars.len());
    let (from, to) = (at.saturating_sub(40), (at + 20).min(chars.len()));
    let mut text: String = chars[from..to].iter().collect();
    if from > 0 {
        text.insert(0, '…');
    }
    if to < chars.len() {
        text.push('…');
    }
    format!("{text}\n  {}^", " ".repeat(at - from + usize::from(from > 0)))
}

/// CSV with a header: Arrow's reader with an inferred schema, each row written as a JSON
/// object (null cells left out).
fn read_csv(mut input: impl BufRead, name: &str, emit: &mut dyn FnMut(Record) -> bool, progress: &dyn Fn(u64)) -> Result<u64, String> {
    // The header and the rows the types are inferred from are read first and read again
    // by the reader; the rest streams (a file of any size is never whole in memory).
    let mut head = Vec::new();
    for _ in 0..=CSV_INFERRED_ROWS {
        if input.read_until(b'\n', &mut head).map_err(|e| format!("{name}: {e}"))? == 0 {
            break;
        }
    }
    let format = arrow_csv::reader::Format::default().with_header(true);
    let (schema, _) = format
        .infer_schema(std::io::Cursor::new(&head), Some(CSV_INFERRED_ROWS))
        .map_err(|e| format!("{name}: not CSV with a header row: {e}"))?;
    let bytes = Rc::new(Cell::new(0u64));
    let counting = Counting { inner: std::io::Cursor::new(head).chain(input), bytes: Rc::clone(&bytes), lines: Rc::new(Cell::new(0)) };
    let reader = arrow_csv::ReaderBuilder::new(Arc::new(schema))
        .with_format(format)
        .with_batch_size(4096)
        .build(counting)
        .map_err(|e| format!("{name}: {e}"))?;
    let mut line = 1u64;
    for batch in reader {
        let batch = batch.map_err(|e| format!("{name}: after line {line}: {e}"))?;
        let mut writer = arrow_json::LineDelimitedWriter::new(Vec::new());
        writer.write(&batch).map_err(|e| format!("{name}: {e}"))?;
        writer.finish().map_err(|e| format!("{name}: {e}"))?;
        let text = String::from_utf8(writer.into_inner()).map_err(|e| format!("{name}: {e}"))?;
        for row in text.lines() {
            line += 1;
            if !emit(Record { text: row.to_owned(), line }) {
                return Ok(bytes.get());
            }
        }
        progress(bytes.get());
    }
    progress(bytes.get());
    Ok(bytes.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pretty_record_becomes_one_line_with_its_strings_whole() {
        let pretty = "{\n  \"b\": [1, 2],\n  \"a\": \"x \\\" y\\\\\",\n  \"c\": {\"d\": \"\\n\"}\n}";
        assert_eq!(compact(pretty), r#"{"b":[1,2],"a":"x \" y\\","c":{"d":"\n"}}"#);
    }

    #[test]
    fn inputs_are_read_in_the_form_they_have() {
        let read = |text: &str, format: InputFormat| {
            let mut records = Vec::new();
            read_records(Box::new(std::io::Cursor::new(text.as_bytes().to_vec())), "input", None, format, &mut |r| {
                records.push((r.line, r.text));
                true
            }, &|_| {})
            .map(|_| records)
        };
        let lines = read("{\"a\": 1}\n\nnot json\n{\"a\": 2}\n", InputFormat::Auto).unwrap();
        assert_eq!(lines, vec![(1, r#"{"a": 1}"#.to_owned()), (3, "not json".to_owned()), (4, r#"{"a": 2}"#.to_owned())]);
        let array = read("\n[{\"a\": 1},\n {\"a\": [2]}]\n", InputFormat::Auto).unwrap();
        assert_eq!(array.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(), vec![r#"{"a":1}"#, r#"{"a":[2]}"#]);
        let documents = read("{\n  \"a\": 1\n}\n{\"a\": 2}{\"a\": 3}\n", InputFormat::Auto).unwrap();
        assert_eq!(documents.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(), vec![r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":3}"#]);
        let error = read("{\n  \"a\": 1,\n  \"b\" 2\n}\n", InputFormat::Auto).unwrap_err();
        assert!(error.starts_with("input:3:"), "{error}");
        let csv = read("id,name,ok\n1,x,true\n2,,false\n", InputFormat::Csv).unwrap();
        assert_eq!(csv, vec![(2, r#"{"id":1,"name":"x","ok":true}"#.to_owned()), (3, r#"{"id":2,"ok":false}"#.to_owned())]);
        // Past the rows the types come from, the rest streams with those types.
        let long: String = std::iter::once("n,s\n".to_owned()).chain((0..2500).map(|i| format!("{i},\"a\nb{i}\"\n"))).collect();
        let rows = read(&long, InputFormat::Csv).unwrap();
        assert_eq!(rows.len(), 2500);
        assert_eq!(rows[2499].1, r#"{"n":2499,"s":"a\nb2499"}"#);
        let late = format!("{long}x,y\n");
        assert!(read(&late, InputFormat::Csv).unwrap_err().contains("after line"), "a value of another type past the inferred rows");
    }
}
