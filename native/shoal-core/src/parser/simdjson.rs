//! [`SimdjsonParser`]: simdjson's On-Demand API (C++) behind the [`RecordParser`] trait,
//! called once per batch through a thin shim of ours (`cpp/shim.cpp`), with
//! [`OnDemandParser`] as the fallback for the records simdjson cannot take.
//!
//! # Where simdjson comes from
//!
//! The `simdjson-sys` crate (crates.io) vendors simdjson's amalgamated `simdjson.h` and
//! `simdjson.cpp` (4.6.4) and builds them into a static library that it links; `build.rs`
//! compiles our shim (`-O3`) against the same header, found through the crate's `links`
//! metadata. The library is built for runtime dispatch: stage 1 (structural indexing and
//! UTF-8 validation, the SIMD part) uses the kernel simdjson picks from the CPU (icelake,
//! haswell, westmere or the portable fallback: [`SimdjsonParser::kernel`]), without any
//! `-march` flag. The On-Demand walk is header code compiled for simdjson's *builtin*
//! kernel (what the compiler flags allow); compiling it once per kernel in target regions
//! was measured to change nothing on GitHub events, so it is not done.
//!
//! # One call per batch
//!
//! Rust hands the shim the records (pointer and length), the fields of interest as a
//! flattened tree of object keys, and output arrays: per record and field a type tag and
//! either the number or an offset and length into the record (strings, objects, arrays,
//! numbers beyond 64 bits), with a flag on strings that have escapes (unescaped here);
//! per record a status (simdjson error code, byte offset). Each record is copied into a
//! reusable buffer with simdjson's 64 bytes of padding before simdjson reads it (a `&[u8]`
//! promises nothing past its end); in a C++ harness, skipping that copy for records
//! followed by 64 readable bytes was 5-15% faster.
//!
//! # Full validation
//!
//! On-Demand only validates what it visits, so the shim visits everything: every object
//! field, every array element; numbers are parsed, `true`/`false`/`null` checked, strings
//! with a backslash unescaped (which checks their escapes; stage 1 has already checked
//! UTF-8, control characters and closing quotes of the whole record), keys with a
//! backslash unescaped; after the root value the document must be at its end. The result
//! is the same acceptance as [`OnDemandParser`] (documented there), including these
//! points where simdjson's own rules differ:
//!
//! * numbers that simdjson refuses but JSON allows (exponents beyond `f64` range such as
//!   `1e400`, integers of 20+ digits) are checked against the JSON grammar by the shim and
//!   converted here: ±infinity or the nearest `f64`, as [`OnDemandParser`] does;
//! * lone UTF-16 surrogates in escapes are accepted (simdjson's `allow_replacement`) and
//!   become U+FFFD;
//! * simdjson quirks worked around in the shim: it skips a leading UTF-8 byte order mark
//!   (rejected here, as JSON text has none); it skips an unconsumed string followed by `:`
//!   as if it were a key (so every string is consumed, else `["a":1}]` would pass); its
//!   top-level `false` check looks at four letters only (`fals\` would pass);
//! * the walk recurses once per nesting level; past simdjson's default maximum depth
//!   (1024) a record gets `DEPTH_ERROR` from the shim and [`OnDemandParser`] parses it
//!   instead (it has no depth limit). So do records too large for simdjson (4 GiB).
//!
//! Rejections say `invalid JSON at byte N: <simdjson's message>`; where simdjson gives no
//! position (errors found by stage 1, such as invalid UTF-8), the message is
//! [`OnDemandParser`]'s.

use std::borrow::Cow;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::NonNull;

// Links simdjson's library (the shim calls into it).
use simdjson_sys as _;

use super::ondemand::unescape_into;
use super::{FieldSet, OnDemandParser, ParsedBatch, RecordParser};
use crate::value::FieldValue;

/// A node of the flattened tree of fields of interest (`shoal::Node` in the shim).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ShimNode {
    /// The field id ending here, or -1.
    field: i32,
    first_child: u32,
    child_count: u32,
}

/// An edge of the tree: a key (in the key bytes) leading to a node.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ShimChild {
    key_offset: u32,
    key_len: u32,
    node: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ShimRecord {
    ptr: *const u8,
    len: usize,
}

