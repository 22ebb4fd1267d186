//! The command line and main loop of an mcp-tasks server: [`Cli`] (flatten
//! it into your own `clap` arguments) says where the store is (a SQLite
//! file, `memory`, or a Postgres URL), the limits, bearer-token
//! authentication, the admin address and the export of traces;
//! [`Cli::engine`] opens the store and builds the engine, [`init_tracing`]
//! starts the logs (and traces), and [`serve`] serves over Streamable HTTP
//! (or stdio) until a signal, then drains. The project's example servers
//! and the gateway binary (`mcp-tasks-gateway`) are built on it.
//!
//! ```no_run
//! use clap::Parser;
//! use mcp_tasks_runtime::{mcp::TaskServer, tool::Registry};
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     cli: mcp_tasks_server::Cli,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     let args = Args::parse();
//!     let cli = &args.cli;
//!     let _traces = mcp_tasks_server::init_tracing(cli, "my-server")?;
//!     let store = cli.store_location("my-server.db");
//!     let builder = cli.engine("my-server.db").await?.registry(Registry::from_inventory()?);
//!     let engine = cli.check_replay_if_asked(builder).await?.start().await?;
//!     let server = cli.auth(TaskServer::builder(engine))?;
//!     mcp_tasks_server::serve(cli, &store, server).await
//! }
//! ```

