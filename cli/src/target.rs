//! Which store the command works on (`--store`, `IDEMKIT_STORE`, or the default SQLite file),
//! and opening it: read-only for the commands that only read.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "postgres")]
use idem_runtime::PostgresStore;
#[cfg(feature = "redis")]
use idem_runtime::RedisStore;
use idem_runtime::store::OperationIds;
use idem_runtime::store::default_path;
use idem_runtime::store::redacted_url;
use idem_runtime::{Idem, Records, Settler, SqliteStore, Store, StoreError};

/// A store named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Sqlite(PathBuf),
    Postgres(String),
    Redis(String),
}

/// Where the store lives, as the command was told: `sqlite:PATH`, a bare path, `postgres://…`
/// (or `postgresql://…`), `redis://…` (or `rediss://…`).
pub fn parse(spec: &str) -> Result<Target, String> {
    if let Some(path) = spec.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err("`sqlite:` names no file; write sqlite:PATH".to_owned());
        }
        return Ok(Target::Sqlite(PathBuf::from(path)));
    }
    match spec.split_once("://") {
        Some(("postgres" | "postgresql", _)) => Ok(Target::Postgres(spec.to_owned())),
        Some(("redis" | "rediss", _)) => Ok(Target::Redis(spec.to_owned())),
        Some((scheme, _)) => Err(format!(
            "`{scheme}://` is not a store this command knows; use sqlite:PATH, a path, postgres://… or redis://…"
        )),
        None if spec.is_empty() => Err(
            "the store is empty; give sqlite:PATH, a path, postgres://… or redis://…".to_owned(),
        ),
        None => Ok(Target::Sqlite(PathBuf::from(spec))),
    }
}

/// Settings of the server stores that a URL does not carry (read only by the stores built in).
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(all(feature = "postgres", feature = "redis")), allow(dead_code))]
pub struct Names {
    pub pg_schema: Option<String>,
    pub pg_table: Option<String>,
    pub redis_prefix: Option<String>,
    /// S33: how long a prune keeps tombstones past their ttl (`None`: the store's default).
    pub tombstones: Option<std::time::Duration>,
}

impl Target {
    /// The store named, or the default SQLite file (`IDEMKIT_DB`, else `.idemkit/idemkit.db`
    /// here), exactly as the runtime finds it.
    pub fn choose(spec: Option<&str>) -> Result<Target, String> {
        match spec {
            Some(spec) => parse(spec),
            None => default_path()
                .map(Target::Sqlite)
                .map_err(|e| e.to_string()),
        }
    }

    /// The store for messages: a URL's password is never printed.
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite(path) => format!("sqlite:{}", path.display()),
            Target::Postgres(url) | Target::Redis(url) => redacted_url(url),
        }
    }

    /// Opens the store; `read_only` for the commands that only read (SQLite and PostgreSQL then
    /// create, migrate and write nothing). A SQLite file that is not there is an error: this
    /// command never makes an empty store.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "redis")),
        allow(unused_variables)
    )]
    pub async fn open(
        &self,
        names: &Names,
        read_only: bool,
    ) -> Result<Box<dyn Records>, StoreError> {
        match self {
            Target::Sqlite(path) => {
                if !path.is_file() {
                    return Err(StoreError::unavailable(format!(
                        "there is no store at {} (nothing was created); give the agent's store with --store \
                         or IDEMKIT_STORE (sqlite:PATH, postgres://…, redis://…), or set IDEMKIT_DB as the agent does",
                        path.display()
                    )));
                }
                let mut builder = SqliteStore::builder(path).read_only(read_only);
                if let Some(keep) = names.tombstones {
                    builder = builder.tombstones(keep);
                }
                Ok(Box::new(builder.open()?))
            }
            #[cfg(feature = "postgres")]
            Target::Postgres(url) => {
                let mut builder = PostgresStore::builder(url.as_str())
                    .read_only(read_only)
                    .max_connections(2);
                if let Some(schema) = &names.pg_schema {
                    builder = builder.schema(schema);
                }
                if let Some(table) = &names.pg_table {
                    builder = builder.table(table);
                }
                if let Some(keep) = names.tombstones {
                    builder = builder.tombstones(keep);
                }
                Ok(Box::new(builder.connect().await?))
            }
            #[cfg(feature = "redis")]
            Target::Redis(url) => {
                let mut builder = RedisStore::builder(url.as_str());
                if let Some(prefix) = &names.redis_prefix {
                    builder = builder.prefix(prefix);
                }
                if let Some(keep) = names.tombstones {
                    builder = builder.tombstones(keep);
                }
                Ok(Box::new(builder.connect().await?))
            }
            #[cfg(not(feature = "postgres"))]
            Target::Postgres(_) => Err(not_built_in("PostgreSQL", "postgres")),
            #[cfg(not(feature = "redis"))]
            Target::Redis(_) => Err(not_built_in("Redis", "redis")),
        }
    }
}

