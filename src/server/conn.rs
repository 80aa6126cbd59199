//! The server's connections: accepted here and driven with hyper's HTTP/1
//! connection (upgrades on, for the websockets), so that no client can
//! hold a socket for ever and the open sockets stay within a bound.
//!
//! Each connection is in one phase at a time:
//!
//! | phase | when | closed |
//! |---|---|---|
//! | head | accepted, or bytes of a new request came in after an idle spell | if the head is not whole within the header timeout |
//! | idle | between requests (keep-alive) | after the idle timeout |
//! | busy | a request's handler runs or its response is being handed over | never by a timer (the handler reads the body with its own timeout) |
//! | upgraded | a websocket | never: the stream ends it |
//!
//! Whatever the phase, a response the client has not taken for the body
//! timeout (writes blocked: a client that does not read) closes the
//! connection. At the bound on open connections a new connection closes
//! the quiet one (head or idle, nothing left to write) that has been so
//! the longest; when none is quiet the new one is refused. The bound is
//! kept below the open-file limit, so a full house never starves the
//! store, the blob files or `accept` itself.
//!
//! On shutdown the quiet connections close at once and the others finish
//! their request first (hyper's graceful shutdown); the server waits for
//! them. Handlers see the client's address as `ConnectInfo<SocketAddr>`,
//! as with axum's `into_make_service_with_connect_info`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::state::Limits;

/// Open files kept for everything else (the store, blob files, logs) when
/// the bound on connections is fitted under the open-file limit: a quarter
/// of the limit, and never fewer than this.
const MIN_RESERVED_FILES: u64 = 64;

/// The fewest connections served, whatever the open-file limit says.
const MIN_CONNECTIONS: usize = 8;

/// Serves `app` on `listener` until `shutdown` resolves, then waits for the
/// connections still serving a request.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let timeouts = Timeouts::of(&limits);
    let registry = Arc::new(Registry::new(fit_to_open_files(limits.connections)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let reaper = tokio::spawn(reap(registry.clone(), timeouts, stop_rx.clone()));
    let mut connections = JoinSet::new();
    let mut refused = Warner::default();
    tokio::pin!(shutdown);
    loop {
        // Finished connections leave the set as they go.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Some(registration) = registry.admit() else {
                    refused.warn(|| {
                        tracing::warn!(
                            "{} connections are open and all are serving requests: refusing new ones",
                            registry.bound
                        )
                    });
                    drop(stream);
                    continue;
                };
                let io = Tracked {
                    stream,
                    entry: registration.entry.clone(),
                    _registration: registration,
                };
                connections.spawn(drive(io, peer, app.clone(), stop_rx.clone()));
            }
            Err(e) if is_out_of_files(&e) => {
                // Make room, then try again: the waiting client is served
                // once a quiet connection is gone.
                registry.evict_oldest_quiet();
                refused.warn(|| tracing::warn!("accept: {e}"));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
    let _ = reaper.await;
    Ok(())
}

/// The timeouts the reaper applies.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    header: Duration,
    idle: Duration,
    write: Duration,
}

impl Timeouts {
    fn of(limits: &Limits) -> Timeouts {
        Timeouts {
            header: limits.header_timeout,
            idle: limits.idle_timeout,
            write: limits.body_timeout,
        }
    }

