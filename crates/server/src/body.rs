//! Reading JSON request bodies: size limit, media type, syntax, and strict field checks; and
//! the deadline every request body must meet (docs/api.md, "Limits that hold (second security
//! review)").

use crate::problem::{ApiError, ApiResult};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use futures_util::{Stream, StreamExt};
use registry_domain::text::{text_violation, TextKind};
use registry_domain::violation::escape_token;
use registry_domain::Violation;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{sleep_until, Instant, Sleep};

/// Seconds a request body may take to arrive, counted from its headers (docs/api.md, "Limits that
/// hold (second security review)").
pub const BODY_DEADLINE_SECS: u64 = 10;

/// The step of the way in (`way_in`) that holds every request body to
/// [`BODY_DEADLINE_SECS`], whatever the handler does with it.
///
/// actix times out the headers (5 s) but never a body: a client that declares
/// `Content-Length: 100` and sends one byte kept a handler waiting, and its connection open,
/// for as long as it liked. Here the handler reads the body through a stream that fails with
/// [`io::ErrorKind::TimedOut`](std::io::ErrorKind::TimedOut) at the deadline, which
/// [`read_json`] answers with 408 (`Connection: close`).
///
/// A chunked body the handler did not read to its end (it answered first: 401, 413, or no
/// body expected) is kept here until the response is on its way. actix closes a connection
/// whose request body is unread when it sends the response; had the handler's copy of a
/// chunked body been the last one, actix would instead drain it for as long as the client
/// keeps it coming.
pub async fn deadline<B, Rest>(
    mut req: ServiceRequest,
    next: impl FnOnce(ServiceRequest) -> Rest,
) -> Result<ServiceResponse<B>, actix_web::Error>
where
    Rest: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
{
    let payload = req.take_payload();
    if matches!(payload, Payload::None) {
        return next(req).await;
    }
    let due = Instant::now() + Duration::from_secs(BODY_DEADLINE_SECS);
    // Only a chunked body is drained when dropped; actix closes after any other unread one.
    let chunked = HttpMessage::chunked(&req).unwrap_or(true);
    let body = Rc::new(RefCell::new(Some(payload)));
    req.set_payload(Payload::Stream {
        payload: Box::pin(DeadlineBody {
            body: Rc::clone(&body),
            timer: Box::pin(sleep_until(due)),
            timed_out: false,
        }),
    });
    let response = next(req).await;
    let unread = body.borrow_mut().take();
    if let Some(unread) = unread.filter(|_| chunked) {
        // actix decides between closing and draining as it sends the response, as soon as
        // the middlewares outside this one return it: the payload outlives that moment by a
        // second at least, and then goes.
        let keep_until = due.max(Instant::now() + Duration::from_secs(1));
        actix_web::rt::spawn(async move {
            sleep_until(keep_until).await;
            drop(unread);
        });
    }
    response
}

/// The request body as the handler sees it: the real one until it ends, or until the deadline.
struct DeadlineBody {
    /// `None` once the body ended (or failed): the middleware's test of "read to its end".
    body: Rc<RefCell<Option<Payload>>>,
    timer: Pin<Box<Sleep>>,
    timed_out: bool,
}

