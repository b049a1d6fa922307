//! Full scans choose their records' parser per page (`FullScanParser::Adaptive`, the
//! default): on real GitHub events, every choice returns exactly the rows of each forced
//! parser, in the same order, and the scan reports how many records each parsed.

mod common;

use shoal_core::parser::FullScanParser;
use shoal_core::psf::parse_expr;
use shoal_core::scan::{plan_scan, ScanRequest, ScanStats};
use shoal_core::table::{Table, TableConfig};
use shoal_core::FieldPath;

fn full_scan(table: &Table, filter: &str, parser: FullScanParser) -> (Vec<String>, ScanStats) {
    let request = ScanRequest {
        filter: Some(parse_expr(filter).expect("filter")),
        columns: vec![FieldPath::parse("id").expect("path"), FieldPath::parse("actor.login").expect("path")],
        full_scan_parser: parser,
        ..ScanRequest::default()
    };
    let plan = plan_scan(request.filter.as_ref(), &[], table.log().begin_address(), table.log().tail_address());
    let mut batches = Vec::new();
    let stats = table
        .scan_with_plan(&request, &plan, &mut |b| {
            batches.push(b);
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .expect("scan");
    (common::strings(&batches, 0), stats)
}

#[test]
fn every_parser_choice_returns_the_same_rows_and_counts_what_it_parsed() {
    let Some(lines) = common::github_events(4_000) else { return };
    let table = Table::create(TableConfig::in_memory(64 << 20)).expect("table");
    for chunk in lines.chunks(500) {
        let refs: Vec<&[u8]> = chunk.iter().map(String::as_bytes).collect();
        table.ingest(&refs).expect("ingest");
    }
    // Fields at the start of each event (type), deep and often absent (the pull
    // request's language), numbers (payload.size), and no match at all.
    for filter in [
        "type = 'PushEvent'",
        "payload.pull_request.head.repo.language = 'C++'",
        "payload.size > 2 OR actor.login LIKE 'a%'",
        "type = 'NoSuchEvent'",
    ] {
        let (simdjson, forced) = full_scan(&table, filter, FullScanParser::Simdjson);
        assert_eq!(forced.full_scan_parsed.simdjson, forced.full_scan_records, "{filter}");
        assert_eq!(forced.full_scan_parsed.on_demand, 0, "{filter}");
        let (on_demand, forced) = full_scan(&table, filter, FullScanParser::OnDemand);
        assert_eq!(forced.full_scan_parsed.on_demand, forced.full_scan_records, "{filter}");
        let (adaptive, stats) = full_scan(&table, filter, FullScanParser::Adaptive);
        assert_eq!(simdjson, on_demand, "{filter}");
        assert_eq!(simdjson, adaptive, "{filter}");
        assert_eq!(stats.full_scan_records, lines.len() as u64, "{filter}");
        let parsed = stats.full_scan_parsed;
        assert_eq!(parsed.simdjson + parsed.on_demand, stats.full_scan_records, "{filter}: {parsed:?}");
        // The first page holds well over 4 × SAMPLE_RECORDS events: both parsers had a full sample.
        assert!(parsed.simdjson >= 128 && parsed.on_demand >= 128, "{filter}: {parsed:?}");
    }
}
