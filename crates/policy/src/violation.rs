//! Validation problems that point into the request body.

use std::fmt;

/// One problem found in a request body, located by an RFC 6901 JSON pointer.
///
/// ```
/// use registry_policy::Violation;
/// let v = Violation::new("/policy/kind", "must be \"static\" or \"oidc\"");
/// assert_eq!(v.pointer, "/policy/kind");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// RFC 6901 pointer into the document that was checked (`""` is the whole document).
    pub pointer: String,
    /// A sentence for a person, naming what is wrong.
    pub message: String,
}

impl Violation {
    /// A violation at `pointer`.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }

    /// The same violation with `prefix` put in front of its pointer, for documents nested in a
    /// request body (a policy lives at `/policy`).
    ///
    /// ```
    /// use registry_policy::Violation;
    /// let v = Violation::new("/kind", "required").prefixed("/policy");
    /// assert_eq!(v.pointer, "/policy/kind");
    /// ```
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.pointer = format!("{prefix}{}", self.pointer);
        self
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}

/// Every problem found in one document; never empty when returned as an error.
pub type Violations = Vec<Violation>;

/// Escapes one reference token for use in a JSON pointer (RFC 6901 §3: `~` → `~0`, `/` → `~1`).
///
/// ```
/// assert_eq!(registry_policy::violation::escape_token("a/b~c"), "a~1b~0c");
/// ```
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
