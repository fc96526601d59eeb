//! Golden vectors of encoding v1, and `KeyHasher` against `Sha256::digest` across block and
//! buffer boundaries.

use sha2::{Digest, Sha256};

use super::*;

/// Encoding v1 written out and hashed the plain way, as the key was made before the buffer.
fn reference(tool: &str, fields: &[(&str, u8, &[u8])]) -> Uuid {
    fn put(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    }
    let mut encoding = DOMAIN.to_vec();
    put(&mut encoding, tool.as_bytes());
    encoding.extend_from_slice(&(fields.len() as u32).to_be_bytes());
    for (name, tag, value) in fields {
        put(&mut encoding, name.as_bytes());
        encoding.push(*tag);
        put(&mut encoding, value);
    }
    let digest = Sha256::digest(&encoding);
    Uuid::new_v8(digest[..16].try_into().unwrap())
}

/// Tools and values of every length around the block (64), buffer (128) and padding
/// boundaries, through `derive`, the streaming hasher and a clone of it (finished in place, twice).
#[test]
fn keys_are_sha256_of_the_encoding_at_every_length() {
    let long = "t".repeat(300);
    let bytes: Vec<u8> = (0..=255).cycle().take(700).collect();
    for tool_len in [
        0, 1, 6, 40, 53, 54, 55, 63, 64, 65, 100, 109, 110, 128, 129, 300,
    ] {
        let tool = &long[..tool_len];
        for value_len in 0..=bytes.len() {
            let value = &bytes[..value_len];
            let expected = reference(tool, &[("customer_id", 4, value), ("n", 2, b"7")]);
            let fields: [KeyField<'_>; 2] = [("customer_id", &value), ("n", &7u8)];
            assert_eq!(IdempotencyKey::derive(tool, &fields).as_uuid(), expected);

            let mut hasher = KeyHasher::new(tool, 2);
            hasher.field("customer_id", value);
            let clone = hasher.clone();
            hasher.field("n", &7u8);
            assert_eq!(
                hasher.finish().as_uuid(),
                expected,
                "tool {tool_len}, value {value_len}"
            );
            let mut clone = clone;
            clone.field("n", &7u8);
            // What generated code calls: in place, and the same key when asked again.
            assert_eq!(clone.finish_in_place().as_uuid(), expected);
            assert_eq!(clone.finish_in_place().as_uuid(), expected);
        }
    }
}

#[test]
fn many_fields_and_a_long_value_are_hashed_like_one_string() {
    let value = vec![0xa5u8; 10_000];
    let names: Vec<String> = (0..40).map(|i| "f".repeat(i)).collect();
    let mut fields: Vec<KeyField<'_>> = names.iter().map(|n| (n.as_str(), &true as _)).collect();
    fields.insert(17, ("big", &value));
    let mut expected: Vec<(&str, u8, &[u8])> =
        names.iter().map(|n| (n.as_str(), 3, &[1u8][..])).collect();
    expected.insert(17, ("big", 4, &value));
    assert_eq!(
        IdempotencyKey::derive("charge", &fields).as_uuid(),
        reference("charge", &expected)
    );
}

#[test]
fn every_kind_of_value_is_encoded_as_before() {
    let uuid = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
    let fields: [KeyField<'_>; 8] = [
        ("text", &"héllo"),
        ("char", &'é'),
        ("int", &-42i64),
        ("wide", &i128::MIN),
        ("uint", &u128::MAX),
        ("bool", &false),
        ("bytes", &[0u8, 255]),
        ("uuid", &uuid),
    ];
    let expected = reference(
        "t",
        &[
            ("text", 1, "héllo".as_bytes()),
            ("char", 1, "é".as_bytes()),
            ("int", 2, b"-42"),
            ("wide", 2, i128::MIN.to_string().as_bytes()),
            ("uint", 2, u128::MAX.to_string().as_bytes()),
            ("bool", 3, &[0]),
            ("bytes", 4, &[0, 255]),
            ("uuid", 5, uuid.as_bytes()),
        ],
    );
    assert_eq!(IdempotencyKey::derive("t", &fields).as_uuid(), expected);
}

#[test]
fn the_text_is_the_uuid_crates_hyphenated_lowercase() {
    let mut uuids: Vec<u128> = (0..=255u8).map(|b| u128::from_ne_bytes([b; 16])).collect();
    uuids.extend((0..1000u128).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)));
    uuids.extend((0..128).map(|bit| 1u128 << bit));
    for u in uuids {
        let uuid = Uuid::from_u128(u);
        let mut expected = [0u8; 36];
        uuid.hyphenated().encode_lower(&mut expected);
        assert_eq!(
            IdempotencyKey::from_uuid(uuid).as_str().as_bytes(),
            expected
        );
    }
}
