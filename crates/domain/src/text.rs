//! Text that people read is inert (docs/api.md, "Text people read"): a service's `title`, an
//! account's `name`, a `description` and a customer's name end up in terminals, logs, e-mails
//! and web pages, where a control character acts instead of being shown (an ESC sequence
//! recolours or rewrites a terminal, OSC 52 writes its clipboard, U+2028 ends a JavaScript
//! line). The one rule, [`check_text`], refuses them where the text comes in, wherever that is.
//!
//! ```
//! use registry_domain::text::{check_text, TextKind};
//! assert!(check_text("Billing API", TextKind::Line).is_ok());
//! assert!(check_text("first line\n\tsecond", TextKind::Paragraph).is_ok());
//! assert!(check_text("first line\nsecond", TextKind::Line).is_err());
//! assert!(check_text("\u{1b}]52;c;aGk=\u{7}", TextKind::Paragraph).is_err());
//! ```

use crate::Violation;
use std::borrow::Cow;

/// What a piece of text is, which decides the only control characters it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// One line: a title, a name. No control character at all.
    Line,
    /// Prose: a description. Tab and line feed (U+0009, U+000A) only.
    Paragraph,
}

/// The text holds a character that acts rather than shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must not hold the control character U+{:04X}{}", u32::from(*.0), allowed_note(*.1))]
pub struct UnreadableText(pub char, pub TextKind);

fn allowed_note(kind: TextKind) -> &'static str {
    match kind {
        TextKind::Line => " (no control character, tab and line feed included)",
        TextKind::Paragraph => " (tab and line feed are the only ones allowed)",
    }
}

/// Whether `c` acts on whatever displays it: a C0 control (U+0000–U+001F), DEL (U+007F), a C1
/// control (U+0080–U+009F), or the line and paragraph separators U+2028 and U+2029.
pub fn is_control(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Refuses `text` when it holds a control character ([`is_control`]) other than those `kind`
/// allows; answers the first one found.
pub fn check_text(text: &str, kind: TextKind) -> Result<(), UnreadableText> {
    let allowed = |c: char| kind == TextKind::Paragraph && (c == '\t' || c == '\n');
    match text.chars().find(|&c| is_control(c) && !allowed(c)) {
        Some(c) => Err(UnreadableText(c, kind)),
        None => Ok(()),
    }
}

/// Whether `c` is a bidirectional formatting character (U+061C, U+200E–U+200F, U+202A–U+202E,
/// U+2066–U+2069): accepted in text (any script's writing may need one), but it reorders what a
/// terminal shows around it, so [`escape_controls`] writes it escaped.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// [`check_text`] as the violation of the member at `pointer` (`/title`, `/name`…), named
/// `name` in the message.
pub fn text_violation(pointer: &str, name: &str, text: &str, kind: TextKind) -> Option<Violation> {
    check_text(text, kind)
        .err()
        .map(|problem| Violation::new(pointer, format!("{name} {problem}")))
}

/// `text` as a terminal may print it raw: every control character ([`is_control`], tab and
/// line feed included) and bidirectional control ([`is_bidi_control`]) written as Rust writes
/// it escaped, `\u{1b}`; text without one is
/// borrowed as it is. What a command line prints of text it did not write itself (stored
/// before this rule, or a value the API does not check) goes through this, so that an ESC or
/// OSC 52 sequence never reaches the terminal.
///
/// ```
/// use registry_domain::text::escape_controls;
/// assert_eq!(escape_controls("plain"), "plain");
/// assert_eq!(escape_controls("\u{1b}]52;c;aGk=\u{7}"), "\\u{1b}]52;c;aGk=\\u{7}");
/// // A right-to-left override would make what follows it read backwards.
/// assert_eq!(escape_controls("k\u{202e}evil"), "k\\u{202e}evil");
/// ```
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let acts = |c: char| is_control(c) || is_bidi_control(c);
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if acts(c) {
            escaped.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_c0_c1_del_and_separator_is_refused_in_a_line() {
        let refused = (0u32..=0x1f)
            .chain([0x7f])
            .chain(0x80..=0x9f)
            .chain([0x2028, 0x2029])
            .filter_map(char::from_u32);
        for c in refused {
            let text = format!("a{c}b");
            assert_eq!(
                check_text(&text, TextKind::Line),
                Err(UnreadableText(c, TextKind::Line)),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn a_paragraph_may_hold_tab_and_line_feed_and_nothing_else() {
        assert!(check_text("one\n\ttwo", TextKind::Paragraph).is_ok());
        for bad in [
            "a\rb",
            "a\u{1b}[31mb",
            "a\u{85}b",
            "a\u{2029}b",
            "a\u{0}b",
            "a\u{7f}",
        ] {
            assert!(check_text(bad, TextKind::Paragraph).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn printable_text_of_any_script_passes() {
        for good in [
            "Billing API",
            "Café ☕ — 請求",
            "a\u{a0}b",
            "emoji 🧾",
            "x\u{200b}y",
        ] {
            assert!(check_text(good, TextKind::Line).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn escaped_text_holds_no_control_character() {
        let stored = "a\u{1b}[2J\u{9b}b\u{2028}\n\u{7f}";
        let shown = escape_controls(stored);
        assert_eq!(shown, "a\\u{1b}[2J\\u{9b}b\\u{2028}\\u{a}\\u{7f}");
        assert!(!shown.chars().any(is_control));
    }

    #[test]
    fn the_violation_points_at_the_member_and_names_the_character() {
        let violation = text_violation("/title", "title", "x\u{1b}y", TextKind::Line).unwrap();
        assert_eq!(violation.pointer, "/title");
        assert!(
            violation.message.contains("U+001B"),
            "{}",
            violation.message
        );
        assert!(text_violation("/title", "title", "fine", TextKind::Line).is_none());
    }
}
