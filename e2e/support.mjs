// What the browser tests share: the real `registry` binary on a free loopback port with a fresh
// SQLite file, calls to its API and its hosted issuers from outside the browser, and Debian's
// Chromium driven through playwright-core. A registry started with `{ tls: true }` speaks HTTPS
// (custom domains need it) with a self-signed certificate that `openssl` makes for 127.0.0.1 and
// its issuers, *.oidc.localhost; the calls below trust that certificate alone. Settings:
//   REGISTRY_BINARY  the binary (default: ../target/debug/registry)
//   CHROMIUM_PATH    the browser (default: /usr/bin/chromium)

import { spawn, execFile, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, closeSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const BINARY = process.env.REGISTRY_BINARY || join(root, "target", "debug", "registry");
export const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
export const SCREENSHOTS = join(root, "docs", "screenshots");

// This machine's network is closed: without the background-networking flags Chromium keeps
// trying to reach Google's hosts. playwright-core adds --headless and a fresh, temporary
// --user-data-dir itself (it refuses the latter among `args`).
export const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** A loopback TCP port free now (nothing listens on it once this returns). */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** The certificates of the registries started over HTTPS, by port: the one each is trusted with. */
const certificates = new Map();

/** A service's issuer host. Over HTTPS one level deeper: a wildcard over a top-level name
 * (`*.localhost`) covers nothing for rustls and Node (and for the registry's check at its start). */
function issuerHost(subdomain, tls) {
  return tls ? `${subdomain}.oidc.localhost` : `${subdomain}.localhost`;
}

/** A self-signed certificate for the API (127.0.0.1) and the issuers (*.oidc.localhost), two
 * days long, and its key: tls.crt and tls.key in `dir`. */
function makeCertificate(dir) {
  const cert = join(dir, "tls.crt");
  const key = join(dir, "tls.key");
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=registry e2e",
    "-addext", `subjectAltName=IP:127.0.0.1,DNS:${issuerHost("*", true)}`,
  ], { stdio: ["ignore", "ignore", "pipe"] });
  return { cert, key };
}

/** The registry, started with the tests' settings and `env` on top; over HTTPS with `tls`, its
 * plain-HTTP listener (which only redirects, and answers ACME's HTTP-01) on another free port. */
export async function startRegistry(env = {}, { tls = false } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "registry-e2e-"));
  const port = await freePort();
  const scheme = tls ? "https" : "http";
  const base = `${scheme}://127.0.0.1:${port}`;
  const tlsSettings = {};
  if (tls) {
    const { cert, key } = makeCertificate(dir);
    certificates.set(port, readFileSync(cert, "utf8"));
    tlsSettings.REGISTRY_TLS_CERT = cert;
    tlsSettings.REGISTRY_TLS_KEY = key;
    tlsSettings.REGISTRY_HTTP_REDIRECT_LISTEN = `127.0.0.1:${await freePort()}`;
  }
  const databaseUrl = `sqlite://${join(dir, "registry.db")}`;
  const logPath = join(dir, "server.log");
  const logFd = openSync(logPath, "w");
  const child = spawn(BINARY, ["serve"], {
    env: {
      PATH: process.env.PATH,
      REGISTRY_LISTEN: `127.0.0.1:${port}`,
      REGISTRY_DATABASE_URL: databaseUrl,
      REGISTRY_BASE_URL: base,
      REGISTRY_ISSUER_URL_TEMPLATE: `${scheme}://${issuerHost("{subdomain}", tls)}:${port}`,
      REGISTRY_WORKERS: "2",
      // Fetch counts reach the API at the next flush: every second here.
      REGISTRY_FETCH_FLUSH_SECONDS: "1",
      RUST_LOG: "info",
      ...tlsSettings,
      ...env,
    },
    stdio: ["ignore", "pipe", logFd],
  });
  closeSync(logFd);
  let stdout = "";
  let started = false;
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk) => (stdout += chunk));
  await new Promise((ready, fail) => {
    const timer = setTimeout(() => fail(new Error("the registry did not start within 30 s")), 30_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      if (!started) fail(new Error(`the registry exited with ${code}:\n${readFileSync(logPath, "utf8")}`));
    });
    child.stdout.on("data", () => {
      if (!started && stdout.includes("listening on")) {
        started = true;
        clearTimeout(timer);
        ready();
      }
    });
  });
  return {
    child,
    port,
    base,
    databaseUrl,
    /** A service's issuer URL. */
    issuer: (subdomain) => `${scheme}://${issuerHost(subdomain, tls)}:${port}`,
    /** Everything the server printed: its log (stderr) and its stdout. */
    output: () => readFileSync(logPath, "utf8") + stdout,
    /** The command line on the same database (`registry customer create …`), its JSON output. */
    cli(args) {
      return new Promise((done, fail) => {
        execFile(BINARY, args, { env: { PATH: process.env.PATH, REGISTRY_DATABASE_URL: databaseUrl } }, (error, out, err) => {
          if (error) fail(new Error(`registry ${args.join(" ")}: ${err || error.message}`));
          else done(JSON.parse(out));
        });
      });
    },
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((done) => child.once("exit", done));
        child.kill("SIGTERM");
        await exited;
      }
      certificates.delete(port);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One request to a registry started here, over HTTPS where it speaks it (trusting its
 * certificate alone); `servername` is the name the certificate is checked against. */
function send(url, { method = "GET", headers = {}, body, servername } = {}) {
  const target = new URL(url);
  const ca = target.protocol === "https:" ? certificates.get(Number(target.port)) : undefined;
  if (target.protocol === "https:" && !ca) throw new Error(`no certificate known for ${target.origin}`);
  const options = ca ? { method, headers, ca, servername } : { method, headers };
  return new Promise((done, fail) => {
    const request = (ca ? https : http).request(target, options, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk) => (text += chunk));
      response.on("end", () => done({ status: response.statusCode, headers: response.headers, body: text }));
    });
    request.on("error", fail);
    request.end(body);
  });
}

/** A call to the API at `base` from outside the browser. */
export async function callApi(base, method, path, secret, body) {
  const headers = { Accept: "application/json" };
  if (secret) headers.Authorization = `Bearer ${secret}`;
  const json = body === undefined ? undefined : JSON.stringify(body);
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    headers["Content-Length"] = Buffer.byteLength(json);
  }
  let response;
  try {
    response = await send(base + path, { method, headers, body: json });
  } catch (e) {
    throw new Error(`${method} ${path}: ${e.message}`);
  }
  const text = response.body;
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** A public GET of an issuer hosted on `port`. Sent to 127.0.0.1 with the issuer's Host (and,
 * over HTTPS, its name in the TLS handshake, the certificate checked against it): glibc here
 * does not resolve *.localhost. `headers` go with it (a User-Agent, say). */
export function hostedGet(port, subdomain, path, headers = {}) {
  const tls = certificates.has(port);
  const host = issuerHost(subdomain, tls);
  return send(`${tls ? "https" : "http"}://127.0.0.1:${port}${path}`, {
    headers: { Host: `${host}:${port}`, ...headers },
    servername: host,
  });
}

/** A full-page screenshot into ../docs/screenshots/. */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, name), fullPage: true });
}
