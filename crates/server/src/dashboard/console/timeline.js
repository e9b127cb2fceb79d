// ---- The timeline (SVG), its table, and readiness. ----
const SPAN_LABEL = {
  // Not "safe": a row holds its spans' titles, and a pending key's row must not read as safe.
  published: "published, not yet ready to sign",
  safe: "safe to sign",
  signing: "signing",
  retiring: "retiring",
};

function readinessBody(kid) {
  const result = svc.readiness.get(kid);
  return result && result.ok && result.body ? result.body : null;
}

// What a key's readiness reads: `safe`, or `pending: ` and its reasons; null while unknown.
function readinessText(body) {
  if (!body) return null;
  if (body.safeToSign) return "safe";
  const pending = Array.isArray(body.pending) ? body.pending : [];
  return "pending: " + (pending.length ? pending.map(pendingReason).join("; ") : "unknown");
}

// Each key, uploaded or managed, with the times its spans start and end (ms, or null).
function keyModel() {
  const keys = new Map();
  for (const k of svc.keys) {
    const r = readinessBody(k.kid);
    keys.set(k.kid, {
      kid: String(k.kid),
      source: Array.isArray(k.sources) && k.sources.length ? k.sources.join(", ") : String(k.source ?? ""),
      state: String(k.state ?? ""),
      managed: false,
      published: ms(r && r.firstPublishedAt) ?? ms(k.firstPublishedAt),
      safe: ms(r && r.safeToSignAt),
      signingSince: null,
      retiring: ms(k.retiredAt),
      end: ms(k.publishedUntil),
    });
  }
  const managed = svc.signing && Array.isArray(svc.signing.keys) ? svc.signing.keys : [];
  managed.forEach((m) => {
    let key = keys.get(m.kid);
    if (!key) {
      key = { kid: String(m.kid), source: "managed", published: ms(m.createdAt), safe: null, retiring: null, end: null };
      keys.set(m.kid, key);
    }
    key.managed = true;
    key.state = String(m.state);
    key.safe = key.safe ?? ms(m.safeToSignAt);
    key.signingSince = ms(m.signingSince);
    key.end = ms(m.withdrawAt) ?? key.end;
    key.lastSignedAt = m.lastSignedAt;
    // A retiring key's `retiredAt` (GET …/keys) is when it stopped signing; the others are not
    // retiring.
    if (m.state !== "retiring") {
      key.retiring = null;
    }
  });
  // Keys that left the key set: their rows end where they were withdrawn. A managed key's
  // life (safe, signing, retiring) is what managed signing remembers of it.
  const lives = new Map();
  for (const m of (svc.signing && Array.isArray(svc.signing.withdrawn)) ? svc.signing.withdrawn : []) {
    lives.set(m.kid, m);
  }
  const gone = [...(svc.withdrawn || [])];
  for (const m of lives.values()) {
    if (!gone.some((w) => w.kid === m.kid)) {
      gone.push({ kid: m.kid, source: "managed", firstPublishedAt: m.createdAt, withdrawnAt: m.withdrawnAt });
    }
  }
  for (const w of gone) {
    if (keys.has(w.kid)) continue;
    const life = lives.get(w.kid);
    const end = ms(w.withdrawnAt);
    const until = life ? ms(life.signingUntil) : null;
    keys.set(w.kid, {
      kid: String(w.kid),
      source: String(w.source ?? ""),
      state: "withdrawn",
      managed: Boolean(life),
      published: ms(w.firstPublishedAt),
      safe: life ? ms(life.safeToSignAt) : null,
      signingSince: life ? ms(life.signingSince) : null,
      // Signing until the withdrawal itself (a compromise) leaves no time retiring.
      retiring: life ? (until !== null && until < end ? until : null) : ms(w.retiredAt),
      end,
    });
  }
  return [...keys.values()];
}

