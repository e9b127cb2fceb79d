#!/usr/bin/env python3
"""Measures the hosting cache's memory from outside (second security review, finding 4; the
bound it checks: docs/api.md, "Limits that hold (second security review)", "Hosting memory").

Publishes N services of about SIZE bytes each through the API with a customer's token, then
makes random public GETs of their documents, and reports `registry_hosted_bytes` (what the
cache counts) next to the process's resident memory (VmRSS) before, during and after.

Two ways to run it (standard library only):

  # Start a registry itself, on a fresh SQLite database in a temporary directory:
  python3 docs/hosting-memory-probe.py --binary target/release/registry \\
      --count 9000 --size 64000 --gets 50000 --cache-bytes 536870912

  # Or measure a registry already running (its pid for VmRSS, a customer's token):
  python3 docs/hosting-memory-probe.py --base http://127.0.0.1:8080 --pid 1234 \\
      --token rgst_... --tenant acme --count 1000

The registry's own limits (writes per minute, services per customer, body size) are raised by
`--binary` so that they do not throttle the measurement; a running registry must allow bodies of
SIZE bytes (REGISTRY_MAX_BODY_BYTES) and N services, and the probe waits out 429s.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

# RFC 8037's example Ed25519 public key: valid key material, repeated under different kids.
ED25519_X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
MAX_KEYS = 100


def rss_kib(pid):
    """VmRSS of `pid` in KiB, or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Api:
    """One keep-alive connection to the registry (one per thread)."""

    def __init__(self, base):
        url = urllib.parse.urlsplit(base)
        self.host, self.port = url.hostname, url.port or 80
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        for attempt in range(50):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                response = self.conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                time.sleep(0.2)
                continue
            if response.status == 429:
                time.sleep(float(response.getheader("Retry-After") or 1))
                continue
            if response.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            return response.status, data
        raise RuntimeError(f"{method} {path}: no answer after 50 attempts")