use std::{fmt, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::Parser;
use mcp_tasks_runtime::{
    Engine,
    engine::{EngineBuilder, Limits},
    mcp::{self, HttpOptions, Jwks, JwtAuth, TaskServerBuilder},
    otel::{OtelConfig, OtelGuard},
    store::{MemoryStore, PostgresStore, SchemaVersions, SqliteStore, Store, Synchronous},
};
use rmcp::ServerHandler;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An mcp-tasks server's command line: flatten it (`#[command(flatten)]`) into
/// your own arguments.
#[derive(Debug, Parser)]
pub struct Cli {
    /// Address to listen on (HTTP); the endpoint is `/mcp`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Where tasks are kept: a SQLite file (created if missing; several
    /// processes on one host may share it), a Postgres database
    /// (`postgres://user@host:5432/db`, or `postgresql://…`) shared by a
    /// fleet, or `memory` (in this process only: lost when it ends; for
    /// trials and benchmarks).
    #[arg(long)]
    pub store: Option<String>,
    /// How durable a SQLite commit is: `full` (the default: it survives
    /// power loss) or `normal` (it survives a crash of the process, and
    /// commits do not wait for an fsync).
    #[arg(long, value_enum, default_value = "full")]
    pub sqlite_sync: SqliteSync,
    /// The Postgres schema that holds the tables (created if missing;
    /// default `public`). Only with a `postgres://` store.
    #[arg(long)]
    pub pg_schema: Option<String>,
    /// This instance's name in the leases it holds (default: its process id
    /// and a random suffix). Instances sharing a store need distinct names;
    /// a process started again under a name runs that name's tasks at once.
    #[arg(long)]
    pub instance: Option<String>,
    /// How long a claim on a running task lasts unless renewed (renewed every
    /// third of it): how long a dead instance's tasks wait before another
    /// takes them over. A duration such as `10s`, `1500ms` or `1m`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// How often to look for tasks that no live lease holds (a dead
    /// instance's, or a timer due elsewhere). A duration, as `--lease`.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub scan_interval: Duration,
    /// How long a durable `sleep` may be and still wait in its run (its
    /// deadline journaled first); a longer one parks the task. `0s` parks
    /// every sleep. A duration, as `--lease`.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub sleep_in_process: Duration,
    /// How many inline calls (answered without a task) run at once; the rest
    /// wait (default 512).
    #[arg(long)]
    pub max_inline: Option<usize>,
    /// How long a task is kept after it was created, for the tools that set
    /// no TTL of their own (every tool of the gateway): a duration, as
    /// `--lease`, or `none` to keep tasks until they are deleted (default
    /// `1h`).
    #[arg(long, value_name = "DURATION", value_parser = ttl)]
    pub ttl: Option<Ttl>,
    /// Serve over stdio instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// The key that encrypts MRTR `requestState`: 32 random bytes as 64 hex
    /// digits or base64 (`openssl rand -hex 32`). Instances that share
    /// clients need the same key. Default: `MCP_TASKS_STATE_KEY`, else a
    /// random key per process.
    #[arg(long)]
    pub request_state_key: Option<String>,
    /// An earlier `requestState` key still accepted for reading (key
    /// rotation); may be repeated.
    #[arg(long)]
    pub old_request_state_key: Vec<String>,
    /// Sets one of the engine's limits, `NAME=VALUE`, NAME a field of
    /// `mcp_tasks_runtime::engine::Limits` (`max_argument_bytes`,
    /// `max_answer_bytes`, `max_status_message_bytes`, `max_result_bytes`,
    /// `max_journal_entry_bytes`, `max_journal_entries`,
    /// `max_unfinished_per_principal`,
    /// `max_unfinished_per_address`, `creates_per_second`, `create_burst`,
    /// `max_listens_per_principal`, `max_listens_per_task`);
    /// may be repeated.
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    pub limits: Vec<String>,
    /// How long a client may take to send a request's headers, and how long
    /// an idle kept-alive connection stays open (HTTP). A duration.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// How long a request's whole body may take to arrive, from its
    /// headers, before the request gets 408 (HTTP). A duration.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Duration,
    /// How many HTTP connections are served at once; the rest wait.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// How many HTTP connections one client address may hold open (every
    /// loopback address together: 4 times as many); one more is answered
    /// 429 at once.
    #[arg(long, default_value_t = 128)]
    pub max_connections_per_client: usize,
    /// How many 2025-11-25 sessions one client may have open (every
    /// loopback address together: 4 times as many).
    #[arg(long, default_value_t = 256)]
    pub max_sessions_per_client: usize,
    /// How many 2025-11-25 sessions the server holds open, of all clients.
    #[arg(long, default_value_t = 2048)]
    pub max_sessions: usize,
    /// Count each loopback address (127.0.0.0/8, ::1) as a client of its
    /// own, instead of all of them as one ("this machine").
    #[arg(long)]
    pub loopback_addresses_apart: bool,
    /// How long a 2025-11-25 session may go without a message before it is
    /// closed and its stored state deleted (HTTP). A duration.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub session_idle_timeout: Duration,
    /// Require a bearer token (a JWT) issued by this issuer (its `iss`) on
    /// every HTTP request; each task then belongs to the token's `sub`.
    /// Needs `--jwt-audience` and `--jwks`.
    #[arg(long, requires_all = ["jwt_audience", "jwks"])]
    pub jwt_issuer: Option<String>,
    /// The audience tokens must name (`aud`): this server's identifier.
    #[arg(long, requires = "jwt_issuer")]
    pub jwt_audience: Option<String>,
    /// The keys that sign tokens: a JWKS file, or an `http(s)://` URL
    /// (fetched when needed, refreshed every 10 minutes).
    #[arg(long, value_name = "FILE|URL", requires = "jwt_issuer")]
    pub jwks: Option<String>,
    /// This server's resource identifier as clients reach it (e.g.
    /// `https://tasks.example.com/mcp`), for the Protected Resource Metadata
    /// (default: from the request's `Host`).
    #[arg(long, requires = "jwt_issuer")]
    pub jwt_resource: Option<String>,
    /// An authorization server clients get tokens from, listed in the
    /// Protected Resource Metadata (default: the issuer); may be repeated.
    #[arg(long, requires = "jwt_issuer")]
    pub authorization_server: Vec<String>,
    /// Serve the operator's address here: `/metrics` (Prometheus text) and
    /// a read-only web page of the tasks. Off by default. Keep it on
    /// loopback (`127.0.0.1:9090`): the page shows task ids, which are
    /// bearer secrets, and principals.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Require this token on every request to the admin address, as
    /// `Authorization: Bearer TOKEN` (or as the password a browser asks
    /// for). Default: `MCP_TASKS_ADMIN_TOKEN`, else none; the environment
    /// keeps it out of the process list.
    #[arg(long, value_name = "TOKEN", requires = "admin")]
    pub admin_token: Option<String>,
    /// Serve `--admin` off loopback without a token (refused otherwise):
    /// for an address only an authenticating proxy reaches.
    #[arg(long, requires = "admin")]
    pub admin_allow_remote_without_token: bool,
    /// How many tasks a page of the admin address's list shows.
    #[arg(long, default_value_t = 50, requires = "admin")]
    pub admin_page_size: usize,
    /// On SIGINT or SIGTERM, how long running steps may take to finish
    /// before the instance lets their tasks go and exits (a second signal
    /// exits at once). A duration.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Export the task runs' traces (the `task_run` and `step` spans) as
    /// OTLP over HTTP (protobuf) to the collector at this base URL, e.g.
    /// `http://127.0.0.1:4318` (spans are posted to `/v1/traces`). Off by
    /// default; `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns it on too.
    /// `OTEL_SERVICE_NAME` names the service (default: the program's name),
    /// `OTEL_BSP_SCHEDULE_DELAY` (milliseconds) says how often spans leave.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Instead of serving: replay the journal of every unfinished task in
    /// the store through this build's tools, running no step live and
    /// writing nothing, print one line per task (replays, diverges at a
    /// position, refused by version) and a summary (`json`: the report as
    /// JSON), and exit 0 when it passed, 1 when a task would not resume on
    /// this build. Run it before a deploy, with the new build. The store is
    /// opened read-only: not migrated, not written (a store of an older
    /// schema stays as it is, so the build that runs on it still starts).
    #[arg(long, value_enum, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "text")]
    pub check_replay: Option<ReportFormat>,
}

/// `--check-replay`'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One line per task, then a summary.
    Text,
    /// The report as one JSON object.
    Json,
}

