//! `vramtop serve`: the exporter over real HTTP, on the simulated GPU.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_nvml::expect;
use prometheus_parse::{Scrape, Value};
use vramtop::serve::metrics::FAMILIES;

/// How long a server may take to start or stop before the test gives up
/// (a liveness bound, not a speed figure).
const PATIENCE: Duration = Duration::from_secs(30);

fn log_file(test: &str) -> String {
    std::env::temp_dir()
        .join(format!("vramtop-serve-{}-{test}.log", std::process::id()))
        .display()
        .to_string()
}

/// A running `vramtop serve`; killed when dropped, so a failed assertion
/// leaves no server behind.
struct Server {
    child: Child,
    addr: SocketAddr,
    stderr: BufReader<ChildStderr>,
    log: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Starts `vramtop serve --backend sim --listen 127.0.0.1:0 ARGS` and reads
/// the bound address from its "vramtop serve: serving metrics on http://ADDR/metrics" line.
fn serve(test: &str, args: &[&str]) -> Server {
    serve_with_env(test, args, &[])
}

/// [`serve`] with extra environment variables.
fn serve_with_env(test: &str, args: &[&str], envs: &[(&str, &std::path::Path)]) -> Server {
    serve_on("sim", test, args, envs)
}

/// [`serve_with_env`] on telemetry backend `backend`.
fn serve_on(backend: &str, test: &str, args: &[&str], envs: &[(&str, &std::path::Path)]) -> Server {
    let log = log_file(test);
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(["serve", "--backend", backend, "--listen", "127.0.0.1:0"])
        .args(["--log-file", &log])
        .args(args)
        // No probe of the machine's; a test's own `envs` may name a folder.
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramtop starts");
    let stderr = child.stderr.take().map(BufReader::new);
    // Kept in the guard at once, so that a failure below kills the child.
    let mut server = Server {
        child,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        stderr: stderr.expect("stderr is piped"),
        log,
    };
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = server.stderr.read_line(&mut line).expect("stderr readable");
        assert!(n > 0, "vramtop serve ended before serving:\n{seen}");
        seen.push_str(&line);
        if let Some(rest) = line
            .trim()
            .strip_prefix("vramtop serve: serving metrics on http://")
        {
            server.addr = rest
                .strip_suffix("/metrics")
                .expect("the line ends in /metrics")
                .parse()
                .expect("a socket address");
            return server;
        }
    }
}

/// One HTTP/1.0 exchange: (status code, lower-cased header block, body).
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("timeout set");
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request sent");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("response read");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn scrape(addr: SocketAddr) -> (String, Scrape) {
    let (status, head, body) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200, "{head}");
    let parsed =
        Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text parses");
    (body, parsed)
}

fn value(v: &Value) -> f64 {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
        other => panic!("unexpected histogram or summary {other:?}"),
    }
}

/// The samples of family `name`.
fn family<'s>(scrape: &'s Scrape, name: &str) -> Vec<&'s prometheus_parse::Sample> {
    scrape.samples.iter().filter(|s| s.metric == name).collect()
}

fn once_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--backend", "sim", "--once", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = common::run_vramtop(&all, None);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).expect("--once --json is JSON")
}

const SIM: &[&str] = &["--sim-gpus", "3", "--sim-training", "4", "--sim-seed", "7"];

