// ---- One service. ----
// What the open service's calls answered, kept to redraw (another window, a resize) and to
// poll. `signing`: undefined when unknown, null when off. `readiness`: kid → the call's result.
let svc = null;
let pollTimer = null;
let signingAlert = null;
// The 8 days of hourly fetches (`…/fetches/history`); a registry without that call answers
// 404, and the page falls back to the last 24 hours' agents of `…/fetches`.
let historyServed = true;

function stopPolling() {
  clearTimeout(pollTimer);
  pollTimer = null;
}

function resetService(subdomain) {
  svc = { subdomain, keys: [], readiness: new Map(), signing: undefined, history: null, drawn: {}, panelsAskedAt: Date.now() };
  $("service-heading").textContent = inert(subdomain);
  for (const id of [
    "service-title", "service-message", "service-issuers", "service-created", "timeline",
    "timeline-message", "timeline-note", "timeline-live", "timeline-keys-body",
    "timeline-verifiers-body", "readiness", "readiness-message", "signing-message",
    "signing-facts", "signing-keys", "signing-status", "domain-message", "domain-facts",
    "domain-records", "domain-status", "preflight-message", "preflight-clouds",
  ]) {
    clear($(id));
  }
  signingAlert = null;
  $("service-panels").hidden = false;
  $("signing").hidden = true;
  $("signing-off").hidden = true;
  $("domain").hidden = true;
  $("domain-none").hidden = true;
  $("rotate-confirm").hidden = true;
  $("rotate").setAttribute("aria-expanded", "false");
}

async function loadService(subdomain) {
  const gen = generation;
  resetService(subdomain);
  const [service, live, domain, preflight] = await Promise.all([
    api("GET", servicePath(subdomain)),
    fetchLive(subdomain),
    api("GET", servicePath(subdomain, "/domain")),
    api("GET", servicePath(subdomain, "/preflight")),
  ]);
  if (gen !== generation) return;
  if (service.status === 404) {
    $("service-panels").hidden = true;
    show($("service-message"), "There is no service \u201c" + subdomain + "\u201d that this account may see: " + problemText(service));
    return;
  }
  renderServiceHeader(service, domain);
  applyLive(live);
  renderLive();
  redrawIfChanged("domain", domain, renderDomain);
  redrawIfChanged("preflight", preflight, renderPreflight);
  schedulePoll(gen);
}

// The custom domain and the preflight are asked again at the polls' quiet pace (a domain turns
// active, a first upload makes the clouds' checks pass), and drawn again only when their answer changed:
// a redraw would take the focus off their buttons. No answer keeps what is drawn.
function redrawIfChanged(panel, result, render) {
  if (svc.drawn[panel] !== undefined && transient(result)) return;
  const seen = result.status + " " + JSON.stringify(result.body);
  if (svc.drawn[panel] === seen) return;
  svc.drawn[panel] = seen;
  render(result);
}

// The calls that change while a rotation goes on: keys (then each key's readiness), signing
// and the fetch history, all at once.
// Each reading of the live parts is numbered: an answer older than one already drawn (a poll
// that was in flight while a rotation's own reading came back) is dropped.
let liveAsked = 0;
let liveDrawn = 0;

async function fetchLive(subdomain) {
  const asked = ++liveAsked;
  const keysAndReadiness = api("GET", servicePath(subdomain, "/keys")).then(async (keys) => {
    const list = keys.ok && keys.body && Array.isArray(keys.body.keys) ? keys.body.keys : [];
    const readiness = await Promise.all(list.map((key) =>
      api("GET", servicePath(subdomain, "/keys/" + encodeURIComponent(key.kid) + "/readiness"))));
    return { keys, readiness: list.map((key, i) => [key.kid, readiness[i]]) };
  });
  const [both, signing, history] = await Promise.all([
    keysAndReadiness,
    api("GET", servicePath(subdomain, "/signing")),
    fetchHistory(subdomain),
  ]);
  return { asked, keys: both.keys, readiness: both.readiness, signing, history };
}

async function fetchHistory(subdomain) {
  if (historyServed) {
    const result = await api("GET", servicePath(subdomain, "/fetches/history"));
    if (result.ok && result.body && Array.isArray(result.body.agents)) {
      return { source: "history", result, agents: result.body.agents.map(historyAgent) };
    }
    if (result.status !== 404) return { source: "history", result, agents: [] };
  }
  const result = await api("GET", servicePath(subdomain, "/fetches"));
  if (!(result.ok && result.body && Array.isArray(result.body.documents))) {
    return { source: "fetches", result, agents: [] };
  }
  // The history call is missing (the service answered this one): do not ask for it again.
  historyServed = false;
  return { source: "fetches", result, agents: fetchAgents(result.body.documents) };
}

function historyAgent(agent) {
  const hours = Array.isArray(agent.hours) ? agent.hours : [];
  return {
    agent: String(agent.agent ?? ""),
    count: Number(agent.count) || 0,
    last: ms(agent.lastFetchedAt),
    // A mark at the hour's last fetch (the middle of the hour when it is not known).
    marks: hours.map((h) => ({
      at: ms(h.lastFetchedAt) ?? (ms(h.hour) === null ? null : ms(h.hour) + HOUR_MS / 2),
      count: Number(h.count) || 0,
    })).filter((m) => m.at !== null),
  };
}

