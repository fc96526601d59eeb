//! What a call runs under, found in its task: the runtime scoped to it ([`Idem::scope`], else the
//! installed or the default one), the tenant ([`as_tenant`]), the operation ([`operation_scope`]),
//! carried together into a spawned task ([`in_current_scope`], `TaskScope`); the key of the step
//! being polled (`current`); and the one record-key rule (`call_tenant`, `record_key`) by which
//! the claim keys a record and the HTTP layer names it.

use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;

use crate::error::Error;
#[cfg(doc)]
use crate::idem::IdemBuilder;
use crate::idem::{BUILT_IN_DEFAULT, DEFAULT, INSTALLED, Idem};
use crate::key::{IdempotencyKey, OperationId};

pub(crate) mod current;

tokio::task_local! {
    static SCOPED: Idem;
    static TENANT: Arc<str>;
    static OPERATION: Arc<str>;
}

/// Runs `fut` as the operation called `name`: a tool called by a model (JSON function calling,
/// MCP) that takes an [`OperationId`] gets the id of `name` ([`Idem::operation`]), which the
/// model neither sees nor sends. The host names the operation from its own durable state (a
/// plan step, a ticket), around one model turn: a retried turn (a new `tool_call_id`, the same
/// step), or the same step after the agent restarts, derives the same key, so the tool acts once.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{Idem, MemoryStore, operation_scope, scoped_operation};
///
/// let idem = Idem::new(MemoryStore::new());
/// let id = idem.scope(operation_scope("plan-42/step-3", scoped_operation("send_email"))).await?;
/// assert_eq!(id, idem.operation("plan-42/step-3").await?);
/// # Ok::<(), idem_runtime::Error>(())
/// # }).unwrap();
/// ```
///
/// Tasks `fut` spawns do not inherit it (tokio's task-locals stay with their task): spawn
/// them with [`in_current_scope`], which carries it with the tenant and the runtime.
pub async fn operation_scope<F: Future>(name: impl Into<Arc<str>>, fut: F) -> F::Output {
    OPERATION.scope(name.into(), fut).await
}

/// The name [`operation_scope`] set for this task, if any.
pub fn operation_name() -> Option<Arc<str>> {
    OPERATION.try_with(Arc::clone).ok()
}

/// The [`OperationId`] of the operation in force ([`operation_scope`]), from the runtime in
/// force: what a tool called by a model gets for its `OperationId` parameter. Without an
/// operation in force, [`Error::NoOperation`] naming `tool`.
pub async fn scoped_operation(tool: &str) -> Result<OperationId, Error> {
    let Some(name) = operation_name() else {
        return Err(Error::NoOperation {
            tool: tool.to_owned(),
        });
    };
    check_operation_name(&name, tool)?;
    Idem::current()?.operation(&name).await
}

/// The longest operation name, in bytes (S29): names come from a host's durable state (a plan
/// step, a ticket), never that long; a longer one is a mistake (a whole message as the name).
pub const MAX_OPERATION_NAME_LEN: usize = 512;

/// S29: an empty operation name would make every call without a real one share one operation
/// (one record per tool for all of them), so it is refused, as is one over the bound.
fn check_operation_name(name: &str, tool: &str) -> Result<(), Error> {
    let why = if name.is_empty() {
        "the operation's name is empty"
    } else if name.len() > MAX_OPERATION_NAME_LEN {
        "the operation's name is longer than 512 bytes"
    } else {
        return Ok(());
    };
    Err(Error::Settings {
        tool: tool.to_owned(),
        reason: format!(
            "{why}; an operation name is 1 to {MAX_OPERATION_NAME_LEN} bytes, named from the host's durable state \
             (`operation_scope(\"plan-42/step-3\", ...)`, or `_meta: {{\"idemkit/operation\": \"plan-42/step-3\"}}` \
             over MCP)"
        ),
    })
}

/// Runs `fut` with every call in it made on behalf of `tenant` (an account, an authenticated
/// principal), set once where a request enters: equal key fields of two tenants are two
/// operations, and neither ever sees the other's outcome (S18). A call's key is then
/// [`IdempotencyKey::for_tenant`](crate::IdempotencyKey::for_tenant) of its v1 key. Tasks it
/// spawns do not inherit it (tokio's task-locals stay with their task): spawn them with
/// [`in_current_scope`], or a spawned call is made for no tenant (or the runtime's). Takes
/// precedence over the runtime's [`IdemBuilder::tenant`].
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{Idem, MemoryStore, as_tenant};
///
/// let idem = Idem::new(MemoryStore::new());
/// let id = idem.scope(as_tenant("acme", async { idem_runtime::operation("plan-1").await })).await;
/// # let _ = id;
/// # });
/// ```
pub async fn as_tenant<F: Future>(tenant: impl Into<Arc<str>>, fut: F) -> F::Output {
    TENANTS_USED.store(true, std::sync::atomic::Ordering::Relaxed);
    TENANT.scope(tenant.into(), fut).await
}

