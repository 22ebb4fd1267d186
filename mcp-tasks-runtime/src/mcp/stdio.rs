//! MCP over stdio: newline-delimited JSON-RPC on stdin and stdout, with the
//! 2025-11-25 task edge (see `sep1686`) on what comes in and goes out. The
//! edge needs each message as JSON before rmcp types it (rmcp's own codec
//! drops `params.task`), so the lines are read and written here.

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{Sink, Stream, StreamExt, stream};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::{
    envelope, listen, malformed,
    sep1686::{self, Edge},
};

/// The messages read from `input`, one JSON-RPC message a line. A line
/// that is not a message is logged and skipped, as rmcp's codec does.
/// `legacy` is set once the client opens with `initialize` (2025-11-25 or
/// earlier).
pub(super) fn incoming(
    input: impl AsyncRead + Send + Unpin + 'static,
    legacy: Arc<AtomicBool>,
) -> impl Stream<Item = ClientJsonRpcMessage> + Send + Unpin + 'static {
    let lines = BufReader::new(input).lines();
    Box::pin(stream::unfold(lines, move |mut lines| {
        let legacy = legacy.clone();
        async move {
            loop {
                let line = match lines.next_line().await {
                    Ok(Some(line)) => line,
                    Ok(None) => return None,
                    Err(e) => {
                        tracing::warn!(error = %crate::id::Redacted(&e), "stdin failed");
                        return None;
                    }
                };
                if line.trim().is_empty() {
                    continue;
                }
                match decode(&line, &legacy) {
                    Ok(message) => return Some((message, lines)),
                    Err(e) => {
                        tracing::warn!(error = %crate::id::Redacted(&e), "skipped a line that is not a JSON-RPC message")
                    }
                }
            }
        }
    }))
}

fn decode(line: &str, legacy: &AtomicBool) -> serde_json::Result<ClientJsonRpcMessage> {
    let mut message: Value = serde_json::from_str(line)?;
    if message.get("method").and_then(Value::as_str) == Some("initialize") {
        legacy.store(true, Ordering::SeqCst);
    }
    sep1686::rewrite_request(&mut message);
    if !legacy.load(Ordering::SeqCst) {
        // Served as our own method: see `listen`.
        listen::rename(&mut message);
    }
    malformed::rename_modern_ping(&mut message);
    serde_json::from_value(message)
}

/// Writes each message to `output` as one line, after the edge when the
/// client is a legacy one; a 2026-07-28 client's results get
/// `_meta.serverInfo` (`server_info`, R6).
pub(super) fn outgoing(
    output: impl AsyncWrite + Send + Unpin + 'static,
    edge: Edge,
    legacy: Arc<AtomicBool>,
    server_info: Value,
) -> impl Sink<ServerJsonRpcMessage, Error = io::Error> + Send + Unpin + 'static {
    Box::pin(futures::sink::unfold(
        (output, edge, legacy, server_info),
        |(mut output, edge, legacy, server_info), mut message: ServerJsonRpcMessage| async move {
            let mut line = if legacy.load(Ordering::SeqCst) {
                edge.rewrite_response(&mut message);
                serde_json::to_vec(&message)?
            } else {
                let mut value = serde_json::to_value(&message)?;
                envelope::add_server_info(&mut value, &server_info);
                envelope::drop_empty_elicitation_ids(&mut value);
                serde_json::to_vec(&value)?
            };
            line.push(b'\n');
            output.write_all(&line).await?;
            output.flush().await?;
            Ok((output, edge, legacy, server_info))
        },
    ))
}

/// The stdio transport: `(sink, stream)` as rmcp takes it.
pub(super) fn transport(
    edge: Edge,
    server_info: Value,
) -> (
    impl Sink<ServerJsonRpcMessage, Error = io::Error> + Send + Unpin + 'static,
    impl Stream<Item = ClientJsonRpcMessage> + Send + Unpin + 'static,
) {
    let legacy = Arc::new(AtomicBool::new(false));
    (
        outgoing(tokio::io::stdout(), edge, legacy.clone(), server_info),
        incoming(tokio::io::stdin(), legacy).fuse(),
    )
}