/// `--sqlite-sync`: SQLite's `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SqliteSync {
    /// `synchronous=FULL`.
    Full,
    /// `synchronous=NORMAL`.
    Normal,
}

/// Where a server's tasks are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// In this process's memory (`--store memory`): lost when it ends.
    Memory,
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A Postgres database (its URL) and the schema of the tables.
    Postgres {
        /// The connection URL.
        url: String,
        /// The schema; `None` for the store's default.
        schema: Option<String>,
    },
}

/// A `--ttl`: a duration, or `None` for `none` (tasks kept until deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(pub Option<Duration>);

fn ttl(value: &str) -> Result<Ttl, String> {
    if value == "none" {
        return Ok(Ttl(None));
    }
    humantime::parse_duration(value)
        .map(|d| Ttl(Some(d)))
        .map_err(|e| format!("{e} (a duration such as `90s` or `1h`, or `none`)"))
}

impl fmt::Display for StoreLocation {
    /// The location without the password, if the URL carries one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => write!(f, "memory (lost when the process ends)"),
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres { url, schema } => {
                // scheme://[user[:password]@]host[:port]/db[?params]
                let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
                let rest = rest.split('?').next().unwrap_or(rest);
                let shown = match rest.rsplit_once('@') {
                    Some((userinfo, host)) => {
                        let user = userinfo.split(':').next().unwrap_or_default();
                        format!("{scheme}://{user}@{host}")
                    }
                    None => format!("{scheme}://{rest}"),
                };
                write!(f, "{shown}")?;
                if let Some(schema) = schema {
                    write!(f, " (schema {schema})")?;
                }
                Ok(())
            }
        }
    }
}

impl StoreLocation {
    /// `--store` and `--pg-schema` as [`Cli`] reads them: a
    /// `postgres://` (or `postgresql://`) URL, `memory`, or a SQLite file.
    pub fn parse(store: &str, pg_schema: Option<String>) -> Self {
        if store == "memory" {
            Self::Memory
        } else if store.starts_with("postgres://") || store.starts_with("postgresql://") {
            Self::Postgres {
                url: store.to_owned(),
                schema: pg_schema,
            }
        } else {
            Self::Sqlite(PathBuf::from(store))
        }
    }

    /// Opens the store, creating it if needed and migrating its schema to
    /// this build's (as a server's start does).
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or the database cannot be reached.
    pub async fn open(self) -> Result<Arc<dyn Store>, BoxError> {
        self.open_with(SqliteSync::Full).await
    }