/// `fut` with idemkit's scopes in force here carried into it: the runtime ([`Idem::scope`]), the
/// tenant ([`as_tenant`]) and the operation ([`operation_scope`]). tokio's task-locals stay with
/// their task, so a task spawned inside `as_tenant` would otherwise make its calls for no tenant
/// (another key, another record) and on the installed runtime: wrap what you spawn.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{Idem, MemoryStore, as_tenant, in_current_scope, operation_scope, scoped_operation};
///
/// let idem = Idem::new(MemoryStore::new());
/// let (spawned, here) = idem
///     .scope(as_tenant("acme", operation_scope("plan-42/step-3", async {
///         let task = tokio::spawn(in_current_scope(scoped_operation("send_email")));
///         (task.await.unwrap(), scoped_operation("send_email").await)
///     })))
///     .await;
/// assert_eq!(spawned?, here?, "the task has the tenant's id of the operation, in the same store");
/// # Ok::<(), idem_runtime::Error>(())
/// # }).unwrap();
/// ```
pub fn in_current_scope<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    TaskScope::capture().run(fut)
}

/// Whether any task of the process ever ran under a tenant: until one does, a call looks no
/// further (the task-local lookup is most of what tenants cost a call that has none).
static TENANTS_USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The tenant calls here are made for: the task's ([`as_tenant`]), else `None`.
#[inline]
pub(crate) fn task_tenant() -> Option<Arc<str>> {
    if !TENANTS_USED.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    TENANT.try_with(Arc::clone).ok()
}

/// The tenant a call of `idem` is made for (S18): the task's ([`as_tenant`]), else the runtime's
/// ([`IdemBuilder::tenant`]). The one rule: the claim keys the record with it, and the HTTP
/// layer names that record's key with it, so what an answer tells an operator to resolve is a key
/// the store holds.
#[inline]
pub(crate) fn call_tenant(idem: Option<&Idem>) -> Option<Arc<str>> {
    task_tenant().or_else(|| idem.and_then(|idem| idem.settings().tenant.clone()))
}

/// The key of the record a call keyed `key` makes for `tenant` (S18): the tenant's own.
#[inline]
pub(crate) fn record_key(key: IdempotencyKey, tenant: Option<&str>) -> IdempotencyKey {
    match tenant {
        Some(tenant) => key.for_tenant(tenant),
        None => key,
    }
}

/// What a task's calls run under that lives in the task (the scoped runtime, the tenant, the
/// operation), taken to be put back around work that moves to a task of its own (the HTTP
/// layer's run, detached from its connection: S25; a task the host spawns through
/// [`in_current_scope`]). One place, so that a move between tasks cannot carry some of them and
/// forget another (S26).
pub(crate) struct TaskScope {
    idem: Option<Idem>,
    tenant: Option<Arc<str>>,
    operation: Option<Arc<str>>,
}

impl TaskScope {
    /// This task's.
    pub(crate) fn capture() -> Self {
        TaskScope {
            idem: SCOPED.try_with(Idem::clone).ok(),
            tenant: task_tenant(),
            operation: operation_name(),
        }
    }

    /// With this tenant instead of the task's, when there is one.
    #[cfg(feature = "tower")]
    pub(crate) fn tenant(mut self, tenant: Option<Arc<str>>) -> Self {
        if tenant.is_some() {
            self.tenant = tenant;
        }
        self
    }

    /// Runs `fut` under it.
    pub(crate) async fn run<F: Future>(self, fut: F) -> F::Output {
        let TaskScope {
            idem,
            tenant,
            operation,
        } = self;
        let fut = async move {
            match operation {
                Some(operation) => OPERATION.scope(operation, fut).await,
                None => fut.await,
            }
        };
        let fut = async move {
            match tenant {
                Some(tenant) => as_tenant(tenant, fut).await,
                None => fut.await,
            }
        };
        match idem {
            Some(idem) => SCOPED.scope(idem, fut).await,
            None => fut.await,
        }
    }
}

impl Idem {
    /// Runs `fut` with this runtime in place of the installed one (tasks it spawns do not
    /// inherit it: spawn them with [`in_current_scope`], which carries it).
    pub async fn scope<F: Future>(&self, fut: F) -> F::Output {
        SCOPED.scope(self.clone(), fut).await
    }

