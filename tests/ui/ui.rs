//! The attributes' contract at compile time (docs/protocol.md, "Compile errors", C1–C9, and the third
//! wave's C10): every misuse is a compile error with a message that says what is wrong and what
//! to do, at the offending token; the `.stderr` files are the expected diagnostics. The pass
//! cases compile *and run*: each asserts the keys its tools derive.
//!
//! This is a package of its own because trybuild builds its cases against a copy of the
//! dependencies *and dev-dependencies* of the package under test: in the root package that copy
//! held the stores, rmcp's client and the benchmarks' peers, and doubled the disk a test run needs.

/// One case per contract row; the file names carry the row.
const FAIL: &[&str] = &[
    "c1_missing_key",
    "c2_unknown_field",
    "c2_unknown_field_list",
    "c2_unknown_struct_field",
    "c3_not_key_part",
    "c4_mints_key",
    "c5_not_async",
    "c6_read_only_with_key",
    "c7_not_result",
    "c8_error_lacks_classify",
    "c8_error_lacks_from",
    "c8_output_not_serializable",
    "c9_duplicate_key_field",
    "c9_empty_key",
    "c9_unknown_argument",
    // C10 (issue 31): a `verify` function whose signature does not fit, at its path.
    "c10_verify_wrong_return",
    "c10_verify_wrong_parameters",
    "c10_verify_not_async",
    "c10_verify_wrong_arity",
    // Beyond the table: arguments that cannot be handed to every attempt or fingerprinted.
    "args_not_clone_or_serialize",
    // Issue 39 #3: a handle (an HTTP client) as an argument: the error says it belongs in `&self`.
    "handle_argument",
    // Issue 15: a ttl shorter than the lease would let a running record expire.
    "ttl_shorter_than_lease",
    // Issue 16: a key the caller would pass in (`key: &str`, `IdempotencyKey` by value).
    "key_param_not_injected",
    "key_normalize_unknown",
    "impl_trait_argument",
    // Issue 31: `resend` is a bool; `verify` and `resend` on a read-only tool.
    "c9_resend_not_bool",
    "verify_on_read_only",
    // Issue 17: `json` asked for on a tool whose arguments cannot come from a JSON object.
    "json_arguments_not_from_json",
    "json_argument_not_deserialize",
    // Issue 20: the body is kept as tokens; one that does not parse is the compiler's to report.
    "body_syntax_error",
    // Issue 51 #2: a request builder of reqwest 0.12: the error names the reqwest to use.
    "reqwest_other_version",
    // `previous = "..."` (changing a key safely): a field the tool does not have; the key itself.
    "previous_unknown_field",
    "previous_equals_key",
];

/// MCP tools: this package always enables idemkit's `rmcp` feature.
const MCP_FAIL: &[&str] = &[
    "mcp_unclassified_tool",
    "mcp_contradictory_annotation",
    "mcp_wrong_order",
    // Issue 33: below `#[tool]` with MCP-only arguments, still the one error about the order.
    "mcp_wrong_order_with_hints",
    // Issue 33: an error type that is neither an Error, anyhow's nor a boxed one.
    "mcp_error_not_reportable",
    "mcp_unknown_annotation",
];

/// rig tools: this package always enables idemkit's `rig` feature.
const RIG_FAIL: &[&str] = &[
    "rig_unknown_key_field",
    "rig_output_not_envelope",
    "rig_name_differs",
    "rig_context_param",
    // Issue 44: an error type that is neither an Error, anyhow's nor a boxed one.
    "rig_error_not_reportable",
];

/// One `TestCases` for every case: trybuild builds them in one project, and two test functions
/// (separate processes under nextest) would race on it.
#[test]
fn c1_to_c10_misuse_fails_at_the_offending_token_and_accepted_forms_compile_and_run() {
    // Every row of the table has a case.
    for row in 1..=10 {
        let prefix = format!("c{row}_");
        assert!(
            FAIL.iter().any(|c| c.starts_with(&prefix)),
            "no ui case for C{row}"
        );
    }
    let t = trybuild::TestCases::new();
    for case in FAIL {
        t.compile_fail(format!("fail/{case}.rs"));
    }
    // MCP tools: an unclassified tool in a `#[classified_tools]` router, a
    // hand-written annotation that contradicts the attribute, the attribute below `#[tool]`.
    for case in MCP_FAIL {
        t.compile_fail(format!("fail/{case}.rs"));
    }
    // rig tools: a misspelt field of the arguments, a `type Output` that is not rig's envelope,
    // a `name` other than the impl's `NAME`, a `call` taking rig's `&mut ToolContext`.
    for case in RIG_FAIL {
        t.compile_fail(format!("fail/{case}.rs"));
    }
    // Methods on `&self`, generics, destructured parameters, struct field paths, `name =`,
    // newtype and `OperationId` key fields, stacking with `#[tracing::instrument]`, `crate =`,
    // rig tools whose `name` equals their `NAME` (listed in `idemkit::tools()`).
    t.pass("pass/*.rs");
}