    /// Opens the existing store to read it only: no migration, no write
    /// (`SqliteStore::open_read_only`, `PostgresStore::connect_read_only`).
    /// Returns it with the schema versions it was found at (none for
    /// `memory`, which starts empty).
    ///
    /// # Errors
    ///
    /// When there is no store there, it cannot be read, or its schema is
    /// newer than this build knows or older than it reads as it is.
    pub async fn open_read_only(
        self,
    ) -> Result<(Arc<dyn Store>, Option<SchemaVersions>), BoxError> {
        Ok(match self {
            Self::Memory => (Arc::new(MemoryStore::new()), None),
            Self::Sqlite(path) => {
                let store = SqliteStore::open_read_only(&path).await?;
                let versions = store.schema_versions();
                (Arc::new(store), Some(versions))
            }
            Self::Postgres { url, schema } => {
                let store = postgres(url, schema).connect_read_only().await?;
                let versions = store.schema_versions();
                (Arc::new(store), Some(versions))
            }
        })
    }

    /// Opens the store to write to it, without migrating it: a store whose
    /// schema is older than this build's is refused, naming `migrate`
    /// (the operator's writes must not upgrade a store under the servers of
    /// an older build), and a missing SQLite file is not created
    /// (`SqliteStoreBuilder::migrate(false)`, `PostgresStoreBuilder::migrate(false)`).
    ///
    /// # Errors
    ///
    /// When there is no store there, it cannot be opened, or its schema is
    /// not this build's.
    pub async fn open_current(self) -> Result<Arc<dyn Store>, BoxError> {
        // The runtime's refusal names `migrate`; this says it for this store.
        let refused = |e: mcp_tasks_runtime::Error| -> BoxError {
            let e = e.to_string();
            if e.contains(" migrate") {
                format!("{e}\nto migrate it: {}", self.migrate_command()).into()
            } else {
                e.into()
            }
        };
        Ok(match &self {
            Self::Memory => Arc::new(MemoryStore::new()),
            Self::Sqlite(path) => Arc::new(
                SqliteStore::builder(path)
                    .migrate(false)
                    .open()
                    .await
                    .map_err(refused)?,
            ),
            Self::Postgres { url, schema } => Arc::new(
                postgres(url.clone(), schema.clone())
                    .migrate(false)
                    .connect()
                    .await
                    .map_err(refused)?,
            ),
        })
    }

    /// The operator CLI's command that migrates this store (without the
    /// password of a Postgres URL).
    pub fn migrate_command(&self) -> String {
        match self {
            Self::Memory => "tasks --store memory migrate".to_owned(),
            Self::Sqlite(path) => format!("tasks --store {} migrate", path.display()),
            Self::Postgres { url, schema } => {
                // Shown without its password.
                let url = Self::Postgres {
                    url: url.clone(),
                    schema: None,
                };
                match schema {
                    Some(schema) => format!("tasks --store {url} --pg-schema {schema} migrate"),
                    None => format!("tasks --store {url} migrate"),
                }
            }
        }
    }

    /// Brings the store's schema up to this build's, creating the store if
    /// there is none: what a server of this build does as it starts.
    /// Returns the versions before and after.
    ///
    /// # Errors
    ///
    /// When the store cannot be opened or migrated, its schema is newer than
    /// this build knows, or it is `memory`.
    pub async fn migrate(self) -> Result<SchemaVersions, BoxError> {
        match self {
            Self::Memory => Err("a `memory` store has no schema to migrate".into()),
            Self::Sqlite(path) => Ok(SqliteStore::open(&path).await?.schema_versions()),
            Self::Postgres { url, schema } => {
                Ok(postgres(url, schema).connect().await?.schema_versions())
            }
        }
    }

    /// Opens the store; a SQLite file with `sync`.
    ///
    /// # Errors
    ///
    /// As [`StoreLocation::open`].
    pub async fn open_with(self, sync: SqliteSync) -> Result<Arc<dyn Store>, BoxError> {
        let synchronous = match sync {
            SqliteSync::Full => Synchronous::Full,
            SqliteSync::Normal => Synchronous::Normal,
        };
        Ok(match self {
            Self::Memory => Arc::new(MemoryStore::new()),
            Self::Sqlite(path) => Arc::new(
                SqliteStore::builder(&path)
                    .synchronous(synchronous)
                    .open()
                    .await?,
            ),
            Self::Postgres { url, schema } => Arc::new(postgres(url, schema).connect().await?),
        })
    }
}