impl Stream for DeadlineBody {
    type Item = Result<web::Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(None);
        }
        let mut body = this.body.borrow_mut();
        let Some(payload) = body.as_mut() else {
            return Poll::Ready(None);
        };
        match payload.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => Poll::Ready(Some(Ok(chunk))),
            Poll::Ready(end) => {
                *body = None;
                Poll::Ready(end)
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    // The payload stays: unread, it makes actix close the connection.
                    this.timed_out = true;
                    Poll::Ready(Some(Err(PayloadError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the request body did not arrive in time",
                    )))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// Reads the body as JSON. `None` when the body is empty.
pub async fn read_json(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
) -> ApiResult<Option<Value>> {
    let body = read_bytes(req, payload, limit).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // A body without a Content-Type is not declared JSON either (RFC 9110 lets a recipient take
    // it for application/octet-stream): 415, like any other type, rather than a guess.
    let essence = content_type(req);
    if essence != "application/json" && !essence.ends_with("+json") {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    let value = registry_domain::json::parse_unique(&body)
        .map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    if let Some((pointer, sentence)) = registry_domain::json::number_changed(&body, &value) {
        return Err(ApiError::Validation(vec![Violation::new(
            pointer, sentence,
        )]));
    }
    // PostgreSQL text cannot hold NUL: refused here on every backend, rather than stored on
    // SQLite and failing as a 503 on PostgreSQL; before the other checks, at every place.
    let nul = nul_pointers(&value);
    if !nul.is_empty() {
        return Err(ApiError::Validation(
            nul.into_iter()
                .map(|pointer| {
                    Violation::new(pointer, "text must not contain the NUL character (\\u0000)")
                })
                .collect(),
        ));
    }
    Ok(Some(value))
}

/// Reads the body of a call that takes none: nothing, or an empty JSON object. Anything else is
/// refused as any body is (415 for another type, 400 for text that is not JSON, each member an
/// unknown field), rather than ignored.
async fn read_nothing(req: &HttpRequest, payload: web::Payload, limit: usize) -> ApiResult<()> {
    let body = read_json(req, payload, limit).await?;
    Fields::new(body.as_ref(), &[])?.finish()
}

/// The caller `C` of a call that takes no body (a `DELETE`, a token's regeneration, a
/// rotation), once the body has been read as `read_nothing` reads it: a body such a call
/// cannot use is refused, not ignored, so that a mistaken request changes nothing. The caller
/// comes first: a call without credentials is a 401 whatever its body.
#[derive(Debug)]
pub struct Bodiless<C>(pub C);

impl<C> FromRequest for Bodiless<C>
where
    C: FromRequest<Error = ApiError> + 'static,
{
    type Error = ApiError;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let caller = C::from_request(req, &mut Payload::None);
        let body = web::Payload::from_request(req, payload);
        let req = req.clone();
        Box::pin(async move {
            let caller = caller.await?;
            let limit = req
                .app_data::<web::Data<crate::state::AppState>>()
                .ok_or(ApiError::Internal)?
                .settings
                .max_body_bytes;
            let body = body.await.map_err(|_| ApiError::Internal)?;
            read_nothing(&req, body, limit).await?;
            Ok(Bodiless(caller))
        })
    }
}

/// The essence of the request's `Content-Type` (`application/json`), lower case; empty without
/// one.
pub fn content_type(req: &HttpRequest) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|essence| essence.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Reads the body, at most `limit` bytes (413 past it, 408 at the deadline).
pub async fn read_bytes(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> ApiResult<web::BytesMut> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| match e {
            PayloadError::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                ApiError::RequestTimeout(BODY_DEADLINE_SECS)
            }
            e => ApiError::BadRequest(format!("could not read the body: {e}")),
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The RFC 6901 pointers of every string and member name in `value` that holds NUL, in the
/// document's order. serde_json's depth limit (128) bounds the recursion.
fn nul_pointers(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    // Every body is looked at: pointers are written only for one that holds NUL.
    if holds_nul(value) {
        find_nul(value, &mut String::new(), &mut found);
    }
    found
}

fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(members) => members
            .iter()
            .any(|(name, item)| name.contains('\0') || holds_nul(item)),
        _ => false,
    }
}

fn find_nul(value: &Value, at: &mut String, found: &mut Vec<String>) {
    let depth = at.len();
    match value {
        Value::String(s) if s.contains('\0') => found.push(at.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push_str(&format!("/{i}"));
                find_nul(item, at, found);
                at.truncate(depth);
            }
        }
        Value::Object(members) => {
            for (name, item) in members {
                at.push('/');
                at.push_str(&escape_token(name));
                if name.contains('\0') {
                    found.push(at.clone());
                } else {
                    find_nul(item, at, found);
                }
                at.truncate(depth);
            }
        }
        _ => {}
    }
}

