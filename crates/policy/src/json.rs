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

/// The first number of JSON `text` (already read by [`parse_unique`]) that a [`Value`] cannot
/// hold exactly, with its line and column (from 1, the column in bytes): an integer beyond 64
/// bits, or a fraction whose nearest `f64` is another number (`0.10000000000000000001`,
/// `1e-400`). Such a number would be written back as another one; `1e2` or `0.1`, which come
/// back as `100.0` and `0.1`, are the same numbers and pass.
pub fn inexact_number(text: &[u8]) -> Option<(usize, usize, &str)> {
    let (mut at, mut line, mut line_start) = (0, 1, 0);
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
                let number = std::str::from_utf8(&text[at..end]).ok()?;
                if !exact(number) {
                    return Some((line, at - line_start + 1, number));
                }
                at = end;
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

/// Whether the JSON number `text` comes back as the same number from a [`Value`].
fn exact(text: &str) -> bool {
    if !text.contains(['.', 'e', 'E']) {
        return text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok();
    }
    match text.parse::<f64>() {
        // serde_json writes an f64 in its shortest form, as `{:e}` does.
        Ok(float) if float.is_finite() => {
            let (given, written) = (decimal(text), decimal(&format!("{float:e}")));
            given.is_some() && given == written
        }
        _ => false,
    }
}

/// A decimal number's sign, significant digits and power of ten (a zero, whatever its sign, as
/// `(false, "", 0)`); `None` for an exponent beyond `i64`, of a number no `f64` holds.
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
    let power = exponent - fraction.len() as i64 + trailing as i64;
    Some((negative, significant.to_owned(), power))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_number_a_value_cannot_hold_is_found_where_it_is() {
        let found =
            |text: &str| inexact_number(text.as_bytes()).map(|(l, c, n)| (l, c, n.to_owned()));
        for kept in [
            r#"{"a": [0, -0, 1, -1, 9223372036854775807, -9223372036854775808]}"#,
            r#"{"a": 18446744073709551615, "b": 1e2, "c": 0.1, "d": -2.5E-3, "e": 1.0}"#,
            r#"{"a": 1.7976931348623157e308, "b": 5e-324, "c": 0.0e-999, "d": 100e-2}"#,
            r#"{"a\"1e999": "12345678901234567890123", "b": "0.1000000000000000000001"}"#,
        ] {
            assert_eq!(found(kept), None, "{kept}");
        }
        assert_eq!(
            found(r#"{"a": 18446744073709551616}"#),
            Some((1, 7, "18446744073709551616".into()))
        );
        assert_eq!(
            found("{\n  \"a\": [1,\n -9223372036854775809]}"),
            Some((3, 2, "-9223372036854775809".into()))
        );
        assert_eq!(
            found(r#"[0.10000000000000000001]"#).map(|f| f.2),
            Some("0.10000000000000000001".into())
        );
        assert_eq!(found(r#"[1.5e-400]"#).map(|f| f.2), Some("1.5e-400".into()));
        assert_eq!(
            found(r#"[1e-99999999999999999999]"#).map(|f| f.2),
            Some("1e-99999999999999999999".into())
        );
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
