//! Nothing secret leaks (issue 19, in part): a store URL's password is never printed, not by a
//! builder's `Debug` nor by the error of a connection that fails.

// Without a server store's feature there is nothing to test here.
#![cfg(any(feature = "postgres", feature = "redis"))]

const PASSWORD: &str = "s3cret-pa55word";

/// The error and every source under it, as a user would print them.
fn full_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{err} / {err:?}");
    let mut next = err.source();
    while let Some(e) = next {
        text.push_str(&format!(" / {e} / {e:?}"));
        next = e.source();
    }
    text
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_failing_postgres_connection_never_prints_the_password() {
    // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    let url = format!("postgres://agent:{PASSWORD}@127.0.0.1:9/agents");
    let builder = idem_runtime::PostgresStore::builder(&url)
        .connect_timeout(std::time::Duration::from_secs(2));
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains(PASSWORD) && shown.contains("agent:***@"),
        "{shown}"
    );
    let err = builder.connect().await.expect_err("nothing listens there");
    let text = full_text(&err);
    assert!(!text.contains(PASSWORD), "{text}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_failing_redis_connection_never_prints_the_password() {
    let url = format!("redis://agent:{PASSWORD}@127.0.0.1:9/0");
    let builder = idem_runtime::RedisStore::builder(&url);
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains(PASSWORD) && shown.contains("agent:***@"),
        "{shown}"
    );
    let err = builder.connect().await.expect_err("nothing listens there");
    let text = full_text(&err);
    assert!(!text.contains(PASSWORD), "{text}");
}
