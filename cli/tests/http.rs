//! The records `IdempotencyLayer` keeps are the operator's like a tool call's: `idemkit key`
//! derives a request's key from the client's, `list` and `show` print its record and stored
//! response, `forget` lets the key run again.

mod common;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use common::*;
use idem_runtime::http::{IdempotencyLayer, REPLAYED};
use idem_runtime::{Idem, SqliteStore};
use tower::ServiceExt;

fn keyed() -> Request<Body> {
    Request::post("/v1/orders")
        .header("idempotency-key", "\"order-7\"")
        .body(Body::from(r#"{"sku":"tea"}"#))
        .unwrap()
}

#[tokio::test]
async fn a_keyed_requests_record_is_listed_shown_and_forgotten_by_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.db");
    let at = format!("sqlite:{}", path.display());
    let layer =
        IdempotencyLayer::new(Idem::new(SqliteStore::open(&path).unwrap())).name("shop.orders");
    let app = Router::new()
        .route(
            "/v1/orders",
            post(|| async { (StatusCode::CREATED, "order ord_1 placed") }),
        )
        .layer(layer);
    let first = app.clone().oneshot(keyed()).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);

    let key = stdout(&expect(
        &["key", "shop.orders", "idempotency_key=order-7"],
        0,
    ));
    let key = key.trim();
    let listed = stdout(&expect(
        &["list", "--store", &at, "--tool", "shop.orders"],
        0,
    ));
    assert!(listed.contains(key), "{listed}");
    let shown = stdout(&expect(&["show", key, "--store", &at], 0));
    assert!(shown.contains("shop.orders"), "{shown}");
    assert!(
        shown.contains("order ord_1 placed"),
        "the stored response: {shown}"
    );
    assert!(shown.contains("201"), "the stored status: {shown}");

    let replay = app.clone().oneshot(keyed()).await.unwrap();
    assert_eq!(replay.headers()[REPLAYED], "true");
    expect(&["forget", key, "--store", &at], 0);
    let again = app.oneshot(keyed()).await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert!(
        again.headers().get(REPLAYED).is_none(),
        "a forgotten key runs again"
    );
}
