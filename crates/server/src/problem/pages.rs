//! `GET /problems/{slug}`: the page a problem's `type` URI names (docs/api.md, "Errors"), saying
//! what the problem means and what to do; HTML for a person, JSON for a program that asks for it.

use super::kinds::{self, Kind};
use super::{problem_type, ApiError, ApiResult};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

/// The page of one kind of problem.
pub async fn page(req: HttpRequest, slug: web::Path<String>) -> ApiResult<HttpResponse> {
    let kind = kinds::find(&slug)
        .ok_or_else(|| ApiError::NotFound(format!("no problem is called {:?}", slug.as_str())))?;
    let mut response = HttpResponse::Ok();
    response.insert_header((header::CACHE_CONTROL, "public, max-age=3600"));
    response.insert_header((header::VARY, "Accept"));
    if wants_json(&req) {
        return Ok(response.json(json!({
            "type": problem_type(kind.slug),
            "slug": kind.slug,
            "status": kind.status,
            "title": kind.title,
            "meaning": kind.means,
            "whatToDo": kind.to_do,
        })));
    }
    // The page has no script, style or form of its own: nothing may run, load or frame it.
    Ok(response
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CONTENT_SECURITY_POLICY, PAGE_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(html(kind)))
}

/// The content security policy of a problem's page: plain text, nothing else.
const PAGE_POLICY: &str =
    "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether `Accept` prefers JSON to HTML (a browser names HTML; a default is HTML).
fn wants_json(req: &HttpRequest) -> bool {
    let accept = req
        .headers()
        .get_all(header::ACCEPT)
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    prefers_json(&accept)
}

/// Whether the media ranges of `accept` rate a JSON type above `text/html`, by their `q`
/// (1 when absent; `q=0` is "not acceptable"): HTML when they tie, or when neither is named.
fn prefers_json(accept: &str) -> bool {
    let (mut json, mut html) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let q = (parts.map(|p| p.trim().to_ascii_lowercase()))
            .filter_map(|p| p.strip_prefix("q=").map(str::to_owned))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .filter(|q| (0.0..=1.0).contains(q))
            .unwrap_or(1.0);
        if media == "text/html" {
            html = html.max(q);
        } else if media.contains("json") {
            json = json.max(q);
        }
    }
    json > 0.0 && json > html
}

/// The page as HTML: the text escaped, `code` in backquotes set as code.
fn html(kind: &Kind) -> String {
    let text = |words: &str| {
        let escaped = words
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        let mut out = String::new();
        for (i, part) in escaped.split('`').enumerate() {
            if i % 2 == 1 {
                out.push_str("<code>");
                out.push_str(part);
                out.push_str("</code>");
            } else {
                out.push_str(part);
            }
        }
        out
    };
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title} ({status}) — registry</title>\n</head>\n<body>\n\
         <main>\n<h1>{title}</h1>\n<p>HTTP {status}, problem <code>{slug}</code>.</p>\n\
         <h2>What it means</h2>\n<p>{means}</p>\n<h2>What to do</h2>\n<p>{to_do}</p>\n\
         <p>Every problem's <code>instance</code> is the request's id, which the registry's \
         log names too.</p>\n</main>\n</body>\n</html>\n",
        title = text(kind.title),
        status = kind.status,
        slug = kind.slug,
        means = text(kind.means),
        to_do = text(kind.to_do),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_chosen_only_when_preferred() {
        for (accept, json) in [
            ("application/json", true),
            ("application/problem+json, */*", true),
            ("text/html, application/json", false),
            ("text/html;q=0, application/json", true),
            ("text/html;q=0.5, application/json;q=0.9", true),
            ("text/html, application/json;q=0", false),
            ("text/html;Q=0, application/json", true),
            ("application/json;q=0", false),
            ("", false),
            ("*/*", false),
        ] {
            assert_eq!(prefers_json(accept), json, "{accept}");
        }
    }

    #[test]
    fn pages_escape_their_text_and_set_code() {
        let kind = Kind {
            slug: "x",
            status: 400,
            title: "A <b> & \"c\"",
            means: "Send `Content-Type`.",
            to_do: "Nothing.",
        };
        let page = html(&kind);
        assert!(
            page.contains("<h1>A &lt;b&gt; &amp; &quot;c&quot;</h1>"),
            "{page}"
        );
        assert!(page.contains("Send <code>Content-Type</code>."), "{page}");
    }
}
