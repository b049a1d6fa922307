//! Parser on `sonic-rs`. (being written)
use super::{FieldSet, ParsedBatch, RecordParser};

/// Parser on `sonic-rs`.
#[derive(Debug, Default)]
pub struct SonicParser;
impl SonicParser {
    /// New parser.
    #[must_use]
    pub fn new() -> Self { Self }
}
impl RecordParser for SonicParser {
    fn parse_batch<'a>(&mut self, _records: &[&'a [u8]], _fields: &FieldSet, _out: &mut ParsedBatch<'a>) { todo!() }
    fn name(&self) -> &'static str { "sonic-rs" }
}
