// The anonymous service's dashboard. Everything from the server or the address is rendered with
// textContent (or as an input's value), never as HTML: the subdomain in the path is untrusted.
(() => {
  const $ = (id) => document.getElementById(id);
  const MARKER = "/dashboard/anonymous/";
  const RESYNC_MS = 5 * 60 * 1000;

  // ---- Where we are: the API sits at the path prefix the dashboard is served under. ----
  const at = location.pathname.lastIndexOf(MARKER);
  const apiBase = at >= 0 ? location.pathname.slice(0, at) : "";
  let subdomain = "";
  try {
    subdomain = at >= 0 ? decodeURIComponent(location.pathname.slice(at + MARKER.length)) : "";
  } catch (_) {
    subdomain = "";
  }
  const serviceUrl = apiBase + "/services/" + encodeURIComponent(subdomain);

  // ---- The secret. ----
  // It arrives in the fragment, which browsers never send to a server nor put in a Referer.
  // It is removed from the address bar (and from this history entry) at once, so it is not
  // left on screen, in screenshots or in the back/forward list.
  //
  // It is then kept in memory and in sessionStorage. Why sessionStorage: the secret is returned
  // once only, so if it lived in memory alone a reload would lose the only way to manage the
  // service. sessionStorage is per tab and per origin, is never sent to a server, and is
  // cleared when the tab closes (localStorage would outlive it, so it is not used). What could
  // still read it is script injected into this origin, which the page's Content-Security-Policy
  // (only this hashed script runs) and textContent-only rendering are there to prevent.
  const storageKey = "registry.anonymous-secret." + subdomain;
  let secret = null;

  function store(value) {
    try {
      if (value) sessionStorage.setItem(storageKey, value);
      else sessionStorage.removeItem(storageKey);
    } catch (_) {
      // Storage disabled: the secret stays in memory only and a reload needs the link again.
    }
  }

  function takeSecret() {
    let fromFragment = null;
    if (location.hash.length > 1) {
      fromFragment = new URLSearchParams(location.hash.slice(1)).get("secret");
      history.replaceState(null, "", location.pathname + location.search);
    }
    if (fromFragment) {
      store(fromFragment);
      return fromFragment;
    }
    try {
      return sessionStorage.getItem(storageKey);
    } catch (_) {
      return null;
    }
  }

  // ---- Messages. ----
  function show(el, kind, text, items) {
    el.className = "message " + kind;
    el.replaceChildren(document.createTextNode(inert(text)));
    if (items && items.length) {
      const list = document.createElement("ul");
      for (const item of items) {
        const li = document.createElement("li");
        li.textContent = inert(item);
        list.append(li);
      }
      el.append(list);
    }
  }

  function clear(el) {
    el.className = "message";
    el.replaceChildren();
  }

  function problemText(result) {
    const body = result.body;
    if (body && typeof body.detail === "string" && body.detail) return body.detail;
    if (body && typeof body.title === "string" && body.title) return body.title;
    return "the registry answered " + result.status;
  }

  // ---- Talking to the API (shared/request.js). ----
  function api(method, suffix, body) {
    return callRegistry(serviceUrl + suffix, secret, method, body);
  }

  // ---- States that end the page's use. ----
  let countdownTimer = null;
  let resyncTimer = null;

  function stopCountdown() {
    clearInterval(countdownTimer);
    countdownTimer = null;
  }

  function stopTimers() {
    stopCountdown();
    clearInterval(resyncTimer);
    resyncTimer = null;
  }

  function homeLink(text) {
    const link = document.createElement("a");
    link.href = apiBase + "/";
    link.textContent = text;
    return link;
  }

  function lockOut(text, forgetSecret) {
    stopTimers();
    if (forgetSecret) {
      secret = null;
      store(null);
    }
    $("loading").hidden = true;
    $("service").hidden = true;
    const message = $("page-message");
    show(message, "error", text + " ");
    message.append(homeLink("Create a new anonymous service."));
  }

  // Handles what any call can answer; returns true when the page can go on.
  function survivable(result, where) {
    switch (result.status) {
      case 401:
        // A secret the service does not take: a service that is gone answers 404 instead.
        lockOut("The secret in this link is not valid for this service: the link was cut short " +
          "(check that everything after #secret= was copied).", true);
        return false;
      case 404:
        lockOut("There is no service \u201c" + subdomain + "\u201d any more. Anonymous services " +
          "are deleted when they expire (at most 24 hours after creation) or when their owner " +
          "deletes them. Check the link, or start again.", true);
        return false;
      case 429:
        show(where, "error", "Too many attempts from your address. Wait " +
          (result.retryAfter ? result.retryAfter + " seconds" : "a little") + " and try again.");
        return false;
      case 0:
        show(where, "error", "The registry cannot be reached. Check your connection and try again.");
        return false;
      default:
        return true;
    }
  }

  // ---- The service and its countdown. ----
  let current = null;
  let deadline = 0;

  function formatSeconds(total) {
    const h = Math.floor(total / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = total % 60;
    const pad = (n) => String(n).padStart(2, "0");
    return (h > 0 ? h + " h " : "") + pad(m) + " min " + pad(s) + " s";
  }

  function tick() {
    // A monotonic clock: changing the computer's clock does not change the countdown.
    const left = Math.max(0, Math.ceil((deadline - performance.now()) / 1000));
    const el = $("countdown");
    el.textContent = formatSeconds(left);
    el.dataset.seconds = String(left);
    if (left === 0 && countdownTimer) {
      stopCountdown();
      setTimeout(confirmExpiry, 1000);
    }
  }

  // remainingSeconds is rounded down, so the countdown may reach zero up to a second early:
  // the server decides when the service is gone.
  async function confirmExpiry() {
    if (!secret) return;
    const result = await api("GET", "");
    if (result.ok && result.body) {
      if (Number(result.body.remainingSeconds) > 0) render(result.body);
      else setTimeout(confirmExpiry, 1000);
    } else if (result.status === 401 || result.status === 404) {
      expired();
    } else {
      setTimeout(confirmExpiry, 5000);
    }
  }

  function expired() {
    stopTimers();
    secret = null;
    store(null);
    for (const control of $("service").querySelectorAll("button, input, textarea")) {
      control.disabled = true;
    }
    show($("expired-message"), "error", "This service has expired: it and its published " +
      "documents are deleted. ");
    $("expired-message").append(homeLink("Create a new anonymous service."));
    // Every control is now disabled: bring the reason into view wherever the reader was.
    $("expired-message").scrollIntoView({ block: "center" });
  }

  function render(service) {
    current = service;
    const name = service.title || service.subdomain;
    document.title = inert(name) + ": registry";
    $("service-heading").textContent = inert(name);
    $("service-description").textContent = inert(service.description || "");
    $("service-description").hidden = !service.description;
    $("subdomain").textContent = inert(service.subdomain);
    $("issuer").textContent = inert(service.issuer);
    $("jwks-url").textContent = inert(service.issuer + "/openid/v1/jwks");
    const expires = $("expires-at");
    expires.dateTime = service.expiresAt;
    const when = new Date(service.expiresAt);
    expires.textContent = isNaN(when.getTime())
      ? service.expiresAt
      : when.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "long" });
    expires.title = service.expiresAt;
    deadline = performance.now() + Number(service.remainingSeconds) * 1000;
    if (!countdownTimer && secret) countdownTimer = setInterval(tick, 1000);
    tick();
  }

  async function load(first) {
    const result = await api("GET", "");
    if (!survivable(result, $("page-message"))) return;
    if (!result.ok || !result.body) {
      show($("page-message"), "error", "The service could not be loaded: " + problemText(result) + ".");
      return;
    }
    render(result.body);
    if (first) {
      $("title-input").value = result.body.title || "";
      $("description-input").value = result.body.description || "";
      $("loading").hidden = true;
      $("service").hidden = false;
    }
  }

  // ---- Title and description. ----
  async function saveDetails(event) {
    event.preventDefault();
    const message = $("details-message");
    const title = $("title-input").value.trim();
    const description = $("description-input").value.trim();
    const body = { description: description || null };
    if (title) {
      body.title = title;
    } else if (current && current.title) {
      $("title-input").setAttribute("aria-invalid", "true");
      show(message, "error", "A title can be changed, but not removed.");
      return;
    }
    $("title-input").removeAttribute("aria-invalid");
    const button = $("details-save");
    button.disabled = true;
    const result = await api("PATCH", "", body);
    button.disabled = false;
    if (!survivable(result, message)) return;
    if (result.ok && result.body) {
      render(result.body);
      show(message, "ok", "Saved.");
    } else {
      const errors = (result.body && Array.isArray(result.body.errors)) ? result.body.errors : [];
      show(message, "error", "Not saved: " + problemText(result),
        errors.map((e) => String(e.message)));
    }
  }

  // ---- Publishing. ----
  const fields = [
    { prefix: "/openidConfiguration", input: "discovery-input", errors: "discovery-errors" },
    { prefix: "/jwks", input: "jwks-input", errors: "jwks-errors" },
  ];

  function fieldError(field, pointer, text) {
    const li = document.createElement("li");
    if (pointer) {
      const code = document.createElement("code");
      code.textContent = inert(pointer);
      li.append(code, document.createTextNode(" "));
    }
    li.append(document.createTextNode(inert(text)));
    $(field.errors).append(li);
    $(field.input).setAttribute("aria-invalid", "true");
  }

  function clearFieldErrors() {
    for (const field of fields) {
      $(field.errors).replaceChildren();
      $(field.input).removeAttribute("aria-invalid");
    }
  }

  async function upload(event) {
    event.preventDefault();
    const message = $("upload-message");
    clear(message);
    clearFieldErrors();
    const parsed = [];
    for (const field of fields) {
      const text = $(field.input).value.trim();
      if (!text) {
        fieldError(field, null, "Paste a JSON document here.");
        continue;
      }
      try {
        parsed.push(JSON.parse(text));
      } catch (e) {
        fieldError(field, null, "This is not valid JSON: " + e.message);
      }
    }
    if (parsed.length !== fields.length) {
      show(message, "error", "Nothing was sent: fix the documents first.");
      return;
    }
    const button = $("upload");
    button.disabled = true;
    const result = await api("PUT", "/config", { openidConfiguration: parsed[0], jwks: parsed[1] });
    button.disabled = false;
    if (!survivable(result, message)) return;
    if (result.ok && result.body) {
      const warnings = Array.isArray(result.body.warnings) ? result.body.warnings.map(String) : [];
      if (warnings.length) {
        show(message, "warn", "Published, with warnings:", warnings);
      } else {
        show(message, "ok", "Published. The issuer URL serves the documents now.");
      }
      showPublished(result.body);
      if (!$("keys").hidden) refreshKeys();
      return;
    }
    const errors = (result.body && Array.isArray(result.body.errors)) ? result.body.errors : [];
    const elsewhere = [];
    for (const error of errors) {
      const pointer = typeof error.pointer === "string" ? error.pointer : "";
      const text = String(error.message);
      const field = fields.find((f) => pointer === f.prefix || pointer.startsWith(f.prefix + "/"));
      if (field) fieldError(field, pointer, text);
      else elsewhere.push((pointer ? pointer + " " : "") + text);
    }
    const count = errors.length;
    show(message, "error", "Not published: " + (count
      ? count + (count === 1 ? " problem" : " problems") + " found, shown next to the documents."
      : problemText(result) + "."), elsewhere);
  }

  function link(el, url) {
    let ok = false;
    try {
      const parsed = new URL(url);
      ok = parsed.protocol === "https:" || parsed.protocol === "http:";
    } catch (_) {
      ok = false;
    }
    el.textContent = inert(url);
    if (ok) el.href = url;
    else el.removeAttribute("href");
  }

  function showPublished(config) {
    const issuer = current ? current.issuer : "";
    link($("discovery-link"), issuer + "/.well-known/openid-configuration");
    link($("jwks-link"), issuer + "/openid/v1/jwks");
    $("published-discovery").textContent = inert(JSON.stringify(config.openidConfiguration, null, 2));
    $("published-jwks").textContent = inert(JSON.stringify(config.jwks, null, 2));
    $("published").hidden = false;
  }

  // A 404 from /config means "nothing published" while the service exists, or the service is
  // gone: ask the service itself which.
  async function serviceStillThere(message) {
    const check = await api("GET", "");
    return survivable(check, message);
  }

  async function refreshPublished() {
    const message = $("published-message");
    clear(message);
    const result = await api("GET", "/config");
    if (result.status === 404) {
      if (await serviceStillThere(message)) {
        $("published").hidden = true;
        show(message, "ok", "Nothing is published yet.");
      }
      return;
    }
    if (!survivable(result, message)) return;
    if (result.ok && result.body) {
      showPublished(result.body);
      show(message, "ok", "This is what the issuer URL serves.");
    } else {
      show(message, "error", "Could not read the published documents: " + problemText(result) + ".");
    }
  }

  async function removePublished() {
    const message = $("published-message");
    clear(message);
    const result = await api("DELETE", "/config");
    if (result.status === 404) {
      if (await serviceStillThere(message)) {
        $("published").hidden = true;
        show(message, "ok", "Nothing was published.");
      }
      return;
    }
    if (!survivable(result, message)) return;
    if (result.ok) {
      $("published").hidden = true;
      show(message, "ok", "Removed. The issuer URLs answer 404 until you publish again.");
    } else {
      show(message, "error", "Not removed: " + problemText(result) + ".");
    }
  }

  // ---- Keys and the wiring guide. ----
  function dateText(value) {
    if (typeof value !== "string") return "";
    const date = new Date(value);
    return Number.isNaN(date.getTime()) ? value : date.toLocaleString();
  }

  function renderKeys(keys) {
    const body = $("keys-body");
    body.replaceChildren();
    for (const key of keys) {
      const row = document.createElement("tr");
      const cells = [key.kid, key.kty, key.state, dateText(key.firstPublishedAt), dateText(key.publishedUntil)];
      for (const text of cells) {
        const cell = document.createElement("td");
        cell.textContent = inert(String(text ?? ""));
        row.append(cell);
      }
      const action = document.createElement("td");
      if (key.state === "retired") {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "danger";
        button.textContent = inert("Withdraw " + String(key.kid));
        button.addEventListener("click", () => withdrawKey(String(key.kid)));
        action.append(button);
      }
      row.append(action);
      body.append(row);
    }
    $("keys").hidden = keys.length === 0;
  }

  async function refreshKeys() {
    const message = $("keys-message");
    clear(message);
    const result = await api("GET", "/keys");
    if (!survivable(result, message)) return;
    if (result.ok && result.body && Array.isArray(result.body.keys)) {
      renderKeys(result.body.keys);
      const retired = result.body.keys.filter((k) => k.state === "retired").length;
      show(message, "ok", result.body.keys.length === 0 ? "No key is published."
        : result.body.keys.length + " published, " + retired + " of them retired.");
    } else {
      show(message, "error", "Could not read the keys: " + problemText(result) + ".");
    }
  }

  async function withdrawKey(kid) {
    const message = $("keys-message");
    clear(message);
    const result = await api("DELETE", "/keys/" + encodeURIComponent(kid));
    if (!survivable(result, message)) return;
    if (result.ok) {
      await refreshKeys();
      show($("keys-message"), "ok", "Withdrawn: " + kid + " is no longer published.");
    } else {
      show(message, "error", "Not withdrawn: " + problemText(result) + ".");
    }
  }

  async function showWiring(event) {
    event.preventDefault();
    const message = $("wiring-message");
    clear(message);
    const subject = $("wiring-subject").value.trim();
    const query = subject ? "?subject=" + encodeURIComponent(subject) : "";
    const result = await api("GET", "/federation" + query);
    if (!survivable(result, message)) return;
    if (result.ok && result.body && result.body.aws) {
      $("wiring-aws-url").textContent = inert(String(result.body.aws.providerUrl));
      $("wiring-aws").textContent = inert(JSON.stringify(result.body.aws.trustPolicy, null, 2));
      $("wiring-gcp").textContent = inert(JSON.stringify(result.body.gcp, null, 2));
      $("wiring-azure").textContent = inert(JSON.stringify(result.body.azure, null, 2));
      $("wiring").hidden = false;
    } else {
      show(message, "error", "Could not read the wiring guide: " + problemText(result) + ".");
    }
  }

  // ---- Preflight (docs/api.md, "Preflight"). ----
  const CLOUDS = [["aws", "AWS"], ["gcp", "GCP"], ["azure", "Azure"]];

  function renderPreflight(body) {
    const list = $("preflight-clouds");
    list.replaceChildren();
    for (const [name, label] of CLOUDS) {
      const cloud = body.clouds[name];
      if (!cloud) continue;
      const item = document.createElement("li");
      item.id = "preflight-" + name;
      const head = document.createElement("strong");
      head.textContent = label + ": " + (cloud.ready ? "ready" : "not ready");
      item.append(head);
      const findings = document.createElement("ul");
      for (const f of cloud.findings || []) {
        const li = document.createElement("li");
        li.textContent = inert(f.severity + " " + f.code + (f.pointer ? " at " + f.pointer : "") + ": " + f.message);
        findings.append(li);
      }
      if (findings.childElementCount) item.append(findings);
      list.append(item);
    }
    const token = body.token;
    $("preflight-token-summary").textContent = token
      ? inert("Token: alg " + String(token.header.alg) + ", kid " + String(token.header.kid ?? "none") +
        ", iss " + String(token.claims.iss ?? "none") + ", aud " + JSON.stringify(token.claims.aud ?? null))
      : "";
    $("preflight").hidden = false;
  }

  async function runPreflight(event) {
    event.preventDefault();
    const message = $("preflight-message");
    clear(message);
    const token = $("preflight-token").value.trim();
    const result = token ? await api("POST", "/preflight", { token }) : await api("GET", "/preflight");
    if (!survivable(result, message)) return;
    if (result.ok && result.body && result.body.clouds) {
      renderPreflight(result.body);
      const ready = CLOUDS.filter(([name]) => result.body.clouds[name]?.ready).map(([, label]) => label);
      show(message, ready.length === CLOUDS.length ? "ok" : "warn", ready.length === 0
        ? "No cloud would accept it yet: see what each would refuse below."
        : "Ready for " + ready.join(", ") + "; see the findings below.");
    } else {
      show(message, "error", "Could not run the checks: " + problemText(result) + ".");
    }
  }

  // ---- Fetch evidence (docs/api.md, "Fetch evidence"). ----
  function renderFetches(documents) {
    const body = $("fetches-body");
    body.replaceChildren();
    for (const doc of documents) {
      const row = document.createElement("tr");
      const agents = (doc.agents || []).map((a) => (a.agent || "(no User-Agent)") + " \u00d7" + a.count).join(", ");
      const cells = [
        doc.path,
        doc.fetches24h,
        doc.lastFetchedAt ? dateText(doc.lastFetchedAt) : "never",
        doc.fetchedSinceChange ? "fetched" : "not fetched yet",
        agents,
      ];
      for (const text of cells) {
        const cell = document.createElement("td");
        cell.textContent = inert(String(text ?? ""));
        row.append(cell);
      }
      body.append(row);
    }
    $("fetches").hidden = documents.length === 0;
  }

  async function refreshFetches() {
    const message = $("fetches-message");
    clear(message);
    const result = await api("GET", "/fetches");
    if (!survivable(result, message)) return;
    if (result.ok && result.body && Array.isArray(result.body.documents)) {
      renderFetches(result.body.documents);
      const stale = result.body.documents.filter((d) => !d.fetchedSinceChange).length;
      show(message, stale === 0 ? "ok" : "warn", stale === 0
        ? "Both documents were fetched since they last changed."
        : stale + " of the documents not fetched since they last changed.");
    } else {
      show(message, "error", "Could not read the fetches: " + problemText(result) + ".");
    }
  }

  // ---- Keeping access. ----
  function dashboardLink() {
    return location.origin + location.pathname + "#secret=" + encodeURIComponent(secret);
  }

  function toggleLink() {
    const box = $("link-box");
    const toggle = $("link-toggle");
    const showing = box.hidden;
    box.hidden = !showing;
    // Not left in the page while hidden.
    $("link-output").value = showing ? dashboardLink() : "";
    toggle.textContent = showing ? "Hide dashboard link" : "Show dashboard link";
    toggle.setAttribute("aria-expanded", String(showing));
    if (showing) $("link-output").select();
  }

  async function copyLink() {
    const message = $("link-message");
    try {
      await navigator.clipboard.writeText(dashboardLink());
      show(message, "ok", "Copied. Store it somewhere safe: it grants full control of the service.");
    } catch (_) {
      show(message, "error", "Copying is not allowed here: use \u201cShow dashboard link\u201d and copy it by hand.");
    }
  }

  // ---- Deleting. ----
  function askDelete() {
    $("confirm-text").textContent = "\u201c" + inert(current ? current.title || current.subdomain : subdomain) +
      "\u201d and its published documents will be deleted now. This cannot be undone.";
    $("confirm-delete").showModal();
  }

  async function confirmDelete() {
    $("confirm-delete").close();
    const message = $("delete-message");
    const button = $("delete");
    button.disabled = true;
    const result = await api("DELETE", "");
    button.disabled = false;
    if (!survivable(result, message)) return;
    if (!result.ok) {
      show(message, "error", "Not deleted: " + problemText(result) + ".");
      return;
    }
    stopTimers();
    secret = null;
    store(null);
    document.title = "Service deleted: registry";
    $("service").hidden = true;
    $("deleted").hidden = false;
    $("deleted-heading").focus();
  }

  // ---- Start. ----
  $("details-form").addEventListener("submit", saveDetails);
  $("upload-form").addEventListener("submit", upload);
  $("published-refresh").addEventListener("click", refreshPublished);
  $("published-remove").addEventListener("click", removePublished);
  $("keys-refresh").addEventListener("click", refreshKeys);
  $("wiring-form").addEventListener("submit", showWiring);
  $("preflight-form").addEventListener("submit", runPreflight);
  $("fetches-refresh").addEventListener("click", refreshFetches);
  $("link-toggle").addEventListener("click", toggleLink);
  $("link-copy").addEventListener("click", copyLink);
  $("delete").addEventListener("click", askDelete);
  $("confirm-yes").addEventListener("click", confirmDelete);
  $("confirm-no").addEventListener("click", () => $("confirm-delete").close());

  // A link pasted into a tab already showing this page changes only the fragment, which does
  // not reload the page: start again so the new secret is read (and removed from view).
  window.addEventListener("hashchange", () => {
    if (new URLSearchParams(location.hash.slice(1)).has("secret")) location.reload();
  });

  secret = takeSecret();
  if (!subdomain || subdomain.includes("/")) {
    lockOut("This address does not name a service.", false);
  } else if (!secret) {
    lockOut("This page needs the service's secret, and the link has none. The dashboard opens " +
      "from the link given when the service was created, which ends in #secret=\u2026. The " +
      "secret is shown only once: without it the service cannot be managed, and it is deleted " +
      "when it expires.", false);
  } else {
    load(true);
    // Re-read the lifetime now and then, and when the tab comes back: timers sleep with the
    // computer, and the service may have been deleted from another tab.
    resyncTimer = setInterval(() => load(false), RESYNC_MS);
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && secret) load(false);
    });
  }
})();
