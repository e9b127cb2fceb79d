// The registered customers' console (docs/api.md, "Console"; the calls are its other
// sections). Signing in is pasting a service account's token: it is kept in this tab's
// sessionStorage and in memory, and sent to the API on this origin as a bearer token, never in
// an address, a cookie or localStorage. Everything shown comes from the API with that token, so
// the account's policy decides what can be seen and done, and a refusal is shown with the
// problem's own words. Everything the server or the address holds is rendered with textContent
// or as an attribute, never parsed as HTML.
const $ = (id) => document.getElementById(id);
// The SVG namespace, as the HTML parser gave it to the page's own <svg> (the page holds no
// absolute URL, not even this one: see tests/integration/api/dashboard.rs).
const SVG_NS = document.getElementById("timeline").namespaceURI;
// The API sits at the path prefix the console is served under.
const API = location.pathname.replace(/\/console\/?$/, "");
const TOKEN_KEY = "registry-console-token";
const ACCOUNT_KEY = "registry-console-account";
const POLL_MS = 3000;
const QUIET_POLL_MS = 5000;
const HOUR_MS = 3600 * 1000;
const VIEWS = ["services", "service", "accounts", "audit"];
const CLOUDS = [["aws", "AWS"], ["gcp", "GCP"], ["azure", "Azure"]];
// docs/api.md, "Audit trail and last use".
const AUDIT_ACTIONS = [
  "customer.create", "customer.update", "customer.disable", "customer.enable",
  "service.create", "service.update", "service.delete", "config.put", "config.delete",
  "key.delete", "key.expire", "account.create", "account.update", "account.delete",
  "account.regenerate-token", "anonymous.create", "anonymous.update", "anonymous.delete",
  "anonymous.expire", "domain.put", "domain.delete", "verifier.dismiss", "signing.enable",
  "signing.update", "signing.disable", "signing.rotate", "signing.switch", "signing.withdraw",
];

let token = null;
// The account an identity token acts as, when the signed-in person named one.
let account = null;
// Bumped by every navigation and by signing out: an answer to a request made for an earlier
// view is dropped instead of drawn over the current one.
let generation = 0;

// ---- The token, and the account it acts as. ----
// sessionStorage so that a reload keeps the tab signed in; it is per tab, never sent anywhere
// by the browser, and gone when the tab closes (localStorage would outlive it).
function stored(key) {
  try {
    return sessionStorage.getItem(key);
  } catch (_) {
    return null;
  }
}

function store(key, value) {
  try {
    if (value) sessionStorage.setItem(key, value);
    else sessionStorage.removeItem(key);
  } catch (_) {
    // Storage disabled: the token lives in memory only, and a reload asks for it again.
  }
}

// ---- Building the page. ----
function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = inert(text);
  if (className) node.className = className;
  return node;
}

function svgEl(tag, attributes, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = inert(text);
  return node;
}

// A tooltip for an SVG shape: the <title> browsers show on hover.
function titled(node, text) {
  node.append(svgEl("title", {}, text));
  return node;
}

function cell(content, className) {
  const td = el("td", null, className);
  if (content instanceof Node) td.append(content);
  else td.textContent = content === undefined || content === null || content === "" ? "\u2014" : inert(content);
  return td;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const content of cells) tr.append(content instanceof HTMLTableCellElement ? content : cell(content));
  return tr;
}

function code(text) {
  return el("code", text);
}

function item(...children) {
  const li = el("li");
  li.append(...children);
  return li;
}

function facts(dl, entries) {
  dl.replaceChildren();
  for (const [term, value] of entries) {
    const dd = el("dd");
    if (value instanceof Node) dd.append(value);
    else dd.textContent = value === undefined || value === null || value === "" ? "\u2014" : inert(value);
    dl.append(el("dt", term), dd);
  }
}

function show(node, text, items) {
  node.replaceChildren(document.createTextNode(inert(text)));
  if (items && items.length) {
    const list = el("ul");
    for (const item of items) list.append(el("li", item));
    node.append(list);
  }
}

function clear(node) {
  node.replaceChildren();
}

// ---- Times. ----
// One formatter each, made once: the services table formats hundreds of dates.
const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const clockTime = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const dayTime = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });

function ms(value) {
  if (typeof value !== "string") return null;
  const t = Date.parse(value);
  return Number.isNaN(t) ? null : t;
}

function dateText(value) {
  const t = ms(value);
  if (t === null) return value ? String(value) : "\u2014";
  return dateTime.format(t);
}

// A <time> for an RFC 3339 value, or `empty` as text when there is none.
function timeNode(value, empty) {
  const t = ms(value);
  if (t === null) return document.createTextNode(empty === undefined ? "\u2014" : empty);
  const node = el("time", dateTime.format(t));
  node.dateTime = value;
  node.title = value;
  return node;
}

function duration(seconds) {
  const s = Number(seconds);
  if (!Number.isFinite(s)) return "\u2014";
  if (s === 0) return "none";
  const units = [[86400, "day"], [3600, "hour"], [60, "minute"], [1, "second"]];
  for (const [size, name] of units) {
    if (s >= size) {
      const n = Math.round((s / size) * 10) / 10;
      return n + " " + name + (n === 1 ? "" : "s");
    }
  }
  return s + " seconds";
}

function max(a, b) {
  if (a === null) return b;
  if (b === null) return a;
  return Math.max(a, b);
}

// ---- Talking to the API. ----
function problemText(result) {
  if (!result) return "no answer";
  if (result.status === 0) return "the registry cannot be reached; check your connection";
  const body = result.body;
  if (body && typeof body.detail === "string" && body.detail) return body.detail;
  if (body && typeof body.title === "string" && body.title) return body.title;
  return "the registry answered " + result.status;
}

// `text` ending as a sentence, for another one to follow it.
function sentence(text) {
  return /[.!?]$/.test(text) ? text : text + ".";
}

// A call with the signed-in token (shared/request.js).
async function api(method, path, body) {
  const sent = token;
  // Signed out while a view was loading: what it still asks for is not asked.
  if (!sent) return { status: 0, ok: false, body: null, retryAfter: null };
  const result = await callRegistry(API + path, sent, method, body, account);
  // The token was refused (revoked, expired, mistyped): it is no use keeping it.
  if (result.status === 401 && sent === token && token) {
    const why = sentence(problemText(result));
    // The API names its header; here the account is named at sign-in.
    const next = why.includes("X-Service-Account")
      ? " Sign in again with the token and your account's id under \u201cAccount id\u201d."
      : " Sign in with a valid token.";
    signOut("The registry did not accept this token: " + why + next);
  }
  return result;
}

function servicePath(subdomain, suffix) {
  return "/services/" + encodeURIComponent(subdomain) + (suffix || "");
}
