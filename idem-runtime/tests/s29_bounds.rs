//! S29: an operation name that is empty, or over its documented length, is refused with an
//! error that says the bound; never one record shared by all such calls.

use idem_runtime::{
    Error, Idem, MAX_OPERATION_NAME_LEN, MemoryStore, operation_scope, scoped_operation,
};

fn says_the_bound(e: &Error) -> bool {
    matches!(e, Error::Settings { .. }) && e.to_string().contains("1 to 512 bytes")
}

#[tokio::test]
async fn s29_an_empty_or_too_long_operation_name_is_refused_saying_the_bound() {
    let idem = Idem::new(MemoryStore::new());
    let too_long = "x".repeat(MAX_OPERATION_NAME_LEN + 1);
    for name in ["", too_long.as_str()] {
        let scoped = idem
            .scope(operation_scope(name, scoped_operation("send_apology")))
            .await
            .unwrap_err();
        assert!(says_the_bound(&scoped), "{scoped}");
        assert!(scoped.to_string().contains("send_apology"), "{scoped}");
        let on_idem = idem
            .scope(operation_scope(name, idem.scoped_operation("send_apology")))
            .await
            .unwrap_err();
        assert!(says_the_bound(&on_idem), "{on_idem}");
        let direct = idem.operation(name).await.unwrap_err();
        assert!(says_the_bound(&direct), "{direct}");
    }
    // At the bound, and a name of one byte: operations of their own.
    let longest = "y".repeat(MAX_OPERATION_NAME_LEN);
    let a = idem.operation(&longest).await.unwrap();
    let b = idem.operation("a").await.unwrap();
    assert_ne!(a, b);
}
