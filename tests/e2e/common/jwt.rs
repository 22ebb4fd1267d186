//! Bearer tokens for the tests: Ed25519 keys whose public halves go in a
//! JWKS, and the claims a test signs with them.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// The issuer the servers under test trust.
pub const ISSUER: &str = "https://login.test.example/";
/// The audience they expect.
pub const AUDIENCE: &str = "https://tasks.test.example/mcp";

/// The key the server trusts (kid `k1`), and its public half.
pub const KEY_A: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJN+RI+anjOJeY/WAWRuOCfQYYah/UyZ7UcfweZq785u
-----END PRIVATE KEY-----
";
pub const KEY_A_X: &str = "dTzJ5kNMITGlxBPCwgqY4eT9TtY-_clIw0624DyhVs4";
/// Another key (kid `k2`): trusted only where a test says so.
pub const KEY_B: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIFvCXnBSvY9Ekx2J4PU/WDA9YYl88yFKFZueib1hAQwt
-----END PRIVATE KEY-----
";
pub const KEY_B_X: &str = "segPkfvQ5nbdEiMcb1bqxSxY6-RYC0em-bKmUpUJjjo";

/// The JWK of an Ed25519 public key.
pub fn jwk(kid: &str, x: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": kid, "x": x})
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// What a token says; `valid(sub)` is accepted, the others change one thing.
pub struct Claims {
    pub sub: String,
    pub iss: String,
    pub aud: String,
    pub exp: u64,
    pub kid: &'static str,
    pub key: &'static str,
}

impl Claims {
    pub fn valid(sub: &str) -> Self {
        Self {
            sub: sub.to_owned(),
            iss: ISSUER.to_owned(),
            aud: AUDIENCE.to_owned(),
            exp: now() + 3600,
            kid: "k1",
            key: KEY_A,
        }
    }

    pub fn sign(&self) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.to_owned());
        let claims = json!({
            "sub": self.sub, "iss": self.iss, "aud": self.aud,
            "exp": self.exp, "iat": now(),
        });
        jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_ed_pem(self.key.as_bytes()).unwrap(),
        )
        .unwrap()
    }
}
