//! JSON text read strictly: no object names a member twice. RFC 8259 leaves such a document's
//! meaning to each parser (serde_json keeps the last member, others the first), so a policy
//! document, a request's body or the claims to sign that name one twice are refused rather than
//! read as one reader guesses. The registry reads every text that comes in through this one
//! reader, so a document the engine takes here is one the registry takes too.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};

/// Parses JSON text in which no object, at any depth, names a member twice; such text fails
/// with an error for which [`named_twice`] holds, naming the member and where it stopped.
pub fn parse_unique(text: &[u8]) -> serde_json::Result<Value> {
    struct Unique(Value);
    struct UniqueVisitor;

    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(json: D) -> Result<Self, D::Error> {
            json.deserialize_any(UniqueVisitor).map(Unique)
        }
    }

    impl<'de> Visitor<'de> for UniqueVisitor {
        type Value = Value;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
            Ok(Value::Bool(b))
        }
        fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
            Ok(Value::from(n))
        }
        fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
            Ok(Value::from(n))
        }
        fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
            Ok(Value::from(n))
        }
        fn visit_str<E>(self, s: &str) -> Result<Value, E> {
            Ok(Value::from(s))
        }
        fn visit_string<E>(self, s: String) -> Result<Value, E> {
            Ok(Value::String(s))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
            let mut array = Vec::with_capacity(items.size_hint().unwrap_or(0));
            while let Some(Unique(item)) = items.next_element()? {
                array.push(item);
            }
            Ok(Value::Array(array))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
            let mut object = Map::new();
            while let Some(name) = members.next_key::<String>()? {
                let Unique(value) = members.next_value()?;
                match object.entry(name) {
                    Entry::Vacant(slot) => {
                        slot.insert(value);
                    }
                    Entry::Occupied(slot) => {
                        return Err(de::Error::custom(format_args!(
                            "the member {:?} appears twice in one object",
                            slot.key()
                        )))
                    }
                }
            }
            Ok(Value::Object(object))
        }
    }

    let mut json = serde_json::Deserializer::from_slice(text);
    let Unique(value) = Unique::deserialize(&mut json)?;
    json.end()?;
    Ok(value)
}

/// Whether `error`, from [`parse_unique`], is a member named twice (rather than text that is
/// not JSON).
pub fn named_twice(error: &serde_json::Error) -> bool {
    // The visitor takes every JSON type, so the only data error it raises is its own.
    error.classify() == serde_json::error::Category::Data
}

/// Whether `error`, from [`parse_unique`], is text that nests arrays and objects deeper than
/// serde_json reads (128 levels).
pub fn too_deep(error: &serde_json::Error) -> bool {
    error.is_syntax() && error.to_string().starts_with("recursion limit exceeded")
}

/// Whether `error`, from [`parse_unique`] of `text`, is a number past what serde_json reads
/// (beyond an f64's range, such as `1e400`): `Some` with the name of the member it is the
/// value of when it is a member's (`None` in an array), so that a refusal names it.
pub fn out_of_range<'t>(error: &serde_json::Error, text: &'t [u8]) -> Option<Option<&'t str>> {
    if !(error.is_syntax() && error.to_string().starts_with("number out of range")) {
        return None;
    }
    // Where serde_json stopped, in bytes: its column counts bytes from the line's start.
    let line_starts = (text.split_inclusive(|b| *b == b'\n')).take(error.line().saturating_sub(1));
    let at = line_starts.map(<[u8]>::len).sum::<usize>() + error.column();
    let before = std::str::from_utf8(&text[..at.min(text.len())]).ok();
    // The member's name is the last string before the last colon (a number holds neither).
    let member = before.and_then(|before| {
        let (name, value) = before.rsplit_once(':')?;
        let name = name.trim_end().strip_suffix('"')?;
        let name = &name[name.rfind('"')? + 1..];
        (!value.contains([',', '['])).then_some(name)
    });
    Some(member)
}

/// Where `value`, read from `text` by [`parse_unique`], holds a number it would write back as
/// another number, as an RFC 6901 pointer and a sentence naming the number, its line and
/// column, and what to do: more significant digits than a double keeps, an integer beyond 64
/// bits that no double holds, or a number below a double's range. Every reader whose value is
/// written on (an API body, a file the command line or `sync` uploads) refuses such text rather
/// than change it.
pub fn number_changed(text: &[u8], value: &Value) -> Option<(String, String)> {
    let number = inexact_number(text)?;
    let sentence = format!(
        "the number {} (line {}, column {}) would be kept as another number: more digits than \
         a double keeps, an integer beyond 64 bits, or below a double's range; send it as a \
         string",
        number.text, number.line, number.column
    );
    Some((number_pointer(value, number.index), sentence))
}