// SAFETY: only a buffer for the call to the shim, emptied right after it: the pointers are
// never kept nor dereferenced outside that call.
unsafe impl Send for ShimRecord {}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct ShimValue {
    tag: u8,
    escaped: u8,
    pad: u16,
    len: u32,
    data: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct ShimStatus {
    code: i32,
    pad: u32,
    offset: u64,
}

// The shim has the same sizes in `static_assert`s.
const _: () = assert!(
    size_of::<ShimNode>() == 12
        && size_of::<ShimChild>() == 12
        && size_of::<ShimRecord>() == 2 * size_of::<usize>()
        && size_of::<ShimValue>() == 16
        && size_of::<ShimStatus>() == 16
);

mod tag {
    pub const MISSING: u8 = 0;
    pub const NULL: u8 = 1;
    pub const FALSE: u8 = 2;
    pub const TRUE: u8 = 3;
    pub const INT: u8 = 4;
    pub const FLOAT: u8 = 5;
    pub const STR: u8 = 6;
    pub const OBJECT: u8 = 7;
    pub const ARRAY: u8 = 8;
    pub const RAW_NUMBER: u8 = 9;
}

/// simdjson's `error_code` values that send a record to the fallback parser.
mod code {
    pub const CAPACITY: i32 = 1;
    pub const MEMALLOC: i32 = 2;
    pub const DEPTH_ERROR: i32 = 4;
}

const OFFSET_UNKNOWN: u64 = u64::MAX;

extern "C" {
    fn shoal_simdjson_new() -> *mut c_void;
    fn shoal_simdjson_free(ctx: *mut c_void);
    fn shoal_simdjson_kernel() -> *const c_char;
    fn shoal_simdjson_error_message(code: i32) -> *const c_char;
    #[allow(clippy::too_many_arguments)]
    fn shoal_simdjson_parse_batch(
        ctx: *mut c_void,
        records: *const ShimRecord,
        record_count: usize,
        nodes: *const ShimNode,
        node_count: usize,
        children: *const ShimChild,
        keys: *const u8,
        field_count: usize,
        values: *mut ShimValue,
        status: *mut ShimStatus,
        trusted: u8,
    ) -> i32;
}

/// The fields of interest, flattened for the shim; rebuilt when the [`FieldSet`] changes.
#[derive(Debug)]
struct Tree {
    fields: FieldSet,
    /// Node 0 is the record itself; a node's children are contiguous in `children`.
    nodes: Vec<ShimNode>,
    children: Vec<ShimChild>,
    keys: Vec<u8>,
}

impl Tree {
    fn build(fields: &FieldSet) -> Self {
        /// The field ending at a node, and its children as (key, node index).
        type TreeNode<'k> = (Option<usize>, Vec<(&'k [u8], usize)>);
        let mut nodes: Vec<TreeNode<'_>> = vec![(None, Vec::new())];
        for (id, path) in fields.paths().iter().enumerate() {
            let mut cur = 0;
            for segment in path.segments() {
                let key = segment.as_bytes();
                cur = match nodes[cur].1.iter().find(|(k, _)| *k == key) {
                    Some(&(_, child)) => child,
                    None => {
                        let child = nodes.len();
                        nodes.push((None, Vec::new()));
                        nodes[cur].1.push((key, child));
                        child
                    }
                };
            }
            nodes[cur].0 = Some(id);
        }
        let (mut flat, mut children, mut keys) = (Vec::with_capacity(nodes.len()), Vec::new(), Vec::new());
        for (field, kids) in &nodes {
            flat.push(ShimNode {
                field: field.map_or(-1, |f| i32::try_from(f).expect("fewer than 2^31 fields")),
                first_child: u32::try_from(children.len()).expect("fewer than 2^32 keys"),
                child_count: u32::try_from(kids.len()).expect("fewer than 2^32 keys"),
            });
            for (key, node) in kids {
                children.push(ShimChild {
                    key_offset: u32::try_from(keys.len()).expect("keys under 4 GiB"),
                    key_len: u32::try_from(key.len()).expect("keys under 4 GiB"),
                    node: u32::try_from(*node).expect("fewer than 2^32 nodes"),
                });
                keys.extend_from_slice(key);
            }
        }
        Self { fields: fields.clone(), nodes: flat, children, keys }
    }
}

/// The shim's parser context (simdjson's parser, the padded record buffer).
struct Context(NonNull<c_void>);

impl Context {
    fn new() -> Self {
        // SAFETY: no preconditions; null only when out of memory.
        let ptr = unsafe { shoal_simdjson_new() };
        Self(NonNull::new(ptr).expect("out of memory creating the simdjson parser"))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by `shoal_simdjson_new`, freed once.
        unsafe { shoal_simdjson_free(self.0.as_ptr()) }
    }
}

// SAFETY: the context has no thread affinity; `&mut self` keeps it to one thread at a time.
unsafe impl Send for Context {}

/// simdjson's On-Demand parser as a [`RecordParser`]: same acceptance and same values as
/// [`OnDemandParser`] (see the module documentation for how), one FFI call per batch.
pub struct SimdjsonParser {
    ctx: Context,
    tree: Tree,
    records: Vec<ShimRecord>,
    values: Vec<ShimValue>,
    status: Vec<ShimStatus>,
    fallback: OnDemandParser,
}

impl std::fmt::Debug for SimdjsonParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimdjsonParser").field("kernel", &self.kernel()).field("fields", &self.tree.fields).finish()
    }
}

impl Default for SimdjsonParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SimdjsonParser {
    /// A parser with no fields of interest yet.
    ///
    /// # Panics
    /// If the C++ side cannot allocate its context.
    #[must_use]
    pub fn new() -> Self {
        Self {
            ctx: Context::new(),
            tree: Tree::build(&FieldSet::new()),
            records: Vec::new(),
            values: Vec::new(),
            status: Vec::new(),
            fallback: OnDemandParser::new(),
        }
    }

