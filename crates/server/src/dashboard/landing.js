
"use strict";
(() => {
  const button = document.getElementById("create");
  const message = document.getElementById("create-message");

  function fail(text) {
    message.className = "message error";
    message.textContent = text;
    button.disabled = false;
    button.textContent = "Create an anonymous service";
  }

  async function create() {
    button.disabled = true;
    button.textContent = "Creating…";
    message.className = "message";
    message.textContent = "";
    let response;
    try {
      // Relative, so the page works when the registry is served under a path prefix.
      response = await fetch("anonymous/services", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: "{}",
        cache: "no-store",
        credentials: "omit",
      });
    } catch (_) {
      fail("The registry cannot be reached. Check your connection and try again.");
      return;
    }
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (response.status === 429) {
      const wait = response.headers.get("Retry-After");
      fail("Too many anonymous services were created from your address. " +
        (wait ? "Try again in " + Math.ceil(Number(wait) / 60) + " minute(s)." : "Try again later."));
      return;
    }
    if (!response.ok || !body || typeof body.dashboardUrl !== "string") {
      fail("The service could not be created" +
        (body && typeof body.detail === "string" ? ": " + body.detail : ".") + " Try again.");
      return;
    }
    // The address comes from the server, but only ever navigate to a web page.
    let target;
    try {
      target = new URL(body.dashboardUrl, location.href);
    } catch (_) {
      target = null;
    }
    if (!target || (target.protocol !== "https:" && target.protocol !== "http:")) {
      fail("The registry answered with an unusable dashboard address.");
      return;
    }
    // The secret is in the fragment: it stays in this browser and is removed from the
    // address bar by the dashboard as soon as it has read it.
    location.assign(target.href);
  }

  button.addEventListener("click", create);
})();
