//! Exports the engine's traces through OpenTelemetry, as OTLP over HTTP
//! (protobuf): feature `otel`.
//!
//! [`layer`] returns a [`tracing_subscriber::Layer`] to add to the
//! program's subscriber, and a guard that flushes the spans still buffered
//! and shuts the exporter down when it drops (or on [`OtelGuard::shutdown`]).
//! The layer is built on `tracing-opentelemetry`, and spans leave through
//! `opentelemetry_sdk`'s batch processor and `opentelemetry-otlp`'s HTTP
//! exporter, on a thread of their own: a run never waits on the collector.
//!
//! Only the engine's own spans are exported, nothing else the program
//! traces or logs (no events, no request logs):
//!
//! - `task_run`, one per run of a task (a root span: each run is a trace);
//! - `step`, a child of its run's `task_run` for each journaled step (a
//!   checkpoint, a sleep, a `now` or `uuid`), whether it ran or replayed.
//!
//! Their attributes, renamed for OpenTelemetry (every other attribute is
//! dropped, so no value the engine did not choose is exported):
//!
//! | span | attribute | type | what |
//! |---|---|---|---|
//! | `task_run` | `mcp_tasks.tool` | string | the tool |
//! | `task_run` | `mcp_tasks.task.ref` | string | the first 8 hex digits of the task's id: a reference, never the id (a bearer secret) |
//! | `task_run` | `mcp_tasks.attempt` | int | the claim the run holds (its fencing token): it grows with each run |
//! | `task_run` | `mcp_tasks.exit` | string | how the run ended: `done`, `failed`, `parked`, `asleep`, `cancelled`, `ended elsewhere`, `handed off`, `lost its lease` |
//! | `step` | `mcp_tasks.step.position` | int | its position in the journal |
//! | `step` | `mcp_tasks.step.kind` | string | `checkpoint`, `sleep`, `now`, `uuid`, … |
//! | `step` | `mcp_tasks.step.name` | string | the step's name |
//! | `step` | `mcp_tasks.step.replayed` | bool | its value came from the journal (`true`) or it ran (`false`) |
//! | both | `busy_ns`, `idle_ns` | int | time spent running / waiting (from `tracing-opentelemetry`) |
//!
//! A run that ends `failed` has the status `Error`; one that ends `done`,
//! `Ok`. The resource carries `service.name`.
//!
//! # Configuration
//!
//! [`OtelConfig`] says where spans go; what it leaves unset comes from the
//! standard environment variables, as the OpenTelemetry crates read them:
//!
//! - the endpoint: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), else
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (with `/v1/traces` appended), else
//!   `http://localhost:4318/v1/traces`;
//! - `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`;
//! - `OTEL_BSP_SCHEDULE_DELAY` (how often a batch leaves, default 5 s),
//!   `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//!   `OTEL_BSP_EXPORT_TIMEOUT`;
//! - `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TIMEOUT`.
//!
//! The exporter speaks plain HTTP (no TLS is built in): point it at a
//! collector or agent beside the server. It reports its own failures (a
//! batch that could not be sent, spans dropped on a full queue) as `tracing`
//! events of the targets `opentelemetry_sdk` and `opentelemetry-otlp`, which
//! the program's other layers log; a collector that is down costs the
//! server nothing else. At shutdown the guard waits for the last batch at
//! most 5 s.
//!
//! ```
//! use mcp_tasks_runtime::otel::{self, OtelConfig};
//! use tracing_subscriber::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let (layer, guard) = otel::layer(
//!     OtelConfig::new()
//!         .endpoint("http://127.0.0.1:4318")
//!         .service_name("billing-tasks"),
//! )?;
//! tracing_subscriber::registry().with(layer).init();
//! // ... serve; the spans still buffered are sent before the process exits:
//! guard.shutdown()?;
//! # Ok(())
//! # }
//! ```

use std::{borrow::Cow, fmt, time::Duration};

use opentelemetry::{
    Context, KeyValue,
    trace::{Status, TracerProvider as _},
};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::{
    Resource,
    error::OTelSdkResult,
    trace::{
        BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanProcessor,
    },
};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::{
    Layer,
    filter::{LevelFilter, filter_fn},
    registry::LookupSpan,
};

/// Where the engine's spans go, and as what service (see the [module
/// docs](self) for the environment variables that fill in what is unset).
#[derive(Debug, Clone, Default)]
pub struct OtelConfig {
    endpoint: Option<String>,
    service_name: Option<String>,
    export_interval: Option<Duration>,
}

impl OtelConfig {
    /// Nothing set: everything from the environment or the defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The collector's OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`:
    /// spans are posted to `/v1/traces` under it (a URL that already ends
    /// with `/v1/traces` is used as is). Set here, it wins over
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The `service.name` of the spans' resource. Set here, it wins over
    /// `OTEL_SERVICE_NAME`; unset and without it, `unknown_service`.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// How often a batch of spans is sent (`OTEL_BSP_SCHEDULE_DELAY`,
    /// default 5 s).
    pub fn export_interval(mut self, every: Duration) -> Self {
        self.export_interval = Some(every);
        self
    }

