//! Sharded tables: their definitions (the shard map), kept by every node, and the routing
//! of a record to its shard by its shard key.
//!
//! Shard `i` of table `T` is an ordinary table named `T.shard-i` on node `i mod N` (`N`:
//! the number of nodes when `T` was made); it keeps its own log, PSFs, safe boundaries and
//! recovery. A definition is a JSON file `<data_dir>/cluster/<T>.json`, written atomically
//! on every node, so that any node can plan, route and fan out for `T`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most shards a table may have.
pub const MAX_SHARDS: usize = 4096;

/// What separates a table's name from its shard number in the shards' own table names.
pub const SHARD_INFIX: &str = ".shard-";

/// A sharded table's definition: how many shards, where they live, how records are routed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardedTable {
    /// The table's name (what clients use).
    pub name: String,
    /// Number of shards, `1..=MAX_SHARDS`.
    pub shards: usize,
    /// Dotted paths whose values route a record (empty: records are spread by batch,
    /// round-robin over the shards).
    pub shard_key: Vec<String>,
    /// Number of nodes when the table was made: shard `i` lives on node `i mod nodes`.
    pub nodes: usize,
    /// The `create_table` body every shard is made with (without `name`, `shards`,
    /// `shard_key`, `if_not_exists`).
    pub options: serde_json::Map<String, Value>,
    /// Shards moved off their first node (`move_shard`): shard number → node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub placement: BTreeMap<usize, usize>,
}

