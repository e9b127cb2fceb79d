//! The browser pages: the landing page (`GET /`), the anonymous service's dashboard
//! (`GET /dashboard/anonymous/{subdomain}`) and the registered customers' console
//! (`GET /console`).
//!
//! Each page is one self-contained HTML document: its CSS and JS are inlined into the `<style>`
//! and `<script>` placeholders once, at first use, and the Content-Security-Policy allows exactly
//! those blocks by their SHA-256 hashes. Nothing else may load or run: no external assets, no
//! inline event handlers, no `eval`. The dashboard is the same bytes for every subdomain: its
//! script reads the subdomain from the address and renders it as text, so the server never
//! reflects the (untrusted) path into HTML.

use actix_web::http::header;
use actix_web::HttpResponse;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

const STYLE: &str = include_str!("page.css");
const LANDING_HTML: &str = include_str!("landing.html");
const LANDING_JS: &str = include_str!("landing.js");
const DASHBOARD_HTML: &str = include_str!("dashboard.html");
const DASHBOARD_JS: &str = include_str!("dashboard.js");
/// What the dashboard's and the console's scripts share: the one way they call the API.
const REQUEST_JS: &str = include_str!("shared/request.js");
/// What they share of showing text from outside: inert, whatever characters it holds.
const TEXT_JS: &str = include_str!("shared/text.js");
const CONSOLE_HTML: &str = include_str!("console/console.html");
const CONSOLE_CSS: &str = include_str!("console/console.css");
/// The console's script, a part per concern, in the order they run: one scope (they share the
/// token and the view's state), strict, nothing global.
const CONSOLE_JS: &[&str] = &[
    include_str!("console/base.js"),
    include_str!("console/session.js"),
    include_str!("console/services.js"),
    include_str!("console/service.js"),
    include_str!("console/timeline.js"),
    include_str!("console/panels.js"),
    include_str!("console/accounts.js"),
    include_str!("console/audit.js"),
    include_str!("console/start.js"),
];

/// [`CONSOLE_JS`] as the page's one script.
fn console_script() -> String {
    format!(
        "\"use strict\";\n(() => {{\n{REQUEST_JS}{TEXT_JS}{}}})();\n",
        CONSOLE_JS.concat()
    )
}

/// The dashboard's one script (its own function scope inside).
fn dashboard_script() -> String {
    format!("\"use strict\";\n{REQUEST_JS}{TEXT_JS}{DASHBOARD_JS}")
}

const STYLE_SLOT: &str = "<style></style>";
const SCRIPT_SLOT: &str = "<script></script>";

/// A page ready to serve: the assembled HTML and the policy that admits its inline blocks.
#[derive(Debug)]
struct Page {
    html: String,
    csp: String,
}

impl Page {
    /// Inlines `css` and `js` into the template's empty `<style>` and `<script>` elements.
    /// Panics on a malformed template: the templates are compiled in, and a unit test builds both.
    fn assemble(template: &str, css: &str, js: &str) -> Self {
        Self::assemble_with(template, css, js, "'none'")
    }

    /// [`Page::assemble`] with another `default-src`: the console's is `'self'` (docs/api.md,
    /// "Pages"), which changes nothing it may load: every kind of resource is named.
    fn assemble_with(template: &str, css: &str, js: &str, default_src: &str) -> Self {
        assert_eq!(
            template.matches(STYLE_SLOT).count(),
            1,
            "one {STYLE_SLOT} slot"
        );
        assert_eq!(
            template.matches(SCRIPT_SLOT).count(),
            1,
            "one {SCRIPT_SLOT} slot"
        );
        // Either would end the block early and leave the rest unhashed (and broken).
        assert!(!css.contains("</style"), "CSS must not close its element");
        assert!(!js.contains("</script"), "JS must not close its element");
        let html = template
            .replacen(STYLE_SLOT, &format!("<style>{css}</style>"), 1)
            .replacen(SCRIPT_SLOT, &format!("<script>{js}</script>"), 1);
        // form-action 'none': a form submitted without its script (say, the script failed) must
        // not send its fields anywhere, not even to this page's own query string. Every kind of
        // resource is named, so `default-src` (the console's `'self'`) admits nothing more.
        let csp = format!(
            "default-src {default_src}; script-src '{}'; style-src '{}'; connect-src 'self'; \
             img-src 'self' data:; font-src 'none'; media-src 'none'; object-src 'none'; \
             frame-src 'none'; worker-src 'none'; manifest-src 'none'; base-uri 'none'; \
             form-action 'none'; frame-ancestors 'none'",
            csp_hash(js),
            csp_hash(css),
        );
        Self { html, csp }
    }