    /// The simdjson kernel in use, chosen at run time from the CPU (`"icelake"`,
    /// `"haswell"`, `"westmere"`, `"fallback"`, `"arm64"`...).
    #[must_use]
    pub fn kernel(&self) -> &'static str {
        // SAFETY: the shim returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(shoal_simdjson_kernel()) }.to_str().unwrap_or("?")
    }

    fn prepare(&mut self, fields: &FieldSet) {
        if self.tree.fields != *fields {
            self.tree = Tree::build(fields);
        }
    }

    /// Parses `record` with the fallback parser and appends the outcome to `out`.
    fn fall_back<'a>(&mut self, record: &'a [u8], fields: &FieldSet, scratch: &mut ParsedBatch<'a>, out: &mut ParsedBatch<'a>) {
        self.fallback.parse_batch(&[record], fields, scratch);
        match scratch.record(0) {
            Ok(values) => out.push_values(values.iter().cloned()),
            Err(message) => out.push_error(message.to_owned()),
        }
    }
}

impl RecordParser for SimdjsonParser {
    fn parse_batch<'a>(&mut self, records: &[&'a [u8]], fields: &FieldSet, out: &mut ParsedBatch<'a>) {
        self.parse(records, fields, out, false);
    }

    fn parse_trusted_batch<'a>(&mut self, records: &[&'a [u8]], fields: &FieldSet, out: &mut ParsedBatch<'a>) {
        self.parse(records, fields, out, true);
    }

    fn name(&self) -> &'static str {
        "simdjson-ondemand"
    }
}

impl SimdjsonParser {
    /// One batch through the shim; `trusted` as in
    /// [`RecordParser::parse_trusted_batch`] (the shim then skips values outside the
    /// fields of interest instead of validating them, and stops at the last one).
    fn parse<'a>(&mut self, records: &[&'a [u8]], fields: &FieldSet, out: &mut ParsedBatch<'a>, trusted: bool) {
        self.prepare(fields);
        out.reset(fields.len());
        if records.is_empty() {
            return;
        }
        let field_count = fields.len();
        self.records.clear();
        self.records.extend(records.iter().map(|r| ShimRecord { ptr: r.as_ptr(), len: r.len() }));
        self.values.clear();
        self.values.resize(records.len() * field_count, ShimValue::default());
        self.status.clear();
        self.status.resize(records.len(), ShimStatus::default());
        // SAFETY: the record pointers are valid for their lengths for the whole call; the
        // tree arrays describe each other (built by `Tree::build`); `values` holds
        // `records.len() * field_count` entries and `status` `records.len()`, as the shim
        // writes. The context is ours alone (`&mut self`).
        let rc = unsafe {
            shoal_simdjson_parse_batch(
                self.ctx.0.as_ptr(),
                self.records.as_ptr(),
                self.records.len(),
                self.tree.nodes.as_ptr(),
                self.tree.nodes.len(),
                self.tree.children.as_ptr(),
                self.tree.keys.as_ptr(),
                field_count,
                self.values.as_mut_ptr(),
                self.status.as_mut_ptr(),
                u8::from(trusted),
            )
        };
        self.records.clear();
        let mut scratch = ParsedBatch::default();
        if rc != 0 {
            // Out of memory for the shim's buffers: the whole batch goes to the fallback.
            for record in records {
                self.fall_back(record, fields, &mut scratch, out);
            }
            return;
        }
        let mut converted: Vec<FieldValue<'a>> = Vec::with_capacity(field_count);
        for (i, &record) in records.iter().enumerate() {
            let status = self.status[i];
            match status.code {
                0 => {
                    // SAFETY: simdjson accepted the record, and its stage 1 validates the whole
                    // input as UTF-8 (checked against `std::str::from_utf8` by the tests). The
                    // shim's offsets are only used through `str::get`, which checks bounds and
                    // character boundaries.
                    let text = unsafe { std::str::from_utf8_unchecked(record) };
                    debug_assert!(std::str::from_utf8(record).is_ok());
                    converted.clear();
                    let shim_values = &self.values[i * field_count..(i + 1) * field_count];
                    converted.extend(shim_values.iter().map_while(|v| convert(text, v)));
                    if converted.len() == field_count {
                        out.push_values(converted.drain(..));
                    } else {
                        // Not expected (the shim's offsets are inside the record, on character
                        // boundaries); the fallback gives a correct answer anyway.
                        debug_assert!(false, "unconvertible shim output for {:?}", String::from_utf8_lossy(record));
                        self.fall_back(record, fields, &mut scratch, out);
                    }
                }
                code::DEPTH_ERROR | code::CAPACITY | code::MEMALLOC => self.fall_back(record, fields, &mut scratch, out),
                code => {
                    // SAFETY: the shim returns a static NUL-terminated string for any code.
                    let message = unsafe { CStr::from_ptr(shoal_simdjson_error_message(code)) }.to_string_lossy();
                    if status.offset == OFFSET_UNKNOWN {
                        // Found by stage 1 over the whole record: ask the fallback where.
                        self.fallback.parse_batch(&[record], fields, &mut scratch);
                        match scratch.record(0) {
                            Err(located) => out.push_error(located.to_owned()),
                            Ok(_) => out.push_error(format!("invalid JSON: {message}")),
                        }
                    } else {
                        out.push_error(format!("invalid JSON at byte {}: {message}", status.offset));
                    }
                }
            }
        }
    }
}

