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
import { createPrivateKey, generateKeyPairSync, sign } from "node:crypto";
import { chromium } from "playwright-core";
import { CHROMIUM, CHROMIUM_ARGS, callApi, hostedGet, screenshot, startRegistry } from "./support.mjs";

// ---------------------------------------------------------------------------------------------
// The server (started by support.mjs).

/** A call to the API from outside the browser. */
function api(method, path, secret, body) {
  return callApi(registry.base, method, path, secret, body);
}

/** A public GET of a hosted issuer. */
function hosted(subdomain, path) {
  return hostedGet(registry.port, subdomain, path);
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

/** A compact RS256 JWS of `claims`, signed with `keys`' private key under its `kid`. */
function jwt(keys, claims) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const input = part({ alg: "RS256", kid: keys.privateJwk.kid, typ: "JWT" }) + "." + part(claims);
  const key = createPrivateKey({ key: keys.privateJwk, format: "jwk" });
  return input + "." + sign("sha256", Buffer.from(input), key).toString("base64url");
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
/** Every request the browser made, with the promise of its headers as sent (asked for at once:
 * they cannot be read once the page is closed). */
const requests = [];
const sentHeaders = new Map();
/** Console errors and uncaught exceptions: a CSP refusal shows up here. */
const pageProblems = [];
/** Every secret this run created, checked against URLs, Referers and the server's output. */
const secrets = new Set();

async function newPage() {
  const page = await context.newPage();
  page.on("console", (message) => {
    // Chromium logs every 4xx answer to fetch; those are expected here (400, 401, 404).
    const expected = /^Failed to load resource: the server responded with a status of 40[014]/;
    if (message.type() === "error" && !expected.test(message.text())) {
      pageProblems.push(`console: ${message.text()}`);
    }
  });
  page.on("pageerror", (error) => pageProblems.push(`page error: ${error.message}`));
  return page;
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
  context.on("request", (request) => {
    requests.push(request);
    sentHeaders.set(request, request.allHeaders().catch(() => request.headers()));
  });
});

after(async () => {
  await context?.close();
  await browser?.close();
  await registry?.stop();
});

