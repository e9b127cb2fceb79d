// ---- Signing in and out. ----
function signIn(event) {
  event.preventDefault();
  const input = $("token-input");
  const value = input.value.trim();
  if (!value) return refuseField(input, "Paste a service account's token first.");
  const accountInput = $("account-input");
  const named = accountInput.value.trim();
  // An id goes in a header: visible ASCII only.
  if (named && !/^[\x21-\x7e]+$/.test(named)) {
    return refuseField(accountInput, "An account id has no space or control character: copy it from the Accounts view or from the account's creation.");
  }
  // A static token (rgst_…) is its account already: an id beside it would say nothing.
  if (named && value.split(".").length !== 3) {
    return refuseField(accountInput, "An account id goes with an identity token (a JWT) only: a service account's own token is its account already. Clear the account id, or paste the identity token.");
  }
  // The token leaves the form at once: it is kept in memory and in this tab's storage only.
  input.value = "";
  input.removeAttribute("aria-invalid");
  accountInput.value = "";
  accountInput.removeAttribute("aria-invalid");
  clear($("signin-message"));
  token = value;
  account = named || null;
  store(TOKEN_KEY, token);
  store(ACCOUNT_KEY, account);
  enter();
}

// Says why the sign-in form cannot be sent, at the field that is wrong.
function refuseField(field, message) {
  show($("signin-message"), message);
  field.setAttribute("aria-invalid", "true");
  field.focus();
}

// Shows the signed-in page and the view the address names (the services by default).
function enter() {
  $("view-signin").hidden = true;
  $("nav").hidden = false;
  $("sign-out").hidden = false;
  route();
}

function signOut(message) {
  token = null;
  account = null;
  store(TOKEN_KEY, null);
  store(ACCOUNT_KEY, null);
  generation += 1;
  stopPolling();
  clearViews();
  for (const view of VIEWS) $("view-" + view).hidden = true;
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("view-signin").hidden = false;
  document.title = "Console: registry";
  if (message) {
    show($("signin-message"), message);
    $("signin-heading").focus();
  } else {
    clear($("signin-message"));
    // Signed out on purpose: the next sign-in starts at the services.
    history.replaceState(null, "", location.pathname + location.search);
    $("token-input").focus();
  }
}

// Nothing the token read stays on the page once it is gone.
function clearViews() {
  svc = null;
  accounts = [];
  auditCursor = null;
  delete document.body.dataset.servicesRendered;
  for (const id of [
    "services-body", "services-summary", "services-message", "service-heading", "service-title",
    "service-message", "service-issuers", "service-created", "timeline", "timeline-message",
    "timeline-note", "timeline-live", "timeline-keys-body", "timeline-verifiers-body", "readiness",
    "readiness-message", "signing-message", "signing-facts", "signing-keys", "signing-status",
    "domain-message", "domain-facts", "domain-records", "domain-status", "preflight-message",
    "preflight-clouds", "accounts-message", "accounts-body", "explain-account", "explain-message",
    "explain-result", "audit-message", "audit-summary", "audit-body",
  ]) {
    clear($(id));
  }
  $("explain-result").className = "explain-result";
  $("explain-service").value = "";
  $("explain-claims").value = "{}";
  $("explain-action").value = "";
  $("audit-more").hidden = true;
  $("rotate-confirm").hidden = true;
}

// ---- Views: the address's fragment names one (#services, #service/<subdomain>, #accounts,
// #audit). It never holds the token. ----
function parseRoute(hash) {
  const name = hash.replace(/^#/, "");
  if (name === "services" || name === "accounts" || name === "audit") return { view: name };
  if (name.startsWith("service/")) {
    let subdomain = "";
    try {
      subdomain = decodeURIComponent(name.slice("service/".length));
    } catch (_) {
      return null;
    }
    // A subdomain or an id: letters, digits and '-' only. Anything else ("..", say, which the
    // URL parser would collapse) names no service, and its calls would reach other paths.
    if (/^[A-Za-z0-9-]+$/.test(subdomain)) return { view: "service", subdomain };
  }
  return null;
}

function route() {
  if (!token) return;
  const target = parseRoute(location.hash);
  if (!target) {
    // replaceState fires no hashchange: carry on with the default view.
    history.replaceState(null, "", "#services");
    route();
    return;
  }
  generation += 1;
  stopPolling();
  for (const view of VIEWS) $("view-" + view).hidden = view !== target.view;
  for (const link of $("nav").querySelectorAll("a")) {
    if (link.dataset.view === target.view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  let heading;
  if (target.view === "services") {
    heading = $("services-heading");
    document.title = "Services: registry console";
    loadServices();
  } else if (target.view === "service") {
    heading = $("service-heading");
    document.title = target.subdomain + ": registry console";
    loadService(target.subdomain);
  } else if (target.view === "accounts") {
    heading = $("accounts-heading");
    document.title = "Accounts: registry console";
    loadAccounts();
  } else {
    heading = $("audit-heading");
    document.title = "Audit trail: registry console";
    auditCursor = null;
    loadAudit(false);
  }
  // Where a screen reader (and the keyboard) starts in the new view.
  heading.focus();
}
