//! MCP over stdio: newline-delimited JSON-RPC on stdin and stdout. Some
//! requests are served under names of our own (`subscriptions/listen`, and
//! the 2025-11-25 task requests, whose `params.task` rmcp's codec drops), so
//! each message is read as JSON before rmcp types it: the lines are read and
//! written here, each line read within a bound
//! ([`StdioOptions::max_line_bytes`](super::StdioOptions::max_line_bytes)).

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{Sink, Stream, StreamExt, stream};
use rmcp::model::{ClientJsonRpcMessage, ErrorData, JsonRpcError, RequestId, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::Mutex,
};

use super::{envelope, listen, malformed, options::JsonLimits, server::TaskServer};
use crate::Engine;

/// Where the server writes: rmcp's messages and the transport's own errors
/// (for lines it could not read) share it, one whole line at a time.
type Output<W> = Arc<Mutex<W>>;

/// One line of input, read by [`read_line`].
enum Line {
    /// A line within the limit (in the buffer, without its newline).
    Text,
    /// A line over the limit: dropped.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads one line into `buf`, keeping at most `limit` bytes of it: the rest
/// of a longer line is read and dropped, so memory stays bounded whatever
/// the client sends.
async fn read_line(
    input: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Text,
            });
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        if !too_long {
            if buf.len() + chunk.len() > limit {
                too_long = true;
                buf.clear();
                buf.shrink_to(64 * 1024);
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let used = newline.map_or(available.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Text });
        }
    }
}

/// The messages read from `input`, one JSON-RPC message a line of at most
/// `limit` bytes. A line that is not JSON, or a request whose envelope or
/// `params` are wrong, is answered on `output` with the JSON-RPC error the
/// HTTP transport gives it (`-32700`, `-32600`, `-32602`); a malformed
/// notification, or a message rmcp cannot type, is logged and skipped, as
/// rmcp's codec does; a longer line is answered on `output` (see
/// [`StdioOptions::max_line_bytes`](super::StdioOptions::max_line_bytes)),
/// each renamed as its client's `era` says.
fn incoming<W: AsyncWrite + Send + Unpin + 'static>(
    input: impl AsyncRead + Send + Unpin + 'static,
    limit: usize,
    json: JsonLimits,
    output: Output<W>,
    era: Era,
    engine: Engine,
) -> impl Stream<Item = ClientJsonRpcMessage> + Send + Unpin + 'static {
    let state = (BufReader::new(input), Vec::new());
    Box::pin(stream::unfold(state, move |(mut input, mut buf)| {
        let (era, output, engine) = (era.clone(), output.clone(), engine.clone());
        async move {
            loop {
                match read_line(&mut input, &mut buf, limit).await {
                    Ok(Line::Text) => {}
                    Ok(Line::End) => return None,
                    Ok(Line::TooLong) => {
                        tracing::warn!(
                            max_line_bytes = limit,
                            "refused a line longer than the limit"
                        );
                        let error = ErrorData::invalid_request(
                            format!(
                                "Invalid Request: the line is longer than {limit} bytes \
                                 (max_line_bytes), so it was not read; send each message on \
                                 one line within the limit"
                            ),
                            None,
                        );
                        if answer(&output, None, error).await.is_err() {
                            return None;
                        }
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %crate::id::Redacted(&e), "stdin failed");
                        return None;
                    }
                }
                if buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match decode(&buf, json, &era, &engine) {
                    Ok(message) => return Some((message, (input, buf))),
                    // Counted in the drain's own lines, not logged each.
                    Err(Unserved::Draining(id, error)) => {
                        if answer(&output, Some(id), error).await.is_err() {
                            return None;
                        }
                    }
                    Err(Unserved::Answer(id, error)) => {
                        tracing::warn!(error = %error.message, "refused a line that is no JSON-RPC message");
                        if answer(&output, id, error).await.is_err() {
                            return None;
                        }
                    }
                    Err(Unserved::Skip(why)) => {
                        tracing::warn!(error = %crate::id::Redacted(&why), "skipped a line that is not a JSON-RPC message")
                    }
                }
            }
        }
    }))
}

/// Why a line is not handed to rmcp.
enum Unserved {
    /// It is answered with this error: JSON that is no message, or a
    /// request whose envelope or `params` are wrong (`envelope::check`).
    Answer(Option<RequestId>, ErrorData),
    /// A `tools/call` while the engine drains, answered with this error
    /// (`envelope::refuse_while_draining`).
    Draining(RequestId, ErrorData),
    /// It is only logged: a malformed notification (which gets no answer),
    /// or a message rmcp cannot type.
    Skip(String),
}

/// Writes the error `error` (for request `id`, when it is known) as a line.
async fn answer<W: AsyncWrite + Unpin>(
    output: &Output<W>,
    id: Option<RequestId>,
    error: ErrorData,
) -> io::Result<()> {
    let mut line = serde_json::to_vec(&JsonRpcError::new(id, error))?;
    line.push(b'\n');
    let mut output = output.lock().await;
    let written = async {
        output.write_all(&line).await?;
        output.flush().await
    };
    written.await.inspect_err(|e| {
        tracing::warn!(error = %crate::id::Redacted(e), "stdout failed");
    })
}