/// A number of JSON text that a [`Value`] would write back as another number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InexactNumber<'t> {
    /// The number as the text writes it.
    text: &'t str,
    /// Its line, from 1.
    line: usize,
    /// Its column in bytes, from 1.
    column: usize,
    /// How many numbers come before it in the text: a [`Value`] read with `preserve_order`
    /// visits its numbers in the same order ([`number_pointer`]).
    index: usize,
}

/// The first number of JSON `text` (already read by [`parse_unique`]) that a [`Value`] would
/// write back as another number: more significant digits than a double keeps
/// (`0.10000000000000000001`), an integer beyond 64 bits that no double holds
/// (`18446744073709551616`), or a number below a double's range (`1e-400`). `1e2` or
/// `100000000000000000000`, written back as `100.0` and `1e20`, are the same numbers and pass.
fn inexact_number(text: &[u8]) -> Option<InexactNumber<'_>> {
    let (mut at, mut line, mut line_start, mut index) = (0, 1, 0, 0);
    while at < text.len() {
        match text[at] {
            b'"' => {
                // A string's bytes hold no number; `\"` does not end it.
                at += 1;
                while at < text.len() && text[at] != b'"' {
                    at += if text[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let end = text[at..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(text.len(), |length| at + length);
                // ASCII by the match above; were it not, the number would be refused.
                let number = std::str::from_utf8(&text[at..end]).unwrap_or_default();
                if !written_back_as_sent(number) {
                    return Some(InexactNumber {
                        text: number,
                        line,
                        column: at - line_start + 1,
                        index,
                    });
                }
                (at, index) = (end, index + 1);
            }
            b'\n' => {
                at += 1;
                (line, line_start) = (line + 1, at);
            }
            _ => at += 1,
        }
    }
    None
}

/// Whether the JSON number `text` is written back by a [`Value`] as the same number: read and
/// written by serde_json itself, whose writer breaks a tie of two shortest forms its own way.
fn written_back_as_sent(text: &str) -> bool {
    // An integer of 64 bits (a time, a count: most numbers a body holds) is kept as it is,
    // known so without a value's reading and writing.
    let magnitude = text.strip_prefix('-').unwrap_or(text);
    if magnitude.bytes().all(|b| b.is_ascii_digit())
        && (text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok())
    {
        return true;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) => decimal(text).is_some_and(|sent| decimal(&value.to_string()) == Some(sent)),
        Err(_) => false,
    }
}

/// A decimal number's sign, significant digits and power of ten (a zero, whatever its sign, as
/// `(false, "", 0)`); `None` when its power of ten is beyond `i64`, which no double reaches.
fn decimal(text: &str) -> Option<(bool, String, i64)> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    if significant.is_empty() {
        return Some((false, String::new(), 0));
    }
    let trailing = digits.len() - digits.trim_end_matches('0').len();
    let exponent: i64 = exponent
        .strip_prefix('+')
        .unwrap_or(exponent)
        .parse()
        .ok()?;
    let shift = i64::try_from(trailing).ok()? - i64::try_from(fraction.len()).ok()?;
    Some((
        negative,
        significant.to_owned(),
        exponent.checked_add(shift)?,
    ))
}

