//! The facade's paths: every name that was at the root and now has its documented path
//! in a module (`scope`, `registry`, `settle`, `store`, `key`, `advice`, `json`) is kept at the
//! root, hidden, for the code written against it. Both paths must name one item: removing the
//! old one by mistake, or pointing it elsewhere, fails this file's build (or its test).

// Two globs that bring one name for two items are an error here, not a warning.
#![deny(ambiguous_glob_imports)]

use std::any::TypeId;

/// Brought by two globs below: one name for one item is fine, one name for two items is an
/// ambiguity at its use in `both`.
#[allow(unused_imports)]
mod old {
    pub use idemkit::store::{Intercept, Step};
    pub use idemkit::{
        Advice, CallInfo, CallOutcome, DuplicateTools, Fingerprint, KeyHasher, KeyValue,
        MAX_OPERATION_NAME_LEN, MemoryStore, Pass, Records, SettleReport, SettleStore, Settled,
        Settler, SettlerHandle, Store, StoreError, StoreErrorKind, ToolInfo, ToolKind, as_tenant,
        check_unique_tool_names, in_current_scope, normalize, observe, operation, operation_name,
        operation_scope, scoped_operation, tools, tools_manifest,
    };
    #[cfg(feature = "json")]
    pub use idemkit::{
        DEFAULT_MAX_ARGUMENTS_LEN, JsonCallError, JsonReply, JsonTools, ToolDefinition,
    };
    #[cfg(feature = "postgres")]
    pub use idemkit::{PostgresStore, PostgresStoreBuilder};
    #[cfg(feature = "redis")]
    pub use idemkit::{RedisStore, RedisStoreBuilder};
    #[cfg(feature = "sqlite")]
    pub use idemkit::{SqliteStore, SqliteStoreBuilder, Synchronous};
}

#[allow(unused_imports)]
mod new {
    pub use idemkit::advice::Advice;
    #[cfg(feature = "json")]
    pub use idemkit::json::{
        DEFAULT_MAX_ARGUMENTS_LEN, JsonCallError, JsonReply, JsonTools, ToolDefinition,
    };
    pub use idemkit::key::{Fingerprint, KeyHasher, KeyValue, normalize};
    pub use idemkit::registry::{
        DuplicateTools, ToolInfo, ToolKind, check_unique_tool_names, tools, tools_manifest,
    };
    pub use idemkit::scope::{
        CallInfo, CallOutcome, MAX_OPERATION_NAME_LEN, as_tenant, in_current_scope, observe,
        operation, operation_name, operation_scope, scoped_operation,
    };
    pub use idemkit::settle::{Pass, SettleReport, SettleStore, Settled, Settler, SettlerHandle};
    pub use idemkit::store::{MemoryStore, Records, Store, StoreError, StoreErrorKind};
    #[cfg(feature = "postgres")]
    pub use idemkit::store::{PostgresStore, PostgresStoreBuilder};
    #[cfg(feature = "redis")]
    pub use idemkit::store::{RedisStore, RedisStoreBuilder};
    #[cfg(feature = "sqlite")]
    pub use idemkit::store::{SqliteStore, SqliteStoreBuilder, Synchronous};
    pub use idemkit::testing::{Intercept, Step};
}

#[allow(unused_imports)]
mod both {
    use super::new::*;
    use super::old::*;

    use self::{
        Advice as _, CallInfo as _, CallOutcome as _, DuplicateTools as _, Fingerprint as _,
        Intercept as _, KeyHasher as _, KeyValue as _, MAX_OPERATION_NAME_LEN as _,
        MemoryStore as _, Pass as _, Records as _, SettleReport as _, SettleStore as _,
        Settled as _, Settler as _, SettlerHandle as _, Step as _, Store as _, StoreError as _,
        StoreErrorKind as _, ToolInfo as _, ToolKind as _, as_tenant as _,
        check_unique_tool_names as _, in_current_scope as _, normalize as _, observe as _,
        operation as _, operation_name as _, operation_scope as _, scoped_operation as _,
        tools as _, tools_manifest as _,
    };
    #[cfg(feature = "json")]
    use self::{
        DEFAULT_MAX_ARGUMENTS_LEN as _, JsonCallError as _, JsonReply as _, JsonTools as _,
        ToolDefinition as _,
    };
    #[cfg(feature = "postgres")]
    use self::{PostgresStore as _, PostgresStoreBuilder as _};
    #[cfg(feature = "redis")]
    use self::{RedisStore as _, RedisStoreBuilder as _};
    #[cfg(feature = "sqlite")]
    use self::{SqliteStore as _, SqliteStoreBuilder as _, Synchronous as _};
}

