//! [`PostgresStoreBuilder`]: connecting a [`PostgresStore`].

use std::{collections::BTreeSet, fmt, sync::Arc, time::Duration};

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::{Config, SimpleQueryMessage, config::Host};

use super::{
    PostgresStore,
    feed::{self, Feed, Health},
    schema,
    tls::{self, PostgresTls},
};
use crate::{
    error::Result,
    store::{SchemaVersions, StoreError, error::Context},
};

const DEFAULT_SCHEMA: &str = "public";
const DEFAULT_MAX_CONNECTIONS: usize = 16;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for connecting a [`PostgresStore`]. Made by
/// [`PostgresStore::builder`].
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is called"]
pub struct PostgresStoreBuilder {
    url: String,
    schema: String,
    max_connections: usize,
    connect_timeout: Duration,
    migrate: bool,
    /// The connector given to [`PostgresStoreBuilder::tls`], if any.
    tls: Option<Arc<dyn Connector>>,
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: show what it points at instead.
        let target = tls::take(&self.url)
            .ok()
            .and_then(|(url, _)| url.parse::<Config>().ok())
            .map_or_else(|| "(an invalid URL)".to_owned(), |c| describe(&c));
        f.debug_struct("PostgresStoreBuilder")
            .field("target", &target)
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("migrate", &self.migrate)
            .field("own_tls", &self.tls.is_some())
            .finish()
    }
}

impl PostgresStoreBuilder {
    /// The defaults, for the database at `url`.
    pub(super) fn new(url: String) -> Self {
        Self {
            url,
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            migrate: true,
            tls: None,
        }
    }

    /// The Postgres schema that holds the store's tables; it is created if
    /// it does not exist. Defaults to `public`. Several stores can share a
    /// database, each in a schema of its own. The name must be a plain
    /// lower-case identifier (letters, digits and `_`).
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = name.into();
        self
    }

    /// The most connections the store keeps open at once. Defaults to 16.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long opening one connection may take before it fails, when the
    /// URL does not set `connect_timeout` itself. Defaults to 10 seconds.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether [`connect`](Self::connect) creates the schema if needed and
    /// brings an older one up to this build's (the default, `true`, as a
    /// server's start does). With `false`, `connect` takes no lock and runs
    /// no DDL, and writes only to a schema of this build's version: any other
    /// is refused, naming both versions. For a program that must not upgrade
    /// a store under the servers of an older build (an operator's one-off
    /// write), leaving the migration to an explicit step.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Connects through `tls`, a TLS connector of your own (a
    /// `tokio_postgres_rustls::MakeRustlsConnect` with your roots or client
    /// certificate, `postgres_native_tls`'s, ...), instead of the rustls
    /// one the URL's `sslmode` makes. tokio-postgres then reads `sslmode`
    /// (`disable`, `prefer` or `require`: whether TLS is tried, and whether
    /// it must be), and the connector checks the server's certificate; the
    /// URL's `verify-ca`, `verify-full` and `sslrootcert` stand for
    /// `require` (the connector decides what is checked).
    ///
    /// ```no_run
    /// use mcp_tasks_runtime::store::PostgresStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mcp_tasks_runtime::Result<()> {
    /// // Plain text, whatever the URL says (a Unix socket, say).
    /// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/postgres")
    ///     .tls(tokio_postgres::NoTls)
    ///     .connect()
    ///     .await?;
    /// # drop(store);
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(mut self, tls: impl PostgresTls) -> Self {
        self.tls = Some(Arc::new(tls));
        self
    }

    /// Connects, creates the schema if needed, and brings its tables up to
    /// date (without [`migrate`](Self::migrate): connects to a schema of
    /// this build's version only). Processes that connect at the same time migrate one after the
    /// other (under an advisory lock), so all of them succeed.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) if the URL is invalid (an
    /// `sslmode` this store does not support included), the schema name is
    /// refused, the server cannot be reached (or its certificate is not the
    /// one `sslmode` asks for), or the schema is newer than this build
    /// knows. The message names the server (without the password).
    pub async fn connect(self) -> Result<PostgresStore> {
        self.open(false).await
    }

    /// Connects to read the store only: no migration, no DDL, no advisory
    /// lock, no write. Every connection of the pool runs its statements in
    /// read-only transactions (`default_transaction_read_only`), and the
    /// store refuses its own writes ([`Store::create`](crate::store::Store::create),
    /// [`Store::transition`](crate::store::Store::transition), …) with an
    /// error saying it is read-only. It listens to no feed
    /// ([`Store::changes`](crate::store::Store::changes) is `None`). For
    /// the checks and views that must leave a store as they found it, beside
    /// servers of this build or an older one: the replay check before a
    /// deploy, an operator listing tasks.
    ///
    /// A schema of an older version is read as it is when this build's
    /// reads work on it ([`PostgresStore::schema_versions`] says which it
    /// is), and refused otherwise, the message naming both versions and how
    /// to migrate.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); and when the schema holds no store
    /// (it does not exist, or has no `mcp_tasks_schema_version` table), or
    /// its version is older than this build reads as it is.
    pub async fn connect_read_only(self) -> Result<PostgresStore> {
        self.open(true).await
    }

    /// [`connect`](Self::connect), or [`connect_read_only`](Self::connect_read_only).
    async fn open(self, read_only: bool) -> Result<PostgresStore> {
        let (url, mut tls) = tls::take(&self.url)?;
        let mut config: Config = url.parse().map_err(|e| {
            StoreError::new("Postgres store: could not read the connection URL").with_source(e)
        })?;
        tls.apply(&mut config);
        let connector = match self.tls {
            Some(own) => own,
            None => Arc::new(tls.connector()?),
        };
        schema::check_name(&self.schema)?;
        // Set on each new connection of the pool by a statement, not by the
        // startup packet's `options`, which PgBouncer refuses.
        let mut session = format!("SET search_path TO {}", self.schema);
        if read_only {
            // Every transaction of every connection read-only: a write the
            // store would not refuse itself, the server refuses.
            session.push_str("; SET default_transaction_read_only TO on");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("mcp-tasks");
        }
        let target = describe(&config);
        let channel = feed::channel(&self.schema);
        // A read-only store follows nothing: no listening connection.
        let health = Arc::new(Health::default());
        let feed =
            (!read_only).then(|| connector.feed(config.clone(), channel.clone(), health.clone()));
        let warn_if_plain = tls::warn_if_plain(&config);
        let manager = connector.manager(
            config,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let mut pool = Pool::builder(manager)
            .max_size(self.max_connections)
            .post_create(set_up(session, health));
        if let Some(hook) = warn_if_plain {
            pool = pool.post_create(hook);
        }
        let pool = pool
            .build()
            .context(|| format!("Postgres store at {target}: could not build the pool"))?;
        let migrate = self.migrate;
        let mut store = PostgresStore {
            pool,
            target,
            schema: self.schema,
            channel,
            feed,
            read_only,
            versions: SchemaVersions::read_only(0, schema::LATEST),
            writer: Default::default(),
        };
        let mut client = store.client(|| "could not connect".to_owned()).await?;
        refuse_transaction_pooling(&store.pool, &client, &store.target).await?;
        store.versions = if read_only {
            let found = schema::readable(&client, &store.target, &store.schema).await?;
            SchemaVersions::read_only(found, schema::LATEST)
        } else if !migrate {
            let found = schema::current(&client, &store.target, &store.schema).await?;
            SchemaVersions::migrated(found, schema::LATEST)
        } else {
            let found = schema::migrate(&mut client, &store.target, &store.schema).await?;
            SchemaVersions::migrated(found, schema::LATEST)
        };
        drop(client);
        Ok(store)
    }
}