impl ShardedTable {
    /// Checks what a definition may hold before anything acts on it or writes it: the name
    /// is a table name (`shoal_ops::catalog::validate_table_name`: no path separators, not
    /// starting with `.`, at most 128 characters — it becomes the file name
    /// `<data_dir>/cluster/<name>.json`), `shards` is within `1..=MAX_SHARDS` and `nodes`
    /// within `1..=MAX_NODES`.
    ///
    /// # Errors
    /// A message naming the field and the value.
    pub fn validate(&self) -> Result<(), String> {
        shoal_ops::catalog::validate_table_name(&self.name).map_err(|e| e.to_string())?;
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(format!("\"shards\" must be an integer in 1..={MAX_SHARDS}, got {}", self.shards));
        }
        if !(1..=super::config::MAX_NODES).contains(&self.nodes) {
            return Err(format!("\"nodes\" must be an integer in 1..={}, got {}", super::config::MAX_NODES, self.nodes));
        }
        if let Some((shard, node)) = self.placement.iter().find(|(&shard, &node)| shard >= self.shards || node >= super::config::MAX_NODES) {
            return Err(format!("\"placement\" puts shard {shard} on node {node}: the table has {} shards", self.shards));
        }
        Ok(())
    }

    /// Whether `other` defines the same table, wherever its shards are now.
    #[must_use]
    pub fn same_table(&self, other: &ShardedTable) -> bool {
        self.name == other.name && self.shards == other.shards && self.shard_key == other.shard_key && self.nodes == other.nodes && self.options == other.options
    }

    /// The table name of shard `shard` (`events.shard-2`).
    #[must_use]
    pub fn shard_table(&self, shard: usize) -> String {
        format!("{}{SHARD_INFIX}{shard}", self.name)
    }

    /// The node holding shard `shard`: where a move put it, else `shard mod nodes`.
    #[must_use]
    pub fn node_of(&self, shard: usize) -> usize {
        self.placement.get(&shard).copied().unwrap_or(shard % self.nodes.max(1))
    }

    /// The shards that can hold a record matching `filter`, when the filter pins every
    /// shard-key path to literal values (`key = v`, `key IN (…)`, alone or among the terms
    /// of an `AND`): partition pruning, as Kudu and Paimon do. `None`: every shard. A
    /// number pins both its integer and its float spelling (`7` and `7.0` are equal in SQL
    /// and hash apart).
    #[must_use]
    pub fn prune(&self, filter: Option<&str>) -> Option<Vec<usize>> {
        use shoal_core::psf::{CmpOp, Expr, Literal};
        if self.shard_key.is_empty() {
            return None;
        }
        // The filter was held to its caller's limit before the plan (a SQL statement's is rendered).
        let expr = shoal_core::psf::expr::parse_expr_within(filter?, shoal_core::psf::expr::MAX_RENDERED_EXPR_BYTES).ok()?;
        let terms: &[Expr] = match &expr {
            Expr::And(terms) => terms,
            single => std::slice::from_ref(single),
        };
        let spellings = |literal: &Literal| -> Option<Vec<Value>> {
            Some(match literal {
                Literal::Str(text) => vec![Value::String(text.clone())],
                Literal::Bool(b) => vec![Value::Bool(*b)],
                #[allow(clippy::cast_precision_loss)]
                Literal::Int(i) => vec![Value::from(*i), Value::from(*i as f64)],
                #[allow(clippy::cast_possible_truncation)]
                Literal::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => vec![Value::from(*f), Value::from(*f as i64)],
                Literal::Float(f) => vec![Value::from(*f)],
                // An instant equals strings of many spellings: every shard may hold one.
                Literal::Null | Literal::Timestamp(_) => return None,
            })
        };
        let mut candidates: Vec<Vec<Value>> = Vec::with_capacity(self.shard_key.len());
        for key in &self.shard_key {
            let key = shoal_core::FieldPath::parse(key).ok()?;
            let values = terms.iter().find_map(|term| match term {
                Expr::Cmp { path, op: CmpOp::Eq, value } if *path == key => spellings(value),
                Expr::In { path, list, negated: false } if *path == key => {
                    list.iter().map(spellings).collect::<Option<Vec<_>>>().map(|v| v.concat())
                }
                _ => None,
            })?;
            candidates.push(values);
        }
        if candidates.iter().map(Vec::len).product::<usize>() > MAX_PRUNED_COMBINATIONS {
            return None;
        }
        let mut shards = std::collections::BTreeSet::new();
        let mut combination = vec![0usize; candidates.len()];
        loop {
            let values: Vec<Option<&Value>> = combination.iter().zip(&candidates).map(|(&i, c)| c.get(i)).collect();
            #[allow(clippy::cast_possible_truncation)]
            shards.insert((hash_key_values(&values) % self.shards as u64) as usize);
            let Some(position) = (0..combination.len()).rev().find(|&p| combination[p] + 1 < candidates[p].len()) else { break };
            combination[position] += 1;
            for later in &mut combination[position + 1..] {
                *later = 0;
            }
        }
        Some(shards.into_iter().collect())
    }

    /// The shard a record (JSON text) goes to: the FNV-1a hash of its shard key's values,
    /// modulo the number of shards ([`hash_key_values`]); where an object names a member
    /// twice, the first counts (the one the engine stores). A record that is not JSON goes
    /// to shard 0, whose table applies its `on_invalid_json` policy to it; JSON that is not
    /// an object has every key path absent.
    #[must_use]
    pub fn shard_of(&self, record: &[u8]) -> usize {
        // Names borrowed from the record; one with escapes needs them decoded (owned).
        let values = key_values::<&str>(record, &self.shard_key).or_else(|| key_values::<String>(record, &self.shard_key));
        let hash = match values {
            Some(values) => hash_key_values(&values.iter().map(Option::as_ref).collect::<Vec<_>>()),
            None => match serde_json::from_slice::<Value>(record) {
                Ok(_) => hash_key_values(&vec![None; self.shard_key.len()]),
                Err(_) => return 0,
            },
        };
        #[allow(clippy::cast_possible_truncation)] // the remainder is below `shards`
        let shard = (hash % self.shards as u64) as usize;
        shard
    }
}

/// A JSON object's members by name, values as raw text; of a name given twice the first
/// member is kept, as the engine's parser keeps it (a record is routed by the key value it
/// is stored with). `K`: `&str` borrows the names (fails on a name with escapes), `String`
/// decodes them.
struct FirstWins<'a, K>(std::collections::HashMap<K, &'a serde_json::value::RawValue>);

