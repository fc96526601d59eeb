//! The conformance suite (S1–S13, contention, operation ids) on `SqliteStore`, unchanged, with
//! `synchronous=FULL` (the default: operations that commit go to the store's connection thread)
//! and `NORMAL` (they run on the caller's thread): each row gets a new file in a temporary
//! directory.

use idem_runtime::store::OperationIds;
use idem_runtime::testing::Intercept;
use idem_runtime::{Records, SqliteStore, Store, Synchronous};

/// A `SqliteStore` on a new file, in a temporary directory that is deleted when the row's store
/// is dropped (the hook, which forwards everything, owns it).
fn fresh(synchronous: Synchronous) -> impl Store + OperationIds + Records {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::builder(dir.path().join("idemkit.db"))
        .synchronous(synchronous)
        .open()
        .expect("a new store opens");
    Intercept::new(store, move |_, _| {
        let _kept_until_the_store_is_dropped = &dir;
        None
    })
}

mod full {
    async fn fresh_store()
    -> impl idem_runtime::Store + idem_runtime::store::OperationIds + idem_runtime::Records {
        super::fresh(idem_runtime::Synchronous::Full)
    }
    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
    idem_runtime::restore_conformance_tests!(fresh_store);
}

mod normal {
    async fn fresh_store()
    -> impl idem_runtime::Store + idem_runtime::store::OperationIds + idem_runtime::Records {
        super::fresh(idem_runtime::Synchronous::Normal)
    }
    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
    idem_runtime::restore_conformance_tests!(fresh_store);
}