// A key's spans, each state until the next begins (or its withdrawal, or now).
function keySpans(key, now) {
  const gone = key.end !== null && key.end <= now ? key.end : null;
  const first = (...times) => times.find((t) => t !== null && t !== undefined) ?? now;
  const spans = [];
  const add = (kind, from, to) => {
    if (from !== null && from !== undefined && to > from) spans.push({ kind, from, to });
  };
  add("published", key.published, first(key.safe, key.retiring, gone));
  // An uploaded key signs outside the registry: once safe, it may sign until it retires.
  add("safe", key.safe, first(key.managed ? key.signingSince : null, key.retiring, gone));
  if (key.managed) add("signing", key.signingSince, first(key.retiring, gone));
  add("retiring", key.retiring, first(gone));
  return spans;
}

// Every agent that fetched the key set, and every verifier readiness names.
function verifierModel() {
  const rows = new Map();
  const entry = (agent) => {
    if (!rows.has(agent)) rows.set(agent, { agent, count: 0, last: null, marks: [], verifierOf: [] });
    return rows.get(agent);
  };
  for (const a of (svc.history && svc.history.agents) || []) {
    const r = entry(a.agent);
    r.count += a.count;
    r.last = max(r.last, a.last);
    r.marks.push(...a.marks);
  }
  for (const [kid] of svc.readiness) {
    const body = readinessBody(kid);
    for (const v of (body && body.verifiers) || []) {
      const r = entry(String(v.agent ?? ""));
      r.verifierOf.push({ kid, fetched: Boolean(v.fetchedSinceKey) });
      const t = ms(v.lastFetchedAt);
      r.last = max(r.last, t);
      if (t !== null && r.marks.length === 0) r.marks.push({ at: t, count: 1 });
    }
  }
  return [...rows.values()].sort((a, b) => a.agent.localeCompare(b.agent));
}

function agentName(agent) {
  return agent === "" ? "(no User-Agent)" : agent;
}

function windowMs() {
  return (Number($("timeline-window").value) || 86400) * 1000;
}

function windowLabel() {
  const select = $("timeline-window");
  return select.options[select.selectedIndex] ? select.options[select.selectedIndex].text : "24 hours";
}

// A row's label, cut to the room there is (the full text in its tooltip).
function label(text, x, y, room) {
  const fits = Math.max(8, Math.floor(room / 7));
  const shown = text.length > fits ? text.slice(0, fits - 1) + "\u2026" : text;
  return titled(svgEl("text", { x, y }, shown), text);
}

