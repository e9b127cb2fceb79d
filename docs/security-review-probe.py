#!/usr/bin/env python3
"""Probes of the security review (docs/reliability.md), run against one release binary.

    python3 docs/security-review-probe.py PATH/TO/registry

Starts the binary on a fresh SQLite database on loopback (a trusted proxy of 127.0.0.1, so that
X-Forwarded-For can stand for many client addresses), runs each probe and prints one line per
figure. Run it for the binary before a change and after it, the same day, to compare.
"""

import base64
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    def __init__(self, binary, env=None):
        self.dir = tempfile.mkdtemp(prefix="probe-")
        self.port = free_port()
        self.db = f"sqlite://{self.dir}/registry.db"
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "REGISTRY_LISTEN": f"127.0.0.1:{self.port}",
            "REGISTRY_DATABASE_URL": self.db,
            "REGISTRY_BASE_URL": f"http://127.0.0.1:{self.port}",
            "REGISTRY_ISSUER_URL_TEMPLATE": f"http://{{subdomain}}.localhost:{self.port}",
            "REGISTRY_TRUSTED_PROXIES": "127.0.0.1/32",
            "REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS": "true",
            "REGISTRY_WORKERS": "2",
            **(env or {}),
        }
        self.binary = binary
        self.proc = subprocess.Popen(
            [binary, "serve"], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        for line in self.proc.stdout:
            if b"listening on" in line:
                break
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def cli(self, *args):
        out = subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, check=False
        )
        return out.returncode, out.stdout, out.stderr

    def customer(self, tenant):
        code, out, err = self.cli("customer", "create", "--tenant", tenant, "--plan", "business", "--name", tenant)
        assert code == 0, err
        return json.loads(out)["token"]

    def request(self, method, path, token=None, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=h)
        response = conn.getresponse()
        payload = response.read()
        conn.close()
        return response.status, payload

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(iss, sub="anyone"):
    now = int(time.time())
    claims = {"iss": iss, "sub": sub, "aud": "registry", "iat": now, "exp": now + 600}
    return f"{b64(json.dumps({'alg': 'none'}).encode())}.{b64(json.dumps(claims).encode())}."


def probe_issuers(binary):
    r = Registry(binary)
    token = r.customer("acme")
    rules = [
        {"services": ["*"], "claims": {"iss": f"https://idp{i}.example", "aud": "registry", "sub": "x"}}
        for i in range(20)
    ]
    statuses = [r.request("POST", "/service-accounts", token, {"name": "a", "policy": {"kind": "oidc", "rules": rules}})[0]]
    before = r.rss_kib()
    for i in range(6000):
        xff = f"198.18.{i // 250}.{i % 250}"
        r.request("GET", "/services", unsigned(f"https://{i}{'x' * 10000}.example"), headers={"X-Forwarded-For": xff})
    grown = (r.rss_kib() - before) / 1024
    print(f"1 trust: account with 20 issuers {statuses}; 6,000 tokens with 10 KB made-up issuers: RSS +{grown:.1f} MiB")
    r.stop()


def probe_forwarded(binary):
    r = Registry(binary)
    token = r.customer("acme")
    status, body = r.request("POST", "/service-accounts", token, {"name": "office", "policy": {"kind": "static", "services": ["*"], "ip_allowlist": ["127.0.0.0/8"]}})
    office = json.loads(body)["token"]
    results = {}
    for xff in ["203.0.113.5", "junk, 203.0.113.5", "203.0.113.5:4711", "203.0.113.5, junk"]:
        results[xff] = r.request("GET", "/services", office, headers={"X-Forwarded-For": xff})[0]
    print(f"3 X-Forwarded-For with an allowlist of 127.0.0.0/8: {results}")
    r.stop()


def probe_tenant(binary):
    r = Registry(binary)
    code, _, err = r.cli("customer", "create", "--tenant", "foo-acme", "--plan", "business", "--name", "Foo")
    print(f"5 customer create --tenant foo-acme: exit {code} {err.strip()[:90]!r}")
    r.stop()


def probe_argon2(binary):
    r = Registry(binary)
    status, body = r.request("POST", "/anonymous/services", body={"title": "t"})
    created = json.loads(body)
    secret, sub = created["secret"], created["service"]["subdomain"]
    wrong = secret[:-1] + ("b" if secret[-1] == "a" else "a")

    def timed_create():
        started = time.monotonic()
        r.request("POST", "/anonymous/services", body={"title": "legit"}, headers={"X-Forwarded-For": "192.0.2.1"})
        return time.monotonic() - started

    alone = min(timed_create() for _ in range(3))
    statuses = []

    def burst():
        for _ in range(10):
            statuses.append(r.request("GET", f"/services/{sub}", wrong)[0])

    threads = [threading.Thread(target=burst) for _ in range(30)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    during = timed_create()
    for t in threads:
        t.join()
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    print(f"6 argon2: creation alone {alone * 1000:.0f} ms, during a 300-request burst of wrong secrets {during * 1000:.0f} ms; burst answers {counts}")
    r.stop()


def probe_ipv6(binary):
    r = Registry(binary, {"REGISTRY_ANON_CREATE_PER_HOUR": "20"})
    created = sum(
        r.request("POST", "/anonymous/services", body={}, headers={"X-Forwarded-For": f"2001:db8:1:2::{i + 1:x}"})[0] == 201
        for i in range(30)
    )
    print(f"7 IPv6: {created} of 30 anonymous creations from one /64 (limit 20 per address)")
    r.stop()


if __name__ == "__main__":
    binary = sys.argv[1]
    for probe in [probe_issuers, probe_forwarded, probe_tenant, probe_argon2, probe_ipv6]:
        probe(binary)
