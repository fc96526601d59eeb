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
