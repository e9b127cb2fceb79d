// What the browser tests share: the real `registry` binary on a free loopback port with a fresh
// SQLite file, calls to its API and its hosted issuers from outside the browser, and Debian's
// Chromium driven through playwright-core. Settings:
//   REGISTRY_BINARY  the binary (default: ../target/debug/registry)
//   CHROMIUM_PATH    the browser (default: /usr/bin/chromium)

import { spawn, execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, closeSync } from "node:fs";
import http from "node:http";
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

function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** The registry, started with the tests' settings and `env` on top. */
export async function startRegistry(env = {}) {
  const dir = mkdtempSync(join(tmpdir(), "registry-e2e-"));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const databaseUrl = `sqlite://${join(dir, "registry.db")}`;
  const logPath = join(dir, "server.log");
  const logFd = openSync(logPath, "w");
  const child = spawn(BINARY, ["serve"], {
    env: {
      PATH: process.env.PATH,
      REGISTRY_LISTEN: `127.0.0.1:${port}`,
      REGISTRY_DATABASE_URL: databaseUrl,
      REGISTRY_BASE_URL: base,
      REGISTRY_ISSUER_URL_TEMPLATE: `http://{subdomain}.localhost:${port}`,
      REGISTRY_WORKERS: "2",
      // Fetch counts reach the API at the next flush: every second here.
      REGISTRY_FETCH_FLUSH_SECONDS: "1",
      RUST_LOG: "info",
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
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A call to the API at `base` from outside the browser. */
export async function callApi(base, method, path, secret, body) {
  const headers = { Accept: "application/json" };
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(base + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new Error(`${method} ${path}: ${e.message} (${e.cause?.message ?? "no cause"})`);
  }
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** A public GET of an issuer hosted on `port`. Sent to 127.0.0.1 with the issuer's Host: glibc
 * here does not resolve *.localhost. `headers` go with it (a User-Agent, say). */
export function hostedGet(port, subdomain, path, headers = {}) {
  return new Promise((done, fail) => {
    const request = http.request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "GET",
        headers: { Host: `${subdomain}.localhost:${port}`, ...headers },
      },
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk) => (body += chunk));
        response.on("end", () => done({ status: response.statusCode, headers: response.headers, body }));
      },
    );
    request.on("error", fail);
    request.end();
  });
}

/** A full-page screenshot into ../docs/screenshots/. */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, name), fullPage: true });
}
