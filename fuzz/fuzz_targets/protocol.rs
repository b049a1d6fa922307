//! The Flight protocol's untrusted bodies, against a real catalog (in memory) holding a
//! table with records and PSFs: GetFlightInfo commands, DoGet tickets (forged or not),
//! action bodies, and Flight SQL statements (parsed, planned, run and shaped). Every input
//! gets an answer or a status; none panics.
#![no_main]

use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use shoal_ops::catalog::Catalog;
use shoal_ops::config::EngineConfig;
use shoal_ops::ops;
use shoal_ops::sql::{self, Parameters, Shaper};

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let config = EngineConfig { in_memory: true, memory_budget_bytes: 16 << 20, ..EngineConfig::default() };
        let catalog = Catalog::open(config).expect("catalog");
        ops::run_action(&catalog, "create_table", br#"{"name": "t"}"#).expect("create");
        ops::run_action(&catalog, "register_psf", br#"{"table": "t", "name": "type", "kind": "projection", "field": "type"}"#)
            .expect("psf");
        let table = &catalog.get("t").expect("table").table;
        let records: [&[u8]; 4] = [
            br#"{"id": 1, "type": "PushEvent", "actor": {"login": "a"}, "n": 3}"#,
            br#"{"id": "2", "type": "IssuesEvent", "a.b": [1, {"c": null}], "n": 1.5}"#,
            br#"{"id": 3, "type": null, "actor": "x", "n": -7}"#,
            br#"{}"#,
        ];
        table.ingest(&records).expect("records");
        catalog
    })
}

fuzz_target!(|data: &[u8]| {
    let catalog = catalog();
    let Some((&selector, body)) = data.split_first() else { return };
    match selector % 5 {
        0 => {
            let _ = ops::plan_query(catalog, body);
        }
        1 => {
            if let Ok(ops::TicketScan::Rows(scan)) = ops::open_ticket(catalog, body) {
                let _ = scan.run(&mut |_| std::ops::ControlFlow::Continue(()));
            }
        }
        2 => {
            // Read-only actions and PSF registration (bounded by the input's size).
            for name in ["stats", "list_psfs", "writer_status", "list_transactions"] {
                let _ = ops::run_action(catalog, name, body);
            }
        }
        4 => {
            let Ok(text) = std::str::from_utf8(body) else { return };
            let _ = sql::parameter_schema(catalog, text);
            let Ok(statement) = sql::parse_sql(text, Parameters::Unbound) else { return };
            let command = serde_json::to_vec(&statement.command).expect("a command serialises");
            let Ok(planned) = ops::plan_query(catalog, &command) else { return };
            let Ok(mut shaper) = Shaper::new(&statement.shape, &Arc::new(planned.schema)) else { return };
            for endpoint in &planned.endpoints {
                match ops::open_ticket(catalog, &endpoint.ticket) {
                    Ok(ops::TicketScan::Rows(scan)) => {
                        let _ = scan.run(&mut |batch| {
                            let _ = shaper.push(batch);
                            ControlFlow::Continue(())
                        });
                    }
                    Ok(ops::TicketScan::Aggregates(batch)) => {
                        let _ = shaper.push(batch);
                    }
                    Err(_) => {}
                }
            }
            let _ = shaper.finish();
        }
        _ => {
            if ops::run_action(catalog, "register_psf", body).is_ok() {
                let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
                if let Some(name) = parsed.get("name").and_then(|n| n.as_str()) {
                    let body = serde_json::json!({"table": "t", "name": name}).to_string();
                    let _ = ops::run_action(catalog, "deregister_psf", body.as_bytes());
                }
            }
        }
    }
});
