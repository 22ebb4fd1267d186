//! MRTR rounds of an inline call: the journal travels to the client and back
//! in `requestState`, encrypted and authenticated with XChaCha20-Poly1305
//! (RustCrypto's `chacha20poly1305`), bound to the caller, the tool and its
//! arguments (the AEAD's associated data), good for one hour, and spent the
//! first time it comes back (recorded in the store, so a replay is refused
//! by every instance that shares it).
//!
//! The state also names the keys of the questions its round asked: the
//! retry's `inputResponses` are taken for those keys only, and any other key
//! is ignored (tasks ext. `tasks/update`), so that no question is answered
//! before the client was shown it. A first call (no `requestState`) has been
//! asked nothing: its `inputResponses`, if any, are all ignored.
//!
//! The sealed form is `v1.` followed by unpadded base64url of the 24-byte
//! random nonce and the ciphertext. The nonce, in hex, is also the state's
//! single-use id.

use std::{fmt, str::FromStr, time::Duration};

use base64::Engine as _;
use chacha20poly1305::{
    XChaCha20Poly1305, XNonce,
    aead::{Aead, KeyInit, Payload},
};
use rmcp::ErrorData as McpError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{journal::JournalEntry, tool::JsonObject};

/// What comes before the base64 of a sealed state: the format's version.
const PREFIX: &str = "v1.";

/// Associated data that names what the state is, before the binding.
const DOMAIN: &[u8] = b"mcp-tasks requestState v1\0";

/// A key that encrypts MRTR `requestState`: 32 random bytes.
///
/// Parse one from 64 hex digits or from base64 (standard or URL-safe, with
/// or without padding); anything else — a passphrase, a shorter or longer
/// key — is refused with [`RequestStateKeyError`]. Make one with
/// `openssl rand -hex 32`, or [`RequestStateKey::random`].
///
/// ```
/// use mcp_tasks_runtime::mcp::RequestStateKey;
///
/// let key: RequestStateKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f".parse()?;
/// assert_eq!(key, RequestStateKey::parse("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")?);
/// assert!(RequestStateKey::parse("correct horse battery staple").is_err());
/// # Ok::<(), mcp_tasks_runtime::mcp::RequestStateKeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RequestStateKey([u8; 32]);

impl RequestStateKey {
    /// Parses a key written as 64 hex digits or as base64 of 32 bytes.
    ///
    /// # Errors
    ///
    /// [`RequestStateKeyError`], saying what was expected (the key itself is not
    /// repeated in the message).
    pub fn parse(text: &str) -> Result<Self, RequestStateKeyError> {
        let text = text.trim();
        if let Ok(bytes) = hex::decode(text) {
            return Self::exact(&bytes, text);
        }
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        let decoded = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(text).ok());
        match decoded {
            Some(bytes) => Self::exact(&bytes, text),
            None => Err(RequestStateKeyError(format!(
                "the requestState key ({} characters) is neither hex nor base64: {}",
                text.chars().count(),
                RequestStateKeyError::EXPECTED
            ))),
        }
    }

    fn exact(bytes: &[u8], text: &str) -> Result<Self, RequestStateKeyError> {
        <[u8; 32]>::try_from(bytes).map(Self).map_err(|_| {
            RequestStateKeyError(format!(
                "the requestState key ({} characters) decodes to {} bytes, not 32: {}",
                text.chars().count(),
                bytes.len(),
                RequestStateKeyError::EXPECTED
            ))
        })
    }

    /// A key drawn from the operating system's random number generator.
    ///
    /// # Panics
    ///
    /// When that generator fails.
    pub fn random() -> Self {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).expect("the operating system's random number generator failed");
        Self(k)
    }

    /// The key as 64 hex digits (to store it where the servers read it).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&self.0).into())
    }
}

impl FromStr for RequestStateKey {
    type Err = RequestStateKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Debug for RequestStateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestStateKey(..)")
    }
}