/// The pool's hook on each new connection: sets its session up (`session`:
/// the statements), and tells `health` the database answers.
fn set_up(session: String, health: Arc<Health>) -> Hook {
    let session: Arc<str> = session.into();
    Hook::async_fn(move |client, _| {
        let (session, health) = (session.clone(), health.clone());
        Box::pin(async move {
            client
                .batch_execute(&session)
                .await
                .map_err(HookError::Backend)?;
            health.back();
            Ok(())
        })
    })
}

/// Refuses a pooler that hands one database session to several clients
/// (PgBouncer's `pool_mode = transaction` or `statement`): the store
/// prepares its statements once per connection and `LISTEN`s on one, and
/// both belong to a session. `first` is a connection of `pool`; a second one
/// is taken beside it, and both ask for their backend's process id a few
/// times over. Each connection a session of its own, `first` always names
/// one process, the second another; behind a transaction pooler, sessions
/// are handed from client to client between statements, and a process shows
/// up on both, or one connection names two. (A pool of one connection is
/// not checked.)
async fn refuse_transaction_pooling(pool: &Pool, first: &Object, target: &str) -> Result<()> {
    const ROUNDS: usize = 4;
    if pool.status().max_size < 2 {
        return Ok(());
    }
    let what = || format!("Postgres store at {target}: could not connect");
    let second = pool.get().await.context(what)?;
    let pid_of = async |c: &tokio_postgres::Client| -> Result<String> {
        let rows = c
            .simple_query("SELECT pg_backend_pid()")
            .await
            .context(what)?;
        Ok(rows
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap_or_default())
    };
    let (mut seen_first, mut seen_second) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..ROUNDS {
        seen_first.insert(pid_of(first).await?);
        seen_second.insert(pid_of(&second).await?);
    }
    let shared =
        seen_first.len() > 1 || seen_second.len() > 1 || !seen_first.is_disjoint(&seen_second);
    if shared {
        let pids: Vec<String> = seen_first.union(&seen_second).cloned().collect();
        return Err(StoreError::new(format!(
            "Postgres store at {target}: its connections were handed from one database session \
             to another between statements (backends {}): a connection pooler in transaction or \
             statement mode stands in between, and the store needs a session per connection \
             (its prepared statements and its LISTEN feed live in one). Put the pooler in \
             session mode (PgBouncer: `pool_mode = session`), or connect to the database directly",
            pids.join(", ")
        ))
        .into());
    }
    Ok(())
}

/// What a connection config points at, as a URL without the password:
/// `postgres://user@host:port/db`.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = config.get_ports().get(i).or(config.get_ports().first());
            let host = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            port.map_or(host.clone(), |port| format!("{host}:{port}"))
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or_default(),
        hosts.join(","),
        config.get_dbname().unwrap_or_default()
    )
}

/// A [`PostgresTls`] with its type put away, for the builder to keep.
trait Connector: Send + Sync {
    /// The pool's manager of connections to `config` through it.
    fn manager(&self, config: Config, manager: ManagerConfig) -> Manager;
    /// The change feed, listening over a connection through it.
    fn feed(&self, config: Config, channel: String, health: Arc<Health>) -> Feed;
}

impl<T: PostgresTls> Connector for T {
    fn manager(&self, config: Config, manager: ManagerConfig) -> Manager {
        Manager::from_config(config, self.clone(), manager)
    }

    fn feed(&self, config: Config, channel: String, health: Arc<Health>) -> Feed {
        Feed::start(config, self.clone(), channel, health)
    }
}