impl Target {
    #[cfg_attr(
        not(any(feature = "postgres", feature = "redis")),
        allow(unused_variables)
    )]
    /// A runtime over the store, for `idemkit proxy`: opened to write, a SQLite file (and its
    /// folder) created where it is missing; with a settler of the same store and its records.
    pub async fn runtime(&self, names: &Names) -> Result<Opened, StoreError> {
        match self {
            Target::Sqlite(path) => opened(SqliteStore::builder(path).open()?),
            #[cfg(feature = "postgres")]
            Target::Postgres(url) => {
                let mut builder = PostgresStore::builder(url.as_str());
                if let Some(schema) = &names.pg_schema {
                    builder = builder.schema(schema);
                }
                if let Some(table) = &names.pg_table {
                    builder = builder.table(table);
                }
                opened(builder.connect().await?)
            }
            #[cfg(feature = "redis")]
            Target::Redis(url) => {
                let mut builder = RedisStore::builder(url.as_str());
                if let Some(prefix) = &names.redis_prefix {
                    builder = builder.prefix(prefix);
                }
                opened(builder.connect().await?)
            }
            #[cfg(not(feature = "postgres"))]
            Target::Postgres(_) => Err(not_built_in("PostgreSQL", "postgres")),
            #[cfg(not(feature = "redis"))]
            Target::Redis(_) => Err(not_built_in("Redis", "redis")),
        }
    }
}

/// A store opened to write: the runtime over it, a settler of it, its records.
pub struct Opened {
    pub idem: Idem,
    pub settler: Settler,
    pub records: Arc<dyn Records>,
}

fn opened<S>(store: S) -> Result<Opened, StoreError>
where
    S: Store + OperationIds + Records + 'static,
{
    let store = Arc::new(store);
    let idem = Idem::builder()
        .shared_store(store.clone())
        .build()
        .map_err(|e| StoreError::unavailable(e.to_string()))?;
    Ok(Opened {
        idem,
        settler: Settler::new(store.clone()),
        records: store,
    })
}

/// The error for a server store whose client this build of the command left out.
#[cfg(not(all(feature = "postgres", feature = "redis")))]
fn not_built_in(store: &str, feature: &str) -> StoreError {
    StoreError::unavailable(format!(
        "this `idemkit` was built without the {store} store: install it with \
         `cargo install --path cli --features {feature}` (or `--features postgres,redis`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_store() {
        assert_eq!(
            parse("sqlite:/a/b.db"),
            Ok(Target::Sqlite("/a/b.db".into()))
        );
        assert_eq!(
            parse("sqlite:///a/b.db"),
            Ok(Target::Sqlite("/a/b.db".into()))
        );
        assert_eq!(parse("rel/b.db"), Ok(Target::Sqlite("rel/b.db".into())));
        assert!(matches!(
            parse("postgres://u@h/db"),
            Ok(Target::Postgres(_))
        ));
        assert!(matches!(
            parse("postgresql://u@h/db"),
            Ok(Target::Postgres(_))
        ));
        assert!(matches!(parse("redis://h:6379/0"), Ok(Target::Redis(_))));
        assert!(parse("mysql://h/db").is_err());
        assert!(parse("sqlite:").is_err());
    }

    #[test]
    fn passwords_are_not_described() {
        let t = parse("postgres://agent:s3cret@db/agents").unwrap();
        assert!(!t.describe().contains("s3cret"));
        let t = parse("redis://:s3cret@h:6379/0").unwrap();
        assert!(!t.describe().contains("s3cret"));
    }
}
