//! The conformance suite (S1–S13) on the memory store.

async fn fresh_store() -> idem_runtime::MemoryStore {
    idem_runtime::MemoryStore::new()
}

idem_runtime::conformance_tests!(fresh_store);
idem_runtime::records_conformance_tests!(fresh_store);
idem_runtime::restore_conformance_tests!(fresh_store);
