//! What a caller is told, in one place: every surface renders its answers from here and writes
//! no texts of its own.
//!
//! - [`explain`]: [`Explanation`](crate::Explanation), what a failed call is told (a stable
//!   `reason` word, whether calling again can help, a sentence), one per way a call can end; and
//!   `success_envelope`, what a successful call is told (`{"result", "replayed",
//!   "idempotencyKey", "advice"}`).
//! - [`sentences`]: each sentence about how a call ended written once (not run, the effect
//!   unknown, how to settle, done but not kept, replayed: the replay note).
//! - [`advice`]: [`Advice`](crate::Advice), the machine-readable advice beside every answer (S35).
//!
//! Who renders what:
//!
//! | surface | renders |
//! | --- | --- |
//! | MCP (`crate::mcp`, feature `rmcp`): tool results, `JsonToolsServer`, the client's answers | `success_envelope`, the replay note, `Explanation` (as a tool error), `Advice` |
//! | rig (`crate::rig`, feature `rig`) | `success_envelope`, the replay note, `Explanation` (as `ToolExecutionError`'s model feedback), `Advice` |
//! | JSON function calling (`crate::json`, `JsonReply`, `JsonCallError`) | `success_envelope`, the replay note, `Explanation`, `Advice` |
//! | HTTP server (`crate::http`, the tower layer's problem details) | `Explanation`, `sentences`, `Advice` (an extension member) |
//! | HTTP client (`crate::http::IdempotentRequest`) | reads `Advice` back from a problem |
//! | idemkit's own errors (`crate::Error`'s text) | `sentences` |
//! | the settler's report and the `idemkit` command | `sentences` |
//!
//! The public paths are `idem_runtime::Explanation`, `idem_runtime::advice` and (not a stable
//! API) `idem_runtime::sentences`; generated code reaches the envelope and the replay note through
//! `__private`.

pub mod advice;
pub mod explain;
pub mod sentences;