/// A `requestState` key that is not 32 bytes in hex or base64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStateKeyError(String);

impl RequestStateKeyError {
    const EXPECTED: &str = "it must be 32 random bytes, written as 64 hex digits or in base64 \
         (make one with `openssl rand -hex 32`); passphrases are not accepted";
}

impl fmt::Display for RequestStateKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RequestStateKeyError {}

/// Seals and opens `requestState`: the current key seals, and it or any
/// old key opens (key rotation).
pub(crate) struct Sealer {
    current: XChaCha20Poly1305,
    old: Vec<XChaCha20Poly1305>,
    ttl: Duration,
}

impl Sealer {
    /// A sealer whose states `key` seals, good for `ttl`.
    pub(crate) fn new(key: &RequestStateKey, ttl: Duration) -> Self {
        Self {
            current: key.cipher(),
            old: Vec::new(),
            ttl,
        }
    }

    /// Seals with `key` from now on.
    pub(crate) fn seal_with(&mut self, key: &RequestStateKey) {
        self.current = key.cipher();
    }

    /// Opens states `key` sealed too.
    pub(crate) fn open_also(&mut self, key: &RequestStateKey) {
        self.old.push(key.cipher());
    }

    /// Seals `journal`, and the keys of the questions this round `asked`,
    /// for the next round of the call `binding` names.
    pub(crate) fn seal(
        &self,
        journal: Vec<JournalEntry>,
        asked: Vec<String>,
        binding: &[u8],
        now_ms: i64,
    ) -> Result<String, McpError> {
        let ttl = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        let plain = serde_json::to_vec(&InlineState {
            expires_at_ms: now_ms.saturating_add(ttl),
            journal,
            asked,
        })
        .map_err(|e| McpError::internal_error(format!("cannot encode requestState: {e}"), None))?;
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).map_err(|e| {
            McpError::internal_error(format!("no random nonce for requestState: {e}"), None)
        })?;
        let aad = aad(binding);
        let sealed = self
            .current
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: &aad,
                },
            )
            .map_err(|_| McpError::internal_error("cannot encrypt requestState", None))?;
        let mut out = nonce.to_vec();
        out.extend(sealed);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
        ))
    }

    /// Opens a state sealed for `binding` that has not expired by `now_ms`.
    pub(crate) fn open(
        &self,
        sealed: &str,
        binding: &[u8],
        now_ms: i64,
    ) -> Result<Opened, McpError> {
        let invalid = |why: &str| {
            McpError::invalid_params(
                format!(
                    "invalid requestState ({why}): send back exactly the requestState the \
                     server gave for this call, with the same tool and arguments"
                ),
                None,
            )
        };
        let bytes = sealed
            .strip_prefix(PREFIX)
            .and_then(|b64| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(b64)
                    .ok()
            })
            .filter(|b| b.len() > 24)
            .ok_or_else(|| invalid("not a state this server made"))?;
        let (nonce, ciphertext) = bytes.split_at(24);
        let aad = aad(binding);
        let plain = std::iter::once(&self.current)
            .chain(&self.old)
            .find_map(|cipher| {
                cipher
                    .decrypt(
                        XNonce::from_slice(nonce),
                        Payload {
                            msg: ciphertext,
                            aad: &aad,
                        },
                    )
                    .ok()
            })
            .ok_or_else(|| {
                invalid("it does not verify: altered, made with another key, or for another call")
            })?;
        let state: InlineState =
            serde_json::from_slice(&plain).map_err(|_| invalid("unreadable"))?;
        if state.expires_at_ms <= now_ms {
            return Err(invalid("expired: start the call again"));
        }
        Ok(Opened {
            id: nonce.iter().map(|b| format!("{b:02x}")).collect(),
            expires_at_ms: state.expires_at_ms,
            journal: state.journal,
            asked: state.asked,
        })
    }
}