/// The Postgres store at `url`, in `schema` (or the default).
fn postgres(url: String, schema: Option<String>) -> mcp_tasks_runtime::store::PostgresStoreBuilder {
    let builder = PostgresStore::builder(url);
    match schema {
        Some(schema) => builder.schema(schema),
        None => builder,
    }
}

impl Cli {
    /// Where the tasks are kept: `--store` (with `--pg-schema`), or the
    /// SQLite file `default` in the working directory.
    pub fn store_location(&self, default: &str) -> StoreLocation {
        StoreLocation::parse(
            self.store.as_deref().unwrap_or(default),
            self.pg_schema.clone(),
        )
    }

    /// Opens the store the command line names (`default`: the SQLite file
    /// used without `--store`).
    ///
    /// # Errors
    ///
    /// When the file cannot be opened, the database cannot be reached, or
    /// `--pg-schema` is given without a Postgres store.
    pub async fn open_store(&self, default: &str) -> Result<Arc<dyn Store>, BoxError> {
        self.check_pg_schema(default)?;
        self.store_location(default)
            .open_with(self.sqlite_sync)
            .await
    }

    /// Opens the store the command line names to read it only, for
    /// `--check-replay`: no migration, no write. A SQLite file that does
    /// not exist yet holds no task to check: the check reads an empty
    /// store, and says so on stderr.
    ///
    /// # Errors
    ///
    /// As [`StoreLocation::open_read_only`], and [`Cli::open_store`]'s
    /// `--pg-schema` check.
    pub async fn open_store_read_only(&self, default: &str) -> Result<Arc<dyn Store>, BoxError> {
        self.check_pg_schema(default)?;
        let location = self.store_location(default);
        if let StoreLocation::Sqlite(path) = &location
            && !path.exists()
        {
            eprintln!("no store at {location} yet: no task to check");
            return Ok(Arc::new(MemoryStore::new()));
        }
        let (store, versions) = location.clone().open_read_only().await?;
        if let Some(v) = versions
            && v.found < v.latest
        {
            eprintln!(
                "the store at {location} has schema version {}, older than this build's ({}): \
                 read as it is, not migrated",
                v.found, v.latest
            );
        }
        Ok(store)
    }

    /// `--pg-schema` needs a Postgres store.
    fn check_pg_schema(&self, default: &str) -> Result<(), BoxError> {
        if self.pg_schema.is_some()
            && !matches!(self.store_location(default), StoreLocation::Postgres { .. })
        {
            return Err("--pg-schema needs a postgres:// store".into());
        }
        Ok(())
    }

    /// An engine builder on the store the command line names, with its
    /// instance name, lease and scan interval. With `--admin`, it puts the
    /// metrics recorder in place first, so that `/metrics` counts what the
    /// engine does as it starts (its first expiry sweep, say), not only what
    /// comes after the admin address is served. With `--check-replay`, the
    /// store is opened read-only ([`Cli::open_store_read_only`]): hand the
    /// builder to [`Cli::check_replay_if_asked`] before starting it.
    ///
    /// # Errors
    ///
    /// As [`Cli::open_store`].
    pub async fn engine(&self, default: &str) -> Result<EngineBuilder, BoxError> {
        if self.admin.is_some() {
            mcp_tasks_runtime::metrics::install();
        }
        let store = if self.check_replay.is_some() {
            self.open_store_read_only(default).await?
        } else {
            self.open_store(default).await?
        };
        let mut builder = Engine::builder_arc(store)
            .lease(self.lease)
            .scan_interval(self.scan_interval)
            .sleep_in_process_up_to(self.sleep_in_process);
        if let Some(name) = &self.instance {
            builder = builder.instance(name.clone());
        }
        if let Some(n) = self.max_inline {
            builder = builder.max_inline(n);
        }
        if let Some(Ttl(ttl)) = self.ttl {
            builder = builder.default_ttl(ttl);
        }
        Ok(builder.limits(self.engine_limits()?))
    }
}

