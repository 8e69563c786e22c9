//! `vramtop serve` under load and abuse: the HTTP server the binary runs
//! (`vramtop::serve::http::serve`), started in this process on loopback
//! with short deadlines so that each test ends in seconds.
//!
//! Each abuse runs while a normal scraper keeps asking for `/metrics`, and
//! the test asserts what every client gets: the normal scraper its whole
//! body every time, the abuser an answer or a closed connection. Nothing
//! here asserts a duration; the waits are liveness bounds ([`PATIENCE`]).
//! The speed figures (requests per second, p99, RSS and threads under each
//! abuse) are measured by `scripts/serve-load.py` against the binary.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;
use vramtop::serve::http::{self, Limits};

/// The longest any exchange may take before the test calls it hung (a
/// liveness bound for a loaded CI machine, not a speed figure).
const PATIENCE: Duration = Duration::from_secs(20);

/// Scrapes the normal scraper makes during each abuse.
const NORMAL_SCRAPES: usize = 20;

/// A body of the size a few GPUs give (bytes), distinct per line so that a
/// cut or mixed-up answer is noticed.
fn body() -> String {
    (0..400)
        .map(|i| format!("vramtop_test_series{{n=\"{i}\"}} {i}\n"))
        .collect()
}

/// An in-process server; stopped (its runtime dropped) with the guard.
struct TestServer {
    addr: SocketAddr,
    body: String,
    _runtime: tokio::runtime::Runtime,
}

fn start(limits: Limits) -> TestServer {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let listener =
        http::bind(SocketAddr::from(([127, 0, 0, 1], 0)), runtime.handle()).expect("binds");
    let addr = listener.local_addr().expect("an address");
    let body = body();
    let (_publish, metrics) = watch::channel(Bytes::from(body.clone()));
    runtime.spawn(http::serve(listener, metrics, limits));
    TestServer {
        addr,
        body,
        _runtime: runtime,
    }
}

/// A server with `limits` changed from the defaults by `change`.
fn start_with(change: impl FnOnce(&mut Limits)) -> TestServer {
    let mut limits = Limits::default();
    change(&mut limits);
    start(limits)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(PATIENCE))
        .expect("write timeout");
    stream
}

/// One answer read off `stream`: (status, lower-cased head, body). The body
/// is `Content-Length` bytes long.
fn read_answer(stream: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("the answer's head arrives");
        assert_eq!(n, 1, "closed inside a head: {raw:?}");
        raw.push(byte[0]);
    }
    let head = String::from_utf8(raw)
        .expect("an ASCII head")
        .to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Content-Length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("the whole body");
    (status, head, body)
}

/// A normal scrape on a fresh connection; asserts the whole body came.
fn scrape(server: &TestServer) {
    let mut stream = connect(server.addr);
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nConnection: close\r\n\r\n")
        .expect("request sent");
    let (status, head, body) = read_answer(&mut stream);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, server.body.as_bytes(), "the whole body");
}

/// [`NORMAL_SCRAPES`] normal scrapes, one after the other.
fn normal_scraper(server: &TestServer) {
    for _ in 0..NORMAL_SCRAPES {
        scrape(server);
    }
}

/// Whether the server closed `stream`: reading ends (0 bytes or a reset)
/// before [`PATIENCE`], with `answer_allowed` bytes at most before the end.
fn wait_closed(stream: &mut TcpStream, answer_allowed: usize) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return seen,
            Ok(n) => {
                seen.extend_from_slice(&chunk[..n]);
                assert!(
                    seen.len() <= answer_allowed,
                    "{} bytes and still open",
                    seen.len()
                );
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset) => return seen,
            Err(e) => panic!("the server never closed the connection: {e}"),
        }
    }
}

