//! Properties of keys and fingerprints over random inputs: a key is exactly encoding v1 of the
//! tool's name and the key fields' values and nothing else; different values never share a key,
//! however the bytes are split between fields; every string type keys alike; a key survives its
//! text and serde forms; a fingerprint ignores map order at every depth but not values.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

use idem_runtime::{
    Classify, Failure, Fingerprint, Idem, IdempotencyKey, KeyField, KeyPart, MemoryStore, Tool,
};
use proptest::prelude::*;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A key field value of any kind the encoding knows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Val {
    Text(String),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Bytes(Vec<u8>),
    Uuid(u128),
}

impl Val {
    fn part(&self) -> Box<dyn KeyPart + Sync + '_> {
        match self {
            Val::Text(s) => Box::new(s.as_str()),
            Val::Int(i) => Box::new(*i),
            Val::UInt(u) => Box::new(*u),
            Val::Bool(b) => Box::new(*b),
            Val::Bytes(b) => Box::new(b.as_slice()),
            Val::Uuid(u) => Box::new(Uuid::from_u128(*u)),
        }
    }

    /// Tag and value bytes, straight from the table in docs/protocol.md ("Keys: encoding v1").
    fn encoded(&self) -> (u8, Vec<u8>) {
        match self {
            Val::Text(s) => (1, s.as_bytes().to_vec()),
            Val::Int(i) => (2, i.to_string().into_bytes()),
            Val::UInt(u) => (2, u.to_string().into_bytes()),
            Val::Bool(b) => (3, vec![u8::from(*b)]),
            Val::Bytes(b) => (4, b.clone()),
            Val::Uuid(u) => (5, u.to_be_bytes().to_vec()),
        }
    }
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        ".{0,12}".prop_map(Val::Text),
        any::<i64>().prop_map(Val::Int),
        any::<u64>().prop_map(Val::UInt),
        any::<bool>().prop_map(Val::Bool),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Val::Bytes),
        any::<u128>().prop_map(Val::Uuid),
    ]
}

fn fields() -> impl Strategy<Value = Vec<(String, Val)>> {
    prop::collection::vec(("[a-z_]{0,6}", val()), 0..5)
}

fn derive(tool: &str, fields: &[(String, Val)]) -> IdempotencyKey {
    let parts: Vec<_> = fields.iter().map(|(n, v)| (n.as_str(), v.part())).collect();
    let refs: Vec<KeyField<'_>> = parts.iter().map(|(n, p)| (*n, &**p as _)).collect();
    IdempotencyKey::derive(tool, &refs)
}

/// Encoding v1 written out from docs/protocol.md, independently of the crate's hasher.
fn reference_key(tool: &str, fields: &[(String, Val)]) -> Uuid {
    let mut bytes = b"idemkit:v1\0".to_vec();
    let put = |bytes: &mut Vec<u8>, b: &[u8]| {
        bytes.extend_from_slice(&(b.len() as u32).to_be_bytes());
        bytes.extend_from_slice(b);
    };
    put(&mut bytes, tool.as_bytes());
    bytes.extend_from_slice(&(fields.len() as u32).to_be_bytes());
    for (name, value) in fields {
        put(&mut bytes, name.as_bytes());
        let (tag, value) = value.encoded();
        bytes.push(tag);
        put(&mut bytes, &value);
    }
    let digest = Sha256::digest(&bytes);
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    first[6] = (first[6] & 0x0f) | 0x80; // version 8
    first[8] = (first[8] & 0x3f) | 0x80; // RFC 9562 variant
    Uuid::from_bytes(first)
}

/// `s` cut at the given points (sorted, deduplicated, within bounds and on char boundaries).
fn split_at(s: &str, cuts: &[usize]) -> Vec<String> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| c % (s.len() + 1))
        .filter(|&c| s.is_char_boundary(c))
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut parts = Vec::new();
    let mut from = 0;
    for p in points {
        parts.push(s[from..p].to_owned());
        from = p;
    }
    parts.push(s[from..].to_owned());
    parts
}

fn text_fields(parts: &[String]) -> Vec<(String, Val)> {
    parts
        .iter()
        .map(|p| ("f".to_owned(), Val::Text(p.clone())))
        .collect()
}

#[derive(Debug)]
struct E;

impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idem_runtime::Error> for E {
    fn from(_: idem_runtime::Error) -> Self {
        E
    }
}