impl Cli {
    /// `--check-replay`: when it is given, runs the replay check of
    /// `builder` (the tools this binary serves, on its store, which
    /// [`Cli::engine`] opened read-only), prints the report and exits the
    /// process, 0 when it passed and 1 when not; the engine is never
    /// started. Without it, hands `builder` back to start. A server that
    /// serves tools calls it between [`Cli::engine`] and `start`; [`serve`]
    /// refuses to serve with `--check-replay`.
    ///
    /// # Errors
    ///
    /// When the store cannot be read.
    pub async fn check_replay_if_asked(
        &self,
        builder: EngineBuilder,
    ) -> Result<EngineBuilder, BoxError> {
        let Some(format) = self.check_replay else {
            return Ok(builder);
        };
        let report = builder.check_replay().await?;
        match format {
            ReportFormat::Text => println!("{report}"),
            ReportFormat::Json => println!("{}", serde_json::to_string(&report)?),
        }
        std::process::exit(if report.passed() { 0 } else { 1 });
    }

    /// The engine's limits: the defaults, with each `--limit` applied.
    ///
    /// # Errors
    ///
    /// An unknown limit, or a value that is not a number.
    pub fn engine_limits(&self) -> Result<Limits, BoxError> {
        let mut limits = Limits::default();
        for setting in &self.limits {
            let (name, value) = setting
                .split_once('=')
                .ok_or_else(|| format!("--limit {setting}: expected NAME=VALUE"))?;
            let bad = |e: &dyn fmt::Display| format!("--limit {setting}: {e}");
            let size = || value.parse::<usize>().map_err(|e| bad(&e));
            match name {
                "max_argument_bytes" => limits.max_argument_bytes = size()?,
                "max_answer_bytes" => limits.max_answer_bytes = size()?,
                "max_status_message_bytes" => limits.max_status_message_bytes = size()?,
                "max_result_bytes" => limits.max_result_bytes = size()?,
                "max_journal_entry_bytes" => limits.max_journal_entry_bytes = size()?,
                "max_journal_entries" => limits.max_journal_entries = size()?,
                "max_unfinished_per_principal" => limits.max_unfinished_per_principal = size()?,
                "max_unfinished_per_address" => limits.max_unfinished_per_address = size()?,
                "creates_per_second" => {
                    limits.creates_per_second = value.parse().map_err(|e| bad(&e))?;
                }
                "create_burst" => limits.create_burst = value.parse().map_err(|e| bad(&e))?,
                "max_listens_per_principal" => limits.max_listens_per_principal = size()?,
                "max_listens_per_task" => limits.max_listens_per_task = size()?,
                other => {
                    return Err(format!("--limit {setting}: no limit is named `{other}`").into());
                }
            }
        }
        Ok(limits)
    }

    /// Gives `builder` the `requestState` keys of the command line (or of
    /// `MCP_TASKS_STATE_KEY`).
    ///
    /// # Errors
    ///
    /// When a key is not 32 bytes in hex or base64: the server refuses to
    /// start, saying so.
    pub fn state_keys<H>(
        &self,
        mut builder: TaskServerBuilder<H>,
    ) -> Result<TaskServerBuilder<H>, BoxError> {
        let key = self
            .request_state_key
            .clone()
            .or_else(|| std::env::var("MCP_TASKS_STATE_KEY").ok());
        if let Some(key) = key {
            builder = builder.request_state_key(key)?;
        }
        for old in &self.old_request_state_key {
            builder = builder.old_request_state_key(old)?;
        }
        Ok(builder)
    }
}

impl Cli {
    /// Gives `builder` bearer-token authentication when `--jwt-issuer` is
    /// set.
    ///
    /// # Errors
    ///
    /// When the JWKS file cannot be read or holds no usable key, or the URL
    /// is no `http(s)` URL: the server refuses to start, saying so.
    pub fn auth<H>(&self, builder: TaskServerBuilder<H>) -> Result<TaskServerBuilder<H>, BoxError> {
        let (Some(issuer), Some(audience), Some(jwks)) =
            (&self.jwt_issuer, &self.jwt_audience, &self.jwks)
        else {
            return Ok(builder);
        };
        let keys = if jwks.starts_with("http://") || jwks.starts_with("https://") {
            Jwks::url(jwks)?
        } else {
            Jwks::file(jwks)?
        };
        let mut auth = JwtAuth::new(issuer.clone(), audience.clone(), keys);
        if let Some(resource) = &self.jwt_resource {
            auth = auth.resource(resource.clone());
        }
        for server in &self.authorization_server {
            auth = auth.authorization_server(server.clone());
        }
        Ok(builder.auth(auth))
    }
}