#[test]
fn sim_metrics_match_once_json_for_the_same_seed() {
    let server = serve("match", SIM);
    let (_, scrape) = scrape(server.addr);
    let once = once_json(SIM);
    let gpus = once["gpus"].as_array().expect("a GPU list");
    assert_eq!(gpus.len(), 3);

    let totals = family(&scrape, "vramtop_gpu_memory_total_bytes");
    assert_eq!(totals.len(), gpus.len(), "one total per GPU");
    for gpu in gpus {
        let index = gpu["index"].as_u64().expect("an index").to_string();
        let sample = totals
            .iter()
            .find(|s| s.labels.get("gpu") == Some(index.as_str()))
            .unwrap_or_else(|| panic!("no total for GPU {index}"));
        assert_eq!(
            value(&sample.value),
            gpu["memory_total"].as_f64().expect("a total"),
            "GPU {index}"
        );
        assert_eq!(sample.labels.get("uuid"), gpu["uuid"].as_str());
        assert_eq!(sample.labels.get("name"), gpu["name"].as_str());
        // vramtop_gpu_up is labelled as every other GPU family is.
        let up = family(&scrape, "vramtop_gpu_up")
            .into_iter()
            .find(|s| s.labels.get("gpu") == Some(index.as_str()))
            .unwrap_or_else(|| panic!("no up for GPU {index}"));
        assert_eq!(value(&up.value), 1.0);
        assert_eq!(up.labels.get("uuid"), gpu["uuid"].as_str());
        assert_eq!(up.labels.get("name"), gpu["name"].as_str());
    }

    // Every simulated training process has allocator figures, labelled by
    // GPU and pid; the ones --once shows (first per GPU) are among them.
    let allocated = family(&scrape, "vramtop_allocator_allocated_bytes");
    assert_eq!(allocated.len(), 4, "one series per training process");
    let pids: BTreeSet<(String, String)> = allocated
        .iter()
        .map(|s| {
            (
                s.labels.get("gpu").expect("gpu label").to_string(),
                s.labels.get("pid").expect("pid label").to_string(),
            )
        })
        .collect();
    for gpu in gpus {
        let pid = gpu["allocator"]["pid"]
            .as_u64()
            .expect("a simulated trainer");
        let index = gpu["index"].as_u64().expect("an index");
        assert!(
            pids.contains(&(index.to_string(), pid.to_string())),
            "{pids:?} lacks GPU {index} pid {pid}"
        );
    }
    for name in [
        "vramtop_allocator_reserved_bytes",
        "vramtop_allocator_active_bytes",
        "vramtop_allocator_inactive_split_bytes",
        "vramtop_allocator_segments",
        "vramtop_allocator_peak_allocated_bytes",
        "vramtop_allocator_peak_reserved_bytes",
        "vramtop_allocator_fragmentation_ratio",
    ] {
        assert_eq!(family(&scrape, name).len(), 4, "{name}");
    }
    for s in family(&scrape, "vramtop_allocator_fragmentation_ratio") {
        let f = value(&s.value);
        assert!((0.0..=1.0).contains(&f), "a ratio: {f}");
    }
    for s in &allocated {
        let reserved = family(&scrape, "vramtop_allocator_reserved_bytes")
            .into_iter()
            .find(|r| r.labels.get("pid") == s.labels.get("pid"))
            .expect("reserved for the same pid");
        assert!(value(&s.value) <= value(&reserved.value));
    }

    let build = family(&scrape, "vramtop_build_info");
    assert_eq!(build.len(), 1);
    assert_eq!(build[0].labels.get("backend"), Some("sim"));
    assert_eq!(
        build[0].labels.get("version"),
        Some(env!("CARGO_PKG_VERSION"))
    );
    // The simulated board has no fan: no series rather than a fake 0.
    assert!(family(&scrape, "vramtop_gpu_fan_speed_ratio").is_empty());
}

#[test]
fn every_family_has_help_and_type_and_counters_end_in_total() {
    let server = serve("types", SIM);
    let (body, scrape) = scrape(server.addr);
    let names: BTreeSet<&str> = scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    assert!(names.len() >= 20, "{names:?}");
    for name in &names {
        assert!(
            FAMILIES.iter().any(|f| f.name == *name),
            "{name} not declared"
        );
        assert!(
            scrape.docs.contains_key(*name),
            "{name} has no HELP line:\n{body}"
        );
        let type_line = body
            .lines()
            .find(|l| l.starts_with(&format!("# TYPE {name} ")))
            .unwrap_or_else(|| panic!("{name} has no TYPE line"));
        let is_counter = type_line.ends_with(" counter");
        assert_eq!(is_counter, name.ends_with("_total"), "{type_line}");
    }
    for s in &scrape.samples {
        let counter = matches!(s.value, Value::Counter(_));
        assert_eq!(counter, s.metric.ends_with("_total"), "{}", s.metric);
    }
    // The format wants each family's lines together: a name seen again
    // after another family's lines would break that.
    let mut order: Vec<&str> = Vec::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().expect("a name");
        if order.last() != Some(&name) {
            assert!(!order.contains(&name), "{name} is split");
            order.push(name);
        }
    }
}

