//! The conformance suite (S1–S13, contention, operation ids) on `SqliteStore`, unchanged, with
//! `synchronous=FULL` (the default: operations that commit go to the store's connection thread)
//! and `NORMAL` (they run on the caller's thread): each row gets a new file in a temporary
//! directory.

use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, Count, LeaseToken, Record, RecordFilter, Released, Written,
};
use idem_runtime::{IdempotencyKey, Records, SqliteStore, Store, StoreError, Synchronous};
use uuid::Uuid;

/// A `SqliteStore` on a new file, deleted with its directory when the row's store is dropped.
struct TempSqlite {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

fn fresh(synchronous: Synchronous) -> TempSqlite {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::builder(dir.path().join("idemkit.db"))
        .synchronous(synchronous)
        .open()
        .expect("a new store opens");
    TempSqlite { store, _dir: dir }
}

#[async_trait::async_trait]
impl Store for TempSqlite {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.store.claim(req).await
    }
    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.store.complete(key, token, outcome, ttl).await
    }
    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        self.store.renew(key, token, lease).await
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        self.store.release(key, token).await
    }
    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.store.mark_ambiguous(key, token, note, ttl).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Store::get(&self.store, key).await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        Store::prune(&self.store, limit).await
    }
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.store.operation_id(name, fresh).await
    }
}

#[async_trait::async_trait]
impl Records for TempSqlite {
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Records::get(&self.store, key).await
    }
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        self.store.list(filter).await
    }
    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        self.store.release_key(key, force).await
    }
    async fn forget(&self, key: &IdempotencyKey) -> Result<bool, StoreError> {
        self.store.forget(key).await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        Records::prune(&self.store, limit).await
    }
    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        self.store.counts().await
    }
}

mod full {
    async fn fresh_store() -> super::TempSqlite {
        super::fresh(idem_runtime::Synchronous::Full)
    }
    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
}

mod normal {
    async fn fresh_store() -> super::TempSqlite {
        super::fresh(idem_runtime::Synchronous::Normal)
    }
    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
}