def metric(api, name):
    status, data = api.request("GET", "/metrics")
    if status != 200:
        return None
    for line in data.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def upload_body(index, size):
    """A valid upload of about `size` bytes: 100 keys with long kids, and a padded document."""
    keys_share = size * 9 // 10
    kid_len = max(8, keys_share // MAX_KEYS - 70)
    keys = [
        {
            "kty": "OKP",
            "crv": "Ed25519",
            "use": "sig",
            "kid": f"{index}-{k}-" + "k" * kid_len,
            "x": ED25519_X,
        }
        for k in range(MAX_KEYS)
    ]
    doc = {
        "issuer": "https://example.invalid",
        "jwks_uri": "https://example.invalid/keys",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["EdDSA"],
    }
    body = {"openidConfiguration": doc, "jwks": {"keys": keys}}
    pad = size - len(json.dumps(body, separators=(",", ":"))) - 20
    doc["x_padding"] = "p" * max(0, pad)
    return json.dumps(body, separators=(",", ":")).encode()


def publish(base, token, tenant, indices, size, prefix, done, errors):
    api = Api(base)
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for i in indices:
        name = f"{prefix}{i}"
        status, data = api.request(
            "POST", "/services", json.dumps({"title": name, "serviceName": name}), auth
        )
        if status not in (201, 409):
            errors.append(f"create {name}: {status} {data[:200]!r}")
            continue
        subdomain = f"{name}-{tenant}"
        status, data = api.request(
            "PUT", f"/services/{subdomain}/config", upload_body(i, size), auth
        )
        if status != 200:
            errors.append(f"publish {subdomain}: {status} {data[:200]!r}")
            continue
        done.append(subdomain)


def public_gets(base, host_template, subdomains, count, seed, failures):
    api = Api(base)
    rng = random.Random(seed)
    paths = ["/.well-known/openid-configuration", "/openid/v1/jwks"]
    for _ in range(count):
        subdomain = rng.choice(subdomains)
        host = host_template.format(subdomain=subdomain)
        status, _ = api.request("GET", rng.choice(paths), headers={"Host": host})
        if status != 200:
            failures.append(status)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_registry(args):
    """Starts `--binary` on a fresh SQLite database; returns (process, base, token, tenant, dir)."""
    workdir = tempfile.mkdtemp(prefix="hosting-probe-")
    database = f"sqlite://{workdir}/registry.db"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "REGISTRY_DATABASE_URL": database,
        "REGISTRY_LISTEN": f"127.0.0.1:{port}",
        "REGISTRY_BASE_URL": base,
        "REGISTRY_ISSUER_URL_TEMPLATE": f"http://{{subdomain}}.localhost:{port}",
        "REGISTRY_HOSTING_CACHE_BYTES": str(args.cache_bytes),
        "REGISTRY_MAX_BODY_BYTES": str(max(65536, args.size + 4096)),
        "REGISTRY_WRITES_PER_MINUTE": "100000000",
        "REGISTRY_MAX_SERVICES_PER_CUSTOMER": str(args.count + 100),
        "RUST_LOG": "warn",
    }
    if args.workers:
        env["REGISTRY_WORKERS"] = str(args.workers)
    created = subprocess.run(
        [args.binary, "customer", "create", "--tenant", "probe", "--plan", "enterprise",
         "--name", "Probe", "--database-url", database],
        env=env, capture_output=True, text=True, check=True,
    )
    token = re.search(r'"token"\s*:\s*"([^"]+)"', created.stdout).group(1)
    log = open(os.path.join(workdir, "server.log"), "w")
    process = subprocess.Popen([args.binary, "serve"], env=env, stdout=log, stderr=log)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        sys.exit(f"the registry did not start; see {workdir}/server.log")
    return process, base, token, "probe", workdir


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", help="start this registry binary on a fresh SQLite database")
    parser.add_argument("--cache-bytes", type=int, default=512 * 1024 * 1024,
                        help="REGISTRY_HOSTING_CACHE_BYTES with --binary (default 512 MiB)")
    parser.add_argument("--workers", type=int, help="REGISTRY_WORKERS with --binary")
    parser.add_argument("--base", help="API base URL of a running registry")
    parser.add_argument("--pid", type=int, help="its process id (for VmRSS)")
    parser.add_argument("--token", help="a customer's token")
    parser.add_argument("--tenant", help="the customer's tenant suffix")
    parser.add_argument("--host-template", default="{subdomain}.localhost:{port}",
                        help="Host header of a hosted issuer ({subdomain}, {port})")
    parser.add_argument("--count", type=int, default=1000, help="services to publish")
    parser.add_argument("--size", type=int, default=64000, help="bytes per upload")
    parser.add_argument("--gets", type=int, default=20000, help="random public GETs")
    parser.add_argument("--threads", type=int, default=4, help="client threads")
    parser.add_argument("--prefix", default="m", help="service name prefix")
    parser.add_argument("--settle", type=float, default=5, help="idle seconds before 'after'")
    args = parser.parse_args()

    process = workdir = None
    if args.binary:
        process, base, token, tenant, workdir = start_registry(args)
        pid = process.pid
    else:
        if not (args.base and args.token and args.tenant):
            parser.error("either --binary, or --base, --token and --tenant")
        base, token, tenant, pid = args.base, args.token, args.tenant, args.pid
    port = urllib.parse.urlsplit(base).port or 80
    host_template = args.host_template.replace("{port}", str(port))
    api = Api(base)
    rows = []

    def sample(label):
        hosted = metric(api, "registry_hosted_bytes")
        rss = rss_kib(pid)
        rows.append((label, hosted, rss))
        rss_text = f"{rss / 1024:8.1f} MiB" if rss is not None else "       ?"
        hosted_text = f"{hosted / 2**20:8.1f} MiB" if hosted is not None else "       ?"
        print(f"{label:<28} registry_hosted_bytes {hosted_text}   VmRSS {rss_text}", flush=True)

    try:
        sample("before")
        started = time.time()
        done, errors = [], []
        threads = [
            threading.Thread(target=publish, args=(
                base, token, tenant, range(t, args.count, args.threads), args.size,
                args.prefix, done, errors))
            for t in range(args.threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"published {len(done)} of {args.count} services of ~{args.size} bytes "
              f"in {time.time() - started:.1f} s ({len(errors)} errors)", flush=True)
        for error in errors[:5]:
            print("  " + error, flush=True)
        if not done:
            sys.exit(1)
        sample("after publishing")
        failures = []
        per_round = max(1, args.gets // 4)
        for round_ in range(4):
            threads = [
                threading.Thread(target=public_gets, args=(
                    base, host_template, done, per_round // args.threads, round_ * 100 + t,
                    failures))
                for t in range(args.threads)
            ]
            started = time.time()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.time() - started
            sample(f"during GETs ({(round_ + 1) * 25}%, {per_round / elapsed:.0f}/s)")
        if failures:
            print(f"{len(failures)} public GETs failed, e.g. {failures[:5]}", flush=True)
        time.sleep(args.settle)
        sample(f"after GETs (+{args.settle:g} s)")
        peak = max((r[2] or 0) for r in rows)
        bound = args.cache_bytes if args.binary else None
        print(json.dumps({
            "count": len(done), "size": args.size, "gets": args.gets,
            "cacheBytes": bound, "peakRssKiB": peak,
            "samples": [{"label": l, "hostedBytes": h, "rssKiB": r} for l, h, r in rows],
        }))
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