fn same<A: ?Sized + 'static, B: ?Sized + 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

fn same_fn<A: 'static, B: 'static>(_: A, _: B) -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

#[test]
fn every_old_root_path_names_the_item_of_its_module_path() {
    assert!(same::<idemkit::Advice, idemkit::advice::Advice>());
    assert!(same::<idemkit::CallInfo, idemkit::scope::CallInfo>());
    assert!(same::<idemkit::CallOutcome, idemkit::scope::CallOutcome>());
    assert!(same::<
        idemkit::DuplicateTools,
        idemkit::registry::DuplicateTools,
    >());
    assert!(same::<idemkit::ToolInfo, idemkit::registry::ToolInfo>());
    assert!(same::<idemkit::ToolKind, idemkit::registry::ToolKind>());
    assert!(same::<idemkit::Fingerprint, idemkit::key::Fingerprint>());
    assert!(same::<idemkit::KeyHasher, idemkit::key::KeyHasher>());
    assert!(same::<
        idemkit::KeyValue<'static>,
        idemkit::key::KeyValue<'static>,
    >());
    assert!(same::<idemkit::MemoryStore, idemkit::store::MemoryStore>());
    assert!(same::<idemkit::StoreError, idemkit::store::StoreError>());
    assert!(same::<
        idemkit::StoreErrorKind,
        idemkit::store::StoreErrorKind,
    >());
    assert!(same::<idemkit::Pass, idemkit::settle::Pass>());
    assert!(same::<idemkit::SettleReport, idemkit::settle::SettleReport>());
    assert!(same::<idemkit::Settled, idemkit::settle::Settled>());
    assert!(same::<idemkit::Settler, idemkit::settle::Settler>());
    assert!(same::<idemkit::SettlerHandle, idemkit::settle::SettlerHandle>());
    assert!(same::<
        dyn idemkit::SettleStore,
        dyn idemkit::settle::SettleStore,
    >());
    assert!(same::<dyn idemkit::Store, dyn idemkit::store::Store>());
    assert!(same::<dyn idemkit::Records, dyn idemkit::store::Records>());
    assert_eq!(
        idemkit::MAX_OPERATION_NAME_LEN,
        idemkit::scope::MAX_OPERATION_NAME_LEN
    );
    // A function item has a type of its own: two paths to one function give one type.
    assert!(same_fn(idemkit::tools, idemkit::registry::tools));
    assert!(same_fn(
        idemkit::tools_manifest,
        idemkit::registry::tools_manifest
    ));
    assert!(same_fn(
        idemkit::check_unique_tool_names,
        idemkit::registry::check_unique_tool_names
    ));
    assert!(same_fn(
        idemkit::operation_name,
        idemkit::scope::operation_name
    ));
    assert!(same_fn(
        idemkit::normalize::nfc,
        idemkit::key::normalize::nfc
    ));
    // And two functions, two types: the check can fail.
    assert!(!same_fn(idemkit::tools, idemkit::registry::tools_manifest));
    #[cfg(feature = "json")]
    {
        assert!(same::<idemkit::JsonTools, idemkit::json::JsonTools>());
        assert!(same::<idemkit::JsonCallError, idemkit::json::JsonCallError>());
        assert!(same::<idemkit::JsonReply, idemkit::json::JsonReply>());
        assert!(same::<idemkit::ToolDefinition, idemkit::json::ToolDefinition>());
    }
    #[cfg(feature = "sqlite")]
    {
        assert!(same::<idemkit::SqliteStore, idemkit::store::SqliteStore>());
        assert!(same::<
            idemkit::SqliteStoreBuilder,
            idemkit::store::SqliteStoreBuilder,
        >());
        assert!(same::<idemkit::Synchronous, idemkit::store::Synchronous>());
    }
    #[cfg(feature = "postgres")]
    {
        assert!(same::<idemkit::PostgresStore, idemkit::store::PostgresStore>());
        assert!(same::<
            idemkit::PostgresStoreBuilder,
            idemkit::store::PostgresStoreBuilder,
        >());
    }
    #[cfg(feature = "redis")]
    {
        assert!(same::<idemkit::RedisStore, idemkit::store::RedisStore>());
        assert!(same::<
            idemkit::RedisStoreBuilder,
            idemkit::store::RedisStoreBuilder,
        >());
    }
}
