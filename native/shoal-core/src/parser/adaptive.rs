//! The choice of parser for a full scan's records, made while the scan runs.
//!
//! A scan reads only the fields of interest of each record (FishStore §5.1). Two trusted
//! passes can do it, and which is faster depends on the data and the fields: simdjson
//! runs its stage 1 over the whole record (a steady ~4 GiB/s), while shoal's On-Demand
//! scanner stops at the last field of interest it finds — far faster when the fields sit
//! near the start of each record (`type` of a GitHub event: 26 GiB/s), slower when they
//! are often absent, so that it must read every record to its end (2.7 GiB/s;
//! `benches/parser.rs`). Neither the planner nor the user can know which case a query is
//! in, so a full scan measures: a batch (a page) of at least [`PROBE_MIN_RECORDS`] records
//! — each of the first four, then one in eight — has two small samples parsed, one by
//! each parser, timed per byte; the rest of the batch goes to the parser whose running
//! cost is lower. Other batches go to the current choice untimed.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{FieldSet, ParsedBatch, RecordParser};

/// Which parser a full scan gives its pages' records (index scans' candidates always go
/// to the On-Demand scanner: candidates mostly hold the filter's fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullScanParser {
    /// Chosen per page by measuring both ([`AdaptiveChoice`]); the default.
    #[default]
    Adaptive,
    /// simdjson's On-Demand API (stage 1 over each whole record).
    Simdjson,
    /// shoal's On-Demand scanner (stops at the last field of interest).
    OnDemand,
}

/// Records per sample at most: each of the two parsers parses one sample of a probed
/// batch, of a quarter of the batch up to this many records.
pub const SAMPLE_RECORDS: usize = 128;

/// Records per sample at least.
pub const MIN_SAMPLE_RECORDS: usize = 16;

/// A batch is probed when it holds at least this many records (two samples and at
/// least as much again for the winner); smaller ones go to the current choice. Small
/// pages (`page_size_bits` 16 holds ~30–130 GitHub events) are still probed.
pub const PROBE_MIN_RECORDS: usize = 4 * MIN_SAMPLE_RECORDS;

/// Weight of the newest sample in a parser's running cost (exponential moving average).
const NEW_SAMPLE_WEIGHT: f64 = 0.3;

/// Every large batch is probed until this many probes were made; then one in
/// [`PROBE_EVERY`], so that the slower parser's samples cost little once the choice is
/// clear, while a change in the data (another part of the log) is still noticed.
const EAGER_PROBES: u64 = 4;

/// See [`EAGER_PROBES`].
const PROBE_EVERY: u64 = 8;

/// The running state of a scan's choice between two parsers (see the module's
/// documentation): each one's cost in nanoseconds per byte of record, and how many
/// records each parsed.
#[derive(Debug, Default, Clone)]
pub struct AdaptiveChoice {
    /// Nanoseconds per byte of record, per parser (`None`: not measured yet).
    cost: [Option<f64>; 2],
    /// Probes made; their order alternates, so that neither parser always parses the
    /// first sample.
    probes: u64,
    /// Batches of at least [`PROBE_MIN_RECORDS`] seen.
    large_batches: u64,
    /// Records parsed by each parser.
    pub records: [u64; 2],
}

impl AdaptiveChoice {
    /// The parser (0 or 1) with the lower running cost; 0 until both were measured.
    #[must_use]
    pub fn current(&self) -> usize {
        match self.cost {
            [Some(a), Some(b)] if b < a => 1,
            _ => 0,
        }
    }

