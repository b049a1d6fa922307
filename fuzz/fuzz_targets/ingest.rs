//! Ingestion of untrusted records: both JSON parsers (the simdjson shim through the
//! default parser), PSF evaluation, schema inference and the Arrow batch builder. Each
//! input is split into records at newlines; a batch is accepted or refused whole, and a
//! whole-record scan afterwards returns exactly the records accepted. The On-Demand
//! scanner's trusted pass (index scans) never panics on any input, and on every record the
//! validating pass accepts it gives the same values.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use shoal_core::parser::{FieldSet, OnDemandParser, ParsedBatch, RecordParser};
use shoal_core::path::FieldPath;
use shoal_core::psf::PsfSpec;
use shoal_core::scan::ScanRequest;
use shoal_core::table::{InvalidJsonPolicy, Table, TableConfig};

fn table(policy: InvalidJsonPolicy) -> Arc<Table> {
    let mut config = TableConfig { on_invalid_json: policy, index_size_bits: 10, ..TableConfig::in_memory_window(1 << 20) };
    config.log.page_size_bits = 16;
    let table = Table::create(config).expect("table");
    table.register_psf("type", &PsfSpec::Projection { field: "type".into() }).expect("psf");
    table.register_psf("big", &PsfSpec::Predicate { expr: "a.b > 5 OR c LIKE 'x%'".into() }).expect("psf");
    table.register_psf("size", &PsfSpec::range("n", vec![0.0, 10.0])).expect("psf");
    table
}

fuzz_target!(|data: &[u8]| {
    let records: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let mut fields = FieldSet::new();
    for path in ["type", "a", "a.b", "n", "c"] {
        fields.insert(&FieldPath::parse(path).expect("valid path"));
    }
    let mut parser = OnDemandParser::new();
    let (mut checked, mut trusted) = (ParsedBatch::default(), ParsedBatch::default());
    parser.parse_batch(&records, &fields, &mut checked);
    parser.parse_trusted_batch(&records, &fields, &mut trusted);
    for i in 0..records.len() {
        if let Ok(values) = checked.record(i) {
            assert_eq!(trusted.record(i), Ok(values), "trusted pass vs validating pass");
        }
    }
    for policy in [InvalidJsonPolicy::Reject, InvalidJsonPolicy::Skip] {
        // A fresh table per input keeps every run independent of the ones before.
        let table = table(policy);
        let before = table.stats().records;
        let accepted = match table.ingest(&records) {
            Ok(report) => report.records as u64,
            Err(_) => 0,
        };
        assert_eq!(table.stats().records, before + accepted);
        let (batches, _) = table.scan(&ScanRequest::default()).expect("whole-record scan");
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows as u64, accepted, "scan rows vs accepted records");
        let _ = table.schema();
        // Joins the table's threads (flush, observer, compactor) before the next input:
        // a thread still exiting when the leak checker runs shows its thread-local
        // destructors' registration as a leak.
        table.shutdown();
    }
});