    /// How often connections are checked: a quarter of the shortest
    /// timeout, from 50 ms to 1 s.
    fn tick(&self) -> Duration {
        (self.header.min(self.idle).min(self.write) / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// `wanted`, or less if the open-file limit would not allow that many
/// sockets besides the files the server needs.
fn fit_to_open_files(wanted: usize) -> usize {
    let wanted = wanted.max(1);
    let Some(limit) = open_file_limit() else {
        return wanted;
    };
    let reserved = (limit / 4).max(MIN_RESERVED_FILES);
    let room = usize::try_from(limit.saturating_sub(reserved))
        .unwrap_or(usize::MAX)
        .max(MIN_CONNECTIONS);
    if room < wanted {
        eprintln!(
            "note: the open-file limit is {limit}: serving at most {room} connections at once, not {wanted} (raise it with ulimit -n)"
        );
        room
    } else {
        wanted
    }
}

#[cfg(unix)]
fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives
    // for the call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    // `rlim_t` is u64 on Linux and the BSDs, not everywhere.
    #[allow(clippy::useless_conversion)]
    let current = u64::try_from(limit.rlim_cur).ok();
    current.filter(|_| ok && limit.rlim_cur != libc::RLIM_INFINITY)
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<u64> {
    None
}

fn is_out_of_files(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// An error of one connection that `accept` passes on (the next one is
/// fine).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Logs at most once every 10 s.
#[derive(Default)]
struct Warner {
    last: Option<Instant>,
}

impl Warner {
    fn warn(&mut self, log: impl FnOnce()) {
        let now = Instant::now();
        if self
            .last
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10))
        {
            self.last = Some(now);
            log();
        }
    }
}

/// The open connections.
struct Registry {
    bound: usize,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Entry>>>,
}

impl Registry {
    fn new(bound: usize) -> Registry {
        Registry {
            bound,
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Entry>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection, closing the longest-quiet one if the
    /// bound is reached; `None` if it is reached and no connection is
    /// quiet.
    fn admit(self: &Arc<Self>) -> Option<Registration> {
        let mut open = self.lock();
        let staying = open
            .values()
            .filter(|e| !e.evicted.load(Ordering::Relaxed))
            .count();
        if staying >= self.bound && !Self::evict_in(&open) {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry::new());
        open.insert(id, entry.clone());
        Some(Registration {
            registry: self.clone(),
            id,
            entry,
        })
    }

    fn evict_oldest_quiet(&self) -> bool {
        Self::evict_in(&self.lock())
    }

    /// Tells the connection quiet for the longest to close.
    fn evict_in(open: &HashMap<u64, Arc<Entry>>) -> bool {
        let oldest = open
            .values()
            .filter(|e| !e.evicted.load(Ordering::Relaxed))
            .filter_map(|e| e.quiet_since().map(|since| (since, e)))
            .min_by_key(|(since, _)| *since);
        match oldest {
            Some((_, entry)) => {
                entry.evicted.store(true, Ordering::Relaxed);
                entry.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn entries(&self) -> Vec<Arc<Entry>> {
        self.lock().values().cloned().collect()
    }
}

/// A connection's place in the registry, held by its socket: it stays
/// while the socket is open, also when a websocket took it over.
struct Registration {
    registry: Arc<Registry>,
    id: u64,
    entry: Arc<Entry>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Idle,
    Busy,
    Upgraded,
}

#[derive(Debug)]
struct Track {
    phase: Phase,
    /// When the phase began.
    since: Instant,
    /// Requests whose response is not handed over yet.
    in_flight: usize,
    /// Since when a write is waiting for the client to read.
    write_blocked: Option<Instant>,
}

/// What the accept loop and the reaper know of one connection.
struct Entry {
    track: Mutex<Track>,
    /// Wakes the connection's task to close it.
    close: Notify,
    /// Asked to close at once (a timeout).
    kill: AtomicBool,
    /// Asked to close to make room; no longer counted against the bound.
    evicted: AtomicBool,
}

impl Entry {
    fn new() -> Entry {
        Entry {
            track: Mutex::new(Track {
                phase: Phase::Head,
                since: Instant::now(),
                in_flight: 0,
                write_blocked: None,
            }),
            close: Notify::new(),
            kill: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Track> {
        self.track.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes came in.
    fn read_some(&self) {
        let mut t = self.lock();
        if t.phase == Phase::Idle {
            t.phase = Phase::Head;
            t.since = Instant::now();
        }
    }

    /// A write had to wait for the client.
    fn write_blocked(&self) {
        self.lock().write_blocked.get_or_insert_with(Instant::now);
    }

    /// A write went out.
    fn wrote(&self) {
        self.lock().write_blocked = None;
    }

    fn request_started(&self) {
        let mut t = self.lock();
        t.in_flight += 1;
        if t.phase != Phase::Upgraded {
            t.phase = Phase::Busy;
        }
    }

    fn request_done(&self) {
        let mut t = self.lock();
        t.in_flight = t.in_flight.saturating_sub(1);
        if t.in_flight == 0 && t.phase == Phase::Busy {
            t.phase = Phase::Idle;
            t.since = Instant::now();
        }
    }

    /// A websocket (or another protocol) takes the connection over.
    fn upgraded(&self) {
        self.lock().phase = Phase::Upgraded;
    }

    /// Since when the connection is quiet (waiting for a request, nothing
    /// left to write), if it is.
    fn quiet_since(&self) -> Option<Instant> {
        let t = self.lock();
        (matches!(t.phase, Phase::Head | Phase::Idle) && t.write_blocked.is_none())
            .then_some(t.since)
    }

    /// Whether a timeout has run out at `now`.
    fn expired(&self, now: Instant, timeouts: &Timeouts) -> bool {
        let t = self.lock();
        let over = |since: Instant, limit: Duration| now.saturating_duration_since(since) >= limit;
        match t.phase {
            Phase::Upgraded => false,
            Phase::Head if over(t.since, timeouts.header) => true,
            Phase::Idle if over(t.since, timeouts.idle) => true,
            _ => t.write_blocked.is_some_and(|b| over(b, timeouts.write)),
        }
    }
}

/// Closes the connections whose timeouts ran out, until the server stops.
async fn reap(registry: Arc<Registry>, timeouts: Timeouts, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(timeouts.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        for entry in registry.entries() {
            if entry.expired(now, &timeouts) && !entry.kill.swap(true, Ordering::Relaxed) {
                entry.close.notify_one();
            }
        }
    }
}

/// Serves one connection until it ends, is closed, or the server stops.
async fn drive(io: Tracked, peer: SocketAddr, app: Router, mut stop: watch::Receiver<bool>) {
    let entry = io.entry.clone();
    let service = {
        let entry = entry.clone();
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let in_flight = InFlight::start(entry.clone());
            request.extensions_mut().insert(ConnectInfo(peer));
            let mut app = app.clone();
            async move {
                let response = tower_service::Service::call(&mut app, request).await?;
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    in_flight.entry.upgraded();
                }
                Ok::<_, Infallible>(response.map(|body| Guarded {
                    body,
                    _in_flight: in_flight,
                }))
            }
        })
    };
    // No timer in hyper: the reaper keeps the timeouts, as hyper's header
    // timeout would also run between requests and cut the keep-alive.
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        tokio::select! {
            done = connection.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!("connection from {peer}: {e}");
                }
                break;
            }
            () = entry.close.notified() => {
                if entry.kill.load(Ordering::Relaxed) || entry.quiet_since().is_some() {
                    // Nothing is lost: no request is under way.
                    return;
                }
                if !closing {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
            _ = stop.changed(), if !closing => {
                if entry.quiet_since().is_some() {
                    return;
                }
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
    // If the socket lives on, a websocket has it.
    entry.upgraded();
}

/// A request under way on a connection; done when its response body is
/// handed over (or the request is dropped).
struct InFlight {
    entry: Arc<Entry>,
}

impl InFlight {
    fn start(entry: Arc<Entry>) -> InFlight {
        entry.request_started();
        InFlight { entry }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.entry.request_done();
    }
}

/// A response body that keeps its request in flight until hyper drops it.
struct Guarded {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling its entry when bytes move.
struct Tracked {
    stream: TcpStream,
    entry: Arc<Entry>,
    _registration: Registration,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.entry.read_some();
        }
        polled
    }
}

impl Tracked {
    fn note_write(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Pending => self.entry.write_blocked(),
            Poll::Ready(Ok(n)) if *n > 0 => self.entry.wrote(),
            Poll::Ready(_) => {}
        }
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.note_write(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.note_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> Timeouts {
        Timeouts {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            write: Duration::from_secs(60),
        }
    }

    #[test]
    fn phases_and_their_timeouts() {
        let t = timeouts();
        let e = Entry::new();
        let start = e.lock().since;
        // A new connection must send its head within the header timeout.
        assert!(!e.expired(start + Duration::from_secs(9), &t));
        assert!(e.expired(start + Duration::from_secs(10), &t));
        // A request runs as long as it takes.
        e.request_started();
        assert!(!e.expired(start + Duration::from_secs(3600), &t));
        assert!(e.quiet_since().is_none());
        // Between requests the idle timeout applies, not the header one.
        e.request_done();
        let idle = e.lock().since;
        assert!(!e.expired(idle + Duration::from_secs(30), &t));
        assert!(e.expired(idle + Duration::from_secs(60), &t));
        assert_eq!(e.quiet_since(), Some(idle));
        // The first bytes of the next request start its header clock.
        e.read_some();
        let head = e.lock().since;
        assert!(e.expired(head + Duration::from_secs(10), &t));
        // A client that does not read its response is closed.
        e.request_started();
        e.write_blocked();
        let blocked = e.lock().write_blocked.unwrap();
        assert!(!e.expired(blocked + Duration::from_secs(59), &t));
        assert!(e.expired(blocked + Duration::from_secs(60), &t));
        e.wrote();
        assert!(!e.expired(blocked + Duration::from_secs(600), &t));
        // A websocket has no timeout here.
        e.upgraded();
        e.request_done();
        e.write_blocked();
        assert!(!e.expired(blocked + Duration::from_secs(6000), &t));
        assert!(e.quiet_since().is_none());
    }

    #[test]
    fn at_the_bound_the_longest_quiet_connection_goes() {
        let registry = Arc::new(Registry::new(3));
        let a = registry.admit().unwrap();
        let b = registry.admit().unwrap();
        let c = registry.admit().unwrap();
        a.entry.request_started();
        // `b` has been quiet the longest (`a` is busy).
        let d = registry.admit().unwrap();
        assert!(b.entry.evicted.load(Ordering::Relaxed));
        assert!(!c.entry.evicted.load(Ordering::Relaxed));
        drop(b);
        c.entry.request_started();
        d.entry.request_started();
        // All busy: a new connection is refused.
        assert!(registry.admit().is_none());
        d.entry.request_done();
        let _e = registry.admit().unwrap();
        assert!(d.entry.evicted.load(Ordering::Relaxed));
    }
}
