//! Every action body against an on-disk catalog, checking where files land: a name that
//! becomes a path (a table's directory, a transaction's staging file, a checkpoint) must
//! stay inside the data directory's `tables/<valid table name>/`, and nothing outside it
//! may be written or removed (a `cluster_define` name `../tables/victim/table` once
//! overwrote another table's metadata). After each input the fuzzer walks its root: an
//! entry outside the allowed places, or a missing sentinel, panics.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use shoal_ops::catalog::{validate_table_name, Catalog};
use shoal_ops::config::EngineConfig;
use shoal_ops::ops;

/// Most tables kept between inputs (the others are dropped after each input).
const KEEP_TABLES: usize = 8;

struct Fixture {
    catalog: Catalog,
    root: PathBuf,
    data: PathBuf,
    /// The data directory's own entries after the catalog opened and made its first table.
    own: Vec<PathBuf>,
}

fn fixture() -> &'static Mutex<Fixture> {
    static FIXTURE: OnceLock<Mutex<Fixture>> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("shoal-fuzz-actions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data");
        std::fs::create_dir_all(&data).expect("root");
        std::fs::write(root.join("sentinel"), b"outside").expect("sentinel");
        let config = EngineConfig { data_dir: data.clone(), memory_budget_bytes: 4 << 20, checkpoint_interval_secs: 0, ..EngineConfig::default() };
        let catalog = Catalog::open(config).expect("catalog");
        ops::run_action(&catalog, "create_table", br#"{"name": "t", "columnar": {"enabled": false}}"#).expect("create");
        let own = entries(&data).into_iter().filter(|p| !p.starts_with(data.join("tables"))).collect();
        Mutex::new(Fixture { catalog, root, data, own })
    })
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else { continue };
        for entry in read.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// Panics on an entry under `root` that is neither the sentinel, the data directory's own
/// entries, nor inside `tables/<a valid table name>`.
fn check(fixture: &Fixture) {
    assert_eq!(std::fs::read(fixture.root.join("sentinel")).ok().as_deref(), Some(&b"outside"[..]), "the file outside the data directory changed");
    let tables = fixture.data.join("tables");
    for path in entries(&fixture.root) {
        if path == fixture.root.join("sentinel") || path == fixture.data || path == tables || fixture.own.contains(&path) {
            continue;
        }
        let Ok(rest) = path.strip_prefix(&tables) else { panic!("a file outside tables/: {}", path.display()) };
        let name = rest.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or("");
        assert!(validate_table_name(name).is_ok(), "a table directory with an invalid name: {}", path.display());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let fixture = fixture().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // The protocol's actions, as the daemon declares them (their table's order).
    let action = ops::ACTIONS[usize::from(selector) % ops::ACTIONS.len()].name;
    let _ = ops::run_action(&fixture.catalog, action, body);
    check(&fixture);
    let extra: Vec<String> = fixture.catalog.list().iter().map(|e| e.name.clone()).filter(|n| n != "t").skip(KEEP_TABLES).collect();
    for name in extra {
        let body = serde_json::json!({"name": name}).to_string();
        let _ = ops::run_action(&fixture.catalog, "drop_table", body.as_bytes());
    }
});