/** A text field by its accessible name (its label). */
function field(page, name) {
  return page.getByRole("textbox", { name, exact: true });
}

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
    assert.equal((await created).status(), 201);
    await page.waitForURL(/\/dashboard\/anonymous\/[a-z0-9]+-anon$/);
    subdomain = new URL(page.url()).pathname.split("/").pop();
    await page.locator("#service").waitFor();
    // The creation response is gone with the navigation; the secret is where the page keeps it.
    secret = await page.evaluate((key) => sessionStorage.getItem(key), `registry.anonymous-secret.${subdomain}`);
    assert.match(secret, /^rgan_/);
    secrets.add(secret);
    const body = (await api("GET", `/services/${subdomain}`, secret)).body;
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
    const read = Date.now();
    assert.ok(before > 86_000 && before <= 86_400, `countdown starts near 24 h: ${before}`);
    await page.waitForTimeout(2_200);
    const later = await countdown(page);
    const apart = Math.ceil((Date.now() - read) / 1000);
    assert.ok(later < before && later >= before - apart - 1, `${before} then ${later}, ${apart} s apart`);
    assert.match(await page.locator("#countdown").textContent(), /^23 h 59 min \d\d s$/);
  });

  await t.test("title and description are saved through the API", async () => {
    await field(page, "Title").fill("E2E cluster");
    await field(page, "Description (optional)").fill("Throwaway issuer of the browser tests");
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
    assert.equal(await field(page, "Title").inputValue(), "E2E cluster");
  });

  await t.test("a valid discovery document and key set are published", async () => {
    await field(page, "Discovery document (JSON)").fill(JSON.stringify(clusterDiscovery, null, 2));
    await field(page, "Key set (JWKS JSON)").fill(JSON.stringify({ keys: [first.publicJwk] }, null, 2));
    await page.getByRole("button", { name: "Upload and publish" }).click();
    const message = page.locator("#upload-message");
    await message.locator("text=Published").waitFor();
    // The cluster's own issuer differs from the hosted one: the server says what to set.
    assert.match(await message.textContent(), /--service-account-issuer/);
    assert.equal(await message.getAttribute("class"), "message warn");
    await page.locator("#published-jwks", { hasText: "e2e-key-1" }).waitFor();
    await screenshot(page, "published.png");

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

  await t.test("a rotation keeps the old key, shown retired, until it is withdrawn", async () => {
    const second = rsaKeys("e2e-key-2");
    await field(page, "Key set (JWKS JSON)").fill(JSON.stringify({ keys: [second.publicJwk] }, null, 2));
    await page.getByRole("button", { name: "Upload and publish" }).click();
    const message = page.locator("#upload-message");
    await message.locator("text=keeps the old keys published until").waitFor();
    await page.getByRole("button", { name: "Show keys" }).click();
    await page.locator("#keys-message", { hasText: "2 published, 1 of them retired." }).waitFor();
    const rows = await page.locator("#keys-body tr").allTextContents();
    assert.match(rows[0], /e2e-key-2.*current/);
    assert.match(rows[1], /e2e-key-1.*retired/);
    let keys = JSON.parse((await hosted(subdomain, "/openid/v1/jwks")).body).keys;
    assert.deepEqual(keys.map((k) => k.kid), ["e2e-key-2", "e2e-key-1"]);
    await screenshot(page, "keys.png");
    await page.getByRole("button", { name: "Withdraw e2e-key-1" }).click();
    await page.locator("#keys-message", { hasText: "Withdrawn: e2e-key-1" }).waitFor();
    assert.equal(await page.locator("#keys-body tr").count(), 1);
    keys = JSON.parse((await hosted(subdomain, "/openid/v1/jwks")).body).keys;
    assert.deepEqual(keys.map((k) => k.kid), ["e2e-key-2"]);
    // Back to the first key alone, as the rest of the walk-through expects.
    await field(page, "Key set (JWKS JSON)").fill(JSON.stringify({ keys: [first.publicJwk] }, null, 2));
    await page.getByRole("button", { name: "Upload and publish" }).click();
    // e2e-key-1 was withdrawn minutes ago: published again, with a warning that says so.
    await message.locator("text=Published, with warnings:").waitFor();
    await message.getByText(/key "e2e-key-1" was withdrawn from the public key set/).waitFor();
    await page.getByRole("button", { name: "Withdraw e2e-key-2" }).click();
    await page.locator("#keys-message", { hasText: "Withdrawn: e2e-key-2" }).waitFor();
    keys = JSON.parse((await hosted(subdomain, "/openid/v1/jwks")).body).keys;
    assert.deepEqual(keys.map((k) => k.kid), ["e2e-key-1"]);
  });

  await t.test("the wiring guide shows what to register in each cloud", async () => {
    await field(page, "Token subject (sub)").fill("system:serviceaccount:ci:deployer");
    await page.getByRole("button", { name: "Show what to register" }).click();
    await page.locator("#wiring").waitFor();
    const policy = JSON.parse(await page.locator("#wiring-aws").textContent());
    const host = `${subdomain}.localhost:${registry.port}`;
    const condition = policy.Statement[0].Condition.StringEquals;
    assert.equal(condition[`${host}:sub`], "system:serviceaccount:ci:deployer");
    assert.equal(condition[`${host}:aud`], "sts.amazonaws.com");
    assert.match(await page.locator("#wiring-azure").textContent(), /api:\/\/AzureADTokenExchange/);
  });

  await t.test("the preflight says what each cloud would refuse, and checks a pasted token", async () => {
    await page.getByRole("button", { name: "Check with the clouds' rules" }).click();
    await page.locator("#preflight").waitFor();
    // The hosted issuer is http:// here: every cloud refuses it.
    for (const cloud of ["aws", "gcp", "azure"]) {
      const text = await page.locator(`#preflight-${cloud}`).textContent();
      assert.match(text, /not ready/, text);
      assert.match(text, /error issuer-not-https/, text);
    }
    assert.match(await page.locator("#preflight-message").textContent(), /No cloud would accept it yet/);

    const issuer = `http://${subdomain}.localhost:${registry.port}`;
    const now = Math.floor(Date.now() / 1000);
    const token = jwt(first, { iss: issuer, sub: "system:serviceaccount:ci:deployer", aud: ["sts.amazonaws.com"], iat: now, exp: now + 600 });
    await field(page, "Token (optional)").fill(token);
    await page.getByRole("button", { name: "Check with the clouds' rules" }).click();
    await page.locator("#preflight-token-summary", { hasText: "kid e2e-key-1" }).waitFor();
    const aws = await page.locator("#preflight-aws").textContent();
    assert.doesNotMatch(aws, /signature-invalid|key-unknown|audience-mismatch|issuer-mismatch/, aws);
    assert.match(await page.locator("#preflight-gcp").textContent(), /audience-mismatch/);
    await screenshot(page, "preflight.png");

    // A token signed by a key this service never published.
    const stranger = rsaKeys("e2e-key-1");
    await field(page, "Token (optional)").fill(jwt(stranger, { iss: issuer, sub: "x", aud: "sts.amazonaws.com", iat: now, exp: now + 600 }));
    await page.getByRole("button", { name: "Check with the clouds' rules" }).click();
    await page.locator("#preflight-aws", { hasText: "signature-invalid" }).waitFor();
    // The token is never echoed back whole.
    assert.ok(!(await page.content()).includes(token.split(".")[2]), "the signature is not on the page");

    await field(page, "Token (optional)").fill("not a token");
    await page.getByRole("button", { name: "Check with the clouds' rules" }).click();
    await page.locator("#preflight-message", { hasText: "Could not run the checks" }).waitFor();
    await field(page, "Token (optional)").fill("");
  });

  await t.test("the fetch evidence shows that both documents were fetched since they changed", async () => {
    await hosted(subdomain, "/.well-known/openid-configuration");
    await hosted(subdomain, "/openid/v1/jwks");
    const deadline = Date.now() + 15_000;
    for (;;) {
      await page.getByRole("button", { name: "Show fetches" }).click();
      await page.locator("#fetches-message").filter({ hasText: /fetched/ }).waitFor();
      const text = await page.locator("#fetches-message").textContent();
      if (/Both documents were fetched/.test(text)) break;
      assert.ok(Date.now() < deadline, `still: ${text}`);
      await page.waitForTimeout(500);
    }
    const rows = await page.locator("#fetches-body tr").allTextContents();
    assert.equal(rows.length, 2);
    assert.ok(rows.some((row) => /openid-configuration.*fetched/.test(row)), rows.join(" | "));
    assert.ok(rows.some((row) => /\/openid\/v1\/jwks/.test(row)), rows.join(" | "));
    await screenshot(page, "fetches.png");
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
    await field(page, "Discovery document (JSON)").fill("{ not json");
    await page.getByRole("button", { name: "Upload and publish" }).click();
    await page.locator("#discovery-errors li", { hasText: "not valid JSON" }).waitFor();
    assert.equal(await field(page, "Discovery document (JSON)").getAttribute("aria-invalid"), "true");
    assert.equal(requests.filter((r) => r.method() === "PUT").length, puts);
    await field(page, "Discovery document (JSON)").fill(JSON.stringify(clusterDiscovery, null, 2));
  });

  await t.test("a key set with a private key is refused, the error shown next to it", async () => {
    const second = rsaKeys("e2e-key-2");
    await field(page, "Key set (JWKS JSON)").fill(JSON.stringify({ keys: [second.privateJwk] }, null, 2));
    await page.getByRole("button", { name: "Upload and publish" }).click();
    const error = page.locator("#jwks-errors li", { hasText: "/jwks/keys/0" });
    await error.waitFor();
    const text = await error.textContent();
    assert.match(text, /private or symmetric key material \(d, p, q, dp, dq, qi\)/);
    assert.match(text, /rotate it/);
    assert.equal(await field(page, "Key set (JWKS JSON)").getAttribute("aria-invalid"), "true");
    assert.equal(await field(page, "Discovery document (JSON)").getAttribute("aria-invalid"), null);
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
    const link = await field(page, "Dashboard link (secret)").inputValue();
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
  // Long enough for a loaded machine to open the page before the end.
  const created = await api("POST", "/anonymous/services", null, { ttlHours: 10 / 3600 });
  assert.equal(created.status, 201);
  secrets.add(created.body.secret);
  await page.goto(created.body.dashboardUrl);
  await page.locator("#service").waitFor();
  await page.locator("#expired-message", { hasText: "has expired" }).waitFor({ timeout: 30_000 });
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
  // The dashboard links, fragment and all, were opened: their navigations are among these.
  assert.ok(requests.filter((r) => r.isNavigationRequest() && r.url().includes("/dashboard/anonymous/")).length >= 3);
  const apiCalls = requests.filter((r) => r.url().includes("/services/"));
  assert.ok(apiCalls.length > 5);
  for (const request of requests) {
    // As sent: Playwright reports a request's URL without the fragment, which never leaves
    // the browser.
    const url = request.url();
    const headers = await sentHeaders.get(request);
    for (const secret of secrets) {
      assert.ok(!url.includes(secret), `secret in a request URL: ${request.method()} ${url}`);
      assert.ok(!(headers.referer ?? "").includes(secret), `secret in the Referer of ${url}`);
    }
    // Once a page is closed only the provisional headers are left, where Playwright shows a
    // fetch's absent Referer as "" (on the wire there is none).
    assert.ok(!headers.referer, `no-referrer: ${url} was sent a Referer`);
  }
  // The API calls carried it where it belongs.
  assert.ok(
    (await Promise.all(apiCalls.map((r) => sentHeaders.get(r)))).every((h) =>
      /^Bearer rgan_/.test(h.authorization ?? ""),
    ),
  );
  const output = registry.output();
  assert.match(output, /request/, "the server logged its requests");
  for (const secret of secrets) {
    assert.ok(!output.includes(secret), "a secret reached the server's log");
  }
});
