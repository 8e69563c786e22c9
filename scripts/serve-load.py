#!/usr/bin/env python3
"""Load and abuse figures for `vramtop serve`, measured against the binary.

Starts `vramtop serve --backend sim` on a free loopback port, then runs each
scenario for a bounded time while a normal scraper (a fresh connection per
scrape, as a simple client does) keeps asking for /metrics:

  idle        nothing else: fresh-connection and kept-alive req/s and latency
  pipeliner   one client sends 2,000 pipelined requests and never reads
  slowloris   300 connections dribble a request head, one byte a second
  huge-heads  five clients each send a 200 MB header
  200-scrapers 200 kept-alive scrapers ask as fast as they can

For each it prints the normal scraper's answers, failures (no answer within
--timeout), req/s, p50, p99 and worst latency, and the server's peak RSS and
thread count (from /proc). Only 127.0.0.1 is contacted; every loop is
bounded in count and time, and the server is stopped at the end.

    scripts/serve-load.py [--bin target/debug/vramtop] [--seconds 5]

The clients are Python threads: with 200 of them the figures are bounded by
the client as much as by the server.
"""

import argparse
import socket
import subprocess
import threading
import time

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\n\r\n"
CLOSE_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nConnection: close\r\n\r\n"


def read_answer(sock):
    """Reads one HTTP/1.1 answer with a Content-Length; returns the status."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed inside a head")
        head += chunk
    head, rest = head.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a body")
        rest += chunk
    if len(rest) != length:
        raise ConnectionError("more bytes than the Content-Length")
    return status


def fresh_scrape(addr, timeout):
    """One scrape on a new connection: its latency (s), or None on failure."""
    started = time.monotonic()
    try:
        with socket.create_connection(addr, timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(CLOSE_REQUEST)
            if read_answer(s) != 200:
                return None
    except OSError:
        return None
    return time.monotonic() - started


def summary(latencies, failures, seconds):
    lat = sorted(latencies)

    def pct(p):
        return lat[min(len(lat) - 1, int(p * (len(lat) - 1)))] * 1e3 if lat else float("nan")

    return {
        "answers": len(lat),
        "failures": failures,
        "req_s": len(lat) / seconds if seconds > 0 else float("nan"),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": lat[-1] * 1e3 if lat else float("nan"),
    }


def normal_scraper(addr, seconds, timeout):
    latencies, failures = [], 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        lat = fresh_scrape(addr, timeout)
        if lat is None:
            failures += 1
        else:
            latencies.append(lat)
    return summary(latencies, failures, time.monotonic() - started)


def kept_alive_scraper(addr, seconds, timeout, out=None, stop=None):
    """Scrapes on one connection until `seconds` pass (or `stop` is set)."""
    latencies, failures = [], 0
    started = time.monotonic()
    sock = None
    while time.monotonic() - started < seconds and not (stop and stop.is_set()):
        try:
            if sock is None:
                sock = socket.create_connection(addr, timeout=timeout)
                sock.settimeout(timeout)
            t = time.monotonic()
            sock.sendall(REQUEST)
            if read_answer(sock) == 200:
                latencies.append(time.monotonic() - t)
            else:
                failures += 1
        except OSError:
            failures += 1
            if sock is not None:
                sock.close()
            sock = None
    if sock is not None:
        sock.close()
    if out is not None:
        out.append((latencies, failures))
    return summary(latencies, failures, time.monotonic() - started)


class ProcWatch:
    """Peak VmRSS (MiB) and thread count of a process while running."""

    def __init__(self, pid):
        self.pid, self.rss_mib, self.threads = pid, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        self.rss_mib = max(self.rss_mib, int(line.split()[1]) / 1024)
                    elif line.startswith("Threads:"):
                        self.threads = max(self.threads, int(line.split()[1]))
        except OSError:
            pass

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def pipeliner(addr, stop):
    """2,000 pipelined requests, never a read, held until `stop`."""
    with socket.create_connection(addr) as s:
        s.settimeout(1.0)
        data = REQUEST * 2000
        sent = 0
        while sent < len(data) and not stop.is_set():
            try:
                sent += s.send(data[sent:])
            except socket.timeout:
                continue
            except OSError:
                break
        stop.wait()


def slowloris(addr, stop, count=300):
    socks = []
    for _ in range(count):
        try:
            s = socket.create_connection(addr, timeout=2.0)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nX-Slow: ")
            socks.append(s)
        except OSError:
            break
    while socks and not stop.wait(1.0):
        alive = []
        for s in socks:
            try:
                s.sendall(b"a")
                alive.append(s)
            except OSError:
                s.close()
        socks = alive
    for s in socks:
        s.close()


def huge_header(addr, stop, size=200 << 20):
    piece = b"a" * (1 << 20)
    try:
        with socket.create_connection(addr, timeout=2.0) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: vramtop\r\nX-Huge: ")
            sent = 0
            while sent < size and not stop.is_set():
                try:
                    s.sendall(piece)
                except socket.timeout:
                    continue
                sent += len(piece)
            if sent >= size:
                s.sendall(b"\r\n\r\n")
            stop.wait()
    except OSError:
        pass


def many_scrapers(addr, stop, out, count=200):
    threads = [
        threading.Thread(
            target=kept_alive_scraper, args=(addr, 60.0, 5.0, out, stop), daemon=True
        )
        for _ in range(count)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def start_server(binary):
    proc = subprocess.Popen(
        [binary, "serve", "--backend", "sim", "--listen", "127.0.0.1:0",
         "--sim-gpus", "4", "--sim-training", "8"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    for line in proc.stderr:
        text = line.decode(errors="replace").strip()
        if text.startswith("serving metrics on http://"):
            host, port = text[len("serving metrics on http://"):-len("/metrics")].rsplit(":", 1)
            return proc, (host, int(port))
    proc.kill()
    raise SystemExit("vramtop serve ended before serving")


def row(name, normal, watch, extra=""):
    print(
        f"| {name} | {normal['answers']} | {normal['failures']} | {normal['req_s']:.0f} | "
        f"{normal['p50_ms']:.2f} | {normal['p99_ms']:.2f} | {normal['max_ms']:.1f} | "
        f"{watch.rss_mib:.0f} | {watch.threads} | {extra} |",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="target/debug/vramtop")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="a normal scrape without an answer by then is a failure (s)")
    args = parser.parse_args()
    proc, addr = start_server(args.bin)
    try:
        print("| scenario | answers | failures | req/s | p50 ms | p99 ms | max ms | "
              "peak RSS MiB | peak threads | notes |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        with ProcWatch(proc.pid) as watch:
            normal = normal_scraper(addr, args.seconds, args.timeout)
        row("idle, fresh connections", normal, watch)
        with ProcWatch(proc.pid) as watch:
            kept = kept_alive_scraper(addr, args.seconds, args.timeout)
        row("idle, one kept-alive connection", kept, watch)

        scenarios = [
            ("pipeliner (2,000 requests, never reads)", pipeliner),
            ("slowloris (300 connections)", slowloris),
            ("five 200 MB headers", None),
            ("200 kept-alive scrapers", None),
        ]
        for name, abuse in scenarios:
            stop = threading.Event()
            out = []
            if abuse is not None:
                abusers = [threading.Thread(target=abuse, args=(addr, stop), daemon=True)]
            elif name.startswith("five"):
                abusers = [threading.Thread(target=huge_header, args=(addr, stop), daemon=True)
                           for _ in range(5)]
            else:
                abusers = [threading.Thread(target=many_scrapers, args=(addr, stop, out),
                                            daemon=True)]
            with ProcWatch(proc.pid) as watch:
                for t in abusers:
                    t.start()
                time.sleep(1.0)  # let the abuse take hold
                normal = normal_scraper(addr, args.seconds, args.timeout)
                stop.set()
                for t in abusers:
                    t.join(timeout=30)
            extra = ""
            if out:
                lat = [x for latencies, _ in out for x in latencies]
                fails = sum(f for _, f in out)
                s = summary(lat, fails, args.seconds + 1.0)
                extra = (f"the 200: {s['answers']} answers, {fails} failures, "
                         f"{s['req_s']:.0f} req/s, p99 {s['p99_ms']:.1f} ms")
            row(name, normal, watch, extra)
            time.sleep(1.0)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
