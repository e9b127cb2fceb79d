#!/usr/bin/env python3
"""Slow-body probe of a running registry (issue 25, finding 3; what it checks: docs/api.md,
"Limits that hold (second security review)", "Slow clients").

Opens many connections that each send the headers of a request declaring `Content-Length: 100`
and then one byte of the body, and never the rest: the attack of the second security review.
While they are held it asks `GET /healthz` from another connection twice a second and samples the
server's resident memory and open file descriptors (from /proc/PID, so run it on the server's
host as a user who may read them); then it closes whatever is still open and samples again.

Reports how many connections were accepted, how many the server answered (and with what status)
or closed, how many were still open at the end of the hold, the /healthz latencies before,
during and after, and the server's VmRSS/VmHWM/fds before, at the peak, and after.

Source addresses: every Linux loopback address (127.0.0.0/8) is local, so `--sources
127.0.0.1-127.0.0.40` spreads the connections over forty client addresses, the way a
distributed attacker would get past a per-address limit. `--healthz-source` picks the address
of the latency probe (by default one the attack does not use).

The probe needs one file descriptor per connection too: it raises its own soft limit to the hard
one (`ulimit -Hn`); the server's limit is that of the shell that started it (`ulimit -n`).

Standard library only. Example:

    registry serve &                      # REGISTRY_LISTEN=127.0.0.1:8080
    python3 docs/slow-clients-probe.py --url http://127.0.0.1:8080 --pid $! \\
        --connections 21000 --sources 127.0.0.1 --hold 20 --settle 10
"""

import argparse
import errno
import http.client
import ipaddress
import json
import os
import resource
import selectors
import socket
import statistics
import sys
import threading
import time
import urllib.parse

REQUEST_HEAD = (
    "POST {path} HTTP/1.1\r\n"
    "Host: {host}\r\n"
    "Content-Type: application/json\r\n"
    "Content-Length: 100\r\n"
    "\r\n"
)


def parse_sources(text):
    """`a,b,c` or `first-last` (IPv4, inclusive), or a mix: `127.0.0.1,127.0.1.1-127.0.1.9`."""
    sources = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            first, last = (ipaddress.ip_address(p.strip()) for p in part.split("-", 1))
            sources.extend(str(ipaddress.ip_address(n)) for n in range(int(first), int(last) + 1))
        elif part:
            sources.append(part)
    return sources


