//! The HTTP side of `vramtop serve`: hyper's HTTP/1.1 server on tokio,
//! bounded so that no client can hold up another or grow vramtop.
//!
//! Every connection is its own task, so a client that sends slowly or stops
//! reading waits alone: the others are answered by the same few runtime
//! threads meanwhile. What one client can hold is bounded by [`Limits`]:
//! the connections served at once, the size of a request head, how long a
//! head may take to arrive and how long any read or write may wait. A
//! request that breaks a limit gets an answer (431 for a head too large,
//! 400 for a request line that is not HTTP/1.x) or its connection closed
//! (a head that does not arrive in time, an HTTP/2 preface, a client that
//! stops reading); none is left hanging. Answers go out with `TCP_NODELAY`,
//! so an answer on a kept-alive connection is not held back by Nagle's
//! algorithm waiting for the client's delayed ACK.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_io_timeout::TimeoutStream;

use super::exposition;
use super::{INDEX_HTML, Route, route};

/// What one client may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; a connection beyond them is closed as
    /// soon as it is accepted.
    pub max_connections: usize,
    /// The longest a request head (request line and headers) may take to
    /// arrive, counted from when the connection is ready for one: just
    /// after connecting, or after the previous answer on a kept-alive
    /// connection. So it is also how long a kept-alive connection may stay
    /// idle. The connection is closed when it passes.
    pub header_timeout: Duration,
    /// The longest any read may wait for a byte (a backstop for what the
    /// head deadline does not cover, such as a request body).
    pub read_timeout: Duration,
    /// The longest a write may wait for the client to take bytes: a client
    /// that stops reading its answers loses its connection after this.
    pub write_timeout: Duration,
    /// The largest request head (bytes); a larger one is answered 431 and
    /// its connection closed.
    pub max_header_bytes: usize,
}

/// hyper's smallest allowed connection buffer (bytes).
const MIN_BUFFER_BYTES: usize = 8 * 1024;

/// How long the accept loop pauses after a failed accept (ms), so that a
/// persistent failure (out of file descriptors) does not spin a core.
const ACCEPT_RETRY_MS: u64 = 50;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Hundreds of Prometheus servers, with room to spare; each idle
            // connection costs a few KiB.
            max_connections: 512,
            // Longer than the usual scrape intervals (15–30 s), so that a
            // scraper's connection is kept between scrapes.
            header_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            // Far above what a scraper sends (a few hundred bytes, a few KiB
            // with a bearer token).
            max_header_bytes: 32 * 1024,
        }
    }
}

impl Limits {
    /// The connection buffer: a whole head fits, and a pipelining client
    /// cannot make it grow beyond this (bytes).
    fn buffer_bytes(&self) -> usize {
        self.max_header_bytes
            .saturating_mul(2)
            .max(MIN_BUFFER_BYTES)
    }
}

/// Answers HTTP requests on `listener` with the latest body published on
/// `metrics`, within `limits`, until the returned future is dropped.
pub async fn serve(listener: TcpListener, metrics: watch::Receiver<Bytes>, limits: Limits) {
    // Semaphore::new panics beyond MAX_PERMITS, which no machine reaches in
    // connections anyway.
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(
                max = limits.max_connections,
                "too many connections: closing a new one"
            );
            drop(stream);
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, metrics, limits).await {
                // Timeouts, resets and malformed requests: the client's
                // business, and already answered or closed.
                tracing::debug!(error = %e, "connection ended");
            }
            drop(slot);
        });
    }
}

/// Serves one connection until it closes or breaks a limit.
async fn connection(
    stream: TcpStream,
    metrics: watch::Receiver<Bytes>,
    limits: Limits,
) -> Result<(), hyper::Error> {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    let mut stream = TimeoutStream::new(stream);
    stream.set_read_timeout(Some(limits.read_timeout));
    stream.set_write_timeout(Some(limits.write_timeout));
    let io = TokioIo::new(Box::pin(stream));
    let service = service_fn(move |request: Request<Incoming>| {
        // A reference-counted copy of the latest body: no copy of the bytes.
        let body = metrics.borrow().clone();
        async move { Ok::<_, Infallible>(answer(&request, body)) }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.buffer_bytes())
        .serve_connection(io, service)
        .await
}

fn plain(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The answer to one request. The body is whole in memory, so it goes out
/// with a `Content-Length`; HEAD gets the same headers without the body.
fn answer(request: &Request<Incoming>, metrics: Bytes) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    match route(request.method().as_str(), request.uri().path()) {
        Route::Metrics => plain(StatusCode::OK, exposition::CONTENT_TYPE, metrics),
        Route::Index => plain(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Bytes::from_static(INDEX_HTML.as_bytes()),
        ),
        Route::NotFound => plain(
            StatusCode::NOT_FOUND,
            TEXT,
            Bytes::from_static(b"not found; try /metrics\n"),
        ),
        Route::MethodNotAllowed => {
            let mut response = plain(
                StatusCode::METHOD_NOT_ALLOWED,
                TEXT,
                Bytes::from_static(b"only GET and HEAD are allowed\n"),
            );
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            response
        }
    }
}

/// Binds `addr` for [`serve`], from outside a runtime: the address is
/// taken (or refused) before anything else starts. The listener must be
/// handed to [`serve`] inside the runtime `handle` belongs to.
pub fn bind(
    addr: std::net::SocketAddr,
    handle: &tokio::runtime::Handle,
) -> io::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let _entered = handle.enter();
    TcpListener::from_std(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_fit_a_scraper_and_bound_a_client() {
        let limits = Limits::default();
        assert!(limits.max_header_bytes >= 8 * 1024);
        assert!(limits.buffer_bytes() >= limits.max_header_bytes);
        assert!(limits.write_timeout < limits.read_timeout);
        assert!(limits.max_connections >= 200);
    }

    #[test]
    fn the_buffer_never_goes_below_what_hyper_accepts() {
        let tiny = Limits {
            max_header_bytes: 10,
            ..Limits::default()
        };
        assert_eq!(tiny.buffer_bytes(), MIN_BUFFER_BYTES);
        let huge = Limits {
            max_header_bytes: usize::MAX,
            ..Limits::default()
        };
        assert_eq!(huge.buffer_bytes(), usize::MAX);
    }
}