/// A JSON-like tree whose maps serialize their entries in the order stored.
#[derive(Debug, Clone)]
enum Tree {
    Int(i64),
    Text(String),
    Bool(bool),
    List(Vec<Tree>),
    Map(Vec<(String, Tree)>),
}

impl Serialize for Tree {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Tree::Int(i) => s.serialize_i64(*i),
            Tree::Text(t) => s.serialize_str(t),
            Tree::Bool(b) => s.serialize_bool(*b),
            Tree::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Tree::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl Tree {
    /// The same tree with every map's entries in another order (drawn from `seed`).
    fn reordered(&self, seed: &mut u64) -> Tree {
        match self {
            Tree::List(items) => Tree::List(items.iter().map(|t| t.reordered(seed)).collect()),
            Tree::Map(entries) => {
                let mut entries: Vec<_> = entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.reordered(seed)))
                    .collect();
                let mut rng = fastrand::Rng::with_seed(*seed);
                *seed = rng.u64(..);
                rng.shuffle(&mut entries);
                Tree::Map(entries)
            }
            leaf => leaf.clone(),
        }
    }

    fn leaves(&self) -> usize {
        match self {
            Tree::List(items) => items.iter().map(Tree::leaves).sum(),
            Tree::Map(entries) => entries.iter().map(|(_, t)| t.leaves()).sum(),
            _ => 1,
        }
    }

    /// Changes the leaf numbered `pick` (depth first); false if there are fewer leaves.
    fn mutate_a_leaf(&mut self, pick: &mut usize) -> bool {
        match self {
            Tree::Int(i) if *pick == 0 => {
                *i = i.wrapping_add(1);
                true
            }
            Tree::Text(t) if *pick == 0 => {
                t.push('!');
                true
            }
            Tree::Bool(b) if *pick == 0 => {
                *b = !*b;
                true
            }
            Tree::Int(_) | Tree::Text(_) | Tree::Bool(_) => {
                *pick -= 1;
                false
            }
            Tree::List(items) => items.iter_mut().any(|t| t.mutate_a_leaf(pick)),
            Tree::Map(entries) => entries.iter_mut().any(|(_, t)| t.mutate_a_leaf(pick)),
        }
    }
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Tree::Int),
        "[a-z]{0,4}".prop_map(Tree::Text),
        any::<bool>().prop_map(Tree::Bool),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Tree::List),
            // Unique keys: a JSON object has each key once.
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..6)
                .prop_map(|m| Tree::Map(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // A failure prints its minimal input; no regression files in the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_key_is_exactly_encoding_v1_of_the_tool_and_fields(tool in ".{0,10}", fields in fields()) {
        let key = derive(&tool, &fields);
        prop_assert_eq!(key.as_uuid(), reference_key(&tool, &fields));
        prop_assert_eq!(key, derive(&tool, &fields), "derivation is deterministic");
    }

    #[test]
    fn the_executor_keys_only_on_the_tool_and_key_fields(
        tool in "[a-z.]{1,10}",
        fields in fields(),
        args in tree(),
    ) {
        // The other arguments are fingerprinted, never part of the key.
        let seen = std::sync::Mutex::new(None);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let idem = Idem::new(MemoryStore::new());
        let parts: Vec<_> = fields.iter().map(|(n, v)| (n.as_str(), v.part())).collect();
        let refs: Vec<KeyField<'_>> = parts.iter().map(|(n, p)| (*n, &**p as _)).collect();
        let result: Result<(), E> = runtime.block_on(
            Tool::new(&tool).idem(&idem).side_effect(&refs, &args, |key| {
                *seen.lock().unwrap() = Some(key);
                async { Ok(()) }
            }),
        );
        prop_assert!(result.is_ok());
        prop_assert_eq!(seen.into_inner().unwrap(), Some(derive(&tool, &fields)));
    }

    #[test]
    fn different_fields_or_tools_give_different_keys(
        (tool_a, fields_a) in (".{0,6}", fields()),
        (tool_b, fields_b) in (".{0,6}", fields()),
    ) {
        prop_assume!((&tool_a, &fields_a) != (&tool_b, &fields_b));
        // Distinct as encoded (an i64 and a u64 of the same number are one value, tag 2).
        let enc = |f: &[(String, Val)]| f.iter().map(|(n, v)| (n.clone(), v.encoded())).collect::<Vec<_>>();
        prop_assume!((&tool_a, enc(&fields_a)) != (&tool_b, enc(&fields_b)));
        prop_assert_ne!(derive(&tool_a, &fields_a), derive(&tool_b, &fields_b));
    }

    #[test]
    fn one_value_changed_changes_the_key(tool in ".{0,6}", fields in fields(), at in any::<usize>(), other in val()) {
        prop_assume!(!fields.is_empty());
        let i = at % fields.len();
        prop_assume!(fields[i].1.encoded() != other.encoded());
        let mut changed = fields.clone();
        changed[i].1 = other;
        prop_assert_ne!(derive(&tool, &fields), derive(&tool, &changed));
    }

    #[test]
    fn no_split_of_the_same_text_between_fields_collides(
        text in ".{0,16}",
        cuts_a in prop::collection::vec(any::<usize>(), 0..4),
        cuts_b in prop::collection::vec(any::<usize>(), 0..4),
    ) {
        // ("ab", "c") vs ("a", "bc"), and every other way to cut one string into fields.
        let a = split_at(&text, &cuts_a);
        let b = split_at(&text, &cuts_b);
        prop_assume!(a != b);
        prop_assert_eq!(a.concat(), b.concat());
        prop_assert_ne!(derive("t", &text_fields(&a)), derive("t", &text_fields(&b)));
    }

    #[test]
    fn no_split_of_the_same_bytes_collides_even_when_they_look_like_framing(
        (tokens, cuts_a, cuts_b) in prop::collection::vec(any::<bool>(), 1..8).prop_flat_map(|tokens| {
            let gaps: Vec<usize> = (1..tokens.len()).collect();
            (0..tokens.len()).prop_flat_map(move |k| {
                (
                    Just(tokens.clone()),
                    prop::sample::subsequence(gaps.clone(), k),
                    prop::sample::subsequence(gaps.clone(), k),
                )
            })
        }),
    ) {
        // Values made of the encoding's own framing (an empty field name's length, the bytes
        // tag) and plain bytes, cut into the same number of fields at token boundaries: only
        // the values' length prefixes keep one split from another.
        const FRAME: &[u8] = &[0, 0, 0, 0, 4];
        let split = |points: &[usize]| -> Vec<(String, Val)> {
            let mut parts = vec![Vec::new()];
            for (i, &frame) in tokens.iter().enumerate() {
                if points.contains(&i) {
                    parts.push(Vec::new());
                }
                parts.last_mut().unwrap().extend_from_slice(if frame { FRAME } else { b"f" });
            }
            parts.into_iter().map(|p| (String::new(), Val::Bytes(p))).collect()
        };
        let (a, b) = (split(&cuts_a), split(&cuts_b));
        prop_assume!(a != b);
        prop_assert_ne!(derive("t", &a), derive("t", &b));
    }

    #[test]
    fn text_moved_between_tool_name_field_name_and_value_never_collides(
        text in ".{0,12}",
        cut in any::<usize>(),
        cut2 in any::<usize>(),
    ) {
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        let (i, j) = {
            let (x, y) = (bounds[cut % bounds.len()], bounds[cut2 % bounds.len()]);
            (x.min(y), x.max(y))
        };
        let (a, b, c) = (&text[..i], &text[i..j], &text[j..]);
        // (tool, field name, text value): the same characters, placed differently.
        let arrangements = [
            (a.to_owned(), b.to_owned(), c.to_owned()),
            (format!("{a}{b}"), String::new(), c.to_owned()),
            (a.to_owned(), format!("{b}{c}"), String::new()),
            (String::new(), a.to_owned(), format!("{b}{c}")),
        ];
        let key = |(tool, name, value): &(String, String, String)| {
            derive(tool, &[(name.clone(), Val::Text(value.clone()))])
        };
        for x in &arrangements {
            for y in &arrangements {
                if x != y {
                    prop_assert_ne!(key(x), key(y), "{:?} and {:?} collide", x, y);
                }
            }
        }
    }

    #[test]
    fn kinds_are_part_of_the_key(n in any::<u32>(), text in "[0-9]{1,8}") {
        // The text "42", the integer 42, and the bytes of "42" are three different values.
        let as_int = IdempotencyKey::derive("t", &[("f", &n)]);
        let as_text = IdempotencyKey::derive("t", &[("f", &n.to_string())]);
        let as_bytes = IdempotencyKey::derive("t", &[("f", &n.to_string().into_bytes())]);
        prop_assert_ne!(as_int, as_text);
        prop_assert_ne!(as_text, as_bytes);
        prop_assert_ne!(as_int, as_bytes);
        let t = IdempotencyKey::derive("t", &[("f", &text.as_str())]);
        let b = IdempotencyKey::derive("t", &[("f", &text.as_bytes())]);
        prop_assert_ne!(t, b);
    }

    #[test]
    fn every_string_type_gives_the_same_key(tool in ".{0,8}", name in "[a-z_]{1,8}", text in ".{0,24}") {
        let expected = IdempotencyKey::derive(&tool, &[(name.as_str(), &text.as_str())]);
        let string: String = text.clone();
        let borrowed: Cow<'_, str> = Cow::Borrowed(&text);
        let owned: Cow<'_, str> = Cow::Owned(text.clone());
        let boxed: Box<str> = text.clone().into_boxed_str();
        let arc: Arc<str> = Arc::from(text.as_str());
        let by_ref: &&str = &text.as_str();
        let n = name.as_str();
        let all = [
            IdempotencyKey::derive(&tool, &[(n, &string)]),
            IdempotencyKey::derive(&tool, &[(n, &borrowed)]),
            IdempotencyKey::derive(&tool, &[(n, &owned)]),
            IdempotencyKey::derive(&tool, &[(n, &boxed)]),
            IdempotencyKey::derive(&tool, &[(n, &arc)]),
            IdempotencyKey::derive(&tool, &[(n, by_ref)]),
            IdempotencyKey::derive(&tool, &[(n, &Box::new(text.clone()))]),
        ];
        for (i, key) in all.iter().enumerate() {
            prop_assert_eq!(*key, expected, "string type #{}", i);
        }
        // Rc<str> is not Sync, so it goes through the streaming hasher.
        let rc: Rc<str> = Rc::from(text.as_str());
        let mut hasher = idem_runtime::KeyHasher::new(&tool, 1);
        hasher.field(n, &rc);
        prop_assert_eq!(hasher.finish(), expected);
        if let Some(c) = text.chars().next().filter(|_| text.chars().count() == 1) {
            prop_assert_eq!(IdempotencyKey::derive(&tool, &[(n, &c)]), expected, "a char is its text");
        }
    }

    #[test]
    fn a_key_round_trips_through_text_and_serde(tool in ".{0,8}", fields in fields()) {
        let key = derive(&tool, &fields);
        let text = key.to_string();
        prop_assert_eq!(text.len(), 36);
        prop_assert_eq!(&text, &text.to_lowercase());
        prop_assert_eq!(key.as_str(), text.as_str());
        prop_assert_eq!(key.as_uuid().get_version_num(), 8);
        prop_assert_eq!(text.parse::<IdempotencyKey>().unwrap(), key);
        prop_assert_eq!(text.to_uppercase().parse::<IdempotencyKey>().unwrap(), key);
        let json = serde_json::to_string(&key).unwrap();
        prop_assert_eq!(&json, &format!("\"{text}\""));
        prop_assert_eq!(serde_json::from_str::<IdempotencyKey>(&json).unwrap(), key);
        prop_assert_eq!(IdempotencyKey::from_uuid(key.as_uuid()), key);
    }

    #[test]
    fn a_fingerprint_ignores_map_order_at_every_depth(t in tree(), seed in any::<u64>()) {
        let mut s = seed;
        let shuffled = t.reordered(&mut s);
        let fp = Fingerprint::of(&t).unwrap();
        prop_assert_eq!(fp, Fingerprint::of(&shuffled).unwrap());
        let value = serde_json::to_value(&t).unwrap();
        prop_assert_eq!(fp, Fingerprint::of_value(&value));
    }

    #[test]
    fn a_fingerprint_changes_with_any_leaf(t in tree(), pick in any::<usize>()) {
        let leaves = t.leaves();
        prop_assume!(leaves > 0);
        let mut changed = t.clone();
        prop_assert!(changed.mutate_a_leaf(&mut (pick % leaves)));
        prop_assert_ne!(Fingerprint::of(&t).unwrap(), Fingerprint::of(&changed).unwrap());
    }
}