#[test]
fn a_client_that_pipelines_and_never_reads_does_not_hold_up_other_scrapers() {
    let server = start_with(|l| l.write_timeout = Duration::from_secs(1));
    const PIPELINED: usize = 2_000;
    let mut pipeliner = connect(server.addr);
    let requests = "GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n".repeat(PIPELINED);
    // Sent from a thread: once the server stops reading, the rest waits in
    // the socket buffers or fails when the server closes; either is fine.
    let mut writer = pipeliner.try_clone().expect("a second handle");
    let sender = thread::spawn(move || {
        let _ = writer.write_all(requests.as_bytes());
    });
    // The answers fill both socket buffers and the server's write waits:
    // other clients are answered all the same.
    normal_scraper(&server);
    // Long past the write deadline, the server has given up on it: what
    // the socket buffers held arrives, then the end, well short of every
    // answer.
    thread::sleep(Duration::from_secs(5));
    let all_answers = PIPELINED * server.body.len();
    let seen = wait_closed(&mut pipeliner, all_answers);
    assert!(seen.len() < all_answers, "{} bytes", seen.len());
    assert!(
        seen.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{:?}",
        &seen[..seen.len().min(100)]
    );
    sender.join().expect("the sender ends");
    normal_scraper(&server);
}

#[test]
fn slow_and_silent_connections_are_closed_at_the_head_deadline_and_others_answered() {
    let server = start_with(|l| l.header_timeout = Duration::from_secs(1));
    const SLOW: usize = 150;
    const SILENT: usize = 50;
    let mut slow: Vec<TcpStream> = (0..SLOW).map(|_| connect(server.addr)).collect();
    let silent: Vec<TcpStream> = (0..SILENT).map(|_| connect(server.addr)).collect();
    for s in &mut slow {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nX-Slow: ")
            .expect("a head begins");
    }
    // One more byte on every slow connection each 100 ms, never finishing
    // the head, until the server hangs up (or a bound of rounds).
    let mut writers: Vec<TcpStream> = slow
        .iter()
        .map(|s| s.try_clone().expect("a second handle"))
        .collect();
    let dribbler = thread::spawn(move || {
        let started = Instant::now();
        while !writers.is_empty() && started.elapsed() < PATIENCE {
            writers.retain_mut(|w| w.write_all(b"a").is_ok());
            thread::sleep(Duration::from_millis(100));
        }
    });
    normal_scraper(&server);
    for mut s in slow.into_iter().chain(silent) {
        let seen = wait_closed(&mut s, 0);
        assert!(seen.is_empty(), "no answer to a head that never ended");
    }
    dribbler.join().expect("the dribbler ends");
    normal_scraper(&server);
}

/// Sends a head with one header of `header_bytes`, in pieces, stopping at
/// the first refused write (the server hung up); returns the answer.
fn send_huge_header(addr: SocketAddr, header_bytes: usize) -> (u16, String) {
    let mut stream = connect(addr);
    let piece = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    let mut ok = stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nX-Huge: ")
        .is_ok();
    while ok && sent < header_bytes {
        ok = stream.write_all(&piece).is_ok();
        sent += piece.len();
    }
    if ok {
        let _ = stream.write_all(b"\r\n\r\n");
    }
    let (status, head, _) = read_answer(&mut stream);
    let rest = wait_closed(&mut stream, 0);
    assert!(rest.is_empty(), "nothing after the refusal");
    (status, head)
}

#[test]
fn huge_headers_are_refused_with_431_and_closed_while_others_are_answered() {
    let server = start(Limits::default());
    // Five clients, each with a 200 MB header: the server reads a few
    // dozen KiB of each, answers 431 and hangs up.
    let addr = server.addr;
    let huge: Vec<_> = (0..5)
        .map(|_| thread::spawn(move || send_huge_header(addr, 200 << 20)))
        .collect();
    normal_scraper(&server);
    for client in huge {
        let (status, head) = client.join().expect("the client ends");
        assert_eq!(status, 431, "{head}");
        assert!(head.contains("connection: close"), "{head}");
    }
    // Just under the limit is still served.
    let mut stream = connect(server.addr);
    let header = "a".repeat(Limits::default().max_header_bytes - 1024);
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: vramtop\r\nX-Big: {header}\r\n\r\n"
    )
    .expect("request sent");
    let (status, head, body) = read_answer(&mut stream);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, server.body.as_bytes());
}

