// ---- Services: one request for the whole list (docs/api.md: `?include=status`). ----
async function loadServices() {
  const gen = generation;
  const message = $("services-message");
  clear(message);
  delete document.body.dataset.servicesRendered;
  $("services-summary").textContent = "Loading the services\u2026";
  const result = await api("GET", "/services?include=status");
  if (gen !== generation) return;
  if (!result.ok || !Array.isArray(result.body)) {
    $("services-summary").textContent = "";
    $("services-body").replaceChildren();
    show(message, "The services could not be listed: " + problemText(result));
    return;
  }
  renderServices(result.body);
}

function renderServices(services) {
  // One fragment, one insertion: a single layout for hundreds of rows.
  const rows = document.createDocumentFragment();
  for (const service of services) rows.append(serviceRow(service));
  $("services-body").replaceChildren(rows);
  $("services-summary").textContent = services.length === 0
    ? "No service yet. Create one with the API (POST /services) or the command line (registry services create)."
    : services.length + (services.length === 1 ? " service." : " services.");
  // For the browser tests: the moment the list is on the page.
  document.body.dataset.servicesRendered = String(services.length);
}

// A service's issuers: its subdomain's, and its custom domain's while that is served.
function issuers(service, domain) {
  const list = [service.issuer];
  // The custom domain's issuer; the slashes escaped so that the page's text holds no absolute URL.
  if (domain && domain.status === "active" && domain.domain) list.push("https:\/\/" + domain.domain);
  return list;
}

function issuerList(urls) {
  const list = el("ul", null, "plain");
  for (const url of urls) list.append(item(code(url)));
  return list;
}

function serviceRow(service) {
  // `status` is absent from registries that predate it: every column it fills reads "—".
  const status = service.status && typeof service.status === "object" ? service.status : null;
  const name = el("td");
  const link = el("a", service.subdomain);
  link.href = "#service/" + encodeURIComponent(service.subdomain);
  name.append(link);
  if (service.title) name.append(" ", el("span", service.title, "title"));
  const domain = status ? status.domain : null;
  return row([
    name,
    cell(issuerList(issuers(service, domain))),
    cell(status ? (status.published ? "yes" : "no") : null),
    cell(status ? status.keyCount : null, "num"),
    cell(status ? timeNode(status.lastFetchedAt, "never") : null),
    cell(status ? (domain ? domain.domain + " (" + domain.status + ")" : "none") : null),
    cell(status ? signingSummary(status.signing) : null),
  ]);
}

function signingSummary(signing) {
  if (!signing) return "off";
  const next = ms(signing.nextRotationAt);
  return signing.algorithm + (next === null ? ", rotation in progress" : ", next rotation " + dateTime.format(next));
}
