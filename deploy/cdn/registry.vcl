# Varnish 7 (Debian's varnish package) in front of the registry (docs/operations.md, "Behind a
# CDN or another cache"):
# - caches the public documents of the hosted issuers as their headers say (30 s), by Host and
#   path, and serves its copy for up to a day while no registry answers (stale-if-error), within
#   the backends' timeouts (1 s);
# - takes PURGE from the registries' addresses only (REGISTRY_PURGE_URLS names this cache);
# - passes every other request through uncached, with X-Forwarded-For (name this cache's
#   address in the registries' REGISTRY_TRUSTED_PROXIES).
# backends.vcl, beside this file, names the registries: copy backends.example.vcl and edit it.
# Run: varnishd -a :80 -f /etc/varnish/registry.vcl -p vcl_path=/etc/varnish -s malloc,256m
vcl 4.1;

import std;

include "backends.vcl";

sub vcl_recv {
    set req.backend_hint = registries.backend();
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(405, "PURGE is only taken from the registries"));
        }
        return (purge);
    }
    if ((req.method == "GET" || req.method == "HEAD")
        && req.url ~ "^/(\.well-known/openid-configuration|openid/v1/jwks|\.well-known/jwks\.json|keys|keys\.json)$") {
        # A verifier's credentials, if it sends any, are not part of a public document.
        unset req.http.Cookie;
        unset req.http.Authorization;
        # While a registry answers, a copy past its time is served 30 s at most while it is
        # fetched again (stale-while-revalidate); while none does, for as long as it is kept.
        if (std.healthy(req.backend_hint)) {
            set req.grace = 30s;
        }
        return (hash);
    }
    return (pass);
}

sub vcl_backend_response {
    if (bereq.url ~ "^/(\.well-known/openid-configuration|openid/v1/jwks|\.well-known/jwks\.json|keys|keys\.json)$"
        && beresp.status == 200) {
        # The registry's Cache-Control gives the time to live (max-age=30); a copy stays a day
        # past it (stale-if-error=86400), to be served while the registries are down.
        set beresp.grace = 24h;
    }
}

sub vcl_backend_error {
    # No registry answered and no copy is kept: say so in one line, never with Varnish's page.
    set beresp.http.Content-Type = "text/plain";
    set beresp.http.Cache-Control = "no-store";
    set beresp.body = "no registry answered";
    return (deliver);
}
