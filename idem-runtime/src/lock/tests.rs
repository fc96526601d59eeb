use super::*;

#[test]
fn a_binary_without_tools_is_told_where_the_check_must_run() {
    let locked = serde_json::json!({"format": 1, "tools": {"charge": {"key": ["customer_id: &str as text"], "key_encoding": 1}}});
    let changes = differences(&locked, &BTreeMap::new());
    assert!(
        changes[0].contains("no side-effect tool is registered"),
        "{changes:?}"
    );
    assert!(changes[0].contains("unit test"), "{changes:?}");
    assert!(
        changes[1].contains("tool `charge` is in the lock"),
        "{changes:?}"
    );
}

#[test]
fn schema_change_names_a_required_field_added_and_the_fix() {
    let old = serde_json::json!({"properties": {"id": {"type": "string"}}, "required": ["id"]});
    let new = serde_json::json!({"properties": {"id": {"type": "string"}, "fee": {"type": "integer"}}, "required": ["fee", "id"]});
    let said = schema_change(&old, &new);
    assert!(said.contains("`fee`"), "{said}");
    assert!(said.contains("#[serde(default)]"), "{said}");
    let defaulted = serde_json::json!({"properties": {"id": {"type": "string"}, "fee": {"type": "integer", "default": 0}}, "required": ["id"]});
    let said = schema_change(&old, &defaulted);
    assert!(said.contains("still decode"), "{said}");
}
