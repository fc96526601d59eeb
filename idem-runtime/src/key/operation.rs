//! `OperationId`: the key field of an operation with no natural identity.

use std::fmt;

use uuid::Uuid;

/// The identity of an operation that has no natural one: a UUID v4 minted once per name,
/// persisted in the store before it is first returned, and returned unchanged ever after
/// (also after a restart). Use it as a key field.
///
/// Get one with [`Idem::operation`](crate::Idem::operation).
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct OperationId(Uuid);

impl OperationId {
    /// Wraps a UUID read back from a store.
    pub fn from_uuid(uuid: Uuid) -> Self {
        OperationId(uuid)
    }

    /// The UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }

    /// The name the id of the operation `name` is kept under in a store
    /// ([`OperationIds::operation_id`](crate::store::OperationIds::operation_id),
    /// [`Records::operation`](crate::store::Records::operation)), for `tenant` if the call is
    /// made for one: operation ids are scoped to tenants as keys are (S18), so two tenants that
    /// name the same operation get two ids. Without a tenant it is `name` itself (the ids a
    /// store kept before tenants had their own are read unchanged); under one it is
    ///
    /// ```text
    /// "idemkit:tenant:v1:" len(tenant) ":" tenant ":" name      (len in decimal bytes)
    /// ```
    ///
    /// a prefix no name without a tenant may take ([`Idem::operation`](crate::Idem::operation)
    /// refuses one that starts with [`TENANT_PREFIX`](Self::TENANT_PREFIX)).
    ///
    /// ```
    /// use idem_runtime::OperationId;
    ///
    /// assert_eq!(OperationId::stored_name("plan-1", None), "plan-1");
    /// assert_eq!(OperationId::stored_name("plan-1", Some("acme")), "idemkit:tenant:v1:4:acme:plan-1");
    /// ```
    pub fn stored_name<'a>(name: &'a str, tenant: Option<&str>) -> std::borrow::Cow<'a, str> {
        match tenant {
            None => std::borrow::Cow::Borrowed(name),
            Some(tenant) => std::borrow::Cow::Owned(format!(
                "{}{}:{tenant}:{name}",
                Self::TENANT_PREFIX,
                tenant.len()
            )),
        }
    }

    /// How the stored name of a tenant's operation begins ([`OperationId::stored_name`]).
    pub const TENANT_PREFIX: &'static str = "idemkit:tenant:v1:";
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperationId({})", self.0.hyphenated())
    }
}
