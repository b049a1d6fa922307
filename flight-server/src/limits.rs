//! What one caller may hold of the daemon, so that a stalled or hostile one costs others
//! nothing:
//!
//! - [`Admission`]: places among the calls of one kind that run at once (scans: `DoGet`;
//!   ingestion: `DoPut`), given in arrival order, with at most `per_connection` of them held
//!   by one connection, and a bounded wait (`scan_wait_timeout_ms`) before
//!   `RESOURCE_EXHAUSTED`;
//! - [`Outlet`]: the queue of a response stream whose sender gives up on a receiver that
//!   takes nothing for `stream_idle_timeout_secs`, ending the stream with a status after
//!   what was queued (never a clean end that would pass a cut answer off as whole);
//! - [`handshaken`]: accepted connections are handed to the HTTP/2 server only once they
//!   sent the 24 bytes of a connection preface (or of a TLS hello) within
//!   `handshake_timeout_secs`; the others are closed.
//!
//! Metrics: `shoal_admission_refused_total{calls}`, `shoal_stalled_streams_total{call}`,
//! `shoal_handshake_timeouts_total` (docs/operations.md).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// A bound on the calls of one kind that run at once, each holding a blocking thread for
/// its whole length (scans: `DoGet`) or while it has work in flight (ingestion: `DoPut`).
/// Calls beyond it wait, without a thread, for up to `wait` (a client that goes away stops
/// waiting), then are refused naming the setting. Waiting calls get places in the order
/// they came (tokio's semaphore is fair). One connection holds at most `per_connection`
/// places: a client that opened hundreds of streams and reads none of them waits behind its
/// own calls, and leaves the other places to other connections.
pub(crate) struct Admission {
    places: Arc<Semaphore>,
    limit: usize,
    per_connection: usize,
    connections: Mutex<Connections>,
    wait: Duration,
    idle: Option<Duration>,
    calls: &'static str,
    setting: &'static str,
    wait_setting: &'static str,
}

/// Who makes a call, for [`Admission`]: its connection (one connection holds at most half
/// the places) and whether it is a node of this daemon's cluster. A node's calls (they carry
/// the cluster's secret) share one channel per node pair, so they are not capped per
/// connection, and they are not idle-guarded: a put lane to a shard is silent while the
/// other shards get the rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller {
    /// The peer address (`None`: not known, or a node).
    pub connection: Option<SocketAddr>,
    /// A node of this daemon's cluster.
    pub node: bool,
}

impl Caller {
    /// A node of the cluster (calls carrying the cluster's secret).
    pub const NODE: Self = Self { connection: None, node: true };

    /// A client at `connection`.
    #[must_use]
    pub fn client(connection: Option<SocketAddr>) -> Self {
        Self { connection, node: false }
    }

    /// The longest filter text (bytes) this caller's command or action may carry: a
    /// client's is held to `MAX_EXPR_BYTES` (1 MiB) as it sent it; a node sends on what a
    /// coordinator already held so, or the rendered condition of a SQL statement (longer at
    /// times), held to `MAX_RENDERED_EXPR_BYTES` (8 MiB).
    #[must_use]
    pub fn filter_bytes(self) -> usize {
        if self.node {
            shoal_core::psf::expr::MAX_RENDERED_EXPR_BYTES
        } else {
            shoal_core::psf::expr::MAX_EXPR_BYTES
        }
    }

    /// `INVALID_ARGUMENT` when the `filter` of a JSON command or action `body` is longer
    /// than [`Self::filter_bytes`]: checked before a coordinator sends it on to the nodes,
    /// which hold a node's text to the longer limit. `what` names the call in the message.
    pub fn check_filter(self, what: &str, body: &serde_json::Map<String, serde_json::Value>) -> Result<(), Status> {
        match body.get("filter").and_then(serde_json::Value::as_str) {
            Some(filter) if filter.len() > self.filter_bytes() => Err(Status::invalid_argument(format!(
                "{what}: \"filter\": the expression is {} bytes long; the limit is {} bytes",
                filter.len(),
                self.filter_bytes()
            ))),
            _ => Ok(()),
        }
    }
}