fn decode(
    line: &[u8],
    json: JsonLimits,
    era: &Era,
    engine: &Engine,
) -> Result<ClientJsonRpcMessage, Unserved> {
    envelope::census(line, json, "line").map_err(|(id, error)| Unserved::Answer(id, error))?;
    let mut message: Value = serde_json::from_slice(line).map_err(|e| {
        let error =
            ErrorData::parse_error(format!("Parse error: the line is not JSON ({e})"), None);
        Unserved::Answer(None, error)
    })?;
    if let Err((id, error)) = envelope::check(&message) {
        let notification = message.get("method").is_some() && message.get("id").is_none();
        return Err(if notification {
            Unserved::Skip(error.message.into_owned())
        } else {
            Unserved::Answer(id, error)
        });
    }
    if let Some((id, error)) = envelope::refuse_while_draining(&message, engine) {
        return Err(Unserved::Draining(id, error));
    }
    era.inbound(&mut message);
    serde_json::from_value(message).map_err(|e| Unserved::Skip(e.to_string()))
}

/// The era of the client on the other end: 2026-07-28 until it opens with
/// `initialize` (2025-11-25 or earlier), whose messages then cross the
/// older era's edge both ways.
#[derive(Debug, Clone)]
struct Era {
    older: Arc<AtomicBool>,
    #[cfg(feature = "mcp-2025-11-25")]
    edge: crate::mcp_2025::Edge,
}

impl Era {
    /// Renames what this era serves under names of our own.
    fn inbound(&self, message: &mut Value) {
        let renamed = malformed::rename_modern_removed(message);
        #[cfg(feature = "mcp-2025-11-25")]
        {
            if !renamed && message.get("method").and_then(Value::as_str) == Some("initialize") {
                self.older.store(true, Ordering::SeqCst);
            }
            crate::mcp_2025::rewrite_request(message);
        }
        if !renamed && !self.older.load(Ordering::SeqCst) {
            // Served as our own method: see `listen`.
            listen::rename(message);
        }
    }

    /// `message` as one line for this era: a 2026-07-28 client's results
    /// get `_meta.serverInfo` (`server_info`).
    fn line(&self, message: ServerJsonRpcMessage, server_info: &Value) -> io::Result<Vec<u8>> {
        #[cfg(feature = "mcp-2025-11-25")]
        if self.older.load(Ordering::SeqCst) {
            let mut message = message;
            self.edge.rewrite_response(&mut message);
            return Ok(serde_json::to_vec(&message)?);
        }
        let mut value = serde_json::to_value(&message)?;
        envelope::add_server_info(&mut value, server_info);
        envelope::drop_empty_elicitation_ids(&mut value);
        Ok(serde_json::to_vec(&value)?)
    }
}

/// Writes each message to `output` as one line, as its client's `era`
/// writes it.
fn outgoing<W: AsyncWrite + Send + Unpin + 'static>(
    output: Output<W>,
    era: Era,
    server_info: Value,
) -> impl Sink<ServerJsonRpcMessage, Error = io::Error> + Send + Unpin + 'static {
    Box::pin(futures::sink::unfold(
        (output, era, server_info),
        |(output, era, server_info), message: ServerJsonRpcMessage| async move {
            let mut line = era.line(message, &server_info)?;
            line.push(b'\n');
            {
                let mut out = output.lock().await;
                out.write_all(&line).await?;
                out.flush().await?;
            }
            Ok((output, era, server_info))
        },
    ))
}

/// The stdio transport of `server`: `(sink, stream)` as rmcp takes it.
pub(super) fn transport<H: rmcp::ServerHandler>(
    server: &TaskServer<H>,
) -> (
    impl Sink<ServerJsonRpcMessage, Error = io::Error> + Send + Unpin + 'static,
    impl Stream<Item = ClientJsonRpcMessage> + Send + Unpin + 'static,
) {
    let options = server.stdio_options();
    let era = Era {
        older: Arc::default(),
        #[cfg(feature = "mcp-2025-11-25")]
        edge: crate::mcp_2025::Edge::new(server.engine(), server.names_principals()),
    };
    let output = Arc::new(Mutex::new(tokio::io::stdout()));
    (
        outgoing(
            output.clone(),
            era.clone(),
            server.server_info_json().clone(),
        ),
        incoming(
            tokio::io::stdin(),
            options.max_line_bytes,
            JsonLimits::new(options.max_json_values, options.max_json_depth),
            output,
            era,
            server.engine().clone(),
        )
        .fuse(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_over_the_limit_are_dropped_and_the_next_is_read() {
        let at_limit = "y".repeat(10);
        let text = format!("{}\nshort\n{at_limit}\nlast", "x".repeat(40));
        let mut input = BufReader::with_capacity(8, text.as_bytes());
        let mut buf = Vec::new();
        // What each read gives: the line over the limit is dropped, the one
        // at the limit is read, and then the input ends.
        let lines = [None, Some("short"), Some(at_limit.as_str()), Some("last")];
        for line in lines.into_iter().map(|l| l.map(str::as_bytes)) {
            match read_line(&mut input, &mut buf, 10).await {
                Ok(Line::TooLong) => assert_eq!(line, None),
                Ok(Line::Text) => assert_eq!(Some(buf.as_slice()), line),
                _ => panic!("expected {line:?}"),
            }
        }
        assert!(matches!(
            read_line(&mut input, &mut buf, 10).await,
            Ok(Line::End)
        ));
    }
}
