//! What authentication reads of a request, handed over by the HTTP layer as plain bytes.

use bytes::Bytes;
use registry_domain::policy::Action;
use std::cell::Cell;
use std::net::IpAddr;
use time::OffsetDateTime;
use uuid::Uuid;

tokio::task_local! {
    /// The API request being handled: the server sets it around the handler, where audit
    /// events and refusal records are built, and reads it back once the answer is made. A
    /// task-local rather than a request extension, which cost every federated read about 1 %
    /// (docs/benchmarks.md).
    pub static REQUEST: RequestScope;
}

/// What the handling of one request shares with the server around it.
#[derive(Debug)]
pub struct RequestScope {
    id: Bytes,
    used_by: Cell<Option<(Uuid, OffsetDateTime)>>,
}

impl RequestScope {
    /// A request whose `X-Request-Id` is `id`.
    pub fn new(id: Bytes) -> Self {
        Self {
            id,
            used_by: Cell::new(None),
        }
    }

    /// Its `X-Request-Id`.
    pub fn id(&self) -> &Bytes {
        &self.id
    }

    /// The service account the request was granted to, and when: its use, which counts
    /// (`lastUsedAt`) only once the request succeeded.
    pub fn used_by(&self) -> Option<(Uuid, OffsetDateTime)> {
        self.used_by.get()
    }
}

/// The `X-Request-Id` of the API request being handled, if the server gave it one.
pub fn request_id() -> Option<String> {
    REQUEST
        .try_with(|scope| std::str::from_utf8(&scope.id).ok().map(str::to_owned))
        .ok()
        .flatten()
}

/// Notes that `account` was granted the request being handled at `now`, for the server to
/// count once the answer succeeded; `false` outside a request's scope (nothing noted).
pub(crate) fn note_use(account: Uuid, now: OffsetDateTime) -> bool {
    REQUEST
        .try_with(|scope| scope.used_by.set(Some((account, now))))
        .is_ok()
}

/// A request as authentication sees it.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'r> {
    /// The client's address (after trusted proxies).
    pub ip: IpAddr,
    /// The `Authorization` header's value.
    pub authorization: Option<&'r [u8]>,
    /// The `X-Service-Account` header's value: the account a federated caller chose.
    pub service_account: Option<&'r [u8]>,
    /// Whether the call changes something (the write rate: docs/api.md, "Errors", `rate-limited`).
    pub changes: bool,
    /// The action the call takes, which the caller's policy must allow.
    pub action: Action,
}

/// A header value as text, when it is made of visible ASCII, spaces and tabs only (what an
/// HTTP header value may hold as text). Each byte is tested without a branch, so that the
/// compiler tests many at once: a bearer identity token is a kilobyte or more.
pub(crate) fn header_text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .fold(true, |ok, &b| {
            ok & ((b == b'\t') | (b.wrapping_sub(b' ') <= b'~' - b' '))
        })
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::header_text;

    #[test]
    fn header_text_is_visible_ascii_spaces_and_tabs() {
        for b in 0..=u8::MAX {
            let value = [b'x', b, b'y'];
            let expected = b == b'\t' || (b' '..=b'~').contains(&b);
            assert_eq!(header_text(&value).is_some(), expected, "byte {b:#04x}");
        }
        assert_eq!(header_text(b"Bearer a.b.c"), Some("Bearer a.b.c"));
    }
}
