// One call to the registry's API with a bearer credential, as every page makes it: no cookie, no
// referrer, no cached answer, no redirect followed. The answer's status, whether it is a
// success, its JSON body (null when it has none or it is not JSON) and its Retry-After; a
// network failure is status 0. `account`, when given, names the service account an identity
// token acts as (X-Service-Account).
async function callRegistry(url, bearer, method, body, account) {
  const init = {
    method,
    headers: { Authorization: "Bearer " + bearer, Accept: "application/json" },
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    referrerPolicy: "no-referrer",
  };
  if (account) init.headers["X-Service-Account"] = account;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (_) {
    return { status: 0, ok: false, body: null, retryAfter: null };
  }
  let data = null;
  if (response.status !== 204) {
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
  }
  return {
    status: response.status,
    ok: response.ok,
    body: data,
    retryAfter: response.headers.get("Retry-After"),
  };
}
