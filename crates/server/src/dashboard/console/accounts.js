// ---- Accounts and explain. ----
let accounts = [];
// Why the list of accounts could not be read, if it could not: explain says so too.
let accountsRefusal = "";

async function loadAccounts() {
  const gen = generation;
  clear($("accounts-message"));
  const result = await api("GET", "/service-accounts");
  if (gen !== generation) return;
  if (!result.ok || !Array.isArray(result.body)) {
    accounts = [];
    accountsRefusal = problemText(result);
    renderAccounts();
    show($("accounts-message"), "The accounts could not be listed: " + accountsRefusal);
    return;
  }
  accountsRefusal = "";
  accounts = result.body;
  renderAccounts();
}

// What a policy allows, as the table shows it: `actions` (at the top or in each rule; a
// version-1 policy has none and allows every action but tokens:sign, shown "*").
function policySummary(policy) {
  const p = policy && typeof policy === "object" ? policy : {};
  const services = new Set();
  const actions = new Set();
  const lists = p.kind === "oidc" && Array.isArray(p.rules) ? p.rules : [p];
  for (const part of lists) {
    for (const s of Array.isArray(part.services) ? part.services : []) services.add(String(s));
    for (const a of Array.isArray(part.actions) ? part.actions : []) actions.add(String(a));
  }
  return {
    kind: String(p.kind ?? "?"),
    services: [...services],
    actions: actions.size ? [...actions] : ["*"],
  };
}

function renderAccounts() {
  const rows = document.createDocumentFragment();
  for (const account of accounts) {
    const policy = policySummary(account.policy);
    rows.append(row([
      account.name,
      policy.kind,
      policy.services.join(", "),
      policy.actions.join(", "),
      cell(timeNode(account.lastUsedAt, "never")),
    ]));
  }
  $("accounts-body").replaceChildren(rows);
  const select = $("explain-account");
  const chosen = select.value;
  select.replaceChildren(...accounts.map((a) => new Option(inert(a.name), String(a.id))));
  if (accounts.some((a) => String(a.id) === chosen)) select.value = chosen;
}

function claimsProblem(text) {
  const field = $("explain-claims");
  field.setAttribute("aria-invalid", "true");
  show($("explain-message"), text);
  $("explain-result").replaceChildren();
  $("explain-result").className = "explain-result";
}

async function explain(event) {
  event.preventDefault();
  const gen = generation;
  const message = $("explain-message");
  const answer = $("explain-result");
  clear(message);
  const id = $("explain-account").value;
  if (!id) {
    show(message, accountsRefusal
      ? "There is no account to explain: the accounts could not be listed: " + accountsRefusal
      : "There is no account to explain: the list of accounts is empty.");
    return;
  }
  let claims = {};
  const text = $("explain-claims").value.trim();
  if (text) {
    try {
      claims = JSON.parse(text);
    } catch (e) {
      claimsProblem("The claims are not valid JSON: " + e.message + ". Nothing was sent.");
      return;
    }
    if (!claims || typeof claims !== "object" || Array.isArray(claims)) {
      claimsProblem("The claims must be a JSON object, such as {\"sub\": \"repo:acme/infra:ref:refs/heads/main\"}. Nothing was sent.");
      return;
    }
  }
  $("explain-claims").removeAttribute("aria-invalid");
  const body = { claims };
  const service = $("explain-service").value.trim();
  const action = $("explain-action").value;
  if (service) body.service = service;
  if (action) body.action = action;
  answer.replaceChildren();
  answer.className = "explain-result";
  const button = $("explain");
  button.disabled = true;
  const result = await api("POST", "/service-accounts/" + encodeURIComponent(id) + "/explain", body);
  button.disabled = false;
  if (gen !== generation) return;
  if (!result.ok || !result.body) {
    show(message, "Could not explain: " + problemText(result));
    return;
  }
  const account = accounts.find((a) => String(a.id) === id);
  renderExplanation(result.body, account ? account.name : id, service, action);
}

function renderExplanation(body, name, service, action) {
  const answer = $("explain-result");
  const allowed = body.decision === "allow";
  answer.className = "explain-result " + (allowed ? "allowed" : "refused");
  const parts = [el("p", allowed ? "Allowed" : "Refused", "verdict")];
  let context = String(name);
  if (service) context += " on " + service;
  if (action) context += ", action " + action;
  if (body.rule && body.rule.pointer) context += "; by the rule at " + body.rule.pointer;
  parts.push(el("p", context, "muted"));
  const reasons = Array.isArray(body.reasons) ? body.reasons : [];
  if (reasons.length) {
    parts.push(el("h3", "Reasons"));
    const list = el("ul");
    for (const r of reasons) {
      const item = el("li");
      if (r.code) item.append(code(r.code), ": ");
      item.append(inert(String(r.message ?? "") + (r.pointer ? " (at " + r.pointer + ")" : "")));
      list.append(item);
    }
    parts.push(list);
  }
  const hints = Array.isArray(body.hints) ? body.hints : [];
  if (hints.length) {
    parts.push(el("h3", "Hints"));
    const list = el("ul");
    for (const h of hints) list.append(el("li", String(h.message ?? "") + (h.pointer ? " (at " + h.pointer + ")" : "")));
    parts.push(list);
  }
  answer.replaceChildren(...parts);
}