// Drawn at the box's own width, one SVG unit a CSS pixel, so that the text keeps the page's
// size from a phone to a desktop; redrawn on resize.
function drawTimeline() {
  // Nothing to draw before the service's first answers (a resize while it loads).
  if (!svc || !svc.keysResult) return;
  const svg = $("timeline");
  const width = Math.max(280, Math.floor($("timeline-box").clientWidth || 800));
  const now = Date.now();
  const span = windowMs();
  const start = now - span;
  const pad = 10;
  const plot = width - 2 * pad;
  const x = (t) => pad + ((Math.min(now, Math.max(start, t)) - start) / span) * plot;
  // A key withdrawn before the window has nothing to draw in it.
  const keys = keyModel().filter((k) => k.state !== "withdrawn" || k.end >= start);
  const agents = verifierModel();
  const ROW = 40;
  const BAR = 14;
  const AXIS = 24;
  const GROUP = 24;
  const height = AXIS + GROUP + Math.max(1, keys.length) * ROW + GROUP + Math.max(1, agents.length) * ROW + 6;
  const parts = document.createDocumentFragment();

  // The axis: a few times across, with grid lines down through the rows.
  const ticks = Math.min(8, Math.max(2, Math.floor(plot / 130)));
  const format = span <= 86400 * 1000 ? clockTime : dayTime;
  for (let i = 0; i <= ticks; i += 1) {
    const t = start + (span * i) / ticks;
    const tx = x(t);
    parts.append(svgEl("line", { class: "grid", x1: tx, x2: tx, y1: AXIS - 6, y2: height }));
    const anchor = i === 0 ? "start" : i === ticks ? "end" : "middle";
    parts.append(svgEl("text", { class: "axis", x: tx, y: 14, "text-anchor": anchor }, i === ticks ? "now" : format.format(t)));
  }

  let y = AXIS;
  parts.append(svgEl("text", { class: "group", x: pad, y: y + 16 }, "Keys"));
  y += GROUP;
  if (keys.length === 0) {
    parts.append(svgEl("text", { class: "axis", x: pad, y: y + 14 }, svc.keysResult.ok ? "No key is published." : "The keys could not be read."));
  }
  for (const key of keys) {
    const g = svgEl("g", { "data-kid": key.kid });
    // The row says its key's readiness too, at its right end (cut to the room left; the whole
    // sentence in its tooltip): the row is where a reader, and a test, looks for the key.
    const ready = readinessText(readinessBody(key.kid));
    const readyRoom = ready === null ? 0 : Math.min(Math.floor(plot / 2), ready.length * 7 + 8);
    g.append(label(key.kid + " \u00b7 " + key.state + " \u00b7 " + key.source, pad, y + 12, plot - readyRoom));
    if (ready !== null) {
      const fits = Math.max(8, Math.floor(readyRoom / 7));
      const shown = ready.length > fits ? ready.slice(0, fits - 1) + "\u2026" : ready;
      const state = ready === "safe" ? "is-safe" : "is-pending";
      const mark = svgEl("text", { class: "readiness-mark " + state, x: pad + plot, y: y + 12, "text-anchor": "end" }, shown);
      g.append(shown === ready ? mark : titled(mark, ready));
    }
    g.append(svgEl("rect", { class: "track", x: pad, y: y + 17, width: plot, height: BAR, rx: 2 }));
    for (const s of keySpans(key, now)) {
      if (s.to <= start || s.from >= now) continue;
      const x1 = x(s.from);
      const rect = svgEl("rect", { class: s.kind, x: x1, y: y + 17, width: Math.max(2, x(s.to) - x1), height: BAR });
      g.append(titled(rect, key.kid + ": " + SPAN_LABEL[s.kind] + " from " + dateTime.format(s.from) +
        (s.to >= now ? " until now" : " to " + dateTime.format(s.to))));
    }
    if (key.end !== null && key.end >= start && key.end <= now) {
      const wx = x(key.end);
      g.append(titled(svgEl("line", { class: "withdrawn", x1: wx, x2: wx, y1: y + 14, y2: y + 20 + BAR }),
        key.kid + ": withdrawn at " + dateTime.format(key.end)));
    }
    parts.append(g);
    y += ROW;
  }
  if (keys.length === 0) y += ROW;

  parts.append(svgEl("text", { class: "group", x: pad, y: y + 16 }, "Verifiers (key set fetches)"));
  y += GROUP;
  if (agents.length === 0) parts.append(svgEl("text", { class: "axis", x: pad, y: y + 14 }, "No fetch of the key set seen."));
  for (const agent of agents) {
    const g = svgEl("g", { "data-agent": agent.agent });
    const verifier = agent.verifierOf.length ? " \u00b7 verifier" : "";
    g.append(label(agentName(agent.agent) + " \u00b7 " + agent.count + " fetches" + verifier, pad, y + 12, plot));
    g.append(svgEl("rect", { class: "track", x: pad, y: y + 21, width: plot, height: 6, rx: 3 }));
    for (const mark of agent.marks) {
      if (mark.at < start || mark.at > now) continue;
      const radius = Math.min(8, 3 + Math.log2(1 + mark.count));
      g.append(titled(svgEl("circle", { class: "fetch", cx: x(mark.at), cy: y + 24, r: radius.toFixed(1) }),
        agentName(agent.agent) + ": " + mark.count + (mark.count === 1 ? " fetch" : " fetches") + ", the last at " + dateTime.format(mark.at)));
    }
    parts.append(g);
    y += ROW;
  }
  parts.append(svgEl("line", { class: "now", x1: x(now), x2: x(now), y1: AXIS - 6, y2: height }));

  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("height", String(height));
  svg.setAttribute("aria-label", "Key timeline of " + svc.subdomain + " over the last " + windowLabel() + ": " +
    keys.length + (keys.length === 1 ? " key, " : " keys, ") + agents.length +
    (agents.length === 1 ? " verifier" : " verifiers") + ". The tables below hold the same facts.");
  svg.dataset.fetches = svc.history ? svc.history.source : "none";
  svg.replaceChildren(parts);
}

