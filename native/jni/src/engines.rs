//! The engines open in this process, and the handles the JVM holds on them.
//!
//! A handle is a number (never a pointer), so a handle that was closed, never opened, or
//! forged is an error rather than a crash. Every handle on the same canonical data
//! directory shares one engine (one [`Catalog`]): a Spark driver and its tasks, or several
//! Flink operators in one task manager, see the same tables. The engine is closed —
//! its tables flushed and checkpointed — when its last handle is closed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use shoal_ops::catalog::Catalog;
use shoal_ops::config::{EngineConfig, DAEMON_SETTINGS};
use shoal_ops::OpsError;

/// Why an embedded call failed: a protocol error class and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The error class the daemon would have answered (`INVALID_ARGUMENT`, ...; the
    /// names of [`shoal_ops::ErrorClass`]), or `CLOSED` (a handle that is closed or was
    /// never opened) or `PANIC`.
    pub code: &'static str,
    /// What was wrong, naming the table, key, row or address concerned.
    pub message: String,
}

impl Failure {
    /// A failure of class `code`.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<OpsError> for Failure {
    fn from(error: OpsError) -> Self {
        Self::new(error.class.as_str(), error.message)
    }
}

/// One open engine.
struct Engine {
    catalog: Arc<Catalog>,
    handles: usize,
    /// Stops the periodic checkpoints (dropping it does too).
    stop_checkpoints: Option<Sender<()>>,
    checkpointer: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Registry {
    next_handle: u64,
    handles: HashMap<u64, PathBuf>,
    engines: HashMap<PathBuf, Engine>,
    /// Directories whose engine is being closed (outside the lock) and still holds their
    /// LOCK: an open of one of them waits on [`CLOSED`] instead of failing as if another
    /// process held the directory.
    closing: HashSet<PathBuf>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
/// Signalled when a directory leaves [`Registry::closing`].
static CLOSED: Condvar = Condvar::new();

/// Marks `0` as closing until dropped (also when closing panics, so that opens never wait
/// for a close that will not finish).
struct ClosingMark(PathBuf);

impl Drop for ClosingMark {
    fn drop(&mut self) {
        if let Some(registry) = registry().as_mut() {
            registry.closing.remove(&self.0);
        }
        CLOSED.notify_all();
    }
}

fn registry() -> MutexGuard<'static, Option<Registry>> {
    // A panic while holding the lock leaves the maps consistent (every update is a
    // single insert or remove), so a poisoned lock is still usable.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads the options (the engine's configuration keys, `docs/configuration.md`) from a
/// JSON object; `None` or `""` keeps every default.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the key that is unknown, a setting of the daemon's Flight
/// service (`listen`, `tls_cert`, ...: [`DAEMON_SETTINGS`]), has the wrong type or is
/// out of range.
pub fn parse_options(options: Option<&str>) -> Result<EngineConfig, Failure> {
    let invalid = |message: String| Failure::new("INVALID_ARGUMENT", message);
    match options.map(str::trim).filter(|o| !o.is_empty()) {
        None => Ok(EngineConfig::default()),
        Some(text) => {
            let value: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| invalid(format!("embedded options: not a JSON object: {e}")))?;
            if let Some(key) = value
                .as_object()
                .and_then(|o| o.keys().find(|k| DAEMON_SETTINGS.contains(&k.as_str())))
            {
                return Err(invalid(format!(
                    "embedded options: {key:?} is a setting of the daemon's Flight service; \
                     the embedded engine has no service (remove it, or connect to a daemon)"
                )));
            }
            let config: EngineConfig = serde_json::from_value(value).map_err(|e| {
                invalid(format!(
                    "embedded options (the engine's configuration keys): {e}"
                ))
            })?;
            config
                .validate()
                .map_err(|e| invalid(format!("embedded options: {e}")))?;
            Ok(config)
        }
    }
}

/// Opens the engine on `data_dir` (creating the directory), or joins the engine this
/// process already has open there; returns a new handle.
///
/// # Errors
/// `INVALID_ARGUMENT` for bad options or options that differ from those of the engine
/// already open on the directory; `FAILED_PRECONDITION` when the directory cannot be
/// created, is locked by another process (a daemon or another JVM), or holds a table
/// that cannot be recovered.
pub fn open(data_dir: &Path, options: Option<&str>) -> Result<u64, Failure> {
    let mut config = parse_options(options)?;
    std::fs::create_dir_all(data_dir).map_err(|e| {
        Failure::new(
            "FAILED_PRECONDITION",
            format!(
                "cannot create the data directory {}: {e}",
                data_dir.display()
            ),
        )
    })?;
    let key = data_dir.canonicalize().map_err(|e| {
        Failure::new(
            "FAILED_PRECONDITION",
            format!(
                "cannot resolve the data directory {}: {e}",
                data_dir.display()
            ),
        )
    })?;
    config.data_dir.clone_from(&key);
    let mut guard = registry();
    // The last handle of this directory's engine was just closed: wait until that engine
    // has flushed and released the directory, then open it again.
    while guard.as_ref().is_some_and(|r| r.closing.contains(&key)) {
        guard = CLOSED.wait(guard).unwrap_or_else(PoisonError::into_inner);
    }
    let registry = guard.get_or_insert_with(Registry::default);
    if let Some(engine) = registry.engines.get_mut(&key) {
        if options.is_some_and(|o| !o.trim().is_empty())
            && format!("{config:?}") != format!("{:?}", engine.catalog.config())
        {
            return Err(Failure::new(
                "INVALID_ARGUMENT",
                format!("{} is already open in this process with other options; open it with the same options or none", key.display()),
            ));
        }
        engine.handles += 1;
    } else {
        // Periodic work, as the daemon does it: checkpoints (on-disk engines) and the
        // tables' retention policies, each every its interval (0: never).
        let checkpoint_every = (config.checkpoint_interval_secs > 0 && !config.in_memory)
            .then(|| Duration::from_secs(config.checkpoint_interval_secs));
        let retention_every = (config.retention_check_secs > 0)
            .then(|| Duration::from_secs(config.retention_check_secs));
        let catalog =
            Arc::new(Catalog::open(config).map_err(|e| Failure::new("FAILED_PRECONDITION", e))?);
        let (stop_checkpoints, checkpointer) = if checkpoint_every.is_some() || retention_every.is_some() {
            let (sender, receiver) = mpsc::channel::<()>();
            let catalog = Arc::clone(&catalog);
            let thread = std::thread::Builder::new()
                .name("shoal-checkpoints".into())
                .spawn(move || {
                    let started = std::time::Instant::now();
                    let mut next_checkpoint = checkpoint_every;
                    let mut next_retention = retention_every;
                    loop {
                        let next = match (next_checkpoint, next_retention) {
                            (Some(c), Some(r)) => c.min(r),
                            (Some(c), None) => c,
                            (None, Some(r)) => r,
                            (None, None) => return,
                        };
                        let wait = next.saturating_sub(started.elapsed());
                        if !matches!(receiver.recv_timeout(wait), Err(RecvTimeoutError::Timeout)) {
                            return;
                        }
                        let now = started.elapsed();
                        if let (Some(at), Some(every)) = (next_retention, retention_every) {
                            if now >= at {
                                catalog.apply_retention();
                                next_retention = Some(at + every);
                            }
                        }
                        if let (Some(at), Some(every)) = (next_checkpoint, checkpoint_every) {
                            if now >= at {
                                for entry in catalog.list() {
                                    if let Err(e) = entry.table.checkpoint() {
                                        eprintln!(
                                            "shoal embedded: checkpoint of table {:?} failed: {e}",
                                            entry.name
                                        );
                                    }
                                }
                                next_checkpoint = Some(at + every);
                            }
                        }
                    }
                })
                .map_err(|e| {
                    Failure::new(
                        "INTERNAL",
                        format!("cannot start the checkpoint thread: {e}"),
                    )
                })?;
            (Some(sender), Some(thread))
        } else {
            (None, None)
        };
        registry.engines.insert(
            key.clone(),
            Engine {
                catalog,
                handles: 1,
                stop_checkpoints,
                checkpointer,
            },
        );
    }
    registry.next_handle += 1;
    let handle = registry.next_handle;
    registry.handles.insert(handle, key);
    Ok(handle)
}

/// Closes a handle; closing the last handle of an engine flushes, checkpoints and closes
/// its tables and releases the directory. Closing a closed or unknown handle does nothing.
pub fn close(handle: u64) {
    let engine = {
        let mut guard = registry();
        let Some(registry) = guard.as_mut() else {
            return;
        };
        let Some(key) = registry.handles.remove(&handle) else {
            return;
        };
        let Some(engine) = registry.engines.get_mut(&key) else {
            return;
        };
        engine.handles -= 1;
        if engine.handles > 0 {
            return;
        }
        registry.closing.insert(key.clone());
        (registry.engines.remove(&key), ClosingMark(key))
    };
    // Outside the registry's lock: closing flushes every table, which may take a while.
    let (engine, _closing) = engine;
    if let Some(mut engine) = engine {
        drop(engine.stop_checkpoints.take());
        if let Some(thread) = engine.checkpointer.take() {
            let _ = thread.join();
        }
        engine.catalog.close_all();
    }
}

/// The engine behind `handle`.
///
/// # Errors
/// `CLOSED` when the handle is closed or was never opened.
pub fn catalog(handle: u64) -> Result<Arc<Catalog>, Failure> {
    let guard = registry();
    guard
        .as_ref()
        .and_then(|r| r.handles.get(&handle).and_then(|key| r.engines.get(key)))
        .map(|engine| Arc::clone(&engine.catalog))
        .ok_or_else(|| {
            Failure::new(
                "CLOSED",
                format!("handle {handle} is closed (or was never opened)"),
            )
        })
}
