//! Every kind of problem the API answers, in one table: the slug of its `type` URI, its status,
//! its title, and what its page (`GET /problems/{slug}`) says it means and what to do about it.

/// One kind of problem.
#[derive(Debug, PartialEq, Eq)]
pub struct Kind {
    /// The last segment of the problem's `type` (`{base_url}/problems/{slug}`).
    pub slug: &'static str,
    /// The HTTP status it is answered with.
    pub status: u16,
    /// The problem's `title`.
    pub title: &'static str,
    /// What it means.
    pub means: &'static str,
    /// What the caller can do about it.
    pub to_do: &'static str,
}

macro_rules! kinds {
    ($($name:ident = $slug:literal, $status:literal, $title:literal, $means:literal, $to_do:literal;)*) => {
        $(
            #[doc = concat!("`", $slug, "`: ", $title, ".")]
            pub const $name: Kind = Kind {
                slug: $slug,
                status: $status,
                title: $title,
                means: $means,
                to_do: $to_do,
            };
        )*
        /// Every kind, in the order of docs/api.md's table.
        pub const KINDS: &[Kind] = &[$($name),*];
    };
}

kinds! {
    INVALID_JSON = "invalid-json", 400, "Malformed JSON",
        "The request body does not parse as JSON, or an object in it names a member twice.",
        "Send a JSON object with Content-Type: application/json; check quoting and trailing commas, and name each member once. `errors` says what and where.";
    VALIDATION_FAILED = "validation-failed", 400, "Invalid request",
        "The request breaks a rule: a field is missing, unknown or of the wrong shape, a value is out of range, or the call does not apply to this resource. Each problem in `errors` points (RFC 6901) at the part of the body it is about.",
        "Fix every entry of `errors` (or what `detail` names) and send the request again; nothing was changed.";
    UNKNOWN_SERVICES = "unknown-services", 400, "Unknown services in policy",
        "The policy names services that this customer does not own.",
        "Create the services first, or remove them from the policy (each entry of `errors` points at one).";
    KIND_IMMUTABLE = "kind-immutable", 400, "Policy kind cannot change",
        "A PATCH tried to turn a static-token account into a federated one, or the other way round.",
        "Delete the account and create a new one of the other kind.";
    KID_REUSED = "kid-reused", 400, "Key id reused with other material",
        "A key id (`kid`) that is published now came back with other key material: verifiers that cached the old key would refuse tokens signed by the new one.",
        "Give the new key a new `kid`; keep the old key in the set until tokens signed by it have expired.";
    INVALID_SERVICE_NAME = "invalid-service-name", 400, "Invalid service name",
        "The service name, joined with the customer's tenant, would make a subdomain longer than 63 characters. A name that is not a DNS label is a `validation-failed` problem at `/serviceName` instead.",
        "Choose a shorter name.";
    UNAUTHORIZED = "unauthorized", 401, "Unauthorized",
        "The request carried no credential, or one that is malformed, unknown, revoked or expired.",
        "Send Authorization: Bearer with a current token (a static token, an anonymous secret or an identity token a policy trusts). A token shown once and lost is replaced by regenerating it.";
    FORBIDDEN = "forbidden", 403, "Forbidden",
        "The credential is valid, but may not make this call: its policy does not cover what the call acts on, the request comes from an address outside the account's `ip_allowlist`, an anonymous service's secret was used beyond its own service, or the call is one its kind of credential never makes; `detail` says which.",
        "Use an account whose policy names this service (from an allowed address), or widen the policy (`registry policy explain` shows which rule decides).";
    ACTION_NOT_ALLOWED = "action-not-allowed", 403, "Action not allowed",
        "The credential may act on what the call names, but its policy (version 2) does not list the call's action; `detail` names the action.",
        "Add the action to the policy's `actions`, or use an account made for this job.";
    PLAN_REQUIRED = "plan-required", 403, "Plan does not allow this",
        "The customer's plan does not include what the request asked for (a chosen service name on a free or team plan).",
        "Leave `serviceName` out to get a generated name, or move to a plan that includes it.";
    NOT_FOUND = "not-found", 404, "Not found",
        "There is no such resource for this caller, or no such endpoint.",
        "Check the path and the credential: resources of other customers are answered the same way as missing ones.";
    NOTHING_PUBLISHED = "nothing-published", 404, "Nothing published",
        "The service exists but publishes nothing, or nothing under the key source named.",
        "Upload a discovery document and key set (`PUT /services/{s}/config`, or `registry sync`), or name a key source that has published.";
    METHOD_NOT_ALLOWED = "method-not-allowed", 405, "Method not allowed",
        "The path does not serve this method.",
        "Use one of the methods the `Allow` header lists.";
    CONFLICT = "conflict", 409, "Conflict",
        "The request conflicts with the resource's state: the subdomain is taken (or several generated names in a row were), a key that signs cannot be deleted, or another write changed the same thing meanwhile; `detail` says which.",
        "Do what `detail` says: choose another name, retry to get another generated one, or send the request again.";
    DOMAIN_TAKEN = "domain-taken", 409, "Domain taken",
        "Another service holds this custom domain: its owner proved it with the TXT record first.",
        "Choose another domain, or have it removed from the service that holds it (DELETE /services/{s}/domain).";
    TOO_MANY_PENDING_DOMAINS = "too-many-pending-domains", 409, "Too many pending domains",
        "The customer has as many custom domains waiting for their TXT record as it may (REGISTRY_MAX_PENDING_DOMAINS).",
        "Set the TXT records of the domains already asked for, or remove the ones you will not prove (DELETE /services/{s}/domain).";
    TOO_MANY_SOURCES = "too-many-sources", 409, "Too many key sources",
        "The service publishes keys from as many key sources as it may (8; 1 for an anonymous service).",
        "Upload as a source the service has already, or remove one (DELETE /services/{s}/config?source=NAME).";
    SIGNING_DISABLED = "signing-disabled", 409, "Signing disabled",
        "This registry holds no keys: its operator has not set the data key managed keys are sealed under (REGISTRY_DATA_KEY).",
        "Ask the operator to set REGISTRY_DATA_KEY, or sign with your own keys and upload their public half.";
    NO_KEY_READY = "no-key-ready", 409, "No key ready",
        "No managed key of the service is safe to sign with yet: a key signs only once every verifier can know it.",
        "Retry after the `Retry-After` seconds; GET /services/{s}/signing and the key's readiness say what it waits for.";
    ROTATION_IN_PROGRESS = "rotation-in-progress", 409, "Rotation in progress",
        "A next managed key is published already and signs once it is safe.",
        "Wait for it (GET /services/{s}/signing), or rotate with ?compromised=true to replace every key at once.";
    INVALID_CLAIMS = "invalid-claims", 400, "Invalid claims",
        "The claims to sign break a rule: the detail names the claim.",
        "Send the token's payload as base64url (the JWT's second segment): a JSON object of at most 16 KB with the service's `iss`, integer `iat` and `exp`, `exp` in the future and within `maxTokenSeconds` of `iat`.";
    CUSTOM_DOMAINS_DISABLED = "custom-domains-disabled", 409, "Custom domains disabled",
        "This registry takes no custom domains: its operator has not configured an ACME directory (REGISTRY_ACME_DIRECTORY).",
        "Ask the operator to enable custom domains, or use the service's own issuer URL.";
    REQUEST_TIMEOUT = "request-timeout", 408, "Request timeout",
        "The request body did not arrive in time after its headers; the connection is closed.",
        "Send the body at once, on a new connection.";
    QUOTA_EXCEEDED = "quota-exceeded", 403, "Quota exceeded",
        "The customer holds as many services or service accounts as it may.",
        "Delete ones no longer used, or ask the operator to raise the quota.";
    PAYLOAD_TOO_LARGE = "payload-too-large", 413, "Payload too large",
        "The request body is larger than the server accepts.",
        "Send a smaller body (a key set with fewer keys, a shorter policy).";
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type", 415, "Unsupported media type",
        "The body is not declared with the media type the endpoint reads.",
        "Send the Content-Type the detail names: application/json for the API, application/x-ndjson for a cache's access log.";
    RATE_LIMITED = "rate-limited", 429, "Too many requests",
        "This client, credential or customer made more requests of this kind than it may in the time.",
        "Wait as many seconds as `Retry-After` says, then retry; spread the calls out.";
    DATABASE_UNAVAILABLE = "database-unavailable", 503, "Database unavailable",
        "The database does not answer. Public documents in memory are still served; the server recovers by itself.",
        "Retry after `Retry-After` seconds. Operators: check the database (and `/readyz`, which says which side is down).";
    UNAVAILABLE = "unavailable", 503, "Service unavailable",
        "Too many credential checks are waiting (nothing else is affected), or this replica is still starting (applying migrations, loading what it serves).",
        "Retry after `Retry-After` seconds.";
    CAPACITY = "capacity", 503, "Capacity reached",
        "A ceiling shared by every client is reached (live anonymous services).",
        "Retry after `Retry-After` seconds, or create a service with an account.";
    INTERNAL = "internal", 500, "Internal server error",
        "A bug in the registry; the details went only to its log.",
        "Retry; if it persists, give the operator the problem's `instance` (the request id), which the log names.";
}

/// The kind whose slug this is.
pub fn find(slug: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|kind| kind.slug == slug)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_distinct_and_every_kind_is_found() {
        for kind in KINDS {
            assert_eq!(find(kind.slug), Some(kind));
            assert!(
                kind.means.ends_with('.') && kind.to_do.ends_with('.'),
                "{kind:?}"
            );
        }
        assert_eq!(find("no-such-problem"), None);
    }
}
