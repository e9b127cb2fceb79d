"""Instructions per request of a registry binary under callgrind (P1: public discovery by Host;
P1TLS: P1 over HTTPS, keep-alive, TLS 1.3; P2: GET /services/{s}/config with a static token;
P3: the same with an RS256 identity token of the service's own hosted issuer, through an oidc
account; needs Python's `cryptography`; COLD: the key set of N issuers, each fetched once, every
fetch a first one that reads the database: the service is published before the server runs under
callgrind and copied 3,000 times in the database, as `cargo xtask bench --verifiers` does; WIDE:
the same 3,000 issuers fetched once each, then N key sets of issuers drawn at random, every one
a fetch the replica answers from memory (the verifiers' wide scenario, on 3,000 issuers), and
only those N counted: the counts are zeroed after the first fetches and taken before the server
stops (its start and its shutdown, which frees every entry, are not in them), so that one run
gives a request's count, the total over N; SIGN:
`POST /services/{s}/sign` with a static token, a managed ES256 key, as `--workers` does).
With CALLGRIND_CACHE=1, valgrind also simulates the caches (a last level of 2 MiB, smaller
than the 3,000 issuers' entries) and the misses of each level are printed after the count.
Usage: [RUST_LOG=info] [CALLGRIND_CACHE=1] callgrind-driver.py BINARY P1|P1TLS|P2|P3|COLD|WIDE|SIGN N"""
import json, os, socket, ssl, subprocess, sys, tempfile, time, http.client, glob, re

binary, which, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
work = tempfile.mkdtemp(prefix="cg-")
db = f"sqlite://{work}/r.db"
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
env = {"PATH": os.environ["PATH"], "REGISTRY_DATABASE_URL": db, "REGISTRY_LISTEN": f"127.0.0.1:{port}",
       "REGISTRY_BASE_URL": f"http://127.0.0.1:{port}", "REGISTRY_WORKERS": "1",
       "REGISTRY_ISSUER_URL_TEMPLATE": f"http://{{subdomain}}.localhost:{port}",
       # `warn` unless RUST_LOG says otherwise: `RUST_LOG=info` counts the request line and the
       # rest of the log as `serve` writes them by default.
       "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
       "REGISTRY_OIDC_ALLOW_INSECURE_ISSUERS": "true",
       # Managed keys (the benchmarks' data key), with no signature limit in reach.
       "REGISTRY_DATA_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
       "REGISTRY_SIGN_PER_MINUTE": "4000000000"}
tls = which == "P1TLS"
if tls:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", f"{work}/key.pem", "-out", f"{work}/cert.pem", "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    env.update(REGISTRY_TLS_CERT=f"{work}/cert.pem", REGISTRY_TLS_KEY=f"{work}/key.pem")
def connect(timeout):
    if tls:
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ssl._create_unverified_context())
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
# `customer create` never creates a database (docs/api.md, "Customers"): migrate first.
subprocess.run([binary, "migrate"], env=env, capture_output=True, check=True)
out = subprocess.run([binary, "customer", "create", "--tenant", "acme", "--plan", "business", "--name", "Acme"],
                     env=env, capture_output=True, text=True, check=True).stdout