function renderTimelineTables() {
  const keyRows = document.createDocumentFragment();
  for (const key of keyModel()) {
    const iso = (t) => (t === null || t === undefined ? null : new Date(t).toISOString());
    keyRows.append(row([
      cell(code(key.kid)),
      key.source,
      key.state,
      cell(timeNode(iso(key.published))),
      // A withdrawn key's readiness is no longer asked: when it was safe is not known.
      cell(timeNode(iso(key.safe), key.state === "withdrawn" ? "not known" : "not yet")),
      cell(key.managed ? timeNode(iso(key.signingSince), "not yet") : null),
      cell(timeNode(iso(key.retiring))),
      cell(timeNode(iso(key.end))),
    ]));
  }
  $("timeline-keys-body").replaceChildren(keyRows);
  const span = svc.history && svc.history.source === "history" ? "8 days" : "24 hours";
  const agentRows = document.createDocumentFragment();
  for (const agent of verifierModel()) {
    const of = agent.verifierOf.map((v) => v.kid + (v.fetched ? " (fetched since)" : " (not fetched since)")).join("; ");
    agentRows.append(row([
      agentName(agent.agent),
      agent.count + " in " + span,
      cell(timeNode(agent.last === null ? null : new Date(agent.last).toISOString(), "never")),
      of,
    ]));
  }
  $("timeline-verifiers-body").replaceChildren(agentRows);
}

function pendingReason(p) {
  if (p.reason === "verifier") return "verifier " + agentName(String(p.agent ?? ""));
  if (p.reason === "lead" || p.reason === "purge") return p.reason;
  return String(p.message || p.reason);
}

function renderReadiness() {
  const items = document.createDocumentFragment();
  const problems = [];
  for (const key of svc.keys) {
    const item = el("li");
    // Not `data-kid`: that names the key's one row, the timeline's.
    item.dataset.readinessOf = key.kid;
    item.append(code(key.kid), " ");
    const result = svc.readiness.get(key.kid);
    const state = el("span", null, "readiness");
    const body = readinessBody(key.kid);
    if (body) {
      const pending = Array.isArray(body.pending) ? body.pending : [];
      state.textContent = inert(readinessText(body));
      state.classList.add(body.safeToSign ? "is-safe" : "is-pending");
      item.append(state);
      item.append(el("span", " (" + key.state + (body.safeToSignAt ? ", safe since " + dateText(body.safeToSignAt) : "") + ")", "hint"));
      if (!body.safeToSign && pending.length) {
        const why = el("ul");
        for (const p of pending) why.append(el("li", p.message || pendingReason(p)));
        item.append(why);
      }
    } else {
      state.textContent = "unknown";
      item.append(state);
      problems.push(key.kid + ": " + problemText(result));
    }
    items.append(item);
  }
  if (!svc.keysResult.ok) problems.push("the keys could not be read: " + problemText(svc.keysResult));
  else if (svc.keys.length === 0) items.append(el("li", "No key is published.", "muted"));
  $("readiness").replaceChildren(items);
  if (problems.length) show($("readiness-message"), "The readiness of some keys could not be read:", problems);
  else clear($("readiness-message"));
}