#[test]
fn http_routes_content_type_head_404_and_405() {
    let server = serve("routes", &[]);
    let (status, head, body) = http(server.addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(body.contains("# TYPE vramtop_build_info gauge"));

    let (status, head, body) = http(server.addr, "HEAD", "/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(body.is_empty(), "HEAD has no body: {body}");

    let (status, _, body) = http(server.addr, "GET", "/");
    assert_eq!(status, 200);
    assert!(body.contains("href=\"/metrics\""), "{body}");

    let (status, _, _) = http(server.addr, "GET", "/nothing-here");
    assert_eq!(status, 404);

    let (status, head, _) = http(server.addr, "POST", "/metrics");
    assert_eq!(status, 405);
    assert!(head.contains("allow: get, head"), "{head}");
}

/// Reads what the server sends on `stream` until it closes the connection
/// (end or reset), bounded by [`PATIENCE`].
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return seen,
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return seen,
            Err(e) => panic!("the connection was left open: {e}"),
        }
    }
}

#[test]
fn scrapes_are_answered_while_another_client_pipelines_and_never_reads() {
    let server = serve("pipeliner", SIM);
    let mut pipeliner = TcpStream::connect(server.addr).expect("connects");
    pipeliner
        .set_write_timeout(Some(PATIENCE))
        .expect("timeout set");
    let requests = "GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n".repeat(2_000);
    // The answers (megabytes) fill the socket buffers, and the server's
    // write to this client waits; the client never reads.
    let sender = std::thread::spawn(move || {
        let _ = pipeliner.write_all(requests.as_bytes());
        pipeliner
    });
    for _ in 0..10 {
        let (_, parsed) = scrape(server.addr);
        assert!(!family(&parsed, "vramtop_gpu_up").is_empty());
    }
    drop(sender.join().expect("the sender ends"));
}

