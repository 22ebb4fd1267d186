//! The key of MCP `requestState`: 32 bytes, written in hex or base64, and
//! nothing else.

use mcp_tasks_runtime::mcp::RequestStateKey;

#[test]
fn keys_are_32_bytes_in_hex_or_base64_only() {
    let hex = "00".repeat(32);
    assert_eq!(RequestStateKey::parse(&hex).unwrap().to_hex(), hex);
    assert!(
        RequestStateKey::parse(&format!(" {hex}\n")).is_ok(),
        "whitespace around is fine"
    );
    assert!(RequestStateKey::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").is_ok());
    for bad in [
        "",
        "hunter2",
        &"00".repeat(31),
        &"00".repeat(33),
        &"a".repeat(100),
    ] {
        let e = RequestStateKey::parse(bad).unwrap_err().to_string();
        assert!(e.contains("32 random bytes"), "{bad:?}: {e}");
        assert!(
            bad.len() < 4 || !e.contains(bad),
            "the key is not echoed: {e}"
        );
    }
    let k = RequestStateKey::random();
    assert_eq!(RequestStateKey::parse(&k.to_hex()).unwrap(), k);
    assert_eq!(format!("{k:?}"), "RequestStateKey(..)");
}