/// The text `offset..offset + len` of `record`.
fn text_at(record: &str, offset: u64, len: u32) -> Option<&str> {
    let start = usize::try_from(offset).ok()?;
    record.get(start..start.checked_add(usize::try_from(len).ok()?)?)
}

/// The [`FieldValue`] the shim described.
fn convert<'a>(record: &'a str, value: &ShimValue) -> Option<FieldValue<'a>> {
    Some(match value.tag {
        tag::MISSING => FieldValue::Missing,
        tag::NULL => FieldValue::Null,
        tag::FALSE => FieldValue::Bool(false),
        tag::TRUE => FieldValue::Bool(true),
        #[allow(clippy::cast_possible_wrap)]
        tag::INT => FieldValue::Int(value.data as i64),
        tag::FLOAT => FieldValue::Float(f64::from_bits(value.data)),
        tag::STR => {
            let content = text_at(record, value.data, value.len)?;
            if value.escaped == 0 {
                FieldValue::Str(Cow::Borrowed(content))
            } else {
                let mut owned = String::with_capacity(content.len());
                unescape_into(content, &mut owned);
                FieldValue::Str(Cow::Owned(owned))
            }
        }
        tag::OBJECT => FieldValue::Object(text_at(record, value.data, value.len)?),
        tag::ARRAY => FieldValue::Array(text_at(record, value.data, value.len)?),
        tag::RAW_NUMBER => {
            // A valid JSON number outside simdjson's range; as OnDemandParser converts it.
            let raw = text_at(record, value.data, value.len)?;
            match raw.parse::<i64>() {
                Ok(i) => FieldValue::Int(i),
                Err(_) => FieldValue::Float(raw.parse::<f64>().ok()?),
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {

    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::parser::test_support::{arb_json, arb_key, field_set, owned, s};
    use crate::path::FieldPath;

    type Outcome = Result<Vec<FieldValue<'static>>, String>;

    /// Parses `records` as one batch with `parser`; each record's values (owned) or error.
    /// Also checks that borrowed strings and raw objects/arrays lie inside their record.
    fn parse_all(parser: &mut dyn RecordParser, records: &[&[u8]], fields: &FieldSet) -> Vec<Outcome> {
        parse_all_as(parser, records, fields, false)
    }

    /// [`parse_all`], through `parse_trusted_batch` when `trusted`.
    fn parse_all_as(parser: &mut dyn RecordParser, records: &[&[u8]], fields: &FieldSet, trusted: bool) -> Vec<Outcome> {
        let mut out = ParsedBatch::default();
        if trusted {
            parser.parse_trusted_batch(records, fields, &mut out);
        } else {
            parser.parse_batch(records, fields, &mut out);
        }
        assert_eq!(out.len(), records.len());
        (0..records.len())
            .map(|i| {
                out.record(i).map_err(str::to_owned).map(|values| {
                    assert_eq!(values.len(), fields.len());
                    let range = records[i].as_ptr_range();
                    for v in values {
                        if let FieldValue::Str(Cow::Borrowed(t)) | FieldValue::Object(t) | FieldValue::Array(t) = v {
                            let p = t.as_bytes().as_ptr_range();
                            assert!(range.start <= p.start && p.end <= range.end, "{t:?} is not inside the record");
                        }
                    }
                    values.iter().map(owned).collect()
                })
            })
            .collect()
    }

    fn parse_with(parser: &mut dyn RecordParser, record: &[u8], fields: &FieldSet) -> Outcome {
        parse_all(parser, &[record], fields).remove(0)
    }

    fn parse(record: &str, paths: &[&str]) -> Outcome {
        parse_with(&mut SimdjsonParser::new(), record.as_bytes(), &field_set(paths))
    }

    /// Values compared exactly (floats by their bits, so `-0.0` differs from `0.0`).
    fn same_values(a: &[FieldValue<'_>], b: &[FieldValue<'_>]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| match (x, y) {
                (FieldValue::Float(x), FieldValue::Float(y)) => x.to_bits() == y.to_bits(),
                _ => x == y,
            })
    }

    /// `None` if both parsers agree on `records` (same acceptance, same values), and the
    /// trusted parse of the accepted records gives the same values; else a description of
    /// the first difference.
    fn difference(records: &[&[u8]], fields: &FieldSet) -> Option<String> {
        let ours = parse_all(&mut SimdjsonParser::new(), records, fields);
        let reference = parse_all(&mut OnDemandParser::new(), records, fields);
        let accepted: Vec<&[u8]> = records.iter().zip(&ours).filter(|(_, o)| o.is_ok()).map(|(r, _)| *r).collect();
        let trusted = parse_all_as(&mut SimdjsonParser::new(), &accepted, fields, true);
        let validated = ours.iter().filter(|o| o.is_ok());
        for ((record, t), v) in accepted.iter().zip(&trusted).zip(validated) {
            let agree = matches!((t, v), (Ok(t), Ok(v)) if same_values(t, v));
            if !agree {
                return Some(format!("{:?}:\n  trusted: {t:?}\n  validated: {v:?}", String::from_utf8_lossy(record)));
            }
        }
        for ((record, a), b) in records.iter().zip(&ours).zip(&reference) {
            let agree = match (a, b) {
                (Ok(a), Ok(b)) => same_values(a, b),
                (Err(_), Err(_)) => true,
                _ => false,
            };
            if !agree {
                return Some(format!("{:?}:\n  simdjson: {a:?}\n  ondemand: {b:?}", String::from_utf8_lossy(record)));
            }
        }
        None
    }

    const GITHUB: &str = r#"{"id":"7044401123","type":"PullRequestEvent","actor":{"id":1234,"login":"octo\"cat"},
        "repo":{"id":98765,"name":"a/b"},"payload":{"action":"opened","number":7,
        "pull_request":{"head":{"repo":{"language":"Rust","size":12.5}},"labels":[1,{"x":[]}]}},
        "public":true,"org":null}"#;

    #[test]
    fn reports_the_kernel() {
        let parser = SimdjsonParser::new();
        let known = ["icelake", "haswell", "westmere", "fallback", "arm64", "ppc64", "lsx", "lasx", "rvv_vls"];
        assert!(known.contains(&parser.kernel()), "{:?}", parser.kernel());
        assert_eq!(parser.name(), "simdjson-ondemand");
        eprintln!("simdjson kernel: {}", parser.kernel());
    }

    #[test]
    fn extracts_the_fields_of_interest() {
        let paths = ["id", "actor.id", "repo.id", "type", "payload.action", "payload.pull_request.head.repo.language"];
        let values = parse(GITHUB, &paths).expect("valid");
        assert_eq!(
            values,
            vec![s("7044401123"), FieldValue::Int(1234), FieldValue::Int(98765), s("PullRequestEvent"), s("opened"), s("Rust")]
        );
        let paths = [
            "actor.login",
            "public",
            "org",
            "payload.pull_request.labels",
            "payload.pull_request.head.repo",
            "payload.pull_request.head.repo.size",
            "payload",
        ];
        let values = parse(GITHUB, &paths).expect("valid");
        assert_eq!(values[..6], [
            s("octo\"cat"),
            FieldValue::Bool(true),
            FieldValue::Null,
            FieldValue::Array(r#"[1,{"x":[]}]"#),
            FieldValue::Object(r#"{"language":"Rust","size":12.5}"#),
            FieldValue::Float(12.5),
        ]);
        assert!(matches!(&values[6], FieldValue::Object(t) if t.starts_with("{\"action\"") && t.ends_with("]}}")));
        assert_eq!(difference(&[GITHUB.as_bytes()], &field_set(&paths)), None);
    }

    #[test]
    fn unescaped_strings_borrow_the_record() {
        let record = GITHUB.as_bytes().to_vec();
        let fields = field_set(&["type", "actor.login"]);
        let mut parser = SimdjsonParser::new();
        let mut out = ParsedBatch::default();
        parser.parse_batch(&[&record], &fields, &mut out);
        let values = out.record(0).expect("valid");
        assert!(matches!(&values[0], FieldValue::Str(Cow::Borrowed("PullRequestEvent"))));
        assert!(matches!(&values[1], FieldValue::Str(Cow::Owned(t)) if t == "octo\"cat"));
    }

    #[test]
    fn escapes_numbers_and_odd_values_match_the_rust_parser() {
        let records: &[&str] = &[
            r#"{"a":"x\n\t\"\\\/\b\f\r\u0041\u00e9\u20AC\ud83d\ude00y","b":"\ud800","c":"\udc00\ud800\u0041","d\u0041":1}"#,
            r#"{"a":"\ud800\ud800\udc00","b":"\uDBFF\uDFFF","c":"\u0000","dA":"é😀","\ud800":2}"#,
            r#"{"a":9223372036854775807,"b":-9223372036854775808,"c":9223372036854775808,"d":1.0,
                "e":1e2,"f":-0,"g":-0.0,"h":1E+400,"i":123456789012345678901234567890,"j":0.1}"#,
            r#"{"a":18446744073709551615,"b":18446744073709551616,"c":99999999999999999999,"d":-1e-400,
                "e":1e-400,"f":2.2250738585072011e-308,"g":4.9406564584124654e-324,"h":1.7976931348623157e308,"i":-1e309}"#,
            r#"{"a":0.1000000000000000055511151231257827021181583404541015625,"b":1.00000000000000011102230246251565404236316680908203125,
                "c":7.0e-10,"d":123456789012345678e-20,"e":-0e5,"f":0E-0,"g":1e0000000000000000000000001,"h":[1e400,-1e400]}"#,
            r#"{"a":null,"b":[{"c":1}],"c":{},"d":"x","e":{"f":{}},"g":{"h":1}}"#,
            r#"{"a":{"x":1,"x":2,"y":3},"a":{"x":4,"z":5},"b":1,"b":"two","c":{"d":1},"c":2}"#,
            "[1,2]",
            "\"text\\n\"",
            " 42 ",
            "-0",
            "1e400",
            " 123456789012345678901234567890 ",
            "null",
            "true",
            "{}",
            " { \"a\" : [ ] , \"b\" : { } , \"c\" : \"\" } ",
            "{\"a\":\"\",\"b\":\"\\\\\",\"c\":\"\\\"\"}",
        ];
        let fields = field_set(&["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "dA", "\"\u{FFFD}\"", "a.x", "a.z", "b.c", "e.f", "c.d"]);
        let records: Vec<&[u8]> = records.iter().map(|r| r.as_bytes()).collect();
        for record in &records {
            let outcome = parse_with(&mut SimdjsonParser::new(), record, &fields);
            assert!(outcome.is_ok(), "{}: {outcome:?}", String::from_utf8_lossy(record));
        }
        assert_eq!(difference(&records, &fields), None);
        let values = parse(std::str::from_utf8(records[2]).expect("utf8"), &["f", "h", "i"]).expect("valid");
        assert_eq!(values, vec![FieldValue::Int(0), FieldValue::Float(f64::INFINITY), FieldValue::Float(1.234_567_890_123_456_8e29)]);
        let values = parse(std::str::from_utf8(records[0]).expect("utf8"), &["a", "b", "c", "dA"]).expect("valid");
        assert_eq!(values, vec![s("x\n\t\"\\/\u{8}\u{c}\rAé€😀y"), s("\u{FFFD}"), s("\u{FFFD}\u{FFFD}A"), FieldValue::Int(1)]);
    }

    #[test]
    fn invalid_records_are_rejected() {
        let cases: &[&[u8]] = &[
            br#"{"id":1} x"#,
            br#"{"id":1}{"id":2}"#,
            br#"{"id":1} {"id":2}"#,
            br#"[1] ]"#,
            br#"{"id":1,"x":tru}"#,
            br#"{"id":1,"x":nul}"#,
            br#"{"id":1,"x":nulll}"#,
            br#"{"id":1,"x":truex}"#,
            br#"{"id":1,"x":"\uqqqq"}"#,
            br#"{"id":1,"x":"\u12"}"#,
            br#"{"id":1,"x":"\x"}"#,
            br#"{"id":1,"\x":1}"#,
            b"{\"id\":1,\"x\":\"\xff\"}",
            b"{\"id\":1,\"x\":\"a\tb\"}",
            b"{\"id\":1,\"x\":\"a\x01b\"}",
            br#"{"id":1,"x":[1,]}"#,
            br#"{"id":1,"x":{"a":1,}}"#,
            br#"{"id":1,"x":01}"#,
            br#"{"id":1,"x":-}"#,
            br#"{"id":1,"x":1.}"#,
            br#"{"id":1,"x":.5}"#,
            br#"{"id":1,"x":1e}"#,
            br#"{"id":1,"x":1x}"#,
            br#"{"id":1,"x":123456789012345678901234567890x}"#,
            br#"{"id":1,"x":-123456789012345678901234567890.}"#,
            br#"{"id":1,"x":1e400x}"#,
            br#"{"id":1,"x":+1}"#,
            br#"{"id":1,"x":{"a" 1}}"#,
            br#"{"id":1,"x":[1 2]}"#,
            br#"{"id":1,"x":[1}"#,
            br#"{"id":1,"x":["a"b]}"#,
            br#"{"id":"a""#,
            br#"{"id":1"#,
            br#"{"id":1,"#,
            br"",
            b"  \n",
            b"\x0c{}",
            br#"{"id":1,}"#,
            br#"{"id" 1}"#,
            br#"{"id":1 "x":2}"#,
            br#"{id:1}"#,
            br#"{"id":1:2}"#,
            br#"{"id",1}"#,
            br"[1,2",
            br"1 2",
            br"123456789012345678901234567890 1",
            br"1e400 x",
            br#""a" "b""#,
            br"tru",
            br"fals\",
            br"falsx",
            br"truex",
            br"nullx",
            br#"["a":null}]"#,
            br#"{"a":"x":1}"#,
            br#"{"a":"x":1,"b":2}"#,
            br"-",
            b"\"\\ud800\\\"",
            br"]",
            br"[}",
            b"\xef\xbb\xbf{}",
            b"{} \xc2\xa0",
            b"[\"\xed\xa0\x80\"]",
            b"[\"\xc0\xaf\"]",
        ];
        let fields = field_set(&["id", "x", "x.a"]);
        let mut failures = Vec::new();
        for &record in cases {
            for fields in [&fields, &FieldSet::new()] {
                match parse_with(&mut SimdjsonParser::new(), record, fields) {
                    Ok(values) => failures.push(format!("{}: accepted: {values:?}", String::from_utf8_lossy(record))),
                    Err(e) if !e.starts_with("invalid JSON") => failures.push(format!("{}: message {e:?}", String::from_utf8_lossy(record))),
                    Err(_) => {}
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert_eq!(difference(cases, &fields), None);
    }

    /// The scan path (`parse_trusted_batch`, which skips what is not of interest and stops
    /// at the last field) gives exactly the values of the validating parse on real events,
    /// for scalar fields, whole objects and arrays, nested fields and missing ones.
    #[test]
    fn trusted_parse_agrees_with_the_validating_parse_on_github_events() {
        let Some(data) = crate::parser::test_support::github_events_text() else { return };
        let records: Vec<&[u8]> = data.lines().filter(|l| !l.trim().is_empty()).map(str::as_bytes).collect();
        let field_sets = [
            field_set(&["id", "actor.id", "repo.id", "type", "payload.action", "payload.pull_request.head.repo.language"]),
            field_set(&["actor", "payload.commits", "created_at"]),
            field_set(&["payload.size", "payload.pull_request.head", "public", "org.login", "no.such.field"]),
            field_set(&["type"]),
        ];
        for fields in &field_sets {
            for chunk in records.chunks(1000) {
                assert_eq!(difference(chunk, fields), None);
            }
        }
    }

    #[test]
    fn error_messages_say_where() {
        let err = parse(r#"{"id":1,"x":[1 2]}"#, &["id"]).expect_err("invalid");
        assert!(err.starts_with("invalid JSON at byte "), "{err}");
        // Stage-1 errors have no position in simdjson: the Rust parser's message.
        let err = parse_with(&mut SimdjsonParser::new(), b"[\"ok\", \"\xe9t\xe9\"]", &FieldSet::new()).expect_err("latin-1");
        assert_eq!(err, "invalid JSON at byte 8: invalid UTF-8");
    }

    #[test]
    fn deep_nesting_falls_back_without_overflowing_the_stack() {
        let depth = 100_000;
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(parse(&format!(r#"{{"a":1,"b":{deep}}}"#), &["a"]).expect("valid"), vec![FieldValue::Int(1)]);
        assert!(parse(&deep, &["a"]).is_ok());
        assert!(parse(&"[".repeat(depth), &["a"]).is_err());
        assert!(parse(&format!("{deep}]"), &["a"]).is_err());
        let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        assert!(parse(&objects, &["b"]).is_ok());
        assert_eq!(parse(&objects, &["a.a.a"]).expect("valid").len(), 1);
        // Just below and at the shim's limit.
        for n in [1020, 1023, 1024, 1025, 1030] {
            let nested = format!("{}{}", "[".repeat(n), "]".repeat(n));
            let record = format!(r#"{{"a":{nested},"b":2}}"#);
            assert_eq!(parse(&record, &["b"]).expect("valid"), vec![FieldValue::Int(2)], "depth {n}");
            assert_eq!(difference(&[record.as_bytes()], &field_set(&["a", "b"])), None);
        }
    }

    #[test]
    fn batches_keep_order_and_the_tree_follows_the_field_set() {
        let records: Vec<&[u8]> = vec![br#"{"a":1,"b":2}"#, b"{", br#"{"a":"x"}"#, b"", br#"{"b":[1]}"#];
        let mut parser = SimdjsonParser::new();
        let got = parse_all(&mut parser, &records, &field_set(&["a"]));
        assert_eq!(got[0], Ok(vec![FieldValue::Int(1)]));
        assert!(got[1].is_err() && got[3].is_err());
        assert_eq!(got[2], Ok(vec![s("x")]));
        let got = parse_all(&mut parser, &records, &field_set(&["b", "a"]));
        assert_eq!(got[0], Ok(vec![FieldValue::Int(2), FieldValue::Int(1)]));
        assert_eq!(got[4], Ok(vec![FieldValue::Array("[1]"), FieldValue::Missing]));
        assert!(parse_all(&mut parser, &[], &field_set(&["a"])).is_empty());
        // Many keys under one node; a record larger than the first ones (buffers grow).
        let many: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        let many_refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let big = format!(r#"{{"pad":"{}","k3":3,"k19":19,"k20":20}}"#, "x".repeat(100_000));
        let values = parse_all(&mut parser, &[br#"{"k1":1}"#, big.as_bytes()], &field_set(&many_refs));
        let values = values[1].as_ref().expect("valid");
        assert_eq!(values[3], FieldValue::Int(3));
        assert_eq!(values[19], FieldValue::Int(19));
        assert_eq!(values.iter().filter(|v| **v == FieldValue::Missing).count(), 18);
    }

    #[test]
    fn json_test_suite() {
        let Some(entries) = super::super::test_support::json_test_suite_files("SimdjsonParser") else { return };
        let field_sets = [FieldSet::new(), field_set(&["a", "a.b", "\"\"", "id"])];
        let mut parser = SimdjsonParser::new();
        let (mut failures, mut accepted, mut rejected) = (Vec::new(), 0, 0);
        for path in &entries {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let results: Vec<_> = field_sets.iter().map(|f| parse_with(&mut parser, &bytes, f)).collect();
            if results[0].is_ok() != results[1].is_ok() {
                failures.push(format!("{name}: acceptance depends on the fields of interest: {results:?}"));
            }
            match (name.as_bytes().first(), &results[0]) {
                (Some(b'y'), Err(e)) => failures.push(format!("{name}: rejected: {e}")),
                (Some(b'n'), Ok(_)) => failures.push(format!("{name}: accepted")),
                (_, Ok(_)) => accepted += 1,
                (_, Err(_)) => rejected += 1,
            }
            // Implementation-defined (i_) files included: the same decision as the Rust parser.
            for fields in &field_sets {
                if let Some(d) = difference(&[&bytes], fields) {
                    failures.push(format!("{name}: differs from OnDemandParser: {d}"));
                }
            }
        }
        eprintln!("JSONTestSuite (simdjson): {} files, {accepted} accepted, {rejected} rejected", entries.len());
        assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    }

    /// JSON text written token by token (not through serde_json), with what serde_json never
    /// prints: escapes of every kind (lone surrogates too), numbers beyond `f64` and `u64`,
    /// long mantissas, odd whitespace, duplicate keys.
    fn arb_text() -> impl Strategy<Value = String> {
        let string = prop::collection::vec(
            prop_oneof![
                "[a-c é😀/]",
                Just("\\n".to_owned()),
                Just("\\\"".to_owned()),
                Just("\\\\".to_owned()),
                Just("\\/".to_owned()),
                "\\\\u[0-9a-fA-F]{4}",
                "\\\\u[dD][89abAB][0-9a-f]{2}",
                "\\\\u[dD][c-fC-F][0-9a-f]{2}",
            ],
            0..5,
        )
        .prop_map(|parts| format!("\"{}\"", parts.concat()));
        let number = "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,22})?([eE][+-]?[0-9]{1,3})?";
        let ws = "[ \t\r\n]{0,2}";
        let leaf = prop_oneof![
            string.clone(),
            number.prop_map(|n| n),
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
        ];
        let key = prop_oneof![
            prop::sample::select(vec!["\"a\"", "\"b\"", "\"c\"", "\"\\u0061\"", "\"\"", "\"\\ud800\""]).prop_map(str::to_owned),
            string,
        ];
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                (prop::collection::vec((inner.clone(), ws), 0..4)).prop_map(|items| {
                    format!("[{}]", items.iter().map(|(v, w)| format!("{w}{v}{w}")).collect::<Vec<_>>().join(","))
                }),
                (prop::collection::vec((key.clone(), inner, ws), 0..5)).prop_map(|fields| {
                    format!(
                        "{{{}}}",
                        fields.iter().map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}{w}")).collect::<Vec<_>>().join(",")
                    )
                }),
            ]
        })
    }

    const PROP_PATHS: &[&[&str]] = &[
        &["a"],
        &["b"],
        &["a", "b"],
        &["a", "c"],
        &["b", "a", "c"],
        &["q\"\n"],
        &["a", "q\"\n", "é/~"],
        &[""],
        &["c", "", "c"],
        &["\u{FFFD}"],
    ];

    fn prop_fields() -> FieldSet {
        let mut fields = FieldSet::new();
        for path in PROP_PATHS {
            fields.insert(&FieldPath::from_segments(path.iter().copied()).expect("non-empty"));
        }
        fields
    }

    /// `bytes` with up to three random edits (inserted, removed or replaced bytes, cuts).
    fn mutate(mut bytes: Vec<u8>, edits: &[(prop::sample::Index, u8, u8)]) -> Vec<u8> {
        for (at, kind, byte) in edits {
            let i = at.index(bytes.len() + 1);
            let byte = *b"{}[]\",:\\ 0-.eE\x01tfn\xff\xc3xu9".get(usize::from(*byte) % 25).unwrap_or(byte);
            match kind {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => {
                    bytes.remove(i);
                }
                2 if i < bytes.len() => bytes[i] = byte,
                _ => bytes.truncate(i),
            }
        }
        bytes
    }

    proptest! {
        // `PROPTEST_CASES=100000` for a longer run.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
        ))]

        /// Valid documents from serde_json: both parsers accept them, with equal values.
        #[test]
        fn same_values_as_ondemand_on_serde_documents(
            doc in prop::collection::btree_map(arb_key(), arb_json(), 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            pretty in any::<bool>(),
        ) {
            let text = if pretty { serde_json::to_string_pretty(&doc) } else { serde_json::to_string(&doc) }.expect("serializable");
            let fields = prop_fields();
            prop_assert!(parse_with(&mut SimdjsonParser::new(), text.as_bytes(), &fields).is_ok(), "rejected {}", text);
            prop_assert_eq!(difference(&[text.as_bytes()], &fields), None);
        }

        /// Hand-written JSON text (escapes, big numbers, duplicates), whole and mutated.
        #[test]
        fn same_as_ondemand_on_written_and_mutated_text(
            text in arb_text(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 0..4),
        ) {
            let fields = prop_fields();
            prop_assert_eq!(difference(&[text.as_bytes()], &fields), None);
            let mutated = mutate(text.into_bytes(), &edits);
            prop_assert_eq!(difference(&[&mutated], &fields), None);
            prop_assert_eq!(difference(&[&mutated], &FieldSet::new()), None);
        }

        /// Mutated serde_json documents, several to a batch: the same acceptance and values.
        #[test]
        fn same_as_ondemand_on_mutated_documents(
            docs in prop::collection::vec(
                (arb_json(), prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 0..4)),
                1..6,
            ),
        ) {
            let records: Vec<Vec<u8>> = docs
                .into_iter()
                .map(|(doc, edits)| mutate(serde_json::to_vec(&doc).expect("serializable"), &edits))
                .collect();
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(difference(&refs, &prop_fields()), None);
            prop_assert_eq!(difference(&refs, &field_set(&["a", "a.b", "c"])), None);
        }
    }
}
