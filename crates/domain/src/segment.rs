//! The names that stand as one segment of the registry's URLs (`/services/{subdomain}`,
//! `…/keys/{kid}`, `/service-accounts/{id}`): any text, percent-encoded, but `.` and `..`.

/// Whether `value` is `.` or `..`: a URL takes either for a step of its path (a browser even
/// when it is percent-encoded), so no path segment can name a thing called so: a `kid`, a
/// service, an account.
///
/// ```
/// use registry_domain::segment::is_dot_segment;
/// assert!(is_dot_segment("..") && is_dot_segment("."));
/// assert!(!is_dot_segment("...") && !is_dot_segment("a.b"));
/// ```
pub fn is_dot_segment(value: &str) -> bool {
    value == "." || value == ".."
}