#[test]
fn two_hundred_concurrent_scrapers_all_get_every_answer() {
    let server = start(Limits::default());
    const SCRAPERS: usize = 200;
    const EACH: usize = 5;
    let addr = server.addr;
    let expected = server.body.clone();
    // Each scraper keeps its connection and asks EACH times, as Prometheus
    // does; all connect before any asks, so all are open at once.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(SCRAPERS));
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|_| {
            let (barrier, expected) = (barrier.clone(), expected.clone());
            thread::spawn(move || {
                let mut stream = connect(addr);
                barrier.wait();
                for _ in 0..EACH {
                    stream
                        .write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n")
                        .expect("request sent");
                    let (status, head, body) = read_answer(&mut stream);
                    assert_eq!(status, 200, "{head}");
                    assert_eq!(body, expected.as_bytes());
                }
            })
        })
        .collect();
    normal_scraper(&server);
    for s in scrapers {
        s.join().expect("every scraper got every answer");
    }
}

#[test]
fn a_kept_alive_connection_answers_every_request_in_turn_and_pipelined() {
    let server = start(Limits::default());
    let mut stream = connect(server.addr);
    for _ in 0..300 {
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n")
            .expect("request sent");
        let (status, head, body) = read_answer(&mut stream);
        assert_eq!(status, 200, "{head}");
        assert!(!head.contains("connection: close"), "{head}");
        assert_eq!(body, server.body.as_bytes());
    }
    // A pipelining client that does read gets every answer, in order.
    let paths = ["/metrics", "/", "/nothing", "/metrics"];
    let burst: String = paths
        .iter()
        .map(|p| format!("GET {p} HTTP/1.1\r\nHost: vramtop\r\n\r\n"))
        .collect();
    stream.write_all(burst.as_bytes()).expect("burst sent");
    let statuses: Vec<u16> = paths.iter().map(|_| read_answer(&mut stream).0).collect();
    assert_eq!(statuses, [200, 200, 404, 200]);
}

#[test]
fn connections_beyond_the_limit_are_closed_until_one_frees() {
    const MAX: usize = 4;
    let server = start_with(|l| l.max_connections = MAX);
    // MAX kept-alive connections, each answered once, so each holds a slot.
    let mut held: Vec<TcpStream> = (0..MAX)
        .map(|_| {
            let mut s = connect(server.addr);
            s.write_all(b"GET / HTTP/1.1\r\nHost: vramtop\r\n\r\n")
                .expect("request sent");
            assert_eq!(read_answer(&mut s).0, 200);
            s
        })
        .collect();
    let mut extra = connect(server.addr);
    let _ = extra.write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n");
    assert!(wait_closed(&mut extra, 0).is_empty(), "closed unanswered");
    // One leaves; its slot comes back once the server sees it go.
    let leaving = held.pop().expect("a held connection");
    leaving.shutdown(Shutdown::Both).expect("shutdown");
    drop(leaving);
    let started = Instant::now();
    loop {
        let mut s = connect(server.addr);
        let answered = s
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nConnection: close\r\n\r\n")
            .is_ok()
            && {
                let mut first = [0u8; 12];
                s.read_exact(&mut first).is_ok() && &first == b"HTTP/1.1 200"
            };
        if answered {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the freed slot never came back"
        );
        thread::sleep(Duration::from_millis(50));
    }
    // The connections that held their slots are still served.
    for s in &mut held {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n")
            .expect("request sent");
        assert_eq!(read_answer(s).0, 200);
    }
}

#[test]
fn http2_request_line_is_answered_400_and_preface_closed() {
    let server = start(Limits::default());
    let mut line = connect(server.addr);
    line.write_all(b"GET /metrics HTTP/2.0\r\nHost: vramtop\r\n\r\n")
        .expect("request sent");
    let (status, head, _) = read_answer(&mut line);
    assert_eq!(status, 400, "{head}");
    assert!(wait_closed(&mut line, 0).is_empty());

    // HTTP/2 with prior knowledge is not spoken: the connection is closed
    // rather than left waiting.
    let mut preface = connect(server.addr);
    preface
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .expect("preface sent");
    assert!(wait_closed(&mut preface, 0).is_empty());
    normal_scraper(&server);
}
