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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