/// An opened `requestState`.
pub(crate) struct Opened {
    /// Its single-use id.
    pub(crate) id: String,
    /// When it stops being accepted, Unix milliseconds.
    pub(crate) expires_at_ms: i64,
    /// The journal of the earlier rounds.
    pub(crate) journal: Vec<JournalEntry>,
    /// The keys of the questions the last round asked: the only answers
    /// the retry may carry.
    pub(crate) asked: Vec<String>,
}

/// What an MRTR `requestState` carries between rounds of an inline call.
#[derive(Serialize, Deserialize)]
struct InlineState {
    #[serde(rename = "exp")]
    expires_at_ms: i64,
    journal: Vec<JournalEntry>,
    /// Keys asked in the round that sealed it (a state sealed before keys
    /// were recorded has none: its answers are asked for again).
    #[serde(default)]
    asked: Vec<String>,
}

fn aad(binding: &[u8]) -> Vec<u8> {
    let mut aad = DOMAIN.to_vec();
    aad.extend_from_slice(binding);
    aad
}

/// Binds a `requestState` to the caller, the tool and its arguments.
pub(crate) fn state_binding(principal: Option<&str>, tool: &str, args: &JsonObject) -> Vec<u8> {
    let mut ad = principal.unwrap_or_default().as_bytes().to_vec();
    ad.push(0);
    ad.extend(tool.as_bytes());
    ad.push(0);
    canonical(&Value::Object(args.clone()), &mut ad);
    ad
}

/// Writes `v` as JSON with object keys sorted at every level, so that the
/// binding does not depend on the order a client sends keys in (serde_json
/// keeps insertion order when a crate in the build enables `preserve_order`).
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(&Value::String(k.clone()), out);
                out.push(b':');
                canonical(&map[k], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::{RequestStateKey, Sealer, state_binding};

    #[test]
    fn binding_ignores_key_order_but_not_values_tools_or_principals() {
        let a = json!({"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}, "b": 1});
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(state_binding(None, "t", a), state_binding(None, "t", b));
        assert_ne!(state_binding(None, "t", a), state_binding(None, "u", a));
        assert_ne!(
            state_binding(Some("alice"), "t", a),
            state_binding(Some("bob"), "t", a)
        );
        let c = json!({"b": 2, "a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}});
        assert_ne!(
            state_binding(None, "t", a),
            state_binding(None, "t", c.as_object().unwrap())
        );
    }

    #[test]
    fn sealed_states_are_opaque_bound_expiring_and_rotatable() {
        let (k1, k2) = (RequestStateKey::random(), RequestStateKey::random());
        let sealer = Sealer::new(&k1, Duration::from_secs(60));
        let journal = vec![crate::journal::JournalEntry {
            position: 0,
            kind: crate::journal::StepKind::Checkpoint,
            name: "token".into(),
            value: json!("s3cret-token-value"),
        }];
        let sealed = sealer
            .seal(journal.clone(), vec!["token".into()], b"bind", 1_000)
            .unwrap();
        assert!(!sealed.contains("s3cret"));
        let opened = sealer.open(&sealed, b"bind", 2_000).unwrap();
        assert_eq!(opened.journal, journal);
        assert_eq!(opened.asked, ["token"]);
        assert_eq!(opened.expires_at_ms, 61_000);
        assert!(sealer.open(&sealed, b"other", 2_000).is_err(), "bound");
        assert!(sealer.open(&sealed, b"bind", 61_000).is_err(), "expired");
        // Rotation: a server with a new key still reads states of the old.
        let mut rotated = Sealer::new(&k2, Duration::from_secs(60));
        rotated.open_also(&k1);
        assert!(rotated.open(&sealed, b"bind", 2_000).is_ok());
        let stranger = Sealer::new(&k2, Duration::from_secs(60));
        assert!(stranger.open(&sealed, b"bind", 2_000).is_err());
    }
}
