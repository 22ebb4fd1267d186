//! Test helpers for the Postgres store (features `testing` and `postgres`):
//! a schema of its own on a real PostgreSQL server, for one test or bench.
//! The store contract every store must meet is the crate
//! `mcp-tasks-store-contract`.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio_postgres::{Config, NoTls};

/// Where the tests' PostgreSQL server is unless `MCP_TASKS_POSTGRES_URL`
/// says otherwise.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The URL of the PostgreSQL server the tests use: `MCP_TASKS_POSTGRES_URL`,
/// or `postgres://postgres@127.0.0.1:5432/postgres`.
pub fn postgres_url() -> String {
    std::env::var("MCP_TASKS_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// The [`postgres_url`] once the server there has answered a query; else
/// why not. With `CI` set, a server that does not answer panics instead: CI
/// must run the Postgres tests.
pub async fn postgres_server() -> Result<String, String> {
    let url = postgres_url();
    let probe = async {
        let mut config: Config = url.parse()?;
        config.connect_timeout(Duration::from_secs(5));
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(connection);
        client.simple_query("SELECT 1").await.map(drop)
    };
    let Err(e) = probe.await else {
        return Ok(url);
    };
    let reason = format!("Postgres not reachable at {url}: {e}");
    if std::env::var_os("CI").is_some() {
        panic!(
            "{reason}\nCI is set, so the Postgres tests must run: start the server, or \
             point MCP_TASKS_POSTGRES_URL at one"
        );
    }
    Err(reason)
}

/// Like [`postgres_server`], but a server that does not answer is `None`,
/// and the test `test` says loudly on stderr that it is skipped.
pub async fn postgres_server_or_skip(test: &str) -> Option<String> {
    match postgres_server().await {
        Ok(url) => Some(url),
        Err(reason) => {
            // Past the harness's capture: a skip must show.
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!("SKIPPED: {test}: {reason}\n"),
            );
            None
        }
    }
}

/// A schema of its own on a real PostgreSQL server, for one test or bench
/// (features `testing` and `postgres`).
///
/// Its name is unique to the process and the moment. Stores opened with
/// [`url`](Self::url) carry the name as their application name, so that
/// dropping this ends every session they left open (a killed instance's
/// included) and then drops the schema with everything in it. The drop never
/// panics: a schema it could not drop is reported on stderr.
///
/// ```
/// use mcp_tasks_runtime::store::testing::PostgresSchema;
///
/// let schema = PostgresSchema::new("postgres://postgres@127.0.0.1:5432/postgres", "my_tests");
/// assert!(schema.name().starts_with("my_tests_"));
/// assert!(schema.url().ends_with(&format!("?application_name={}", schema.name())));
/// // A store in it:
/// // PostgresStore::builder(schema.url()).schema(schema.name()).connect().await
/// // The schema and its sessions go when `schema` drops.
/// # std::mem::forget(schema); // no server here: nothing to drop
/// ```
#[derive(Debug)]
pub struct PostgresSchema {
    url: String,
    name: String,
}

impl PostgresSchema {
    /// A fresh schema name beginning with `prefix`, on the server at `url`
    /// (a `postgres://` URL or a `key=value` connection string). Nothing is
    /// created until a store opens the schema.
    ///
    /// # Panics
    ///
    /// If `prefix` is not a lowercase SQL identifier (`a`–`z`, `0`–`9`, `_`,
    /// not starting with a digit): the name is written into SQL unquoted.
    pub fn new(url: &str, prefix: &str) -> Self {
        assert!(
            prefix.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "schema prefix {prefix:?} is not a lowercase SQL identifier"
        );
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Self {
            url: url.to_owned(),
            name: format!(
                "{prefix}_{}_{}_{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL with the schema's name as the application name:
    /// open the stores of the test with it.
    pub fn url(&self) -> String {
        let sep = if self.url.contains("://") {
            if self.url.contains('?') { "&" } else { "?" }
        } else {
            " "
        };
        format!("{}{sep}application_name={}", self.url, self.name)
    }
}

impl Drop for PostgresSchema {
    /// Drops happen inside a runtime, after one, or while a failed test
    /// unwinds: none can await. So the work runs on a thread of its own with
    /// a small runtime of its own, and the drop waits for it.
    fn drop(&mut self) {
        let url = self.url.clone();
        // Sessions a store left open could hold locks the drop would wait
        // for: end them first.
        let sql = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = '{name}' AND pid <> pg_backend_pid();
             DROP SCHEMA IF EXISTS {name} CASCADE;",
            name = self.name
        );
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut config = url.parse::<Config>().map_err(|e| e.to_string())?;
                config.connect_timeout(Duration::from_secs(5));
                let (client, connection) =
                    config.connect(NoTls).await.map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client.batch_execute(&sql).await.map_err(|e| e.to_string())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop test schema {}: {e}", self.name),
            Err(_) => eprintln!("dropping test schema {} panicked", self.name),
        }
    }
}