    fn respond(&'static self) -> HttpResponse {
        HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
            .insert_header((header::CONTENT_SECURITY_POLICY, self.csp.as_str()))
            .insert_header((header::REFERRER_POLICY, "no-referrer"))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            // For browsers that predate frame-ancestors.
            .insert_header((header::X_FRAME_OPTIONS, "DENY"))
            .body(self.html.as_str())
    }
}

/// The CSP source expression of an inline block: `sha256-` and the base64 of its digest.
fn csp_hash(block: &str) -> String {
    let digest = Sha256::digest(block.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

static LANDING: LazyLock<Page> = LazyLock::new(|| Page::assemble(LANDING_HTML, STYLE, LANDING_JS));
static DASHBOARD: LazyLock<Page> =
    LazyLock::new(|| Page::assemble(DASHBOARD_HTML, STYLE, &dashboard_script()));

static CONSOLE: LazyLock<Page> = LazyLock::new(|| {
    let css = format!("{STYLE}{CONSOLE_CSS}");
    Page::assemble_with(CONSOLE_HTML, &css, &console_script(), "'self'")
});

/// `GET /`: what the registry is, and a button that creates an anonymous service.
pub async fn landing() -> HttpResponse {
    LANDING.respond()
}

/// `GET /dashboard/anonymous/{subdomain}`: manage one anonymous service with the secret carried
/// in the address's fragment (which browsers never send to the server).
pub async fn anonymous() -> HttpResponse {
    DASHBOARD.respond()
}

/// `GET /console`: the registered customer's console, signed in with a service account's token
/// kept in the tab's `sessionStorage` only.
pub async fn console() -> HttpResponse {
    CONSOLE.respond()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_pages_assemble_and_their_policy_names_the_inlined_blocks() {
        let (console_css, console_js) = (format!("{STYLE}{CONSOLE_CSS}"), console_script());
        let dashboard_js = dashboard_script();
        for (page, js, css) in [
            (&*LANDING, LANDING_JS, STYLE),
            (&*DASHBOARD, dashboard_js.as_str(), STYLE),
            (&*CONSOLE, console_js.as_str(), console_css.as_str()),
        ] {
            assert!(page.html.contains(&format!("<script>{js}</script>")));
            assert!(page.html.contains(&format!("<style>{css}</style>")));
            assert!(page
                .csp
                .contains(&format!("script-src '{}';", csp_hash(js))));
            assert!(page
                .csp
                .contains(&format!("style-src '{}';", csp_hash(css))));
            assert!(page.csp.contains("frame-ancestors 'none'"));
            assert!(!page.csp.contains("unsafe"));
        }
    }

    #[test]
    fn the_console_defaults_to_its_own_origin_and_the_others_to_nothing() {
        assert!(CONSOLE.csp.starts_with("default-src 'self';"));
        assert!(LANDING.csp.starts_with("default-src 'none';"));
        assert!(DASHBOARD.csp.starts_with("default-src 'none';"));
    }

    #[test]
    fn the_hash_is_the_base64_sha256_of_the_exact_text() {
        // printf 'alert(1)' | openssl dgst -sha256 -binary | base64
        assert_eq!(
            csp_hash("alert(1)"),
            "sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI="
        );
    }

    #[test]
    #[should_panic(expected = "JS must not close its element")]
    fn a_script_that_closes_its_element_is_refused() {
        let _ = Page::assemble("<style></style><script></script>", "", "x='</script>'");
    }
}