/// Logs to stderr (stdout carries the protocol in stdio mode), `RUST_LOG`
/// saying what (default `info`, and `warn` for rmcp, which logs every
/// request); and, with `--otlp-endpoint` (or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` in the environment), exports the task runs'
/// traces through OpenTelemetry ([`mcp_tasks_runtime::otel`]) as the service
/// `service` (unless `OTEL_SERVICE_NAME` names it). Keep the guard it
/// returns until the program ends: when it drops, the spans still buffered
/// are sent.
///
/// # Errors
///
/// When the endpoint is not a plain `http` URL, or the exporter cannot start.
pub fn init_tracing(cli: &Cli, service: &str) -> Result<Option<OtelGuard>, BoxError> {
    use tracing_subscriber::{Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    let from_env = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()));
    let (otel, guard) = if cli.otlp_endpoint.is_some() || from_env {
        let mut config = OtelConfig::new();
        if let Some(url) = &cli.otlp_endpoint {
            config = config.endpoint(url.clone());
        }
        if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
            config = config.service_name(service);
        }
        let (layer, guard) = mcp_tasks_runtime::otel::layer(config)?;
        (Some(layer), Some(guard))
    } else {
        (None, None)
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colours for a terminal only: none in files and pipes.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn")),
                ),
        )
        .with(otel)
        .init();
    Ok(guard)
}

/// Builds the server `builder` describes, with the command line's transport
/// settings, and serves it as the command line says, printing where it listens (and
/// the admin address, with `--admin`), until the transport ends or the
/// process gets SIGINT or SIGTERM.
///
/// A signal shuts the server down gracefully
/// ([`Serve::with_graceful_shutdown`](mcp_tasks_runtime::mcp::Serve::with_graceful_shutdown)):
/// new calls are refused (`-32603`, `data.reason:
/// "shutting_down"`), `tasks/get`, answers and cancels are still served, and
/// each running step finishes (up to `--drain-timeout`) and is journaled.
/// Then the engine gives up its tasks, so that another instance sharing the
/// store takes them over at once (a rolling restart hands tasks over without
/// waiting for their leases to run out), and the process exits 0. A second
/// signal exits at once (status 1); the journal keeps every finished step
/// either way.
///
/// # Errors
///
/// When an address cannot be bound, the transport fails, or the store
/// refuses to release the leases.
pub async fn serve<H: ServerHandler + Clone>(
    cli: &Cli,
    store: &StoreLocation,
    builder: TaskServerBuilder<H>,
) -> Result<(), BoxError> {
    if cli.check_replay.is_some() {
        // A server that did not run the check must not serve instead.
        return Err("--check-replay: this server runs no replay check".into());
    }
    let options = HttpOptions::default()
        .header_read_timeout(cli.header_read_timeout)
        .body_read_timeout(cli.body_read_timeout)
        .max_connections(cli.max_connections)
        .max_connections_per_client(cli.max_connections_per_client)
        .max_sessions_per_client(cli.max_sessions_per_client)
        .max_sessions(cli.max_sessions)
        .loopback_addresses_apart(cli.loopback_addresses_apart)
        .session_idle_timeout(cli.session_idle_timeout);
    let server = builder
        .http(options)
        .drain_timeout(cli.drain_timeout)
        .build();
    let engine = server.engine().clone();
    let admin = match cli.admin {
        Some(addr) => {
            let token = cli
                .admin_token
                .clone()
                .or_else(|| std::env::var("MCP_TASKS_ADMIN_TOKEN").ok());
            let mut options = mcp_tasks_runtime::admin::AdminOptions::default()
                .page_size(cli.admin_page_size)
                .allow_remote_without_token(cli.admin_allow_remote_without_token);
            if let Some(token) = token {
                options = options.bearer_token(token);
            }
            // Before binding: an address off loopback without a token is refused.
            options.check_address(addr)?;
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let local = listener.local_addr()?;
            tokio::spawn(mcp_tasks_runtime::admin::serve_on(
                listener,
                engine.clone(),
                options,
            ));
            format!("; admin on http://{local}/")
        }
        None => String::new(),
    };
    let signal = first_signal(cli.drain_timeout);
    if cli.stdio {
        eprintln!(
            "serving MCP over stdio (store: {store}, instance {}){admin}",
            engine.instance()
        );
        return mcp::serve_stdio(server)
            .with_graceful_shutdown(signal)
            .await;
    }
    let listener = tokio::net::TcpListener::bind(cli.addr).await?;
    let local = listener.local_addr()?;
    // One line: what reads it (a supervisor, the tests) takes the first.
    println!(
        "listening on http://{local}/mcp (store: {store}, instance {}){admin}",
        engine.instance()
    );
    mcp::serve(listener, server)
        .with_graceful_shutdown(signal)
        .await
}