    /// Parses `records` into `out` (as [`RecordParser::parse_trusted_batch`], in order)
    /// with `parsers[0]` or `parsers[1]`: a batch of at least [`PROBE_MIN_RECORDS`] (each
    /// of the first four, then one in eight) has a sample (a quarter of the batch, at
    /// most [`SAMPLE_RECORDS`]) timed on each, and the rest goes to the cheaper of the two
    /// by their running costs; other batches go to [`current`](Self::current).
    pub fn parse_trusted<'a>(
        &mut self,
        parsers: [&mut dyn RecordParser; 2],
        records: &[&'a [u8]],
        fields: &FieldSet,
        out: &mut ParsedBatch<'a>,
    ) {
        let [first, second] = parsers;
        let probe = records.len() >= PROBE_MIN_RECORDS && {
            self.large_batches += 1;
            self.probes < EAGER_PROBES || self.large_batches.is_multiple_of(PROBE_EVERY)
        };
        if !probe {
            let choice = self.current();
            let parser = if choice == 0 { first } else { second };
            parser.parse_trusted_batch(records, fields, out);
            self.records[choice] += records.len() as u64;
            return;
        }
        let order = if self.probes.is_multiple_of(2) { [0, 1] } else { [1, 0] };
        self.probes += 1;
        let parsers = [first, second];
        let mut part = ParsedBatch::default();
        out.reset(fields.len());
        let size = (records.len() / 4).min(SAMPLE_RECORDS);
        for (i, &which) in order.iter().enumerate() {
            let sample = &records[i * size..(i + 1) * size];
            let bytes: usize = sample.iter().map(|r| r.len()).sum();
            let started = Instant::now();
            parsers[which].parse_trusted_batch(sample, fields, &mut part);
            let per_byte = started.elapsed().as_nanos() as f64 / bytes.max(1) as f64;
            self.cost[which] = Some(match self.cost[which] {
                None => per_byte,
                Some(old) => old + NEW_SAMPLE_WEIGHT * (per_byte - old),
            });
            self.records[which] += sample.len() as u64;
            out.append(&mut part);
        }
        let rest = &records[2 * size..];
        let choice = self.current();
        parsers[choice].parse_trusted_batch(rest, fields, &mut part);
        self.records[choice] += rest.len() as u64;
        out.append(&mut part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{OnDemandParser, SimdjsonParser};
    use crate::path::FieldPath;
    use crate::value::FieldValue;

    /// A parser that answers like `inner` after burning `spin` per record.
    struct Slowed<P> {
        inner: P,
        spin: std::time::Duration,
    }

    impl<P: RecordParser> RecordParser for Slowed<P> {
        fn parse_batch<'a>(&mut self, records: &[&'a [u8]], fields: &FieldSet, out: &mut ParsedBatch<'a>) {
            let until = Instant::now() + self.spin * u32::try_from(records.len()).unwrap();
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            self.inner.parse_batch(records, fields, out);
        }

        fn name(&self) -> &'static str {
            "slowed"
        }
    }

    fn fields(paths: &[&str]) -> FieldSet {
        let mut set = FieldSet::new();
        for p in paths {
            set.insert(&FieldPath::parse(p).unwrap());
        }
        set
    }

    fn values<'a>(batch: &ParsedBatch<'a>) -> Vec<Result<Vec<FieldValue<'a>>, String>> {
        (0..batch.len()).map(|i| batch.record(i).map(<[_]>::to_vec).map_err(str::to_owned)).collect()
    }

    #[test]
    fn a_probed_batch_answers_what_either_parser_answers_in_order() {
        let text: Vec<String> = (0..2000)
            .map(|i| match i % 3 {
                0 => format!(r#"{{"type": "A{i}", "n": {i}, "tail": [1, 2, {{"x": "y"}}]}}"#),
                1 => format!(r#"{{"n": {i}, "nested": {{"type": false}}}}"#),
                _ => format!(r#"{{"other": "\u00e9", "type": {i}.5}}"#),
            })
            .collect();
        let records: Vec<&[u8]> = text.iter().map(|t| t.as_bytes()).collect();
        let fields = fields(&["type", "n"]);
        let mut choice = AdaptiveChoice::default();
        let (mut simdjson, mut ondemand) = (SimdjsonParser::new(), OnDemandParser::new());
        // Batches of every size around the probe threshold, probed and not.
        let mut start = 0;
        for size in [1, PROBE_MIN_RECORDS - 1, PROBE_MIN_RECORDS, 700, 0, 11, 4 * SAMPLE_RECORDS + 3, 65] {
            let batch = &records[start..start + size];
            let mut out = ParsedBatch::default();
            choice.parse_trusted([&mut simdjson, &mut ondemand], batch, &fields, &mut out);
            let mut expected = ParsedBatch::default();
            SimdjsonParser::new().parse_trusted_batch(batch, &fields, &mut expected);
            assert_eq!(values(&out), values(&expected), "batch of {size} from {start}");
            start += size;
        }
        assert_eq!(choice.records.iter().sum::<u64>(), start as u64);
    }

    #[test]
    fn the_cheaper_parser_takes_the_rest_of_each_probed_batch() {
        let text: Vec<String> = (0..SAMPLE_RECORDS * 4 * 3).map(|i| format!(r#"{{"type": "T{i}"}}"#)).collect();
        let records: Vec<&[u8]> = text.iter().map(|t| t.as_bytes()).collect();
        let fields = fields(&["type"]);
        for slow in [0, 1] {
            let spin = std::time::Duration::from_micros(20);
            let mut fast = OnDemandParser::new();
            let mut slowed = Slowed { inner: OnDemandParser::new(), spin };
            let parsers: [&mut dyn RecordParser; 2] = if slow == 0 { [&mut slowed, &mut fast] } else { [&mut fast, &mut slowed] };
            let mut choice = AdaptiveChoice::default();
            let [a, b] = parsers;
            for batch in records.chunks(4 * SAMPLE_RECORDS) {
                let mut out = ParsedBatch::default();
                choice.parse_trusted([&mut *a, &mut *b], batch, &fields, &mut out);
                assert_eq!(out.len(), batch.len());
            }
            assert_eq!(choice.current(), 1 - slow, "the slowed parser is {slow}: {choice:?}");
            // The slowed parser parsed only its samples.
            assert_eq!(choice.records[slow], 3 * SAMPLE_RECORDS as u64, "{choice:?}");
            // Small batches go to the current choice.
            let mut out = ParsedBatch::default();
            choice.parse_trusted([&mut *a, &mut *b], &records[..10], &fields, &mut out);
            assert_eq!(choice.records[1 - slow], (3 * 4 * SAMPLE_RECORDS - 3 * SAMPLE_RECORDS + 10) as u64);
        }
    }
}
