//! The browser pages' HTTP contract: strict headers, self-contained HTML, no reflection of the
//! path. (What the pages do in a browser: `e2e/`, run by `cargo xtask e2e`.)

use base64::Engine;
use registry_tests::server::TestServer;
use reqwest::blocking::Response;
use reqwest::Method;

fn header<'a>(response: &'a Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

/// The CSP's directives, each with its sources.
fn directives(csp: &str) -> Vec<(String, Vec<String>)> {
    csp.split(';')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            let mut words = d.split_whitespace().map(str::to_owned);
            (words.next().unwrap(), words.collect())
        })
        .collect()
}

/// Number of elements `<tag>` (without attributes: the pages' inline blocks have none).
fn count(html: &str, tag: &str) -> usize {
    html.matches(&format!("<{tag}")).count()
}

fn assert_strict_page(response: Response) -> String {
    assert_strict_page_defaulting_to(response, "'none'")
}

/// [`assert_strict_page`] whose `default-src` is `default_src`.
fn assert_strict_page_defaulting_to(response: Response, default_src: &str) -> String {
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "content-type"),
        "text/html; charset=utf-8"
    );
    assert_eq!(header(&response, "referrer-policy"), "no-referrer");
    assert_eq!(header(&response, "cache-control"), "no-store");
    assert_eq!(header(&response, "x-content-type-options"), "nosniff");
    let csp = directives(header(&response, "content-security-policy"));
    let sources = |name: &str| -> Vec<String> {
        csp.iter()
            .find(|(d, _)| d == name)
            .unwrap_or_else(|| panic!("no {name} in the CSP: {csp:?}"))
            .1
            .clone()
    };
    for (name, expected) in [
        ("default-src", default_src),
        ("connect-src", "'self'"),
        ("base-uri", "'none'"),
        ("form-action", "'none'"),
        ("frame-ancestors", "'none'"),
    ] {
        assert_eq!(sources(name), [expected], "{name}");
    }
    assert_eq!(sources("img-src"), ["'self'", "data:"]);
    let html = response.text().unwrap();
    // Inline blocks are admitted by their hashes only: one per block, nothing broader.
    for (directive, tag) in [("script-src", "script"), ("style-src", "style")] {
        let hashes = sources(directive);
        assert_eq!(hashes.len(), count(&html, tag), "{directive}: {hashes:?}");
        for hash in hashes {
            let digest = hash
                .strip_prefix("'sha256-")
                .and_then(|h| h.strip_suffix('\''))
                .unwrap_or_else(|| panic!("{directive} allows {hash}, not a sha256 hash"));
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(digest)
                .unwrap();
            assert_eq!(bytes.len(), 32, "{hash}");
        }
    }
    assert_self_contained(&html);
    html
}

/// Loads nothing from elsewhere: no absolute or protocol-relative URL, no sub-resource but
/// the inline blocks and a `data:` icon.
fn assert_self_contained(html: &str) {
    let lower = html.to_ascii_lowercase();
    for forbidden in [
        "://", "src=", "srcset=", "=\"//", "='//", "<iframe", "<object", "<embed",
    ] {
        assert!(
            !lower.contains(forbidden),
            "the page contains {forbidden:?}"
        );
    }
    let style = &lower[lower.find("<style>").unwrap()..lower.find("</style>").unwrap()];
    for forbidden in ["url(", "@import", "@font-face"] {
        assert!(
            !style.contains(forbidden),
            "the style sheet contains {forbidden:?}"
        );
    }
    for (i, _) in lower.match_indices("<link") {
        let tag = &lower[i..i + lower[i..].find('>').unwrap()];
        assert!(
            tag.contains("href=\"data:"),
            "a <link> that loads something: {tag}"
        );
    }
    for part in lower.split("href=\"").skip(1) {
        let target = &part[..part.find('"').unwrap()];
        assert!(
            target.starts_with("data:") || !target.contains(':'),
            "a link out of the registry: {target}"
        );
    }
    // Inline event handlers would be refused by the CSP anyway; keep the pages free of them.
    assert!(!lower.contains(" onclick="), "inline handler");
    assert!(!lower.contains(" style=\""), "inline style attribute");
}

#[test]
fn the_landing_page_is_strict_and_self_contained() {
    let server = TestServer::start();
    let html = assert_strict_page(server.request(Method::GET, "/").send().unwrap());
    assert!(html.contains("Create an anonymous service"));
}

#[test]
fn the_dashboard_is_strict_self_contained_and_the_same_for_every_path() {
    let server = TestServer::start();
    let created = server
        .request(Method::POST, "/anonymous/services")
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let created: serde_json::Value = created.json().unwrap();
    let dashboard_url = created["dashboardUrl"].as_str().unwrap();
    let (address, fragment) = dashboard_url.split_once('#').unwrap();
    assert_eq!(
        fragment,
        format!("secret={}", created["secret"].as_str().unwrap())
    );

    // What a browser requests for the creation's dashboard link: the address without the fragment.
    let page = server
        .request(Method::GET, address.strip_prefix(&server.base).unwrap())
        .send()
        .unwrap();
    let html = assert_strict_page(page);
    for id in ["countdown", "upload-form", "jwks-errors", "confirm-delete"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    // The path is untrusted and never reflected: every subdomain gets the same bytes.
    let hostile = "%3Cscript%3Ealert(1)%3C%2Fscript%3E-anon";
    let other = server
        .request(Method::GET, &format!("/dashboard/anonymous/{hostile}"))
        .send()
        .unwrap();
    assert_eq!(assert_strict_page(other), html);
}

#[test]
fn the_console_is_strict_self_contained_and_holds_no_data() {
    let server = TestServer::start();
    let response = server.request(Method::GET, "/console").send().unwrap();
    // docs/api.md, "Pages": its own origin by default, never framed.
    let html = assert_strict_page_defaulting_to(response, "'self'");
    assert!(html.contains("<title>Console: registry</title>"));
    // Signed in or not, the same bytes: the token lives in the tab, never in the page.
    let customer = server.customer("acme", "business");
    let with_token = server
        .authed(Method::GET, "/console", &customer.token)
        .send()
        .unwrap();
    assert_eq!(with_token.text().unwrap(), html);
}

#[test]
fn the_pages_answer_get_and_head_only() {
    let server = TestServer::start();
    for path in ["/", "/dashboard/anonymous/abc-anon", "/console"] {
        for method in [Method::POST, Method::PUT, Method::DELETE] {
            let response = server.request(method.clone(), path).send().unwrap();
            assert_eq!(response.status(), 405, "{method} {path}");
            assert_eq!(header(&response, "allow"), "GET, HEAD");
        }
    }
    // Only one segment after /dashboard/anonymous/.
    let nested = server
        .request(Method::GET, "/dashboard/anonymous/a/b")
        .send()
        .unwrap();
    assert_eq!(nested.status(), 404);
}