// `…/fetches`: the key set's agents of the last 24 hours, under every issuer, one mark each.
function fetchAgents(documents) {
  const agents = new Map();
  for (const doc of documents) {
    if (doc.path !== "/openid/v1/jwks") continue;
    for (const a of doc.agents || []) {
      const name = String(a.agent ?? "");
      const entry = agents.get(name) || { agent: name, count: 0, last: null, marks: [] };
      entry.count += Number(a.count) || 0;
      entry.last = max(entry.last, ms(a.lastFetchedAt));
      if (ms(a.lastFetchedAt) !== null) entry.marks.push({ at: ms(a.lastFetchedAt), count: Number(a.count) || 0 });
      agents.set(name, entry);
    }
  }
  return [...agents.values()];
}

function applyLive(live) {
  liveDrawn = Math.max(liveDrawn, live.asked || 0);
  svc.keysResult = live.keys;
  svc.keys = live.keys.ok && live.keys.body && Array.isArray(live.keys.body.keys) ? live.keys.body.keys : [];
  svc.withdrawn = live.keys.ok && live.keys.body && Array.isArray(live.keys.body.withdrawn) ? live.keys.body.withdrawn : [];
  svc.readiness = new Map(live.readiness);
  if (live.signing.status === 404) svc.signing = null;
  else if (live.signing.ok && live.signing.body) svc.signing = live.signing.body;
  else svc.signing = undefined;
  svc.signingResult = live.signing;
  svc.history = live.history;
}

function renderLive() {
  const problems = [];
  if (!svc.keysResult.ok) problems.push("Keys: " + problemText(svc.keysResult));
  if (svc.history && !svc.history.result.ok) problems.push("Fetches: " + problemText(svc.history.result));
  if (problems.length) show($("timeline-message"), "Part of the timeline could not be read:", problems);
  else clear($("timeline-message"));
  $("timeline-note").textContent = svc.history && svc.history.source === "fetches"
    ? "Fetches of the last 24 hours only: this registry does not keep the hourly history."
    : "";
  drawTimeline();
  renderTimelineTables();
  renderReadiness();
  renderSigning();
}

function renderServiceHeader(service, domain) {
  if (!service.ok || !service.body) {
    show($("service-message"), "The service could not be read: " + problemText(service));
    return;
  }
  const s = service.body;
  // Opened by id, or in another case: the service's own subdomain names it everywhere after.
  if (s.subdomain && s.subdomain !== svc.subdomain) {
    svc.subdomain = s.subdomain;
    $("service-heading").textContent = inert(s.subdomain);
    document.title = s.subdomain + ": registry console";
  }
  $("service-title").textContent = inert([s.title, s.description].filter(Boolean).join(" \u2014 "));
  $("service-issuers").replaceChildren(...issuers(s, domain.ok ? domain.body : null).map((url) => item(code(url))));
  $("service-created").replaceChildren(timeNode(s.createdAt));
}

// ---- Live updates: the open view asks again every few seconds and redraws in place (focus
// stays where it is): every 3 s while a key waits to be safe or a managed rotation is under way,
// every 5 s otherwise, so that a rotation begun elsewhere (an upload, `registry sync`, the
// signing schedule) shows too. ----
function underWay() {
  if (!svc) return false;
  for (const key of svc.keys) {
    if (key.state !== "current") continue;
    const result = svc.readiness.get(key.kid);
    if (result && result.ok && result.body && result.body.safeToSign === false) return true;
  }
  return Boolean(svc.signing && Array.isArray(svc.signing.keys) && svc.signing.keys.some((k) => k.state === "next"));
}

function schedulePoll(gen) {
  stopPolling();
  if (gen !== generation) return;
  const pending = underWay();
  $("timeline-live").textContent = pending
    ? "A key is not safe to sign with yet: this view updates every few seconds."
    : "";
  pollTimer = setTimeout(() => poll(gen), pending ? POLL_MS : QUIET_POLL_MS);
}

// No answer, or a failing server: keep what is drawn and ask again.
function transient(result) {
  return result.status === 0 || result.status >= 500;
}

async function poll(gen) {
  if (gen !== generation || !svc) return;
  // A hidden tab asks nothing; it asks again once shown (start.js).
  if (document.hidden) return;
  const subdomain = svc.subdomain;
  // The panels change seldom: asked at the quiet pace, even while a key is pending.
  const panels = Date.now() - svc.panelsAskedAt >= QUIET_POLL_MS;
  if (panels) svc.panelsAskedAt = Date.now();
  const [live, domain, preflight] = await Promise.all([
    fetchLive(subdomain),
    panels ? api("GET", servicePath(subdomain, "/domain")) : null,
    panels ? api("GET", servicePath(subdomain, "/preflight")) : null,
  ]);
  if (gen !== generation || live.asked < liveDrawn) return;
  if (transient(live.keys)) {
    show($("timeline-message"), "The registry did not answer (" + problemText(live.keys) + "); asking again in a few seconds.");
    pollTimer = setTimeout(() => poll(gen), POLL_MS);
    return;
  }
  applyLive(live);
  renderLive();
  if (domain) redrawIfChanged("domain", domain, renderDomain);
  if (preflight) redrawIfChanged("preflight", preflight, renderPreflight);
  schedulePoll(gen);
}
