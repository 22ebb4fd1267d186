//! The shape of one JSON-RPC message counted before it is parsed: how many
//! values and how deep, with serde_json's parser and a visitor that keeps
//! nothing, so that a message over [`JsonLimits`] costs no tree.

use rmcp::model::{ErrorData, RequestId};
use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use super::{super::options::JsonLimits, request_id};
use std::cell::{Cell, RefCell};

/// Counts the values and the nesting of the JSON text `bytes` without
/// building anything of it (serde_json's parser, with a visitor that keeps
/// nothing), and refuses it when it is over `limits`: `-32600` naming
/// `max_json_values` or `max_json_depth`, with the message's id when it was
/// read before the limit was. Text that is no JSON gets `-32700`, naming
/// `what` it is (the body, the line). Both transports check with it, before
/// the message is parsed.
pub(in crate::mcp) fn census(
    bytes: &[u8],
    limits: JsonLimits,
    what: &str,
) -> Result<(), (Option<RequestId>, ErrorData)> {
    let tally = Tally {
        limits,
        values: Cell::new(0),
        over: Cell::new(None),
        id: RefCell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = Counted {
        tally: &tally,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    let Err(e) = read else { return Ok(()) };
    let id = tally.id.take();
    let error = match tally.over.get() {
        Some(Over::Values) => over_limit(
            &format!(
                "the message holds more than {} JSON values",
                limits.max_values
            ),
            "max_json_values",
            limits.max_values,
        ),
        Some(Over::Depth) => over_limit(
            &format!(
                "the message nests arrays and objects deeper than {} levels",
                limits.max_depth
            ),
            "max_json_depth",
            limits.max_depth,
        ),
        None => {
            return Err((
                None,
                ErrorData::parse_error(format!("Parse error: the {what} is not JSON ({e})"), None),
            ));
        }
    };
    Err((id, error))
}

/// `-32600` for a message over one of its [`JsonLimits`], naming it.
fn over_limit(what: &str, limit: &str, max: usize) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "Invalid Request: {what} (the server's limit {limit}), so it was not read; \
             send a smaller message"
        ),
        Some(json!({"limit": limit, "max": max})),
    )
}

/// Which of the [`JsonLimits`] a message went over.
#[derive(Debug, Clone, Copy)]
enum Over {
    Values,
    Depth,
}

/// What [`census`] has counted so far.
struct Tally {
    limits: JsonLimits,
    values: Cell<usize>,
    over: Cell<Option<Over>>,
    /// The message's `id`, once read (a string or an integer).
    id: RefCell<Option<RequestId>>,
}

impl Tally {
    fn refuse<E: serde::de::Error>(&self, over: Over) -> E {
        self.over.set(Some(over));
        E::custom("over the server's JSON limits")
    }
}

/// One value at `depth`, counted and then read through, keeping nothing.
#[derive(Clone, Copy)]
struct Counted<'a> {
    tally: &'a Tally,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        let values = self.tally.values.get() + 1;
        if values > self.tally.limits.max_values {
            return Err(self.tally.refuse(Over::Values));
        }
        self.tally.values.set(values);
        de.deserialize_any(self)
    }
}

impl Counted<'_> {
    /// The same count one level down, unless that is too deep.
    fn nested<E: serde::de::Error>(self) -> Result<Self, E> {
        let depth = self.depth + 1;
        if depth > self.tally.limits.max_depth {
            return Err(self.tally.refuse(Over::Depth));
        }
        Ok(Self { depth, ..self })
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.nested()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.nested()?;
        let top = self.depth == 0;
        while let Some(key) = map.next_key::<Key>()? {
            if top && key == Key::Id {
                // The message's own `id`, for the answer to a refusal.
                map.next_value_seed(IdSeed(inner))?;
            } else {
                map.next_value_seed(inner)?;
            }
        }
        Ok(())
    }
}

/// An object key, read without keeping it: whether it is `id`.
#[derive(PartialEq, Eq)]
enum Key {
    Id,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }

            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(if key == "id" { Key::Id } else { Key::Other })
            }
        }
        de.deserialize_str(KeyVisitor)
    }
}

/// The top-level `id`: counted as any value, and kept when it is a string
/// or an integer.
struct IdSeed<'a>(Counted<'a>);

impl<'de> DeserializeSeed<'de> for IdSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        let Counted { tally, depth } = self.0;
        let values = tally.values.get() + 1;
        if values > tally.limits.max_values {
            return Err(tally.refuse(Over::Values));
        }
        tally.values.set(values);
        de.deserialize_any(IdVisitor(Counted { tally, depth }))
    }
}

struct IdVisitor<'a>(Counted<'a>);

impl IdVisitor<'_> {
    fn keep(&self, id: Value) {
        *self.0.tally.id.borrow_mut() = request_id(&id);
    }
}

impl<'de> Visitor<'de> for IdVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.keep(json!(v));
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.keep(json!(v));
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.keep(json!(v));
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.0.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.0.visit_map(map)
    }
}
