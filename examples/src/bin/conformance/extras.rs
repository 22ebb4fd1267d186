//! The base-suite fixtures as an ordinary rmcp handler: content tools, the
//! stateless-protocol probes, prompts, resources and completions, plus what
//! only 2025-11-25 sessions use (`logging/setLevel` with a tool that logs,
//! `resources/subscribe|unsubscribe`, a form no `#[derive(Elicit)]` type can
//! express, and the SSE polling probe).

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
        CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
        GetPromptResult, InputRequests, InputRequiredResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, ServerCapabilities, ServerConfig, ServerRequest,
        SubscribeRequestParams, Tool, UnsubscribeRequestParams,
    },
    service::RequestContext,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
/// A tiny WAV (44-byte header, no samples).
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture JSON matches the rmcp type")
}

/// A complete result (`resultType: "complete"`) from its JSON.
fn result<T: DeserializeOwned>(mut v: Value) -> T {
    v["resultType"] = json!("complete");
    from_json(v)
}

fn text_result(text: &str) -> CallToolResult {
    result(json!({"content": [{"type": "text", "text": text}]}))
}

/// The base-suite fixtures.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fixtures;

/// Logs `message` at `info` to the client of the request, as it asked:
/// `mcp::log` decides (a 2026-07-28 request's own `logLevel`, a session's
/// `logging/setLevel`).
#[allow(deprecated)] // Logging is deprecated (SEP-2577).
async fn log_info(context: &RequestContext<RoleServer>, message: &str) {
    let level = rmcp::model::LoggingLevel::Info;
    mcp_tasks_runtime::mcp::log(context, level, "mcp-tasks-conformance", json!(message)).await;
}

/// Asks the client to fill in `schema` (`elicitation/create`, form mode) and
/// describes its answer.
async fn elicit_form(
    context: &RequestContext<RoleServer>,
    message: &str,
    schema: Value,
) -> Result<String, McpError> {
    let request: ServerRequest = from_json(json!({"method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema}}));
    let answer = context
        .peer
        .send_request(request)
        .await
        .map_err(|e| McpError::internal_error(format!("elicitation failed: {e}"), None))?;
    let answer = serde_json::to_value(answer).unwrap_or_default();
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let content = answer.get("content").cloned().unwrap_or(Value::Null);
    Ok(format!("action={action}, content={content}"))
}

/// The five enum shapes of SEP-1330. A `#[derive(Elicit)]` type writes four
/// of them; the deprecated `enumNames` form only exists as JSON.
fn enum_forms() -> Value {
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"}
            ]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"}
            ]}}
        }
    })
}

fn tools() -> Vec<Tool> {
    let empty = json!({"type": "object", "properties": {}});
    let simple = |name: &str, description: &str| json!({"name": name, "description": description, "inputSchema": empty});
    from_json(json!([
        // First: header-validation probes call the first tool with `{}`.
        simple("test_simple_text", "Returns a simple text response."),
        simple("test_image_content", "Returns an image."),
        simple("test_audio_content", "Returns an audio clip."),
        simple("test_embedded_resource", "Returns an embedded resource."),
        simple("test_multiple_content_types", "Returns text, an image and a resource."),
        simple("test_error_handling", "Always returns a tool error."),
        simple("test_tool_with_progress", "Reports progress three times, then returns."),
        simple("test_missing_capability", "Needs the client's sampling capability."),
        simple("test_streaming_elicitation", "Answers without sending requests to the client."),
        simple("test_logging_tool", "Logs only when the request asks for a log level."),
        simple("test_tool_with_logging", "Logs three messages (2025-11-25 sessions), then returns."),
        simple("test_elicitation_sep1330_enums",
            "Asks a form with every enum shape of SEP-1330 (2025-11-25 sessions)."),
        simple("test_reconnection", "Answers after a short pause (the SSE polling probe)."),
        {
            "name": "json_schema_2020_12_tool",
            "description": "Has a JSON Schema 2020-12 input schema with every keyword the suite checks.",
            "inputSchema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            }
        },
        {
            "name": "test_custom_header",
            "description": "Echoes a value that also travels in the Mcp-Param-Value header.",
            "inputSchema": {"type": "object",
                "properties": {"value": {"type": "string", "x-mcp-header": "Value"}},
                "required": ["value"]}
        }
    ]))
}

