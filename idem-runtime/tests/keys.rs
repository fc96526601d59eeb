//! Encoding v1 of keys (a contract): golden vectors and the properties callers rely on.
//!
//! The vectors were cross-checked against an independent implementation of the
//! encoding (Python's hashlib and uuid). A change here changes every key in flight: a replay
//! after an upgrade would act twice. Do not "fix" a vector; fix the encoder.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

use idem_runtime::{IdempotencyKey, KeyField, KeyHasher, KeyPart, KeyValue, OperationId};
use uuid::Uuid;

fn key(tool: &str, fields: &[KeyField<'_>]) -> String {
    IdempotencyKey::derive(tool, fields).to_string()
}

#[test]
fn golden_charge_key_of_the_design() {
    assert_eq!(
        key(
            "charge",
            &[
                ("customer_id", &"cus_1"),
                ("purpose", &"subscription"),
                ("period", &"2026-11")
            ]
        ),
        "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"
    );
}

#[test]
fn golden_vectors_per_kind() {
    let uuid = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    assert_eq!(
        key("t", &[("n", &42u64)]),
        "a07d9947-e186-8d4b-9510-dd2e145bdc8a"
    );
    assert_eq!(
        key("t", &[("n", &-7i32)]),
        "df7a86a4-9faa-8ba2-820f-8472e4483c73"
    );
    assert_eq!(
        key("t", &[("b", &true)]),
        "0226d6c8-51bc-897f-972b-98afa79dd816"
    );
    assert_eq!(
        key("t", &[("b", &[0u8, 1, 255])]),
        "c24286b6-9c74-8545-9bb2-c2dc6efe1297"
    );
    assert_eq!(
        key("t", &[("u", &uuid)]),
        "703f7bdb-f09c-848c-a823-bfb0e67d7762"
    );
    assert_eq!(
        key("t", &[("s", &"")]),
        "20e2b31b-31b6-84c6-abc6-6bd55494e345"
    );
    assert_eq!(
        key("t", &[("s", &"Zürich—東京")]),
        "ce92f91f-ad6d-83a0-89e7-b95d25354f8c"
    );
    assert_eq!(key("t", &[]), "3c487f22-3d3c-83a8-88f6-a36e581864d5");
}

#[test]
fn every_integer_type_encodes_as_its_decimal() {
    let expected = key("t", &[("n", &42u64)]);
    let ints: [&(dyn KeyPart + Sync); 12] = [
        &42u8, &42u16, &42u32, &42u64, &42u128, &42usize, &42i8, &42i16, &42i32, &42i64, &42i128,
        &42isize,
    ];
    for n in ints {
        assert_eq!(key("t", &[("n", n)]), expected);
    }
    // The tag keeps an integer apart from the text of its digits.
    assert_ne!(expected, key("t", &[("n", &"42")]));
    // The extremes encode without overflow.
    assert_ne!(
        key("t", &[("n", &i128::MIN)]),
        key("t", &[("n", &u128::MAX)])
    );
}

#[test]
fn length_prefixes_keep_ab_c_apart_from_a_bc() {
    assert_ne!(
        key("t", &[("x", &"ab"), ("y", &"c")]),
        key("t", &[("x", &"a"), ("y", &"bc")])
    );
    assert_ne!(key("t", &[("ab", &"c")]), key("t", &[("a", &"bc")]));
    assert_ne!(key("ab", &[("c", &"d")]), key("a", &[("bc", &"d")]));
}

#[test]
fn text_of_any_string_type_gives_the_same_key() {
    let text = "cus_1";
    let expected = key("t", &[("c", &text)]);
    let owned = String::from(text);
    let forms: [&(dyn KeyPart + Sync); 7] = [
        &text,
        &owned,
        &&owned,
        &Cow::<str>::Borrowed(text),
        &Cow::<str>::Owned(owned.clone()),
        &Box::<str>::from(text),
        &Arc::<str>::from(text),
    ];
    for form in forms {
        assert_eq!(key("t", &[("c", form)]), expected);
    }
    let mut h = KeyHasher::new("t", 1);
    h.field("c", &Rc::<str>::from(text));
    assert_eq!(
        h.finish().to_string(),
        expected,
        "Rc<str> through the streaming hasher"
    );
    assert_eq!(key("t", &[("c", &'é')]), key("t", &[("c", &"é")]));
}

#[test]
fn bytes_of_any_container_give_the_same_key() {
    let expected = key("t", &[("b", &[1u8, 2, 3])]);
    assert_eq!(key("t", &[("b", &vec![1u8, 2, 3])]), expected);
    assert_eq!(key("t", &[("b", &&[1u8, 2, 3][..])]), expected);
}

#[test]
fn operation_id_encodes_as_its_uuid() {
    let uuid = Uuid::new_v4();
    assert_eq!(
        key("t", &[("op", &OperationId::from_uuid(uuid))]),
        key("t", &[("op", &uuid)])
    );
}

#[test]
fn field_order_and_names_and_tool_are_part_of_the_key() {
    let base = key("t", &[("a", &1u8), ("b", &2u8)]);
    assert_ne!(base, key("t", &[("b", &2u8), ("a", &1u8)]));
    assert_ne!(base, key("t", &[("a", &1u8), ("c", &2u8)]));
    assert_ne!(base, key("u", &[("a", &1u8), ("b", &2u8)]));
}

#[test]
fn a_newtype_delegating_to_its_inner_value_keys_like_it() {
    struct CustomerId(String);
    impl KeyPart for CustomerId {
        fn key_value(&self) -> KeyValue<'_> {
            self.0.key_value()
        }
    }
    assert_eq!(
        key("t", &[("c", &CustomerId("cus_1".into()))]),
        key("t", &[("c", &"cus_1")])
    );
}

#[test]
fn key_is_a_v8_uuid_that_round_trips_through_its_text() {
    let k = IdempotencyKey::derive("charge", &[("customer_id", &"cus_1")]);
    assert_eq!(k.as_uuid().get_version_num(), 8);
    assert_eq!(k.as_uuid().get_variant(), uuid::Variant::RFC4122);
    assert_eq!(k.as_str().len(), 36);
    assert_eq!(k.as_str(), k.as_str().to_lowercase());
    assert_eq!(k.as_str().parse::<IdempotencyKey>().unwrap(), k);
    let json = serde_json::to_string(&k).unwrap();
    assert_eq!(serde_json::from_str::<IdempotencyKey>(&json).unwrap(), k);
}

#[test]
fn the_streaming_hasher_gives_the_derived_key() {
    let mut h = KeyHasher::new("charge", 3);
    h.field("customer_id", &"cus_1")
        .field("purpose", &"subscription")
        .field("period", &"2026-11");
    assert_eq!(h.finish().as_str(), "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
}

#[test]
#[should_panic(expected = "announced 2 fields but was given 1")]
fn the_streaming_hasher_refuses_a_wrong_field_count() {
    let mut h = KeyHasher::new("t", 2);
    h.field("a", &1u8);
    let _ = h.finish();
}