#[test]
fn http2_and_oversized_heads_get_an_answer_or_a_close() {
    let server = serve("refusals", &[]);
    let exchange = |request: &[u8]| {
        let mut stream = TcpStream::connect(server.addr).expect("connects");
        stream
            .set_read_timeout(Some(PATIENCE))
            .expect("timeout set");
        // A refused request may be cut short by the server hanging up.
        let _ = stream.write_all(request);
        String::from_utf8_lossy(&read_until_closed(&mut stream)).into_owned()
    };
    let answer = exchange(b"GET /metrics HTTP/2.0\r\nHost: vramtop\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = exchange(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert!(answer.is_empty(), "closed without an answer: {answer}");
    let mut huge = b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nX-Huge: ".to_vec();
    huge.resize(huge.len() + (1 << 20), b'a');
    huge.extend_from_slice(b"\r\n\r\n");
    let answer = exchange(&huge);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
}

#[test]
fn simulated_figures_keep_moving_between_scrapes() {
    let server = serve("moving", &["--interval", "100ms"]);
    let (_, first) = scrape(server.addr);
    let get = |s: &Scrape, name: &str| {
        family(s, name)
            .first()
            .map(|x| value(&x.value))
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let samples0 = get(&first, "vramtop_samples_total");
    let t0 = get(&first, "vramtop_last_sample_timestamp_seconds");
    // Wait (boundedly) for the background sampler to take a newer sample.
    let deadline = Instant::now() + PATIENCE;
    let later = loop {
        let (_, s) = scrape(server.addr);
        if get(&s, "vramtop_samples_total") > samples0 {
            break s;
        }
        assert!(Instant::now() < deadline, "no new sample arrived");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(get(&later, "vramtop_last_sample_timestamp_seconds") > t0);
    assert_eq!(get(&later, "vramtop_scrape_errors_total"), 0.0);
}

#[test]
fn sigterm_stops_serve_cleanly() {
    let mut server = serve("sigterm", &[]);
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + PATIENCE;
    let exit = loop {
        if let Some(exit) = server.child.try_wait().expect("wait works") {
            break exit;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    let mut rest = String::new();
    server
        .stderr
        .read_to_string(&mut rest)
        .expect("stderr readable");
    assert!(rest.contains("stopped"), "{rest}");
}

#[test]
fn non_loopback_listen_without_allow_remote_exits_2() {
    let (code, stdout, stderr) = common::run_vramtop(
        &["serve", "--backend", "sim", "--listen", "0.0.0.0:0"],
        None,
    );
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    assert!(stderr.contains("not a loopback address"), "{stderr}");
    assert!(!stderr.contains("serving metrics"), "{stderr}");
}

#[test]
fn bad_listen_address_is_refused_with_the_form_to_write() {
    for bad in ["localhost", "127.0.0.1:80x", "localhost:9400", "::1:9400"] {
        let (code, _, stderr) = common::run_vramtop(&["serve", "--listen", bad], None);
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(stderr.contains("--listen"), "{bad}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "'{bad}' is not an address and port: write an IP address and port, e.g. \
                 127.0.0.1:9400 or [::1]:9400"
            )),
            "{bad}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{bad}: {stderr}");
    }
}

/// Every `vramtop_…` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("vramtop_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

fn expressions(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => expressions(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| expressions(v, out)),
        _ => {}
    }
}

#[test]
fn grafana_dashboard_is_json_and_uses_only_emitted_metrics() {
    let text = std::fs::read_to_string("docs/grafana/vramtop-dashboard.json")
        .expect("the dashboard is committed");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 4, "{} panels", panels.len());
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .expect("template variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(
        vars.contains(&"node") || vars.contains(&"instance"),
        "{vars:?}"
    );

    let mut exprs = Vec::new();
    for p in panels {
        expressions(&p["targets"], &mut exprs);
    }
    assert!(!exprs.is_empty());
    let declared: BTreeSet<&str> = FAMILIES.iter().map(|f| f.name).collect();
    let mut used = BTreeSet::new();
    for e in &exprs {
        for name in metric_names(e) {
            assert!(declared.contains(name.as_str()), "{name} in `{e}`");
            used.insert(name);
        }
        assert!(
            e.contains("$node") || e.contains("$instance"),
            "panel query ignores the node variable: {e}"
        );
    }
    for needed in [
        "vramtop_gpu_memory_used_bytes",
        "vramtop_gpu_memory_total_bytes",
        "vramtop_allocator_allocated_bytes",
        "vramtop_allocator_reserved_bytes",
        "vramtop_allocator_fragmentation_ratio",
        "vramtop_allocator_ooms_total",
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }
}

#[test]
fn fleet_doc_names_only_emitted_metrics() {
    let text = std::fs::read_to_string("docs/fleet.md").expect("docs/fleet.md");
    let declared: BTreeSet<&str> = FAMILIES.iter().map(|f| f.name).collect();
    let names = metric_names(&text);
    assert!(names.contains("vramtop_allocator_ooms_total"), "{names:?}");
    for name in names {
        assert!(declared.contains(name.as_str()), "docs/fleet.md: {name}");
    }
}

/// A probe socket in a private `$XDG_RUNTIME_DIR` that sends hello and stats
/// (protocol v1) to every client, then holds the connection open.
fn fake_probe(runtime: &std::path::Path, reserved: u64, allocated: u64) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = runtime.join("vramtop");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let listener =
        std::os::unix::net::UnixListener::bind(dir.join("777.sock")).expect("bind the probe");
    let lines = format!(
        "{}\n{}\n",
        serde_json::json!({"v": 1, "type": "hello", "pid": 777, "argv": ["train.py"],
            "torch": "2.5.1", "devices": [0], "time": 1.0}),
        serde_json::json!({"v": 1, "type": "stats", "time": 1.0, "device": 0, "stats": {
            "allocated_bytes.all.current": allocated, "reserved_bytes.all.current": reserved,
            "segment.all.current": 2, "num_ooms": 3}}),
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let lines = lines.clone();
            std::thread::spawn(move || {
                if conn.write_all(lines.as_bytes()).is_ok() {
                    let mut sink = [0u8; 64];
                    while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
                }
            });
        }
    });
}