impl ServerHandler for Fixtures {
    fn get_info(&self) -> ServerConfig {
        // `logging` and `resources.subscribe` serve 2025-11-25 sessions;
        // 2026-07-28 clients never send those methods.
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_completions()
            .build();
        ServerConfig::new(capabilities)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let result: CallToolResult = match request.name.as_ref() {
            "test_simple_text" => text_result("This is a simple text response for testing."),
            "test_image_content" => result(
                json!({"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}),
            ),
            "test_audio_content" => result(
                json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}),
            ),
            "test_embedded_resource" => {
                result(json!({"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}]}))
            }
            "test_multiple_content_types" => result(json!({"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ]})),
            "test_error_handling" => result(json!({"isError": true, "content": [
                {"type": "text", "text": "This tool intentionally returns an error for testing"}]})),
            "test_tool_with_progress" => {
                if let Some(token) = context.meta.get_progress_token() {
                    for step in [0.0, 50.0, 100.0] {
                        let _ = context
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), step)
                                    .with_total(100.0),
                            )
                            .await;
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
                text_result("Progress test completed")
            }
            "test_missing_capability" => {
                if context
                    .client_capabilities()
                    .is_none_or(|c| c.sampling.is_none())
                {
                    let needs: ClientCapabilities = from_json(json!({"sampling": {}}));
                    return Err(McpError::missing_required_client_capability(needs));
                }
                text_result("The client can sample.")
            }
            "test_streaming_elicitation" => {
                text_result("No requests are sent on the response stream.")
            }
            "test_logging_tool" => {
                log_info(&context, "The logging tool ran.").await;
                text_result("Logging tool done.")
            }
            "test_tool_with_logging" => {
                for message in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ] {
                    log_info(&context, message).await;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                text_result("Logging test completed")
            }
            "test_elicitation_sep1330_enums" => {
                let answer =
                    elicit_form(&context, "Test enum schema improvements", enum_forms()).await?;
                text_result(&format!("Elicitation completed: {answer}"))
            }
            // The suite's SEP-1699 probe wants the POST stream closed mid-call
            // and the result resent on a GET with `Last-Event-ID`. rmcp can
            // close a request's stream only through its session manager
            // (`LocalSessionHandle::close_sse_stream`), which a handler cannot
            // reach, so this answers on the open stream after a short pause.
            "test_reconnection" => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                text_result("Reconnection test completed")
            }
            "json_schema_2020_12_tool" => text_result("Schema accepted."),
            "test_custom_header" => {
                let value = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("value"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                text_result(&value)
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(result(json!({"prompts": [
            {"name": "test_simple_prompt", "description": "A prompt with no arguments."},
            {"name": "test_prompt_with_arguments", "description": "A prompt with two arguments.",
             "arguments": [{"name": "arg1", "description": "First", "required": true},
                           {"name": "arg2", "description": "Second", "required": true}]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource.",
             "arguments": [{"name": "resourceUri", "description": "The resource", "required": true}]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image."},
            {"name": "test_input_required_result_prompt", "description": "A prompt that asks the user first."}
        ]})))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let arg = |name: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let messages = match request.name.as_str() {
            "test_simple_prompt" => json!([{"role": "user", "content": {"type": "text",
                "text": "This is a simple prompt for testing."}}]),
            "test_prompt_with_arguments" => json!([{"role": "user", "content": {"type": "text",
                "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"))}}]),
            "test_prompt_with_embedded_resource" => json!([
                {"role": "user", "content": {"type": "resource", "resource": {"uri": arg("resourceUri"),
                    "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
            ]),
            "test_prompt_with_image" => json!([
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]),
            "test_input_required_result_prompt" => {
                let answer = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_context"))
                    .filter(|v| v.is_object());
                let Some(answer) = answer else {
                    let requests: InputRequests = from_json(json!({"user_context": {
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "What context should the prompt use?",
                            "requestedSchema": {"type": "object",
                                "properties": {"context": {"type": "string"}}, "required": ["context"]}}}}));
                    return Ok(GetPromptResponse::InputRequired(
                        InputRequiredResult::from_input_requests(requests),
                    ));
                };
                let context = answer
                    .pointer("/content/context")
                    .and_then(Value::as_str)
                    .unwrap_or("none");
                json!([{"role": "user", "content": {"type": "text",
                    "text": format!("Use this context: {context}")}}])
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown prompt `{other}`"),
                    None,
                ));
            }
        };
        let prompt: GetPromptResult = result(json!({"messages": messages}));
        Ok(GetPromptResponse::Complete(prompt))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(result(json!({"resources": [
            {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource", "mimeType": "image/png"}
        ]})))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(result(json!({"resourceTemplates": [
            {"uriTemplate": "test://template/{id}/data", "name": "template-data",
             "description": "Data by id", "mimeType": "application/json"}
        ]})))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri.as_str();
        let contents = if uri == "test://static-text" {
            json!([{"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."}])
        } else if uri == "test://static-binary" {
            json!([{"uri": uri, "mimeType": "image/png", "blob": PNG}])
        } else if let Some(id) = uri
            .strip_prefix("test://template/")
            .and_then(|rest| rest.strip_suffix("/data"))
            .filter(|id| !id.is_empty() && !id.contains('/'))
        {
            let text =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            json!([{"uri": uri, "mimeType": "application/json", "text": text.to_string()}])
        } else {
            return Err(McpError::invalid_params(
                format!("resource not found: {uri}"),
                Some(json!({"uri": uri})),
            ));
        };
        let read: ReadResourceResult = result(json!({"contents": contents}));
        Ok(ReadResourceResponse::Complete(read))
    }

    /// Accepts any level: the server keeps it, as the session's own
    /// (rmcp has already refused a level that is not one of MCP's).
    #[allow(deprecated)] // Logging is legacy-only (SEP-2577).
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    // Any URI may be watched; none of them ever changes, so no
    // `notifications/resources/updated` is sent.
    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let prefix = request.argument.value.clone();
        let values: Vec<String> = ["test", "testing", "tested"]
            .iter()
            .filter(|v| v.starts_with(&prefix))
            .map(|v| (*v).to_owned())
            .collect();
        Ok(result(
            json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}),
        ))
    }
}