impl<'de: 'a, 'a, K: Deserialize<'de> + Eq + std::hash::Hash> Deserialize<'de> for FirstWins<'a, K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members<'a, K>(std::marker::PhantomData<(&'a (), K)>);
        impl<'de: 'a, 'a, K: Deserialize<'de> + Eq + std::hash::Hash> serde::de::Visitor<'de> for Members<'a, K> {
            type Value = FirstWins<'a, K>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = std::collections::HashMap::new();
                while let Some(name) = map.next_key::<K>()? {
                    let value: &'de serde_json::value::RawValue = map.next_value()?;
                    members.entry(name).or_insert(value);
                }
                Ok(FirstWins(members))
            }
        }
        deserializer.deserialize_map(Members(std::marker::PhantomData))
    }
}

/// The values of `key`'s paths in `record` (`None`: absent), reading only the objects on
/// the way to them (the other values are skipped as raw text, not built); the first of
/// duplicate names counts ([`FirstWins`]). `None` when the record is not a JSON object (or,
/// with `K = &str`, names a member with escapes on the way).
fn key_values<'a, K>(record: &'a [u8], key: &[String]) -> Option<Vec<Option<Value>>>
where
    K: Deserialize<'a> + Eq + std::hash::Hash + std::borrow::Borrow<str>,
{
    let top: FirstWins<'a, K> = serde_json::from_slice(record).ok()?;
    let mut values = Vec::with_capacity(key.len());
    for path in key {
        let mut steps = path.split('.');
        let mut raw = steps.next().and_then(|step| top.0.get(step).copied());
        for step in steps {
            let Some(current) = raw else { break };
            raw = if current.get().starts_with('{') {
                let object: FirstWins<'a, K> = serde_json::from_str(current.get()).ok()?;
                object.0.get(step).copied()
            } else {
                None
            };
        }
        values.push(match raw {
            None => None,
            Some(raw) => Some(serde_json::from_str::<Value>(raw.get()).ok()?),
        });
    }
    Some(values)
}

/// The routing hash of a record's shard key values (`None`: the path is absent): 64-bit
/// FNV-1a over each value — a string's UTF-8 bytes, any other value's compact JSON text
/// (`null` when absent) — with a 0x1F byte between values. Stable across versions and
/// languages: the connectors compute the same (`dev.shoal.client.ShardRouting`) to send
/// records to their shard's node directly.
fn hash_key_values(values: &[Option<&Value>]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            feed(&[0x1f]);
        }
        match value {
            Some(Value::String(text)) => feed(text.as_bytes()),
            Some(other) => feed(other.to_string().as_bytes()),
            None => feed(b"null"),
        }
    }
    hash
}

/// The most key-value combinations a filter may name for [`ShardedTable::prune`] to use them.
const MAX_PRUNED_COMBINATIONS: usize = 256;

/// The sharded tables this node knows, by name, and the directory that keeps them.
pub struct ShardMap {
    dir: Option<PathBuf>,
    tables: RwLock<BTreeMap<String, Arc<ShardedTable>>>,
}