def proc_status(pid):
    """VmRSS, VmHWM (KiB) and open fds of the server, or None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    kib = lambda name: int(fields[name].split()[0])
    return {"rss_kib": kib("VmRSS"), "hwm_kib": kib("VmHWM"), "fds": fds}


class Healthz(threading.Thread):
    """Asks GET /healthz on a fresh connection every `every` seconds; keeps (phase, seconds,
    status or error)."""

    def __init__(self, host, port, source, every):
        super().__init__(daemon=True)
        self.host, self.port, self.source, self.every = host, port, source, every
        self.phase = "before"
        self.samples = []
        self.stop = threading.Event()

    def once(self):
        started = time.monotonic()
        phase = self.phase
        try:
            connection = http.client.HTTPConnection(
                self.host, self.port, timeout=120,
                source_address=(self.source, 0) if self.source else None)
            connection.request("GET", "/healthz", headers={"Connection": "close"})
            status = connection.getresponse().status
            connection.close()
        except OSError as error:
            status = f"error: {error}"
        self.samples.append((phase, time.monotonic() - started, status))

    def run(self):
        while not self.stop.is_set():
            self.once()
            self.stop.wait(self.every)


def summarize_latency(samples, phase):
    times = sorted(t for p, t, s in samples if p == phase and s == 200)
    failures = [s for p, t, s in samples if p == phase and s != 200]
    if not times:
        return {"count": 0, "failures": len(failures)}
    return {
        "count": len(times),
        "failures": len(failures),
        "median_ms": round(statistics.median(times) * 1000, 1),
        "max_ms": round(times[-1] * 1000, 1),
        "first_failure": failures[0] if failures else None,
    }


class Connection:
    __slots__ = ("sock", "source", "opened", "state", "response", "closed_at", "status")

    def __init__(self, sock, source, opened):
        self.sock, self.source, self.opened = sock, source, opened
        self.state = "connecting"  # connecting → sent → answered/closed
        self.response = b""
        self.closed_at = None
        self.status = None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--pid", type=int, required=True, help="the registry's process id")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--sources", default="127.0.0.1",
                        help="client addresses, e.g. 127.0.0.1 or 127.0.0.1-127.0.0.40")
    parser.add_argument("--healthz-source", default="127.0.0.254",
                        help="address of the /healthz probe ('' for the system's choice)")
    parser.add_argument("--path", default="/anonymous/services",
                        help="the endpoint the slow bodies are sent to")
    parser.add_argument("--rate", type=float, default=2000.0, help="new connections a second")
    parser.add_argument("--hold", type=float, default=20.0,
                        help="seconds to hold the connections once all are opened")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds to wait after closing them before the last sample")
    parser.add_argument("--json", action="store_true", help="print only the JSON summary")
    args = parser.parse_args()

    url = urllib.parse.urlsplit(args.url)
    host, port = url.hostname, url.port or 80
    sources = parse_sources(args.sources)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    log(f"probe: {args.connections} connections to {host}:{port}{args.path} from "
        f"{len(sources)} address(es); own fd limit {resource.getrlimit(resource.RLIMIT_NOFILE)}")

    healthz = Healthz(host, port, args.healthz_source, 0.5)
    samples = {"before": proc_status(args.pid)}
    healthz.start()
    time.sleep(2.0)

    healthz.phase = "during"
    selector = selectors.DefaultSelector()
    connections = []
    open_errors = {}
    peak = dict(samples["before"] or {})
    head = REQUEST_HEAD.format(path=args.path, host=f"{host}:{port}").encode() + b"{"
    started = time.monotonic()
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    next_open = started
    last_sample = 0.0

    def close(conn, now):
        if conn.closed_at is None:
            conn.closed_at = now
            try:
                selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.sock.close()

    def sample(now):
        nonlocal last_sample
        if now - last_sample >= 0.5:
            last_sample = now
            status = proc_status(args.pid)
            if status:
                for key, value in status.items():
                    peak[key] = max(peak.get(key, 0), value)

    def pump(timeout):
        now = time.monotonic()
        for key, events in selector.select(timeout):
            conn = key.data
            if conn.state == "connecting":
                error = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    name = errno.errorcode.get(error, str(error))
                    open_errors[name] = open_errors.get(name, 0) + 1
                    conn.state = "failed"
                    close(conn, now)
                    continue
                try:
                    conn.sock.send(head)
                    conn.state = "sent"
                    selector.modify(conn.sock, selectors.EVENT_READ, conn)
                except OSError:
                    conn.state = "closed"
                    close(conn, now)
                continue
            try:
                data = conn.sock.recv(4096)
            except OSError:
                data = b""
            if data:
                conn.response += data
                if conn.status is None and b"\r\n" in conn.response:
                    line = conn.response.split(b"\r\n", 1)[0].split()
                    conn.status = int(line[1]) if len(line) > 1 and line[1].isdigit() else -1
                continue
            conn.state = "answered" if conn.status is not None else "closed"
            close(conn, now)
        sample(now)

    opened = 0
    while opened < args.connections:
        now = time.monotonic()
        while opened < args.connections and next_open <= now:
            source = sources[opened % len(sources)]
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            except OSError as error:
                name = errno.errorcode.get(error.errno, str(error.errno))
                open_errors[f"client {name}"] = open_errors.get(f"client {name}", 0) + 1
                opened += 1
                next_open += interval
                continue
            sock.setblocking(False)
            try:
                sock.bind((source, 0))
                sock.connect_ex((host, port))
                conn = Connection(sock, source, now)
                selector.register(sock, selectors.EVENT_WRITE, conn)
                connections.append(conn)
            except OSError as error:
                name = errno.errorcode.get(error.errno, str(error.errno))
                open_errors[name] = open_errors.get(name, 0) + 1
                sock.close()
            opened += 1
            next_open += interval
        pump(0.01)
    opening_took = time.monotonic() - started
    log(f"opened {opened} in {opening_took:.1f} s; holding {args.hold} s")
    hold_until = time.monotonic() + args.hold
    while time.monotonic() < hold_until:
        pump(0.05)
    now = time.monotonic()
    samples["during"] = proc_status(args.pid)
    states = {}
    statuses = {}
    closed_after = []
    for conn in connections:
        states[conn.state] = states.get(conn.state, 0) + 1
        if conn.status is not None:
            statuses[str(conn.status)] = statuses.get(str(conn.status), 0) + 1
        if conn.closed_at is not None and conn.state in ("answered", "closed"):
            closed_after.append(conn.closed_at - conn.opened)
    still_open = sum(1 for c in connections if c.closed_at is None and c.state == "sent")
    for conn in connections:
        close(conn, now)
    selector.close()

    healthz.phase = "after"
    time.sleep(args.settle)
    samples["after"] = proc_status(args.pid)
    healthz.stop.set()
    healthz.join(timeout=130)

    closed_after.sort()
    summary = {
        "connections": args.connections,
        "sources": len(sources),
        "path": args.path,
        "opening_seconds": round(opening_took, 1),
        "hold_seconds": args.hold,
        "accepted_and_sent": sum(1 for c in connections if c.state in ("sent", "answered", "closed")),
        "open_errors": open_errors,
        "answered_by_server": states.get("answered", 0),
        "response_status": statuses,
        "closed_by_server_without_answer": states.get("closed", 0),
        "still_open_at_end_of_hold": still_open,
        "server_closed_after_seconds": {
            "min": round(closed_after[0], 2) if closed_after else None,
            "median": round(statistics.median(closed_after), 2) if closed_after else None,
            "max": round(closed_after[-1], 2) if closed_after else None,
        },
        "healthz": {phase: summarize_latency(healthz.samples, phase)
                    for phase in ("before", "during", "after")},
        "server": {"before": samples["before"], "peak": peak, "end_of_hold": samples["during"],
                   "after": samples["after"]},
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
