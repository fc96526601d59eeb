//! The URL of a test server, for the tests that need one (shared with `cli/tests/common`).
//!
//! Such a test lives in a module named `needs_postgres`, `needs_pgbouncer` or `needs_redis`, so
//! that its name says what it needs: `scripts/test.sh` (the README's test command) leaves out
//! with `--skip needs_…` the tests of a server that is not installed, and says so in its summary.
//! A test never skips itself: without its server's URL it fails, saying how to get one.

/// The module name a test that needs the server of `var` lives in.
pub fn needs(var: &str) -> &'static str {
    match var {
        "IDEMKIT_TEST_POSTGRES_URL" => "needs_postgres",
        "IDEMKIT_TEST_PGBOUNCER_URL" => "needs_pgbouncer",
        "IDEMKIT_TEST_REDIS_URL" => "needs_redis",
        other => panic!("no test server is read from {other}"),
    }
}

/// The URL in `var` of the test server `server` (`PostgreSQL`, `PgBouncer`, `Redis`). Without it
/// the test fails, saying how to run it; it never passes without having run.
///
/// Checks, where the test harness names the thread after the test (not on a runtime's worker
/// threads), that the calling test's name holds its module's `needs_…`, so that
/// `scripts/test.sh` can leave it out where the server is not installed.
#[track_caller]
pub fn server_url(var: &str, server: &str) -> String {
    let needs = needs(var);
    if let Some(test) = std::thread::current().name() {
        let harness_named = test != "main" && !test.starts_with("tokio-");
        assert!(
            !harness_named || test.contains(needs),
            "test `{test}` needs {server} ({var}) but is not in a module named `{needs}`: \
             move it there, so that `scripts/test.sh` can leave it out where {server} is not installed"
        );
    }
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{var} is not set: this test needs {server}. `scripts/test.sh` (the README's test \
             command) starts {server} where it is installed and leaves these tests out, saying \
             so, where it is not; by hand: `eval \"$(scripts/test-servers.sh start)\"`, or leave \
             them out of a cargo run with `-- --skip {needs}`"
        ),
    }
}