/// An [`Admission`] as one caller sees it: places taken through it count against the
/// caller's connection (what a fan-in of a client's query reads locally counts as that
/// client's).
#[derive(Clone)]
pub(crate) struct CallerAdmission {
    admission: Arc<Admission>,
    caller: Caller,
}

impl CallerAdmission {
    /// A place for this caller ([`Admission::enter`]).
    pub(crate) async fn enter(&self) -> Result<Place, Status> {
        self.admission.enter(self.caller).await
    }
}

/// The per-connection semaphores, and the map's size after its last pruning (it is pruned
/// of connections that hold and wait for nothing when it has doubled since).
#[derive(Default)]
struct Connections {
    places: HashMap<SocketAddr, Weak<Semaphore>>,
    pruned_at: usize,
}

/// A place among the running calls of an [`Admission`] (given back when dropped), and the
/// idle timeout of the stream that holds it.
pub struct Place {
    _global: OwnedSemaphorePermit,
    _connection: Option<OwnedSemaphorePermit>,
    idle: Option<Duration>,
}

impl Place {
    /// How long the stream holding this place may send or read nothing before it is ended
    /// (`stream_idle_timeout_secs`; `None`: never).
    pub(crate) fn idle(&self) -> Option<Duration> {
        self.idle
    }
}

/// The settings of one [`Admission`].
pub(crate) struct AdmissionLimits {
    /// Places in all (`max_concurrent_scans`, `max_concurrent_puts`).
    pub limit: usize,
    /// Places one connection holds at most.
    pub per_connection: usize,
    /// How long a call waits for a place.
    pub wait: Duration,
    /// `stream_idle_timeout_secs` (`None`: never).
    pub idle: Option<Duration>,
}

impl Admission {
    /// The idle timeout of `caller`'s streams (a node's: none).
    pub(crate) fn idle(&self, caller: Caller) -> Option<Duration> {
        if caller.node { None } else { self.idle }
    }

    /// `calls` names the calls in messages ("scans (DoGet)"); `setting` and `wait_setting`
    /// the settings a refusal names.
    pub(crate) fn new(limits: &AdmissionLimits, calls: &'static str, setting: &'static str, wait_setting: &'static str) -> Self {
        Self {
            places: Arc::new(Semaphore::new(limits.limit)),
            limit: limits.limit,
            per_connection: limits.per_connection.clamp(1, limits.limit),
            connections: Mutex::new(Connections::default()),
            wait: limits.wait,
            idle: limits.idle,
            calls,
            setting,
            wait_setting,
        }
    }

    /// The semaphore of `connection`'s places (made on its first call; entries of
    /// connections that hold and wait for nothing are dropped as the map grows).
    fn connection_places(&self, connection: SocketAddr) -> Arc<Semaphore> {
        let mut connections = self.connections.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(places) = connections.places.get(&connection).and_then(Weak::upgrade) {
            return places;
        }
        if connections.places.len() >= 1024.max(2 * connections.pruned_at) {
            connections.places.retain(|_, places| places.strong_count() > 0);
            connections.pruned_at = connections.places.len();
        }
        let places = Arc::new(Semaphore::new(self.per_connection));
        connections.places.insert(connection, Arc::downgrade(&places));
        places
    }

    /// This admission as `caller` sees it.
    pub(crate) fn for_caller(self: &Arc<Self>, caller: Caller) -> CallerAdmission {
        CallerAdmission { admission: Arc::clone(self), caller }
    }

