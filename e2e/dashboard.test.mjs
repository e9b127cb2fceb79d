// Browser tests of the landing page and the anonymous service's dashboard.
//
// The real `registry` binary on a free loopback port and a fresh SQLite file, driven by Debian's
// Chromium through playwright-core. Run with `cargo xtask e2e` (which builds the binary first),
// or `npm test` here once `target/debug/registry` is built. Settings:
//   REGISTRY_BINARY  the binary (default: ../target/debug/registry)
//   CHROMIUM_PATH    the browser (default: /usr/bin/chromium)
// Screenshots of the main states are written to ../docs/screenshots/.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, closeSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const BINARY = process.env.REGISTRY_BINARY || join(root, "target", "debug", "registry");
const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const SCREENSHOTS = join(root, "docs", "screenshots");

// This machine's network is closed: without the background-networking flags Chromium keeps
// trying to reach Google's hosts. playwright-core adds --headless and a fresh, temporary
// --user-data-dir itself (it refuses the latter among `args`).
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

// ---------------------------------------------------------------------------------------------
// The server.

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

async function startRegistry() {
  const dir = mkdtempSync(join(tmpdir(), "registry-e2e-"));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const logPath = join(dir, "server.log");
  const logFd = openSync(logPath, "w");
  const child = spawn(BINARY, ["serve"], {
    env: {
      PATH: process.env.PATH,
      REGISTRY_LISTEN: `127.0.0.1:${port}`,
      REGISTRY_DATABASE_URL: `sqlite://${join(dir, "registry.db")}`,
      REGISTRY_BASE_URL: base,
      REGISTRY_ISSUER_URL_TEMPLATE: `http://{subdomain}.localhost:${port}`,
      REGISTRY_WORKERS: "2",
      RUST_LOG: "info",
    },
    stdio: ["ignore", "pipe", logFd],
  });
  closeSync(logFd);
  let stdout = "";
  await new Promise((ready, fail) => {
    const timer = setTimeout(() => fail(new Error("the registry did not start within 30 s")), 30_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`the registry exited with ${code}:\n${readFileSync(logPath, "utf8")}`));
    });
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      if (stdout.includes("listening on")) {
        clearTimeout(timer);
        ready();
      }
    });
  });
  return {
    child,
    port,
    base,
    /** Everything the server printed: its log (stderr) and its stdout. */
    output: () => readFileSync(logPath, "utf8") + stdout,
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

/** A call to the API from outside the browser. */
async function api(method, path, secret, body) {
  const headers = { Accept: "application/json" };
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(registry.base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** A public GET of a hosted issuer. Sent to 127.0.0.1 with the issuer's Host: glibc here does
 * not resolve *.localhost. */
function hosted(subdomain, path) {
  return new Promise((done, fail) => {
    const request = http.request(
      {
        host: "127.0.0.1",
        port: registry.port,
        path,
        method: "GET",
        headers: { Host: `${subdomain}.localhost:${registry.port}` },
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

// ---------------------------------------------------------------------------------------------
// Documents to publish.

function rsaKeys(kid) {
  const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const extra = { kid, use: "sig", alg: "RS256" };
  return {
    publicJwk: { ...publicKey.export({ format: "jwk" }), ...extra },
    privateJwk: { ...privateKey.export({ format: "jwk" }), ...extra },
  };
}

/** A discovery document as a kind/k3s cluster serves it. */
const clusterDiscovery = {
  issuer: "https://kubernetes.default.svc.cluster.local",
  jwks_uri: "https://172.18.0.2:6443/openid/v1/jwks",
  response_types_supported: ["id_token"],
  subject_types_supported: ["public"],
  id_token_signing_alg_values_supported: ["RS256"],
};

// ---------------------------------------------------------------------------------------------
// The browser, and what it sends.

let registry;
let browser;
let context;
/** Every request the browser made. */
const requests = [];
/** Console errors and uncaught exceptions: a CSP refusal shows up here. */
const pageProblems = [];
/** Every secret this run created, checked against URLs, Referers and the server's output. */
const secrets = new Set();

async function newPage() {
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") pageProblems.push(`console: ${message.text()}`);
  });
  page.on("pageerror", (error) => pageProblems.push(`page error: ${error.message}`));
  return page;
}

/** The part of a URL that goes on the wire: a fragment never leaves the browser, and Playwright
 * reports a navigation's URL with it. */
function wireUrl(url) {
  const parsed = new URL(url);
  parsed.hash = "";
  return parsed.href;
}

async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, name), fullPage: true });
}

before(async () => {
  registry = await startRegistry();
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  context = await browser.newContext({
    viewport: { width: 1200, height: 900 },
    colorScheme: "light",
    locale: "en-GB",
    timezoneId: "UTC",
  });
  context.setDefaultTimeout(15_000);
  context.on("request", (request) => requests.push(request));
});

after(async () => {
  await context?.close();
  await browser?.close();
  await registry?.stop();
});

/** Seconds on the countdown. */
async function countdown(page) {
  return Number(await page.locator("#countdown").getAttribute("data-seconds"));
}

// ---------------------------------------------------------------------------------------------

test("an anonymous service from creation to deletion, through the pages", async (t) => {
  const page = await newPage();
  let subdomain;
  let secret;
  const first = rsaKeys("e2e-key-1");

  await t.test("the landing page explains and offers to create a service", async () => {
    await page.goto(`${registry.base}/`);
    await page.getByRole("heading", { level: 1, name: "A public home for your OIDC issuer" }).waitFor();
    await screenshot(page, "landing.png");
  });

  await t.test("the create button lands on the service's dashboard", async () => {
    const created = page.waitForResponse(
      (r) => r.url().endsWith("/anonymous/services") && r.request().method() === "POST",
    );
    await page.getByRole("button", { name: "Create an anonymous service" }).click();
    const body = await (await created).json();
    secret = body.secret;
    subdomain = body.service.subdomain;
    secrets.add(secret);
    assert.match(subdomain, /-anon$/);
    await page.waitForURL(`${registry.base}/dashboard/anonymous/${subdomain}`);
    await page.locator("#service").waitFor();
    // The fragment is gone from the address bar.
    assert.equal(page.url(), `${registry.base}/dashboard/anonymous/${subdomain}`);
    assert.equal(await page.locator("#subdomain").textContent(), subdomain);
    const issuer = `http://${subdomain}.localhost:${registry.port}`;
    assert.equal(await page.locator("#issuer").textContent(), issuer);
    assert.equal(await page.locator("#jwks-url").textContent(), `${issuer}/openid/v1/jwks`);
    assert.equal(await page.locator("#expires-at").getAttribute("datetime"), body.expiresAt);
  });

  await t.test("the countdown runs", async () => {
    const before = await countdown(page);
    assert.ok(before > 86_000 && before <= 86_400, `countdown starts near 24 h: ${before}`);
    await page.waitForTimeout(2_200);
    const later = await countdown(page);
    assert.ok(later < before && later >= before - 4, `${before} then ${later}`);
    assert.match(await page.locator("#countdown").textContent(), /^23 h 59 min \d\d s$/);
  });

  await t.test("title and description are saved through the API", async () => {
    await page.getByLabel("Title").fill("E2E cluster");
    await page.getByLabel("Description").fill("Throwaway issuer of the browser tests");
    await page.getByRole("button", { name: "Save" }).click();
    await page.locator("#details-message", { hasText: "Saved." }).waitFor();
    assert.equal(await page.locator("#service-heading").textContent(), "E2E cluster");
    const stored = await api("GET", `/services/${subdomain}`, secret);
    assert.equal(stored.status, 200);
    assert.equal(stored.body.title, "E2E cluster");
    assert.equal(stored.body.description, "Throwaway issuer of the browser tests");
  });

  await t.test("a reload keeps working: the secret is kept for this tab", async () => {
    await page.reload();
    await page.locator("#service").waitFor();
    assert.equal(await page.locator("#service-heading").textContent(), "E2E cluster");
    assert.equal(await page.getByLabel("Title").inputValue(), "E2E cluster");
  });

  await t.test("a valid discovery document and key set are published", async () => {
    await page.getByLabel("Discovery document").fill(JSON.stringify(clusterDiscovery, null, 2));
    await page.getByLabel("Key set").fill(JSON.stringify({ keys: [first.publicJwk] }, null, 2));
    await page.getByRole("button", { name: "Upload and publish" }).click();
    const message = page.locator("#upload-message");
    await message.locator("text=Published").waitFor();
    // The cluster's own issuer differs from the hosted one: the server says what to set.
    assert.match(await message.textContent(), /--service-account-issuer/);
    assert.equal(await message.getAttribute("class"), "message warn");
    await page.locator("#published-jwks", { hasText: "e2e-key-1" }).waitFor();

    const issuer = `http://${subdomain}.localhost:${registry.port}`;
    const discovery = await hosted(subdomain, "/.well-known/openid-configuration");
    assert.equal(discovery.status, 200);
    const document = JSON.parse(discovery.body);
    assert.equal(document.issuer, issuer);
    assert.equal(document.jwks_uri, `${issuer}/openid/v1/jwks`);
    assert.deepEqual(document.response_types_supported, ["id_token"]);
    const jwks = await hosted(subdomain, "/openid/v1/jwks");
    assert.equal(jwks.status, 200);
    const keys = JSON.parse(jwks.body).keys;
    assert.equal(keys.length, 1);
    assert.equal(keys[0].kid, "e2e-key-1");
    assert.equal(keys[0].n, first.publicJwk.n);
  });

  await t.test("'Show what is published' reads the published documents back", async () => {
    await page.reload();
    await page.locator("#service").waitFor();
    assert.equal(await page.locator("#published").isHidden(), true);
    await page.getByRole("button", { name: "Show what is published" }).click();
    await page.locator("#published-message", { hasText: "This is what the issuer URL serves." }).waitFor();
    const shown = JSON.parse(await page.locator("#published-discovery").textContent());
    assert.equal(shown.issuer, `http://${subdomain}.localhost:${registry.port}`);
    assert.match(await page.locator("#published-jwks").textContent(), /e2e-key-1/);
    assert.equal(
      await page.locator("#jwks-link").getAttribute("href"),
      `http://${subdomain}.localhost:${registry.port}/openid/v1/jwks`,
    );
    await screenshot(page, "dashboard.png");
  });

  await t.test("JSON that does not parse is caught before anything is sent", async () => {
    const puts = requests.filter((r) => r.method() === "PUT").length;
    await page.getByLabel("Discovery document").fill("{ not json");
    await page.getByRole("button", { name: "Upload and publish" }).click();
    await page.locator("#discovery-errors li", { hasText: "not valid JSON" }).waitFor();
    assert.equal(await page.getByLabel("Discovery document").getAttribute("aria-invalid"), "true");
    assert.equal(requests.filter((r) => r.method() === "PUT").length, puts);
    await page.getByLabel("Discovery document").fill(JSON.stringify(clusterDiscovery, null, 2));
  });

  await t.test("a key set with a private key is refused, the error shown next to it", async () => {
    const second = rsaKeys("e2e-key-2");
    await page.getByLabel("Key set").fill(JSON.stringify({ keys: [second.privateJwk] }, null, 2));
    await page.getByRole("button", { name: "Upload and publish" }).click();
    const error = page.locator("#jwks-errors li", { hasText: "/jwks/keys/0/d" });
    await error.waitFor();
    assert.match(await error.textContent(), /private/i);
    assert.equal(await page.getByLabel("Key set").getAttribute("aria-invalid"), "true");
    assert.equal(await page.getByLabel("Discovery document").getAttribute("aria-invalid"), null);
    assert.match(await page.locator("#upload-message").textContent(), /^Not published/);
    await page.locator("#jwks-errors").scrollIntoViewIfNeeded();
    await screenshot(page, "upload-error.png");
    // Nothing changed publicly.
    const keys = JSON.parse((await hosted(subdomain, "/openid/v1/jwks")).body).keys;
    assert.deepEqual(keys.map((k) => k.kid), ["e2e-key-1"]);
  });

  await t.test("the published documents are removed, the service stays", async () => {
    await page.getByRole("button", { name: "Remove published documents" }).click();
    await page.locator("#published-message", { hasText: "Removed." }).waitFor();
    assert.equal((await hosted(subdomain, "/.well-known/openid-configuration")).status, 404);
    assert.equal((await api("GET", `/services/${subdomain}`, secret)).status, 200);
    await page.getByRole("button", { name: "Show what is published" }).click();
    await page.locator("#published-message", { hasText: "Nothing is published yet." }).waitFor();
  });

  await t.test("the dashboard link can be shown and hidden again", async () => {
    await page.getByRole("button", { name: "Show dashboard link" }).click();
    const link = await page.getByLabel("Dashboard link (secret)").inputValue();
    assert.equal(link, `${registry.base}/dashboard/anonymous/${subdomain}#secret=${secret}`);
    await page.getByRole("button", { name: "Hide dashboard link" }).click();
    assert.equal(await page.locator("#link-output").inputValue(), "");
  });

  await t.test("the service is deleted after a confirmation", async () => {
    const dialog = page.getByRole("dialog", { name: "Delete this service?" });
    await page.getByRole("button", { name: "Delete service…" }).click();
    await dialog.waitFor();
    await dialog.getByRole("button", { name: "Cancel" }).click();
    await dialog.waitFor({ state: "hidden" });
    assert.equal((await api("GET", `/services/${subdomain}`, secret)).status, 200);

    await page.getByRole("button", { name: "Delete service…" }).click();
    assert.match(await dialog.textContent(), /E2E cluster/);
    await dialog.getByRole("button", { name: "Delete" }).click();
    await page.getByRole("heading", { name: "Service deleted" }).waitFor();
    const gone = await api("GET", `/services/${subdomain}`, secret);
    assert.ok([401, 404].includes(gone.status), `after deletion: ${gone.status}`);
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    // The secret is forgotten: a reload asks for the link again.
    await page.reload();
    await page.locator("#page-message", { hasText: "needs the service's secret" }).waitFor();
  });

  await page.close();
});

test("clear messages for a missing, wrong or foreign secret", async () => {
  const page = await newPage();
  const created = await api("POST", "/anonymous/services", null, { title: "Other" });
  assert.equal(created.status, 201);
  secrets.add(created.body.secret);
  const other = created.body.service.subdomain;

  await page.goto(`${registry.base}/dashboard/anonymous/${other}`);
  await page.locator("#page-message", { hasText: "needs the service's secret" }).waitFor();
  assert.equal(await page.locator("#service").isHidden(), true);

  const wrong = created.body.secret.replace(/.$/, (c) => (c === "a" ? "b" : "a"));
  await page.goto(`${registry.base}/dashboard/anonymous/${other}#secret=${wrong}`);
  await page.locator("#page-message", { hasText: "not valid for this service" }).waitFor();
  assert.equal(page.url(), `${registry.base}/dashboard/anonymous/${other}`);

  // A real secret on another service's page: 404, which reads as "no such service".
  const hostile = '<img src=x onerror="document.title=1">-anon';
  await page.goto(
    `${registry.base}/dashboard/anonymous/${encodeURIComponent(hostile)}#secret=${created.body.secret}`,
  );
  const message = page.locator("#page-message");
  await message.locator("text=any more").waitFor();
  // The untrusted subdomain is shown as text, never parsed as HTML.
  assert.match(await message.textContent(), /<img src=x onerror="document.title=1">-anon/);
  assert.equal(await page.locator("main img").count(), 0);
  assert.notEqual(await page.title(), "1");
  await page.close();
});

test("an expiring service counts down to an expired state", async () => {
  const page = await newPage();
  const created = await api("POST", "/anonymous/services", null, { ttlHours: 4 / 3600 });
  assert.equal(created.status, 201);
  secrets.add(created.body.secret);
  await page.goto(created.body.dashboardUrl);
  await page.locator("#service").waitFor();
  await page.locator("#expired-message", { hasText: "has expired" }).waitFor({ timeout: 10_000 });
  assert.equal(await countdown(page), 0);
  assert.equal(await page.getByRole("button", { name: "Upload and publish" }).isDisabled(), true);
  // The server agrees.
  const gone = await api("GET", `/services/${created.body.service.subdomain}`, created.body.secret);
  assert.ok([401, 404].includes(gone.status), `expired: ${gone.status}`);
  await page.close();
});

test("the pages run under their CSP, and the secret never leaves the fragment", async () => {
  assert.deepEqual(pageProblems, [], "console errors or uncaught exceptions (a CSP refusal shows here)");
  assert.ok(secrets.size >= 3);
  assert.ok(requests.length > 10, `only ${requests.length} requests seen`);
  const apiCalls = requests.filter((r) => r.url().includes("/services/"));
  assert.ok(apiCalls.length > 5);
  for (const request of requests) {
    const url = wireUrl(request.url());
    const headers = await request.allHeaders().catch(() => request.headers());
    for (const secret of secrets) {
      assert.ok(!url.includes(secret), `secret in a request URL: ${request.method()} ${url}`);
      assert.ok(!(headers.referer ?? "").includes(secret), `secret in the Referer of ${url}`);
    }
    assert.equal(headers.referer, undefined, `no-referrer: ${url} was sent a Referer`);
  }
  // The API calls carried it where it belongs.
  assert.ok(
    (await Promise.all(apiCalls.map((r) => r.allHeaders()))).every((h) => /^Bearer rgan_/.test(h.authorization ?? "")),
  );
  const output = registry.output();
  assert.match(output, /request/, "the server logged its requests");
  for (const secret of secrets) {
    assert.ok(!output.includes(secret), "a secret reached the server's log");
  }
});