    /// The URL spans are posted to, if one is set here.
    fn traces_url(&self) -> Result<Option<String>, OtelError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        let parsed = url::Url::parse(endpoint)
            .map_err(|e| OtelError(format!("invalid OTLP endpoint {endpoint:?}: {e}")))?;
        if parsed.scheme() != "http" {
            return Err(OtelError(format!(
                "invalid OTLP endpoint {endpoint:?}: the exporter speaks plain http"
            )));
        }
        let base = endpoint.trim_end_matches('/');
        Ok(Some(if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        }))
    }
}

/// The exporter could not be built: an invalid endpoint, or the HTTP client
/// failed to start; or it failed to shut down.
#[derive(Debug, Clone)]
pub struct OtelError(String);

impl fmt::Display for OtelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OtelError {}

/// Keeps the exporter running; when it drops, the spans still buffered are
/// sent (waiting up to the export timeout) and the exporter stops. Keep it
/// until the program has finished its work (after the engine's drain).
#[derive(Debug)]
#[must_use = "the exporter stops when the guard drops"]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
}

impl OtelGuard {
    /// Sends the spans still buffered and stops the exporter, saying whether
    /// it could.
    ///
    /// # Errors
    ///
    /// When the last batch could not be sent, or the exporter did not stop
    /// in time.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        match self.provider.take() {
            Some(provider) => provider
                .shutdown()
                .map_err(|e| OtelError(format!("the OTLP exporter did not shut down: {e}"))),
            None => Ok(()),
        }
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// A layer that exports the engine's `task_run` and `step` spans through
/// OTLP/HTTP, and the guard that flushes and stops the exporter (see the
/// [module docs](self)). Add the layer to the program's subscriber; it sees
/// the engine's spans only, whatever the other layers' filters say (the
/// `step` spans are at DEBUG).
///
/// # Errors
///
/// When the endpoint is not a plain `http` URL, or the exporter's HTTP
/// client cannot start.
pub fn layer<S>(
    config: OtelConfig,
) -> Result<(Box<dyn Layer<S> + Send + Sync + 'static>, OtelGuard), OtelError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(url) = config.traces_url()? {
        exporter = exporter.with_endpoint(url);
    }
    let exporter = exporter
        .build()
        .map_err(|e| OtelError(format!("could not build the OTLP exporter: {e}")))?;
    let mut batch = BatchConfigBuilder::default();
    if let Some(every) = config.export_interval {
        batch = batch.with_scheduled_delay(every);
    }
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch.build())
        .build();
    let mut resource = Resource::builder();
    if let Some(name) = config.service_name {
        resource = resource.with_service_name(name);
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(EngineAttributes(processor))
        .with_resource(resource.build())
        .build();
    let scope = opentelemetry::InstrumentationScope::builder("mcp-tasks-runtime")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(filter_fn(is_engine_span).with_max_level_hint(LevelFilter::DEBUG));
    Ok((
        Box::new(layer),
        OtelGuard {
            provider: Some(provider),
        },
    ))
}

/// The spans exported: the engine's runs and steps, nothing else.
fn is_engine_span(meta: &Metadata<'_>) -> bool {
    meta.is_span()
        && meta.target().starts_with("mcp_tasks_runtime::")
        && matches!(meta.name(), "task_run" | "step")
}

/// Renames the engine's fields to namespaced attributes, drops every other
/// attribute, and sets a run's status from how it ended; then hands the
/// span to the batch processor.
#[derive(Debug)]
struct EngineAttributes<P>(P);

impl<P: SpanProcessor> SpanProcessor for EngineAttributes<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        let run = span.name == "task_run";
        let mut exit = None;
        span.attributes = std::mem::take(&mut span.attributes)
            .into_iter()
            .filter_map(|kv| {
                let key = match (run, kv.key.as_str()) {
                    (true, "tool") => "mcp_tasks.tool",
                    (true, "task") => "mcp_tasks.task.ref",
                    (true, "attempt") => "mcp_tasks.attempt",
                    (true, "exit") => {
                        exit = Some(kv.value.as_str().into_owned());
                        "mcp_tasks.exit"
                    }
                    (false, "position") => "mcp_tasks.step.position",
                    (false, "kind") => "mcp_tasks.step.kind",
                    (false, "name") => "mcp_tasks.step.name",
                    (false, "replayed") => "mcp_tasks.step.replayed",
                    (_, "busy_ns" | "idle_ns") => return Some(kv),
                    _ => return None,
                };
                Some(KeyValue::new(key, kv.value))
            })
            .collect();
        span.status = match exit.as_deref() {
            Some("done") => Status::Ok,
            Some("failed") => Status::Error {
                description: Cow::Borrowed("the task failed"),
            },
            _ => Status::Unset,
        };
        // The layer lets no event through (it takes spans only); none is kept
        // in any case: only the values above leave the process.
        span.events = Default::default();
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::OtelConfig;

    #[test]
    fn the_endpoint_is_a_base_url_or_the_traces_url() {
        let url = |e: &str| OtelConfig::new().endpoint(e).traces_url();
        assert_eq!(
            url("http://127.0.0.1:4318").unwrap().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(
            url("http://127.0.0.1:4318/").unwrap().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(
            url("http://collector:4318/v1/traces").unwrap().as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert!(url("https://collector:4318").is_err());
        assert!(url("not a url").is_err());
        assert_eq!(OtelConfig::new().traces_url().unwrap(), None);
    }
}