token = json.loads(out)["token"]
def start(counted):
    """The server, under callgrind when `counted`, once it answers; and a connection to it."""
    global c
    caches = ["--cache-sim=yes", "--LL=2097152,16,64"] if os.environ.get("CALLGRIND_CACHE") else []
    tool = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.out", "--dump-instr=no"] + caches if counted else []
    proc = subprocess.Popen(tool + [binary, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            probe = connect(5); probe.request("GET", "/readyz")
            if probe.getresponse().status == 200: break
        except OSError: pass
        time.sleep(0.2)
    c = connect(60)
    return proc
proc = start(which not in ("COLD", "WIDE"))
def call(method, path, body=None, headers=None):
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read(); return r.status, data
st, data = call("POST", "/services", {"serviceName": "cg", "title": "cg"}); assert st == 201, (st, data)
sub = json.loads(data)["subdomain"]
n_hex = "c3" + "a5" * 255
import base64
b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
nb = b64(bytes.fromhex(n_hex))
if which == "P3":
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    nb = b64(key.public_key().public_numbers().n.to_bytes(256, "big"))
upload = {"openidConfiguration": {"issuer": "x", "jwks_uri": "x", "response_types_supported": ["id_token"],
          "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"]},
          "jwks": {"keys": [{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "e": "AQAB", "n": nb}]}}
st, data = call("PUT", f"/services/{sub}/config", upload); assert st in (200, 201), (st, data)
bearer = token
if which in ("COLD", "WIDE"):
    import sqlite3
    proc.terminate(); proc.wait()
    d = sqlite3.connect(f"{work}/r.db")
    sid = d.execute("SELECT id FROM services WHERE subdomain = ?", (sub,)).fetchone()[0]
    # Each copy: the id's last 12 digits and the subdomain replaced in every text that holds them.
    new_id, new_sub = f"substr('{sid}', 1, 24) || printf('%012x', n.i)", "'s' || n.i || '-acme'"
    text = lambda col: f"replace(replace({col}, '{sid}', {new_id}), '{sub}', {new_sub})"
    series = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) "
    d.execute(f"{series}INSERT INTO services (id, customer_id, subdomain, title, description, created_at, expires_at) "
              f"SELECT {new_id}, customer_id, {new_sub}, title, description, created_at, expires_at FROM services, n WHERE id = '{sid}'")
    d.execute(f"{series}INSERT INTO published_configs (service_id, openid_configuration, jwks, updated_at, key_state, key_expires_at, previous_change_at) "
              f"SELECT {new_id}, {text('openid_configuration')}, {text('jwks')}, updated_at, {text('key_state')}, key_expires_at, previous_change_at "
              f"FROM published_configs, n WHERE service_id = '{sid}'")
    d.commit(); d.close()
    assert which == "WIDE" or n <= 3000, "at most 3,000 issuers"
    proc = start(True)
if which == "P3":
    issuer = f"http://{sub}.localhost:{port}"
    policy = {"kind": "oidc", "rules": [{"services": [sub],
              "claims": {"iss": issuer, "aud": "registry", "sub": "ci"}}]}
    st, data = call("POST", "/service-accounts", {"name": "ci", "policy": policy}); assert st == 201, (st, data)
    now = int(time.time())
    head = b64(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
    body = b64(json.dumps({"iss": issuer, "aud": "registry", "sub": "ci", "iat": now, "exp": now + 3600}).encode())
    signature = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    bearer = f"{head}.{body}.{b64(signature)}"
if which == "SIGN":
    st, data = call("PUT", f"/services/{sub}/signing", {"algorithm": "ES256", "leadSeconds": 0})
    assert st == 200 and json.loads(data)["keys"][0]["state"] == "current", (st, data)
    policy = {"$schema": "https://registry.example/schemas/service-account-policy/v2.json",
              "kind": "static", "services": [sub], "actions": ["tokens:sign"]}
    st, data = call("POST", "/service-accounts", {"name": "signer", "policy": policy}); assert st == 201, (st, data)
    bearer = json.loads(data)["token"]
    now = int(time.time())
    claims = b64(json.dumps({"iss": f"http://{sub}.localhost:{port}", "sub": "system:serviceaccount:default:default",
                             "aud": ["sts.amazonaws.com"], "iat": now, "nbf": now, "exp": now + 86400}).encode())
def get_jwks(i):
    c.request("GET", "/.well-known/jwks.json", headers={"Host": f"s{i}-acme.localhost:{port}"})
    r = c.getresponse(); r.read(); assert r.status == 200, r.status
if which == "WIDE":
    import random
    for i in range(1, 3001): get_jwks(i)
    drawn = random.Random(55)
    subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True)
for i in range(n):
    if which == "WIDE":
        get_jwks(drawn.randint(1, 3000)); continue
    if which == "SIGN":
        c.request("POST", f"/services/{sub}/sign", body=json.dumps({"claims": claims}),
                  headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"})
    elif which == "COLD":
        get_jwks(i + 1); continue
    elif which in ("P1", "P1TLS"):
        c.request("GET", "/.well-known/openid-configuration", headers={"Host": f"{sub}.localhost:{port}"})
    else:
        c.request("GET", f"/services/{sub}/config", headers={"Authorization": f"Bearer {bearer}"})
    r = c.getresponse(); r.read(); assert r.status == 200, r.status
counted = f"{work}/cg.out*"
if which == "WIDE":
    subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True)
    counted = f"{work}/cg.out.1"
proc.terminate(); proc.wait()
events, totals = [], []
for f in glob.glob(counted):
    for line in open(f):
        if line.startswith("events:"): events = line.split()[1:]
        m = re.match(r"(?:summary|totals):((?: \d+)+)", line)
        if m:
            counts = [int(c) for c in m.group(1).split()]
            totals = [a + b for a, b in zip(totals, counts)] if totals else counts
            break
print(which, n, totals[0])
if len(totals) > 1:
    print(" ".join(f"{e}={c}" for e, c in zip(events, totals)))