/// The RFC 6901 pointer of the `index`-th number of `value` in document order (members in the
/// order they were read, as `preserve_order` keeps them), `""` when it has fewer.
fn number_pointer(value: &Value, index: usize) -> String {
    fn find(value: &Value, index: &mut usize, at: &mut String) -> bool {
        match value {
            Value::Number(_) if *index == 0 => true,
            Value::Number(_) => {
                *index -= 1;
                false
            }
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let depth = at.len();
                at.push_str(&format!("/{i}"));
                let found = find(item, index, at);
                if !found {
                    at.truncate(depth);
                }
                found
            }),
            Value::Object(members) => members.iter().any(|(name, item)| {
                let depth = at.len();
                at.push('/');
                at.push_str(&name.replace('~', "~0").replace('/', "~1"));
                let found = find(item, index, at);
                if !found {
                    at.truncate(depth);
                }
                found
            }),
            _ => false,
        }
    }
    let mut at = String::new();
    match find(value, &mut { index }, &mut at) {
        true => at,
        false => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_number_a_value_cannot_hold_is_found_where_it_is() {
        let found = |text: &str| {
            inexact_number(text.as_bytes()).map(|n| (n.line, n.column, n.text.to_owned(), n.index))
        };
        for kept in [
            r#"{"a": [0, -0, 1, -1, 9223372036854775807, -9223372036854775808]}"#,
            r#"{"a": 18446744073709551615, "b": 1e2, "c": 0.1, "d": -2.5E-3, "e": 1.0}"#,
            r#"{"a": 1.7976931348623157e308, "b": 5e-324, "c": 0.0e-999, "d": 100e-2}"#,
            r#"{"a\"1e999": "12345678901234567890123", "b": "0.1000000000000000000001"}"#,
            r#"{"a": 100000000000000000000, "b": 1E+2, "c": -0.0, "d": 1700000000.1234567}"#,
            r#"{"a\\": 1, "é": 2.5}"#,
            "0e-99999999999999999999",
            // serde_json writes this double 1658206780088562.2 (the other shortest form, …2.3,
            // is Rust's `{:e}`): what it writes is what passes.
            "[1658206780088562.2]",
        ] {
            assert_eq!(found(kept), None, "{kept}");
        }
        assert_eq!(
            found(r#"{"a": 18446744073709551616}"#),
            Some((1, 7, "18446744073709551616".into(), 0))
        );
        assert_eq!(
            found("{\n  \"a\": [1,\n -9223372036854775809]}"),
            Some((3, 2, "-9223372036854775809".into(), 1))
        );
        assert_eq!(
            found(r#"{"é\\": [2, 1.5e-400]}"#),
            Some((1, 14, "1.5e-400".into(), 1))
        );
        for refused in [
            "0.10000000000000000001",
            "1658206780088562.3",
            "1e-99999999999999999999",
            "1.5e-9223372036854775808",
            "0.10000000000000001",
        ] {
            assert_eq!(
                found(refused).map(|f| f.2),
                Some(refused.into()),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_number_is_pointed_at_in_document_order() {
        let value = json!({"a": [1, {"b~/c": 2}], "d": "3", "e": 4});
        assert_eq!(number_pointer(&value, 0), "/a/0");
        assert_eq!(number_pointer(&value, 1), "/a/1/b~0~1c");
        assert_eq!(number_pointer(&value, 2), "/e");
        assert_eq!(number_pointer(&value, 3), "");
        assert_eq!(number_pointer(&json!(7), 0), "");
    }

    #[test]
    fn a_number_out_of_range_is_told_with_its_member() {
        let read = |text: &str| {
            let error = parse_unique(text.as_bytes()).unwrap_err();
            out_of_range(&error, text.as_bytes()).map(|m| m.map(str::to_owned))
        };
        assert_eq!(read(r#"{"iss":"a","exp":1e400}"#), Some(Some("exp".into())));
        assert_eq!(
            read("{\n  \"a\": {\"nbf\" :\n -1e999}}"),
            Some(Some("nbf".into()))
        );
        assert_eq!(read(r#"{"exp":[1,1e400]}"#), Some(None));
        assert_eq!(read(r#"{"exp":1,"#), None);
    }

    #[test]
    fn a_member_named_twice_is_refused_at_any_depth() {
        let parsed = |text: &str| parse_unique(text.as_bytes()).map_err(|e| e.to_string());
        assert_eq!(
            parsed(r#"{"a": [1, -2, 2.5, "x", null, true], "b": {"c": {}}}"#),
            Ok(json!({"a": [1, -2, 2.5, "x", null, true], "b": {"c": {}}}))
        );
        let twice = parsed(
            r#"{"name": "a", "policy": {"rules": [{"services": ["web-*"], "services": ["*"]}]}}"#,
        )
        .unwrap_err();
        assert!(
            twice.starts_with(r#"the member "services" appears twice in one object at line 1"#),
            "{twice}"
        );
        let same = parse_unique(br#"{"a": 1, "a": 1}"#).unwrap_err();
        assert!(named_twice(&same), "{same}");
        let broken = parse_unique(br#"{"a": 1,"#).unwrap_err();
        assert!(!named_twice(&broken), "{broken}");
        assert!(parsed(r#"[{"a": 1}, {"a": 2}]"#).is_ok());
        assert!(parsed(r#"{"a": 1} {}"#).is_err(), "trailing text");
        assert_eq!(parsed(" 7 "), Ok(json!(7)));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let refused = parse_unique(deep.as_bytes()).unwrap_err();
        assert!(too_deep(&refused) && !named_twice(&refused), "{refused}");
        assert!(!too_deep(&broken));
    }
}