#[test]
fn an_attached_probes_allocator_is_exported_under_its_host_pid() {
    let runtime = tempfile::tempdir().expect("temp dir");
    let (reserved, allocated) = (3u64 << 29, 1u64 << 30);
    fake_probe(runtime.path(), reserved, allocated);
    let probes = runtime.path().join("vramtop");
    let server = serve_with_env(
        "probe",
        &["--interval", "200ms"],
        &[
            ("XDG_RUNTIME_DIR", runtime.path()),
            (common::PROBE_DIR_ENV, probes.as_path()),
        ],
    );
    // The fake probe is this process: the kernel's peer credentials say so.
    let pid = std::process::id().to_string();
    let started = Instant::now();
    loop {
        let (body, parsed) = scrape(server.addr);
        let of_probe = |name: &str| {
            family(&parsed, name)
                .into_iter()
                .find(|s| s.labels.get("pid") == Some(pid.as_str()))
                .map(|s| value(&s.value))
        };
        if let Some(r) = of_probe("vramtop_allocator_reserved_bytes") {
            assert_eq!(r, reserved as f64, "{body}");
            assert_eq!(
                of_probe("vramtop_allocator_allocated_bytes"),
                Some(allocated as f64)
            );
            assert_eq!(of_probe("vramtop_allocator_ooms_total"), Some(3.0));
            // The probe sent no peaks: none is exported, not a 0 below
            // the current figures.
            assert_eq!(of_probe("vramtop_allocator_peak_allocated_bytes"), None);
            assert_eq!(of_probe("vramtop_allocator_peak_reserved_bytes"), None);
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the probe's allocator never appeared:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn process_usage_and_a_childs_own_context_are_exported_from_nvml() {
    // The fake lists the calling process (vramtop serve) on each GPU and
    // beside it FAKE_NVML_OTHER_PID: this test, vramtop's parent. So
    // vramtop is a child of a GPU process holding a context of its own.
    let parent = std::process::id();
    let Some(lib) = common::fake_nvml::fake_nvml_with(&[
        ("FAKE_NVML_GPUS", "2"),
        ("FAKE_NVML_OTHER_PID", &parent.to_string()),
    ]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let server = serve_on(
        "nvml",
        "usage",
        &["--interval", "100ms"],
        &[("LD_LIBRARY_PATH", dir)],
    );
    let (child, parent) = (server.child.id().to_string(), parent.to_string());
    // CPU time needs two samples: scrape until it is there.
    let started = Instant::now();
    let (body, parsed) = loop {
        let (body, parsed) = scrape(server.addr);
        if family(&parsed, "vramtop_process_cpu_utilization_ratio").len() == 2 {
            break (body, parsed);
        }
        assert!(
            started.elapsed() < PATIENCE,
            "no CPU figure for both processes:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let of = |name: &str, gpu: Option<&str>, pid: &str| {
        family(&parsed, name)
            .into_iter()
            .filter(|s| s.labels.get("pid") == Some(pid) && s.labels.get("gpu") == gpu)
            .map(|s| value(&s.value))
            .collect::<Vec<_>>()
    };
    let sm = "vramtop_gpu_process_sm_utilization_ratio";
    for gpu in 0..2u32 {
        let g = gpu.to_string();
        let ratio = |percent: u32| vec![f64::from(percent) / 100.0];
        assert_eq!(
            of(sm, Some(&g), &child),
            ratio(expect::own_process_sm(gpu)),
            "{body}"
        );
        assert_eq!(
            of(sm, Some(&g), &parent),
            ratio(expect::other_process_sm(gpu)),
            "{body}"
        );
    }
    // Host figures: one series per process though each is on two GPUs.
    let host = family(&parsed, "vramtop_process_host_memory_bytes");
    assert_eq!(host.len(), 2, "{body}");
    assert!(
        host.iter()
            .all(|s| s.labels.get("gpu").is_none() && value(&s.value) > 0.0)
    );
    for pid in [&child, &parent] {
        let cpu = of("vramtop_process_cpu_utilization_ratio", None, pid);
        assert!(cpu.len() == 1 && cpu[0] >= 0.0, "{body}");
    }
    // vramtop, on both GPUs, is the child with a context of its own there.
    let own = family(&parsed, "vramtop_gpu_process_own_context_info");
    assert_eq!(own.len(), 2, "{body}");
    for s in own {
        assert_eq!(s.labels.get("pid"), Some(child.as_str()));
        assert_eq!(s.labels.get("parent_pid"), Some(parent.as_str()));
        assert_eq!(value(&s.value), 1.0);
    }
}