/// A JSON object whose fields are checked one by one, collecting every problem.
pub struct Fields<'a> {
    object: &'a Map<String, Value>,
    prefix: &'static str,
    /// Problems found so far.
    pub problems: Vec<Violation>,
}

impl<'a> Fields<'a> {
    /// Starts checking `value`, which must be an object with no fields beyond `allowed`.
    pub fn new(value: Option<&'a Value>, allowed: &[&str]) -> Result<Self, ApiError> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let object = match value {
            None => EMPTY.get_or_init(Map::new),
            Some(Value::Object(o)) => o,
            Some(_) => {
                return Err(ApiError::Validation(vec![Violation::new(
                    "",
                    "the body must be a JSON object",
                )]))
            }
        };
        let problems = object
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .map(|k| {
                let accepted = match allowed {
                    [] => "this call takes no member: send {} or no body".to_owned(),
                    _ => format!("accepted: {}", allowed.join(", ")),
                };
                Violation::new(
                    format!("/{}", escape_token(k)),
                    format!("unknown field {k:?} ({accepted})"),
                )
            })
            .collect();
        Ok(Self {
            object,
            prefix: "",
            problems,
        })
    }

    /// The raw value of a field.
    pub fn raw(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name)
    }

    /// A string field: absent → `None`; present but not a non-empty string (or too long) → problem.
    pub fn string(&mut self, name: &str, required: bool, max_len: usize) -> Option<String> {
        let pointer = format!("{}/{name}", self.prefix);
        match self.object.get(name) {
            None if required => {
                self.problems
                    .push(Violation::new(pointer, format!("{name} is required")));
                None
            }
            None => None,
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.problems
                    .push(Violation::new(pointer, format!("{name} must not be empty")));
                None
            }
            Some(Value::String(s)) if s.chars().count() > max_len => {
                self.problems.push(Violation::new(
                    pointer,
                    format!("{name} must be at most {max_len} characters"),
                ));
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.problems
                    .push(Violation::new(pointer, format!("{name} must be a string")));
                None
            }
        }
    }

    /// A string field that people read (a title, a name, a description): [`Fields::string`],
    /// and then inert (docs/api.md, "Text people read"): no control character beyond those
    /// `kind` allows.
    pub fn text(
        &mut self,
        name: &str,
        required: bool,
        max_len: usize,
        kind: TextKind,
    ) -> Option<String> {
        // Controls first: a text of one NEL (U+0085) or line separator trims to nothing, and
        // "must not be empty" would not say what is wrong with it.
        if let Some(Value::String(raw)) = self.object.get(name) {
            let pointer = format!("{}/{name}", self.prefix);
            if let Some(problem) = text_violation(&pointer, name, raw, kind) {
                self.problems.push(problem);
                return None;
            }
        }
        self.string(name, required, max_len)
    }

    /// Ends the check: the problems, if any, as one 400.
    pub fn finish(self) -> ApiResult<()> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Validation(self.problems))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::nul_pointers;
    use serde_json::json;

    #[test]
    fn nul_is_found_in_strings_and_member_names_with_its_pointer() {
        assert!(nul_pointers(&json!({"title": "fine", "n": [1, "ok"]})).is_empty());
        assert_eq!(nul_pointers(&json!("a\u{0}b")), [""]);
        assert_eq!(
            nul_pointers(&json!({"policy": {"rules": [{"claims": {"sub": "x\u{0}"}}]}})),
            ["/policy/rules/0/claims/sub"]
        );
        assert_eq!(
            nul_pointers(&json!({"a/b": {"k\u{0}": 1}})),
            ["/a~1b/k\u{0}"]
        );
        // Every place, not the first only, in the body's order.
        assert_eq!(
            nul_pointers(&json!({"title": "a\u{0}", "tags": ["b", "c\u{0}"], "d": "\u{0}"})),
            ["/title", "/tags/1", "/d"]
        );
    }
}