    /// A place for a call of `caller` (one without a connection — a node, an unknown peer —
    /// is counted against the whole only; a node's place has no idle timeout).
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` naming the limit and the wait when no place came within the wait.
    pub(crate) async fn enter(&self, caller: Caller) -> Result<Place, Status> {
        let own = caller.connection.map(|c| self.connection_places(c));
        let places = Arc::clone(&self.places);
        let acquire = async move {
            let connection = match own {
                Some(own) => Some(own.acquire_owned().await.ok()?),
                None => None,
            };
            let global = places.acquire_owned().await.ok()?;
            Some((global, connection))
        };
        match tokio::time::timeout(self.wait, acquire).await {
            Ok(Some((global, connection))) => Ok(Place { _global: global, _connection: connection, idle: self.idle(caller) }),
            _ => {
                metrics::counter!("shoal_admission_refused_total", "calls" => self.setting).increment(1);
                Err(Status::resource_exhausted(format!(
                    "{} {} are running, the limit ({}; one connection holds at most {}); this call waited {} ms for one to end \
                     ({}): retry later or raise the limit (what was acknowledged before this refusal stays)",
                    self.limit,
                    self.calls,
                    self.setting,
                    self.per_connection,
                    self.wait.as_millis(),
                    self.wait_setting
                )))
            }
        }
    }
}

/// Why an [`Outlet`] took no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The receiver went away (the client cancelled or disconnected).
    Gone,
    /// The receiver took nothing for the idle timeout; the stream ends with a status.
    Stalled,
}

/// The sending end of a response stream's queue (see the module's documentation). A stream
/// ends cleanly only through [`Outlet::finish`]: an outlet dropped without it (its producer
/// panicked or returned early) ends the stream with `INTERNAL`, so that a cut answer is never
/// passed off as whole.
pub(crate) struct Outlet<T> {
    sender: mpsc::Sender<T>,
    last: Arc<Mutex<Option<T>>>,
    idle: Option<Duration>,
    call: &'static str,
    runtime: tokio::runtime::Handle,
    /// Makes a stream item of a status (the error variant of the stream's items).
    error: fn(Status) -> T,
    finished: bool,
}

/// A queue of `depth` items for a response stream of `call` ("DoGet", "DoPut"); its sender
/// gives up after `idle` without the receiver taking an item. The stream yields the items,
/// then the status an [`Outlet::stall`] (or a drop without [`Outlet::finish`]) left, made an
/// item by `error`. Call from within the runtime.
pub(crate) fn outlet<T: Send + 'static>(
    depth: usize,
    idle: Option<Duration>,
    call: &'static str,
    error: fn(Status) -> T,
) -> (Outlet<T>, impl Stream<Item = T> + Send + 'static) {
    let (sender, receiver) = mpsc::channel(depth);
    let last = Arc::new(Mutex::new(None));
    let tail = Arc::clone(&last);
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver)
        .chain(futures::stream::once(async move { tail.lock().unwrap_or_else(PoisonError::into_inner).take() }).filter_map(futures::future::ready));
    (Outlet { sender, last, idle, call, runtime: tokio::runtime::Handle::current(), error, finished: false }, stream)
}

impl<T> Drop for Outlet<T> {
    fn drop(&mut self) {
        if !self.finished {
            let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_none() {
                tracing::warn!(call = self.call, "a response stream's producer ended without finishing it: the stream ends with INTERNAL");
                *last = Some((self.error)(Status::internal(format!(
                    "{}: the daemon's producer of this stream ended early (a bug: see the daemon's log); what came before this error is not the whole answer",
                    self.call
                ))));
            }
        }
    }
}

impl<T: Send + 'static> Outlet<T> {
    /// Ends the stream cleanly after what is queued (or, after [`Outlet::stall`], with its
    /// status): everything the stream had to say was sent.
    pub(crate) fn finish(mut self) {
        self.finished = true;
    }

    /// Queues `item`, waiting while the queue is full: [`Stop::Gone`] when the receiver is
    /// gone, [`Stop::Stalled`] when it took nothing for the idle timeout.
    pub(crate) async fn send(&self, item: T) -> Result<(), Stop> {
        match self.idle {
            None => self.sender.send(item).await.map_err(|_| Stop::Gone),
            Some(idle) => match tokio::time::timeout(idle, self.sender.send(item)).await {
                Ok(sent) => sent.map_err(|_| Stop::Gone),
                Err(_) => Err(Stop::Stalled),
            },
        }
    }

    /// As [`Outlet::send`], from a blocking thread.
    pub(crate) fn blocking_send(&self, item: T) -> Result<(), Stop> {
        self.runtime.block_on(self.send(item))
    }

    /// A check, for a blocking thread, that is true once the receiver is gone.
    pub(crate) fn gone_check(&self) -> impl Fn() -> bool + Send + 'static {
        let weak = self.sender.downgrade();
        move || weak.upgrade().is_none_or(|sender| sender.is_closed())
    }

    /// Ends the stream after what is queued with `DEADLINE_EXCEEDED` because its receiver
    /// stalled, and counts it (`shoal_stalled_streams_total`).
    pub(crate) fn stall(mut self) {
        let idle = self.idle.map_or(0, |d| d.as_secs());
        metrics::counter!("shoal_stalled_streams_total", "call" => self.call).increment(1);
        tracing::info!(call = self.call, idle_secs = idle, "a stream's client read nothing for the idle timeout: stream ended");
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((self.error)(stalled(self.call, idle, "read")));
        self.finished = true;
    }
}

/// The status that ends a stream whose client sent (`what` = "sent") or read ("read")
/// nothing for `idle_secs`.
pub(crate) fn stalled(call: &str, idle_secs: u64, what: &str) -> Status {
    Status::deadline_exceeded(format!(
        "{call}: the client {what} nothing for {idle_secs} s (stream_idle_timeout_secs): the stream was ended to free its place; \
         what was acknowledged before stays"
    ))
}

/// The connections `listener` accepts, each handed on once it sent the first 24 bytes
/// (an HTTP/2 connection preface is 24 bytes, a TLS hello more) within `timeout`; a
/// connection that does not is closed (`shoal_handshake_timeouts_total`). Connections
/// are checked concurrently: one that dribbles delays no other. TCP_NODELAY is set (without
/// it, small responses wait ~40 ms for delayed ACKs).
pub fn handshaken(listener: TcpListener, timeout: Duration) -> impl Stream<Item = std::io::Result<TcpStream>> + Send + 'static {
    const PREFACE_BYTES: usize = 24;
    let (sender, receiver) = mpsc::channel::<std::io::Result<TcpStream>>(64);
    tokio::spawn(async move {
        loop {
            // The server dropped its end (shutdown): stop accepting, which closes the socket.
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = sender.closed() => return,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: tell, pause, go on (as hyper does).
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let sender = sender.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; PREFACE_BYTES];
                let ready = tokio::time::timeout(timeout, async {
                    loop {
                        match stream.peek(&mut buffer).await {
                            Ok(n) if n >= PREFACE_BYTES => return true,
                            Ok(0) | Err(_) => return false,
                            // Part of it: wait for more (peek returns at once while data waits).
                            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    }
                })
                .await;
                match ready {
                    Ok(true) => {
                        let _ = sender.send(Ok(stream)).await;
                    }
                    Ok(false) => {}
                    Err(_) => {
                        metrics::counter!("shoal_handshake_timeouts_total").increment(1);
                        tracing::debug!(%peer, timeout_secs = timeout.as_secs(), "a connection sent no handshake in time: closed");
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

/// The status that ends a stream of `call` whose client sent nothing for `idle`, counted
/// (`shoal_stalled_streams_total`) and logged.
pub(crate) fn silent(call: &'static str, idle: Duration) -> Status {
    metrics::counter!("shoal_stalled_streams_total", "call" => call).increment(1);
    tracing::info!(call, idle_secs = idle.as_secs(), "a stream's client sent nothing for the idle timeout: stream ended");
    stalled(call, idle.as_secs(), "sent")
}

/// `stream` (a client's messages), ending with `DEADLINE_EXCEEDED` when the client sends
/// nothing for `idle` (`None`: never): an ingesting stream left open and silent gives up
/// what it holds.
pub(crate) fn idle_guarded<S, T>(stream: S, idle: Option<Duration>, call: &'static str) -> impl Stream<Item = Result<T, Status>> + Send + 'static
where
    S: Stream<Item = Result<T, Status>> + Send + 'static,
    T: Send + 'static,
{
    let stream = Box::pin(stream);
    futures::stream::unfold(Some(stream), move |state| async move {
        let mut stream = state?;
        let Some(idle) = idle else {
            return stream.next().await.map(|item| (item, Some(stream)));
        };
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(item) => item.map(|item| (item, Some(stream))),
            Err(_) => Some((Err(silent(call, idle)), None)),
        }
    })
}
