//! Every client bounded, against the demo as a process on 127.0.0.1 (and a
//! server in-process, for a principal function), over real HTTP from
//! several loopback addresses (Linux routes all of 127.0.0.0/8 to the
//! loopback device): a body that trickles is cut at its deadline while
//! others are served, connections and sessions are capped per client and
//! in total, a principal function counts and binds sessions, and an ended
//! 2025-11-25 session is 404 to every request.

mod common;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::{Duration, Instant},
};

use common::{
    legacy::{demo, store_bytes},
    request,
    session::{Session, http, initialize, initialize_params, rss_bytes},
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

/// Loopback address 127.0.0.`n`.
fn local(n: u8) -> IpAddr {
    Ipv4Addr::new(127, 0, 0, n).into()
}

/// The server's socket address.
fn socket(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// A TCP connection to `to` from loopback address `from`.
async fn connect(from: IpAddr, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// A client at `from` that sends a POST's head, then its body one byte
/// every 2 s: what the server answered, and when it closed the connection.
fn trickle(from: IpAddr, to: SocketAddr) -> tokio::task::JoinHandle<(String, Duration)> {
    tokio::spawn(async move {
        let started = Instant::now();
        let stream = connect(from, to).await;
        let (mut read, mut write) = tokio::io::split(stream);
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {to}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n"
        );
        let _ = write.write_all(head.as_bytes()).await;
        let writer = tokio::spawn(async move {
            loop {
                if write.write_all(b" ").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let reply = request::until_closed(&mut read, Duration::from_secs(40)).await;
        writer.abort();
        (reply, started.elapsed())
    })
}

/// `server/discover` from loopback address `from`: the HTTP status and body.
async fn discover_from(from: IpAddr, url: &str) -> (u16, String) {
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .local_address(from)
        .build()
        .unwrap()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "server/discover")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }}}),
        )
        .send()
        .await
        .expect("the server answers");
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Asserts each trickler got 408 naming `body_read_timeout`, cut at the
/// 4 s deadline (not before, and not much after).
async fn cut_at_the_deadline(tricklers: Vec<tokio::task::JoinHandle<(String, Duration)>>) {
    for t in tricklers {
        let (reply, after) = t.await.unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 408"),
            "a trickling body gets 408: {reply}"
        );
        assert!(reply.contains("body_read_timeout"), "{reply}");
        assert!(
            after >= Duration::from_millis(3500) && after < Duration::from_secs(12),
            "cut after {after:?}, the deadline is 4 s"
        );
    }
}

/// Loopback addresses counted apart: a client whose trickling bodies hold
/// its every connection (a third is refused at once) does not stop
/// another address from being served at once, and the tricklers are cut at
/// the whole-body deadline although a byte arrives every 2 s.
#[tokio::test]
async fn trickling_bodies_are_cut_and_another_address_is_served_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(
        dir.path(),
        &[
            "--loopback-addresses-apart",
            "--max-connections-per-client",
            "2",
            "--body-read-timeout",
            "4s",
        ],
    );
    let to = socket(&server.url);
    let mut tricklers = Vec::new();
    for _ in 0..2 {
        tricklers.push(trickle(local(3), to));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (refused, after) = trickle(local(3), to).await.unwrap();
    assert!(
        refused.starts_with("HTTP/1.1 429"),
        "over the cap: {refused}"
    );
    assert!(refused.contains("max_connections_per_client"), "{refused}");
    assert!(after < Duration::from_secs(2), "refused after {after:?}");
    let started = Instant::now();
    let (status, body) = discover_from(local(4), &server.url).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "another address waited {:?}",
        started.elapsed()
    );
    cut_at_the_deadline(tricklers).await;
}