impl ShardMap {
    /// The definitions under `dir` (`None`: in memory only).
    ///
    /// # Errors
    /// A message naming the file that cannot be read or parsed.
    pub fn open(dir: Option<PathBuf>) -> Result<Self, String> {
        let mut tables = BTreeMap::new();
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            for entry in entries {
                let path = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?.path();
                if path.extension().and_then(|e| e.to_str()) != Some("json") {
                    continue;
                }
                let Some(file) = path.file_name().and_then(|f| f.to_str()) else { continue };
                let table: ShardedTable = shoal_core::checkpoint::read_json(dir, file)
                    .map_err(|e| format!("invalid sharded-table definition {}: {e}", path.display()))?
                    .ok_or_else(|| format!("{} vanished", path.display()))?;
                table.validate().map_err(|e| format!("invalid sharded-table definition {}: {e}", path.display()))?;
                tables.insert(table.name.clone(), Arc::new(table));
            }
        }
        Ok(Self { dir, tables: RwLock::new(tables) })
    }

    /// The definition of `name`, if it is a sharded table.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<ShardedTable>> {
        self.tables.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// Every definition, by name.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<ShardedTable>> {
        self.tables.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// The sharded table and shard number that a shard's table name (`events.shard-2`)
    /// stands for.
    #[must_use]
    pub fn shard_of_table(&self, table: &str) -> Option<(Arc<ShardedTable>, usize)> {
        let (name, number) = table.rsplit_once(SHARD_INFIX)?;
        let shard: usize = number.parse().ok()?;
        let definition = self.get(name)?;
        (shard < definition.shards).then_some((definition, shard))
    }

    /// Records `table`: written to its file first (temporary file, fsync, rename), so a
    /// definition this node answered for survives a crash.
    ///
    /// # Errors
    /// `Err(true)` when a different definition of the same name exists; `Err(false)`
    /// with the I/O failure otherwise (as the message).
    pub fn define(&self, table: &ShardedTable) -> Result<bool, (bool, String)> {
        table.validate().map_err(|e| (false, e))?;
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = tables.get(&table.name) {
            // The same table (a move may have placed its shards elsewhere since).
            if existing.as_ref() == table || existing.same_table(table) {
                return Ok(false);
            }
            return Err((true, format!("table {:?} is defined differently: {}", table.name, serde_json::to_string(existing.as_ref()).unwrap_or_default())));
        }
        if let Some(dir) = &self.dir {
            // Checksummed and atomic (temporary file, fsync, rename, directory fsync).
            shoal_core::checkpoint::write_json_atomic(dir, &format!("{}.json", table.name), table)
                .map_err(|e| (false, e.to_string()))?;
        }
        tables.insert(table.name.clone(), Arc::new(table.clone()));
        Ok(true)
    }

    /// Records `table` in place of the definition of the same name (a shard moved: its
    /// placement changed), written to its file first as [`Self::define`] does.
    ///
    /// # Errors
    /// An invalid definition, one of another table's shape (shards, key), or the I/O failure.
    pub fn replace(&self, table: &ShardedTable) -> Result<(), String> {
        table.validate()?;
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = tables.get(&table.name) {
            if !existing.same_table(table) {
                return Err(format!("table {:?}: a new placement may not change its shards, key or options", table.name));
            }
        }
        if let Some(dir) = &self.dir {
            shoal_core::checkpoint::write_json_atomic(dir, &format!("{}.json", table.name), table).map_err(|e| e.to_string())?;
        }
        tables.insert(table.name.clone(), Arc::new(table.clone()));
        Ok(())
    }

    /// Forgets `name` (its file first); true if it was defined.
    ///
    /// # Errors
    /// The I/O failure, as a message.
    pub fn forget(&self, name: &str) -> Result<bool, String> {
        shoal_ops::catalog::validate_table_name(name).map_err(|e| e.to_string())?;
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        if !tables.contains_key(name) {
            return Ok(false);
        }
        if let Some(dir) = &self.dir {
            let path = dir.join(format!("{name}.json"));
            std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
            sync_dir(dir);
        }
        tables.remove(name);
        Ok(true)
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(handle) = std::fs::File::open(dir) {
        let _ = handle.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The routing hash of a parsed record (a member named twice is the last one there,
    /// where `shard_of` reads the first, the stored one, from the text).
    fn shard_key_hash(record: &Value, key: &[String]) -> u64 {
        let values: Vec<Option<&Value>> = key.iter().map(|path| path.split('.').try_fold(record, |v, step| v.get(step))).collect();
        hash_key_values(&values)
    }

    fn table(shards: usize, key: &[&str]) -> ShardedTable {
        ShardedTable {
            name: "events".into(),
            shards,
            shard_key: key.iter().map(|s| (*s).to_owned()).collect(),
            nodes: 3,
            options: serde_json::Map::new(),
            placement: BTreeMap::new(),
        }
    }

    /// The hash is FNV-1a 64 of the documented bytes (the connectors compute the same).
    #[test]
    fn the_routing_hash_is_fnv1a_of_the_key_values() {
        assert_eq!(shard_key_hash(&json!({"id": "a"}), &["id".into()]), 0xaf63_dc4c_8601_ec8c); // FNV-1a("a")
        assert_eq!(shard_key_hash(&json!({}), &["id".into()]), shard_key_hash(&json!({"id": null}), &["id".into()]));
        assert_eq!(shard_key_hash(&json!({"id": 7}), &["id".into()]), shard_key_hash(&json!({"id": "7"}), &["id".into()]));
        let nested = json!({"repo": {"name": "x"}, "t": 1});
        let two = shard_key_hash(&nested, &["repo.name".into(), "t".into()]);
        assert_ne!(two, shard_key_hash(&nested, &["t".into(), "repo.name".into()]));
    }

    /// Equalities and IN lists on the shard key name the shards that can hold their records;
    /// anything else reads every shard.
    #[test]
    fn a_filter_on_the_shard_key_prunes_the_other_shards() {
        let t = table(8, &["id"]);
        let shard = |id: &str| t.shard_of(format!("{{\"id\": \"{id}\", \"x\": 1}}").as_bytes());
        assert_eq!(t.prune(Some("id = 'a'")), Some(vec![shard("a")]));
        assert_eq!(t.prune(Some("type = 'PushEvent' AND id = 'a'")), Some(vec![shard("a")]));
        let mut both = vec![shard("a"), shard("b")];
        both.sort_unstable();
        both.dedup();
        assert_eq!(t.prune(Some("id IN ('a', 'b')")), Some(both));
        let number = t.prune(Some("id = 7")).unwrap();
        assert!(number.contains(&t.shard_of(b"{\"id\": 7}")) && number.contains(&t.shard_of(b"{\"id\": 7.0}")));
        for unpruned in [None, Some("id = 'a' OR id = 'b'"), Some("id <> 'a'"), Some("x = 1"), Some("id = NULL")] {
            assert_eq!(t.prune(unpruned), None, "{unpruned:?}");
        }
        let composite = table(8, &["t", "id"]);
        assert_eq!(
            composite.prune(Some("id = 'a' AND t = 'x'")),
            Some(vec![composite.shard_of(br#"{"t": "x", "id": "a"}"#)])
        );
        assert_eq!(composite.prune(Some("id = 'a'")), None);
    }

    /// Reading only the key's path routes every record where parsing all of it would.
    #[test]
    fn the_key_alone_routes_as_the_whole_record() {
        let t = table(7, &["a.b", "c"]);
        for record in [
            r#"{"a": {"b": "x"}, "c": 1}"#,
            r#"{"a": {"b": 2.50, "z": [1, {"q": 3}]}, "c": "y", "d": null}"#,
            r#"{"a": {"b\u0041": 1}, "c\n": 2}"#,
            r#"{"a": [1], "c": {"k": [true]}}"#,
            r#"{"c": "only"}"#,
            r#"[1, 2]"#,
            r#"{"a": {"b": "\u00e9\n"}, "c": -0}"#,
        ] {
            let whole = shard_key_hash(&serde_json::from_str(record).unwrap(), &t.shard_key) % 7;
            assert_eq!(t.shard_of(record.as_bytes()) as u64, whole, "{record}");
        }
    }

    /// Of a member named twice the first counts, at every level, escaped or not: the value
    /// the engine stores.
    #[test]
    fn the_first_of_duplicate_members_routes_the_record() {
        let key = vec!["a.b".to_owned()];
        let x = Some(vec![Some(json!("x"))]);
        for record in [
            r#"{"a": {"b": "x"}, "a": {}}"#,
            r#"{"a": {"b": "x"}, "a": 5}"#,
            r#"{"a": {"b": "x", "b": "y"}}"#,
            r#"{"\u0061": {"b": "x"}, "a": {"b": "y"}}"#,
            r#"{"a": {"b": "x", "\u0062": "y"}, "c\n": 1}"#,
        ] {
            let values = key_values::<&str>(record.as_bytes(), &key).or_else(|| key_values::<String>(record.as_bytes(), &key));
            assert_eq!(values, x, "{record}");
            let t = table(MAX_SHARDS, &["a.b"]);
            assert_eq!(t.shard_of(record.as_bytes()), t.shard_of(br#"{"a": {"b": "x"}}"#), "{record}");
        }
    }

    /// The hashes every writer that routes by key must compute (the connectors check the
    /// same file), on both of the daemon's ways of reading the key.
    #[test]
    fn the_routing_hash_agrees_with_the_shared_vectors() {
        let file: Value = serde_json::from_str(include_str!("../../tests/data/shard-key-hashes.json")).unwrap();
        let vectors = file["vectors"].as_array().unwrap();
        assert!(vectors.len() >= 10);
        for vector in vectors {
            let record = vector["record"].as_str().unwrap();
            let key: Vec<String> = serde_json::from_value(vector["shard_key"].clone()).unwrap();
            let expected: u64 = vector["hash"].as_str().unwrap().parse().unwrap();
            for values in [key_values::<&str>(record.as_bytes(), &key), key_values::<String>(record.as_bytes(), &key)] {
                let values = values.unwrap();
                assert_eq!(hash_key_values(&values.iter().map(Option::as_ref).collect::<Vec<_>>()), expected, "{record}");
            }
        }
    }

    #[test]
    fn keys_spread_evenly_over_the_shards() {
        let t = table(3, &["id"]);
        let mut counts = [0usize; 3];
        for i in 0..30_000 {
            counts[t.shard_of(format!("{{\"id\": \"user-{i}\"}}").as_bytes())] += 1;
        }
        for c in counts {
            assert!((9_000..=11_000).contains(&c), "{counts:?}");
        }
        assert_eq!(t.shard_of(b"not json"), 0);
        assert_eq!(t.node_of(4), 1);
        assert_eq!(t.shard_table(4), "events.shard-4");
    }

    #[test]
    fn definitions_survive_a_reopen_and_conflicts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let map = ShardMap::open(Some(dir.path().to_path_buf())).unwrap();
        assert_eq!(map.define(&table(3, &["id"])), Ok(true));
        assert_eq!(map.define(&table(3, &["id"])), Ok(false));
        assert!(map.define(&table(4, &["id"])).unwrap_err().0);
        let reopened = ShardMap::open(Some(dir.path().to_path_buf())).unwrap();
        assert_eq!(reopened.get("events").unwrap().shards, 3);
        assert_eq!(reopened.shard_of_table("events.shard-2").unwrap().1, 2);
        assert!(reopened.shard_of_table("events.shard-3").is_none());
        assert!(reopened.forget("events").unwrap());
        assert!(ShardMap::open(Some(dir.path().to_path_buf())).unwrap().get("events").is_none());
    }

    #[test]
    fn a_moved_shard_keeps_its_place_across_a_reopen_and_a_repeated_definition() {
        let dir = tempfile::tempdir().unwrap();
        let map = ShardMap::open(Some(dir.path().to_path_buf())).unwrap();
        map.define(&table(3, &["id"])).unwrap();
        let mut moved = table(3, &["id"]);
        moved.placement.insert(1, 2);
        map.replace(&moved).unwrap();
        // The same table defined again (a create_table with if_not_exists) keeps the place.
        assert_eq!(map.define(&table(3, &["id"])), Ok(false));
        let reopened = ShardMap::open(Some(dir.path().to_path_buf())).unwrap();
        let events = reopened.get("events").unwrap();
        assert_eq!((0..3).map(|s| events.node_of(s)).collect::<Vec<_>>(), vec![0, 2, 2]);
        // A placement never changes the table's shape, nor names a shard it does not have.
        assert!(reopened.replace(&table(4, &["id"])).is_err());
        let mut beyond = table(3, &["id"]);
        beyond.placement.insert(3, 0);
        assert!(reopened.replace(&beyond).unwrap_err().contains("shard 3"));
    }
}