/// Waits for the first SIGINT or SIGTERM and says what happens now; from
/// then on, a second one exits the process at once (status 1).
async fn first_signal(drain_timeout: Duration) {
    let signal = shutdown_signal().await;
    eprintln!(
        "{signal}: draining: no new calls; running steps finish (up to {}); \
         a second signal exits at once",
        humantime::format_duration(drain_timeout)
    );
    tokio::spawn(async {
        let signal = shutdown_signal().await;
        eprintln!("{signal} again: exiting now");
        std::process::exit(1);
    });
}

/// Waits for SIGINT (Ctrl-C) or, on Unix, SIGTERM; names the one that came.
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = async {
            match signal(SignalKind::terminate()) {
                Ok(mut term) => term.recv().await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            () = ctrl_c() => "SIGINT",
            _ = term => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        ctrl_c().await;
        "Ctrl-C"
    }
}

/// Waits for Ctrl-C; forever if it cannot be listened for.
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("demo").chain(args.iter().copied()))
    }

    #[test]
    fn the_store_is_a_file_unless_it_is_a_postgres_url_or_memory() {
        assert_eq!(
            cli(&[]).store_location("demo.db"),
            StoreLocation::Sqlite("demo.db".into())
        );
        assert_eq!(
            cli(&["--store", "/tmp/x.db"]).store_location("demo.db"),
            StoreLocation::Sqlite("/tmp/x.db".into())
        );
        assert_eq!(
            cli(&["--store", "memory"]).store_location("demo.db"),
            StoreLocation::Memory
        );
        for url in ["postgres://u@h/db", "postgresql://u@h/db"] {
            assert_eq!(
                cli(&["--store", url, "--pg-schema", "s"]).store_location("demo.db"),
                StoreLocation::Postgres {
                    url: url.to_owned(),
                    schema: Some("s".to_owned())
                }
            );
        }
    }

    #[test]
    fn a_postgres_store_is_shown_without_its_password() {
        let shown = |url: &str, schema: Option<&str>| {
            StoreLocation::Postgres {
                url: url.to_owned(),
                schema: schema.map(str::to_owned),
            }
            .to_string()
        };
        assert_eq!(
            shown("postgres://app:secret@db:5432/app?application_name=x", None),
            "postgres://app@db:5432/app"
        );
        assert_eq!(
            shown("postgresql://db/app", Some("tasks")),
            "postgresql://db/app (schema tasks)"
        );
    }

    #[test]
    fn leases_and_scans_take_durations() {
        let set = cli(&[
            "--lease",
            "1500ms",
            "--scan-interval",
            "2s",
            "--sleep-in-process",
            "0s",
        ]);
        assert_eq!(set.lease, Duration::from_millis(1500));
        assert_eq!(set.scan_interval, Duration::from_secs(2));
        assert_eq!(set.sleep_in_process, Duration::ZERO);
        let defaults = cli(&[]);
        assert_eq!(defaults.lease, Duration::from_secs(10));
        assert_eq!(defaults.scan_interval, Duration::from_secs(1));
        assert_eq!(defaults.sleep_in_process, Duration::from_secs(1));
    }
}