    /// The runtime in force here: the scoped one, else the installed one, else the default one.
    ///
    /// [`Error::NoRuntime`] says why there is none (no store built in, or the default store's
    /// path is unusable); it converts into a tool's error type, so `Idem::current()?` works in a
    /// tool's caller.
    pub fn current() -> Result<Idem, Error> {
        Self::current_or_why().map_err(|reason| Error::NoRuntime { reason })
    }

    /// [`Idem::current`], or why there is none.
    pub(crate) fn current_or_why() -> Result<Idem, String> {
        if let Some(idem) = Self::configured() {
            return Ok(idem);
        }
        match BUILT_IN_DEFAULT {
            Some(make) => DEFAULT.get_or_init(make).clone(),
            None => Err("no runtime is installed and no default store is built in".to_owned()),
        }
    }

    /// The scoped runtime, else the installed one; never the default one.
    pub(crate) fn configured() -> Option<Idem> {
        SCOPED
            .try_with(Idem::clone)
            .ok()
            .or_else(|| INSTALLED.get().cloned())
    }

    /// The id of the operation called `name`: a UUID v4 minted on first use and stored before it
    /// is returned, then the same id for ever after, also after a restart (with a durable store).
    /// Use it as a key field of an operation that has no natural identity.
    ///
    /// Scoped to the tenant calls here are made for ([`as_tenant`], else
    /// [`IdemBuilder::tenant`]), as keys are (S18): two tenants that name the same operation get
    /// two ids ([`OperationId::stored_name`] says how it is kept).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use idem_runtime::{Idem, MemoryStore, as_tenant};
    ///
    /// let idem = Idem::new(MemoryStore::new());
    /// let acme = as_tenant("acme", idem.operation("plan-1")).await?;
    /// let globex = as_tenant("globex", idem.operation("plan-1")).await?;
    /// assert_ne!(acme, globex);
    /// assert_eq!(acme, as_tenant("acme", idem.operation("plan-1")).await?);
    /// # Ok::<(), idem_runtime::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use idem_runtime::{Idem, MemoryStore};
    ///
    /// let idem = Idem::new(MemoryStore::new());
    /// let first = idem.operation("plan-42/step-3").await?;
    /// assert_eq!(first, idem.operation("plan-42/step-3").await?);
    /// # Ok::<(), idem_runtime::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn operation(&self, name: &str) -> Result<OperationId, Error> {
        check_operation_name(name, &format!("operation `{name}`"))?;
        // S18: the task's tenant, else the runtime's, as a call's key has it.
        let tenant = task_tenant().or_else(|| self.settings().tenant.clone());
        if tenant.is_none() && name.starts_with(OperationId::TENANT_PREFIX) {
            return Err(Error::Settings {
                tool: format!("operation `{name}`"),
                reason: format!(
                    "an operation name without a tenant may not start with `{}`, the prefix of tenants' \
                     operations in the store (`OperationId::stored_name`)",
                    OperationId::TENANT_PREFIX
                ),
            });
        }
        let stored = OperationId::stored_name(name, tenant.as_deref());
        let fresh = Uuid::new_v4();
        let fut = self.settings().operation_ids.operation_id(&stored, fresh);
        let stored = match tokio::time::timeout(self.settings().store_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(crate::StoreError::unavailable(format!(
                "the store did not answer within {:?}",
                self.settings().store_timeout
            ))),
        };
        stored
            .map(OperationId::from_uuid)
            .map_err(|source| Error::Store {
                tool: format!("operation `{name}`"),
                key: None,
                source,
            })
    }

    /// The [`OperationId`] of the operation in force ([`operation_scope`]) in this runtime's
    /// store; without one, [`Error::NoOperation`] naming `tool`. What a tool with `idem = ...`
    /// that a model calls gets for its `OperationId` parameter.
    pub async fn scoped_operation(&self, tool: &str) -> Result<OperationId, Error> {
        match operation_name() {
            Some(name) => {
                check_operation_name(&name, tool)?;
                self.operation(&name).await
            }
            None => Err(Error::NoOperation {
                tool: tool.to_owned(),
            }),
        }
    }
}

/// The id of the operation called `name`, from the runtime in force ([`Idem::current`]): a UUID
/// v4 minted on first use and stored, then the same id ever after. One call, for a tool's caller
/// that has no [`Idem`] in hand; its error converts into the tool's error type.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{Idem, MemoryStore, operation};
///
/// let idem = Idem::new(MemoryStore::new());
/// idem.scope(async {
///     let id = operation("plan-42/step-3").await?;
///     assert_eq!(id, operation("plan-42/step-3").await?);
///     Ok::<(), idem_runtime::Error>(())
/// })
/// .await
/// # }).unwrap();
/// ```
pub async fn operation(name: &str) -> Result<OperationId, Error> {
    Idem::current()?.operation(name).await
}
