// ---- Managed signing. ----
function renderSigning() {
  const message = $("signing-message");
  if (svc.signing === undefined) {
    show(message, "Managed signing could not be read: " + problemText(svc.signingResult));
    signingAlert = "load";
    return;
  }
  if (signingAlert === "load") {
    clear(message);
    signingAlert = null;
  }
  $("signing-off").hidden = svc.signing !== null;
  $("signing").hidden = svc.signing === null;
  if (svc.signing === null) return;
  const s = svc.signing;
  facts($("signing-facts"), [
    ["Algorithm", s.algorithm],
    ["Rotation period", duration(s.rotationPeriodSeconds)],
    ["Longest token", duration(s.maxTokenSeconds)],
    ["Lead", duration(s.leadSeconds)],
    ["Next rotation", s.nextRotationAt ? timeNode(s.nextRotationAt) : "none scheduled: a rotation is in progress"],
  ]);
  const rows = document.createDocumentFragment();
  for (const k of Array.isArray(s.keys) ? s.keys : []) {
    rows.append(row([
      cell(code(k.kid)),
      k.state,
      k.algorithm,
      cell(timeNode(k.createdAt)),
      cell(timeNode(k.safeToSignAt, "not yet")),
      cell(timeNode(k.signingSince, "not yet")),
      cell(timeNode(k.lastSignedAt, "never")),
      cell(timeNode(k.withdrawAt)),
    ]));
  }
  $("signing-keys").replaceChildren(rows);
}

function askRotate() {
  clear($("signing-status"));
  $("rotate-confirm").hidden = false;
  $("rotate").setAttribute("aria-expanded", "true");
  $("rotate-yes").focus();
}

function cancelRotate() {
  $("rotate-confirm").hidden = true;
  $("rotate").setAttribute("aria-expanded", "false");
  $("rotate").focus();
}

// The button is never disabled on a guess of what the token may do: the API decides, and a
// refusal is shown with its reason.
async function confirmRotate() {
  if (!svc) return;
  const gen = generation;
  const subdomain = svc.subdomain;
  const before = new Set(svc.signing && Array.isArray(svc.signing.keys) ? svc.signing.keys.map((k) => k.kid) : []);
  $("rotate-confirm").hidden = true;
  $("rotate").setAttribute("aria-expanded", "false");
  $("rotate").focus();
  clear($("signing-message"));
  signingAlert = null;
  $("signing-status").textContent = "Rotating\u2026";
  // No poll meanwhile: its answer, from before the rotation, would be drawn after it.
  stopPolling();
  const result = await api("POST", servicePath(subdomain, "/signing/rotate"));
  if (gen !== generation) return;
  if (!result.ok) {
    clear($("signing-status"));
    show($("signing-message"), "Not rotated: " + problemText(result));
    signingAlert = "rotate";
    // The keys go on changing (a pending key turns safe): the view keeps following them.
    schedulePoll(gen);
    return;
  }
  const made = result.body && Array.isArray(result.body.keys) ? result.body.keys.filter((k) => !before.has(k.kid)) : [];
  $("signing-status").textContent = made.length
    ? "Rotation started: the new key " + made[0].kid + " is published (" + made[0].state + ")."
    : "Rotation started.";
  await refreshLive(gen);
}

async function refreshLive(gen) {
  stopPolling();
  const live = await fetchLive(svc.subdomain);
  if (gen !== generation || live.asked < liveDrawn) return;
  applyLive(live);
  renderLive();
  schedulePoll(gen);
}

// ---- Custom domain. ----
// Drawn when the service opens, and again when a poll's answer differs (service.js).
function renderDomain(result) {
  $("domain").hidden = true;
  $("domain-none").hidden = true;
  clear($("domain-message"));
  if (result.status === 404) {
    $("domain-none").hidden = false;
    return;
  }
  if (!result.ok || !result.body) {
    show($("domain-message"), "The custom domain could not be read: " + problemText(result));
    return;
  }
  const d = result.body;
  const entries = [["Domain", code(d.domain)], ["Status", d.status]];
  if (d.certificate) {
    entries.push(["Certificate", String(d.certificate.issuer ?? "") + ", valid until " + dateText(d.certificate.notAfter)]);
  }
  if (d.error) entries.push(["Error", String(d.error.code) + ": " + String(d.error.message)]);
  facts($("domain-facts"), entries);
  const rows = document.createDocumentFragment();
  for (const record of Array.isArray(d.records) ? d.records : []) {
    const button = el("button", "Copy " + record.type + " record", "secondary");
    button.type = "button";
    button.addEventListener("click", () => copyRecord(record));
    rows.append(row([record.type, cell(code(record.name)), cell(code(record.value)), cell(button)]));
  }
  $("domain-records").replaceChildren(rows);
  $("domain").hidden = false;
}

// Success is a status; a failure is an error, shown in the alert like every other.
async function copyRecord(record) {
  const status = $("domain-status");
  clear($("domain-message"));
  try {
    await navigator.clipboard.writeText(String(record.value));
    status.className = "message ok";
    status.textContent = "Copied the " + record.type + " record's value.";
  } catch (_) {
    clear(status);
    show($("domain-message"), "Copying is not allowed here: select the " + record.type + " record's value and copy it by hand.");
  }
}

// ---- Preflight. ----
function renderPreflight(result) {
  clear($("preflight-message"));
  if (!result.ok || !result.body || !result.body.clouds) {
    clear($("preflight-clouds"));
    show($("preflight-message"), "The preflight could not run: " + problemText(result));
    return;
  }
  const list = document.createDocumentFragment();
  for (const [name, title] of CLOUDS) {
    const cloud = result.body.clouds[name];
    if (!cloud) continue;
    const item = el("li");
    item.append(el("strong", title + ": "), el("span", cloud.ready ? "ready" : "not ready", "badge " + (cloud.ready ? "good" : "bad")));
    const findings = el("ul");
    for (const f of cloud.findings || []) {
      const line = el("li");
      line.append(el("span", f.severity + " ", "hint"), code(f.code), document.createTextNode(inert(": " + f.message +
        (f.pointer ? " (at " + f.pointer + ")" : ""))));
      findings.append(line);
    }
    if (findings.childElementCount) item.append(findings);
    list.append(item);
  }
  $("preflight-clouds").replaceChildren(list);
}
