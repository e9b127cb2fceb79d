// ---- Audit trail. ----
let auditCursor = null;
// Each load of the list is numbered: only the newest is drawn (a kind chosen, or More pressed,
// while an earlier answer is on its way).
let auditAsked = 0;

async function loadAudit(append) {
  const gen = generation;
  const asked = ++auditAsked;
  $("audit-more").disabled = true;
  const message = $("audit-message");
  clear(message);
  const kind = $("audit-kind").value;
  let path = "/audit-events?limit=100";
  if (kind) path += "&action=" + encodeURIComponent(kind);
  if (append && auditCursor) path += "&cursor=" + encodeURIComponent(auditCursor);
  // Accounts by name rather than id, where the token may list them (else ids it is).
  const [result] = await Promise.all([api("GET", path), append || accounts.length ? null : loadAccountNames()]);
  if (gen !== generation || asked !== auditAsked) return;
  $("audit-more").disabled = false;
  if (!result.ok || !result.body || !Array.isArray(result.body.events)) {
    if (!append) $("audit-body").replaceChildren();
    $("audit-more").hidden = true;
    show(message, "The audit trail could not be read: " + problemText(result));
    return;
  }
  const rows = document.createDocumentFragment();
  for (const event of result.body.events) rows.append(auditRow(event));
  if (append) $("audit-body").append(rows);
  else $("audit-body").replaceChildren(rows);
  auditCursor = result.body.nextCursor || null;
  const count = $("audit-body").childElementCount;
  $("audit-summary").textContent = (count === 0 ? "No event" : count + (count === 1 ? " event" : " events")) +
    (kind ? " of kind " + kind : "") + (auditCursor ? ", newest first; older ones follow with More." : ".");
  const more = $("audit-more");
  const hadFocus = document.activeElement === more;
  more.hidden = !auditCursor;
  // The button the reader pressed is gone: keep their place at the list's summary.
  if (hadFocus && more.hidden) $("audit-summary").focus();
}

async function loadAccountNames() {
  const gen = generation;
  const result = await api("GET", "/service-accounts");
  if (gen === generation && result.ok && Array.isArray(result.body)) accounts = result.body;
}

function accountName(id) {
  const account = accounts.find((a) => String(a.id) === String(id));
  return account ? String(account.name) : String(id);
}

function shortJson(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "\u2014";
  return text.length > 80 ? text.slice(0, 79) + "\u2026" : text;
}

function auditRow(event) {
  const resource = event.resource || {};
  const actor = event.actor || {};
  const who = [actor.kind, actor.accountId && accountName(actor.accountId), actor.iss, actor.sub].filter(Boolean).join(" ");
  const changes = event.changes && typeof event.changes === "object"
    ? Object.entries(event.changes).map(([name, change]) => name + ": " + shortJson(change && change.old) + " \u2192 " + shortJson(change && change.new)).join("; ")
    : "";
  const name = resource.type === "account" && resource.id ? accountName(resource.id) : resource.subdomain || resource.id;
  return row([
    cell(timeNode(event.at)),
    cell(code(event.action), "nowrap"),
    [resource.type, name].filter(Boolean).join(" "),
    who,
    event.ip,
    changes,
  ]);
}
