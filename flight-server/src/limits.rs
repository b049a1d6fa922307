//! What one caller may hold of the daemon, so that a stalled or hostile one costs others
//! nothing (the hardening issue "Hostile callers and slow clients"):
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
    connections: Mutex<HashMap<SocketAddr, Weak<Semaphore>>>,
    wait: Duration,
    idle: Option<Duration>,
    calls: &'static str,
    setting: &'static str,
    wait_setting: &'static str,
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
    /// The idle timeout of the streams that hold this admission's places.
    pub(crate) fn idle(&self) -> Option<Duration> {
        self.idle
    }

    /// `calls` names the calls in messages ("scans (DoGet)"); `setting` and `wait_setting`
    /// the settings a refusal names.
    pub(crate) fn new(limits: &AdmissionLimits, calls: &'static str, setting: &'static str, wait_setting: &'static str) -> Self {
        Self {
            places: Arc::new(Semaphore::new(limits.limit)),
            limit: limits.limit,
            per_connection: limits.per_connection.clamp(1, limits.limit),
            connections: Mutex::new(HashMap::new()),
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
        if let Some(places) = connections.get(&connection).and_then(Weak::upgrade) {
            return places;
        }
        if connections.len() >= 1024 {
            connections.retain(|_, places| places.strong_count() > 0);
        }
        let places = Arc::new(Semaphore::new(self.per_connection));
        connections.insert(connection, Arc::downgrade(&places));
        places
    }

    /// A place, for a call on `connection` (`None`: a call with no peer address, counted
    /// against the whole only).
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` naming the limit and the wait when no place came within the wait.
    pub(crate) async fn enter(&self, connection: Option<SocketAddr>) -> Result<Place, Status> {
        let own = connection.map(|c| self.connection_places(c));
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
            Ok(Some((global, connection))) => Ok(Place { _global: global, _connection: connection, idle: self.idle }),
            _ => {
                metrics::counter!("shoal_admission_refused_total", "calls" => self.setting).increment(1);
                Err(Status::resource_exhausted(format!(
                    "{} {} are running, the limit ({}; one connection holds at most {}); this call waited {} ms for one to end \
                     ({}): retry later or raise the limit",
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

/// The sending end of a response stream's queue (see the module's documentation).
pub(crate) struct Outlet<T> {
    sender: mpsc::Sender<T>,
    last: Arc<Mutex<Option<T>>>,
    idle: Option<Duration>,
    call: &'static str,
    runtime: tokio::runtime::Handle,
}

/// A queue of `depth` items for a response stream of `call` ("DoGet", "DoPut"); its sender
/// gives up after `idle` without the receiver taking an item. The stream yields the items,
/// then the status an [`Outlet::stall`] left. Call from within the runtime.
pub(crate) fn outlet<T: Send + 'static>(depth: usize, idle: Option<Duration>, call: &'static str) -> (Outlet<T>, impl Stream<Item = T> + Send + 'static) {
    let (sender, receiver) = mpsc::channel(depth);
    let last = Arc::new(Mutex::new(None));
    let tail = Arc::clone(&last);
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver)
        .chain(futures::stream::once(async move { tail.lock().unwrap_or_else(PoisonError::into_inner).take() }).filter_map(futures::future::ready));
    (Outlet { sender, last, idle, call, runtime: tokio::runtime::Handle::current() }, stream)
}

impl<T: Send + 'static> Outlet<T> {
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

    /// Ends the stream after what is queued with `status` (as an item, made by `item`)
    /// because its receiver stalled, and counts it (`shoal_stalled_streams_total`).
    pub(crate) fn stall(&self, item: impl FnOnce(Status) -> T) {
        let idle = self.idle.map_or(0, |d| d.as_secs());
        metrics::counter!("shoal_stalled_streams_total", "call" => self.call).increment(1);
        tracing::info!(call = self.call, idle_secs = idle, "a stream's client read nothing for the idle timeout: stream ended");
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(item(stalled(self.call, idle, "read")));
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
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: tell, pause, go on (as hyper does).
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if sender.is_closed() {
                return;
            }
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
            Err(_) => {
                metrics::counter!("shoal_stalled_streams_total", "call" => call).increment(1);
                tracing::info!(call, idle_secs = idle.as_secs(), "a stream's client sent nothing for the idle timeout: stream ended");
                Some((Err(stalled(call, idle.as_secs(), "sent")), None))
            }
        }
    })
}