/// By default every loopback address is one client (4 times the cap): when
/// tricklers on several 127.x addresses hold this machine's connections,
/// one more is refused at once (not left in the backlog), and a client on
/// yet another 127.x address is served once the deadline has cut them.
#[tokio::test]
async fn trickling_bodies_are_cut_and_this_machine_is_served_after_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(
        dir.path(),
        &[
            "--max-connections-per-client",
            "2",
            "--body-read-timeout",
            "4s",
        ],
    );
    let to = socket(&server.url);
    let started = Instant::now();
    let tricklers: Vec<_> = (2..10).map(|n| trickle(local(n), to)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = discover_from(local(20), &server.url).await;
    assert_eq!(status, 429, "this machine's 8 connections are held: {body}");
    assert!(body.contains("max_connections_per_client"), "{body}");
    let served = loop {
        let (status, body) = discover_from(local(20), &server.url).await;
        if status == 200 {
            break started.elapsed();
        }
        assert_eq!(status, 429, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(12),
            "not served {:?} after the tricklers started",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(
        served >= Duration::from_millis(3500),
        "served after {served:?}"
    );
    cut_at_the_deadline(tricklers).await;
}

/// One more connection than its client's cap is answered 429 at once,
/// naming the limit, and closed; another address is served; a closed
/// connection gives its place back.
#[tokio::test]
async fn the_connection_over_a_clients_cap_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(
        dir.path(),
        &[
            "--loopback-addresses-apart",
            "--max-connections-per-client",
            "1",
        ],
    );
    let to = socket(&server.url);
    // Idle: held open by the server for the header timeout (10 s).
    let held = connect(local(5), to).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let (mut read, mut write) = tokio::io::split(connect(local(5), to).await);
    let _ = write
        .write_all(format!("GET /mcp HTTP/1.1\r\nHost: {to}\r\n\r\n").as_bytes())
        .await;
    let reply = request::until_closed(&mut read, Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert!(
        reply.to_lowercase().contains("connection: close"),
        "{reply}"
    );
    assert!(reply.contains("max_connections_per_client"), "{reply}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let (status, body) = discover_from(local(6), &server.url).await;
    assert_eq!(status, 200, "another address: {body}");
    drop(held);
    let freed = Instant::now();
    loop {
        let (status, body) = discover_from(local(5), &server.url).await;
        if status == 200 {
            break;
        }
        assert!(freed.elapsed() < Duration::from_secs(3), "{status}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens sessions from 127.0.0.2 to 127.0.0.25 in turn until one is
/// refused: the ids opened, and the refusal's JSON-RPC error.
async fn open_until_refused(url: &str, most: usize) -> (Vec<String>, Value) {
    let clients: Vec<reqwest::Client> = (2..26)
        .map(|n| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .local_address(local(n))
                .build()
                .unwrap()
        })
        .collect();
    let mut open = Vec::new();
    loop {
        let client = &clients[open.len() % clients.len()];
        let resp = initialize(client, url, &initialize_params(), None).await;
        if resp.status() != 200 {
            assert_eq!(resp.status(), 429);
            let body: Value = resp.json().await.unwrap();
            return (open, body["error"].clone());
        }
        open.push(
            resp.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
        assert!(open.len() <= most, "no cap after {} sessions", open.len());
    }
}

/// Sessions opened from 24 loopback addresses stop at this machine's cap
/// (4 times `max_sessions_per_client`) by default, and, counted apart, at
/// the total cap; the server's memory and store stay bounded.
#[tokio::test]
async fn sessions_from_many_loopback_addresses_stop_at_the_caps() {
    let dir = tempfile::tempdir().unwrap();
    let one = demo(dir.path(), &["--max-sessions-per-client", "8"]);
    let (open, error) = open_until_refused(&one.url, 32).await;
    assert_eq!(open.len(), 32, "4 x 8 for this machine");
    assert_eq!(
        error["data"]["limit"], "max_sessions_per_client",
        "{error:#}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_sessions_per_client"),
        "{error:#}"
    );
    drop(one);

    let dir = tempfile::tempdir().unwrap();
    let apart = demo(
        dir.path(),
        &[
            "--loopback-addresses-apart",
            "--max-sessions-per-client",
            "8",
            "--max-sessions",
            "150",
        ],
    );
    let (rss_before, store_before) = (rss_bytes(apart.pid()), store_bytes(dir.path()));
    let (open, error) = open_until_refused(&apart.url, 150).await;
    assert_eq!(open.len(), 150, "the total cap, under 24 x 8");
    assert_eq!(error["data"]["limit"], "max_sessions", "{error:#}");
    assert!(
        error["message"].as_str().unwrap().contains("max_sessions"),
        "{error:#}"
    );
    let (rss_after, store_after) = (rss_bytes(apart.pid()), store_bytes(dir.path()));
    // Measured: about 51 KB of memory and 1 to 2 KB of store a session
    // (debug build, small params); bounds several times that, for noise.
    assert!(
        rss_after < rss_before + 150 * 400 * 1024 + 32 * 1024 * 1024,
        "RSS grew from {rss_before} to {rss_after} bytes for 150 sessions"
    );
    assert!(
        store_after < store_before + 150 * 16 * 1024 + 4 * 1024 * 1024,
        "the store grew from {store_before} to {store_after} bytes for 150 sessions"
    );
    // A place frees up when one ends.
    let ended = Session {
        http: http(),
        url: apart.url.clone(),
        id: open[0].clone(),
        token: None,
    };
    assert_eq!(ended.delete().await, 200);
    let resp = initialize(&http(), &apart.url, &initialize_params(), None).await;
    assert_eq!(resp.status(), 200, "a place was free again");
}

/// A server in-process on 127.0.0.1 whose principal function names the
/// caller by its `x-user` header, at most 2 sessions per client.
async fn serve_with_principal() -> String {
    use mcp_tasks_runtime::{
        Engine,
        mcp::{self, HttpOptions, TaskServer},
        store::MemoryStore,
        tool::Registry,
    };
    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new())
        .start()
        .await
        .unwrap();
    let server = TaskServer::builder(engine)
        .principal(|parts: &axum::http::request::Parts| {
            let user = parts.headers.get("x-user")?.to_str().ok()?;
            Some(user.to_owned())
        })
        .http(HttpOptions::default().max_sessions_per_client(2))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server).into_future());
    url
}

/// An HTTP client that names itself `user`.
fn as_user(user: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-user", user.parse().unwrap());
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .default_headers(headers)
        .build()
        .unwrap()
}

/// Sessions are counted and bound by the principal function's answer, on
/// one address: one principal at its cap does not block another, and a
/// session of one is unknown (404) to the other.
#[tokio::test]
async fn a_principal_function_counts_and_binds_sessions() {
    let url = serve_with_principal().await;
    let (alice, bob) = (as_user("alice"), as_user("bob"));
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let resp = initialize(&alice, &url, &initialize_params(), None).await;
        assert_eq!(resp.status(), 200);
        sessions.push(
            resp.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
    }
    let refused = initialize(&alice, &url, &initialize_params(), None).await;
    assert_eq!(refused.status(), 429, "alice's third session");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["error"]["data"]["limit"], "max_sessions_per_client",
        "{body:#}"
    );
    let resp = initialize(&bob, &url, &initialize_params(), None).await;
    assert_eq!(resp.status(), 200, "bob is not alice, on the same address");

    let in_session = |client: &reqwest::Client| {
        client
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &sessions[0])
            .header("MCP-Protocol-Version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    };
    assert_eq!(
        in_session(&bob).send().await.unwrap().status(),
        404,
        "alice's session, to bob"
    );
    assert_eq!(
        in_session(&alice).send().await.unwrap().status(),
        202,
        "alice's own"
    );
}

/// N5: once a 2025-11-25 session has ended, every request naming it gets
/// 404, a second `DELETE` too, and so does a `DELETE` of an id never issued.
#[tokio::test]
async fn an_ended_session_is_not_found_to_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(dir.path(), &[]);
    let session = Session::open(&server.url, None).await;
    let listed = session.request(1, "tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed:#}");
    assert_eq!(session.delete().await, 200);
    let post = session
        .post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 404, "a POST in the ended session");
    let get = session
        .with_headers(session.http.get(&session.url))
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 404, "a GET in the ended session");
    assert_eq!(session.delete().await, 404, "a second DELETE");
    let never = Session {
        id: "never-issued-0123456789abcdef".into(),
        ..session
    };
    assert_eq!(never.delete().await, 404, "a DELETE of an id never issued");
}

/// At the default `body_read_timeout` (120 s), with every connection slot
/// (`--max-connections 20`) held by short bodies trickled a byte every 2 s
/// from this machine: each is cut within seconds (5 s plus 1 s per 32 KiB
/// of its `Content-Length`), and a client waiting meanwhile is served once
/// they are, not after the whole timeout.
#[tokio::test]
async fn short_trickled_bodies_free_their_slots_within_seconds_at_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(dir.path(), &["--max-connections", "20"]);
    let to = socket(&server.url);
    let tricklers: Vec<_> = (2..22).map(|n| trickle(local(n), to)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let (status, body) = discover_from(local(30), &server.url).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "served after {:?}: the tricklers held the slots",
        started.elapsed()
    );
    for t in tricklers {
        let (reply, after) = t.await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        assert!(reply.contains("body_read_timeout"), "{reply}");
        assert!(
            after >= Duration::from_millis(4500) && after < Duration::from_secs(15),
            "cut after {after:?}: 5 s for a 1,000-byte body"
        );
    }
}
