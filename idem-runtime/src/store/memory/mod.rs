//! An in-process store, for tests and single-process programs that may forget on restart.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use uuid::Uuid;

use super::{LeaseToken, Outcome};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

// Operator reads (`Records`), beside the claim state machine.
mod records;

// The map's records read as `Record`s.
mod rows;

// The transitions (`Store`) and the operation ids, each answering at once.
mod transitions;

// The store's clock: ticks from its origin.
mod clock;
use clock::{Origin, Tick};

/// Keeps records in a map in memory; its clock is tokio's, so tests can pause and advance it.
///
/// Nothing survives the process: use the SQLite store for anything that must.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// When the store was made: its records' times are counted from here.
    clock: Origin,
    /// S33: how long a tombstone is kept past its time-to-live (`None`: the default).
    tombstones: Option<std::time::Duration>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each record in an allocation of its own: the map grows by doubling, and moving 24-byte
    /// entries instead of 120-byte ones was ~25 ns of a wrapped call (interleaved rounds of the
    /// `calls` bench).
    records: HashMap<[u8; 16], Slot, KeyHashing>,
    /// Every tool and tenant name seen, shared by their records: a claim does not copy a name.
    names: Names,
    operations: HashMap<String, Uuid>,
    /// Operators' decisions (S24), beside the records so that a record stays small: each kept
    /// until `kept_until` or until a new claim of its key replaces the record.
    resolutions: HashMap<[u8; 16], Kept, KeyHashing>,
    /// What a takeover replaced (S27), beside the records for the same reason: kept while the
    /// record is Running under the claim that replaced it, so that the claim given back
    /// unused ([`Store::restore`](crate::Store::restore)) brings it back.
    priors: HashMap<[u8; 16], Prior, KeyHashing>,
    /// What a record keeps through takeovers (S32, S31), beside the records for the same
    /// reason: only for a record that was taken over or had an Unknown answer of verify (a key
    /// without one was first made at its record's `created`, with no Unknown answer and no note
    /// kept).
    stories: HashMap<[u8; 16], Story, KeyHashing>,
    /// The arguments a call of a tool with `verify` kept with its record (S28), beside the
    /// records for the same reason: other tools' records keep none, and pay nothing.
    arguments: HashMap<[u8; 16], Box<[u8]>, KeyHashing>,
}

/// What a record keeps through takeovers (see [`Inner::stories`]).
#[derive(Debug, Clone)]
struct Story {
    /// When its operation was first made.
    first_made: Tick,
    /// How many Unknown answers of verify it has had, and since when.
    unknowns: u32,
    unknown_since: Option<Tick>,
    /// The note of the ambiguous record it was last taken over from: what it reads with while
    /// a lapsed holder's lease leaves it Running (S31).
    note: Option<Box<str>>,
}

impl Inner {
    /// The story of `key`'s record `rec`, made at its first takeover or Unknown answer.
    fn story(&mut self, key: &[u8; 16], created: Tick) -> &mut Story {
        self.stories.entry(*key).or_insert_with(|| Story {
            first_made: created,
            unknowns: 0,
            unknown_since: None,
            note: None,
        })
    }

    /// `key`'s record is gone or replaced by a new one: so are its story and its arguments.
    fn forget_story(&mut self, key: &[u8; 16]) {
        if !self.stories.is_empty() {
            self.stories.remove(key);
        }
        if !self.arguments.is_empty() {
            self.arguments.remove(key);
        }
    }
}

/// What a takeover replaced (see [`Inner::priors`]).
#[derive(Debug)]
enum Prior {
    /// The live record, as it was.
    Record(Slot),
    /// Not kept: the record is a holder's brought back, whose own claim's prior is gone (one
    /// level is kept). Its claim given back keeps it ambiguous (the safe side).
    Unknown,
}

/// An operator's decision on a record, and until when it is shown.
#[derive(Debug, Clone)]
struct Kept {
    resolution: super::Resolution,
    kept_until: Tick,
}

/// Hashes record keys for the map. Keys are UUIDs, nearly all derived by SHA-256 (the rest random
/// or time-ordered), so a folded multiply per 8 bytes, from a random seed of this store, spreads
/// them well, for a fraction of SipHash's cost: hashing the key twice with SipHash was an eighth
/// of a call's instructions outside SHA-256. The seed keeps collisions from being planned.
#[derive(Debug, Clone)]
struct KeyHashing {
    seed: u64,
}

impl Default for KeyHashing {
    fn default() -> Self {
        // std's per-process random keys, without drawing from fastrand's thread-local generator
        // (which the simulation seeds for the runtime's jitter).
        KeyHashing {
            seed: RandomState::new().hash_one(0x1de4_u64),
        }
    }
}

impl BuildHasher for KeyHashing {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher(self.seed)
    }
}

struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            let product = u128::from(self.0 ^ u64::from_le_bytes(word)) * u128::from(MUL);
            self.0 = (product as u64) ^ ((product >> 64) as u64);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A tool's or a tenant's name, as the store's [`Names`] numbers it: records hold the number, so
/// a claim neither copies a name nor counts a reference to it (two atomic operations a record,
/// one at its claim and one when it is dropped), and a record stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Name(u32);

/// Every tool and tenant name seen, numbered in the order first seen (a process has a handful;
/// none is forgotten), and the two named last: a program's calls come in runs of one tool (and
/// tenant), and comparing a short name is cheaper than hashing it (a tenth of a claim's
/// instructions).
#[derive(Debug, Default)]
struct Names {
    numbers: HashMap<Box<str>, Name, KeyHashing>,
    /// By number.
    names: Vec<Box<str>>,
    /// The last two names asked for, the newer first.
    recent: [Option<Name>; 2],
}

impl Names {
    /// The number of `name`, given at its first record.
    fn get(&mut self, name: &str) -> Name {
        if let Some(hit) = self.recent.iter().flatten().find(|n| self.str(**n) == name) {
            return *hit;
        }
        let number = match self.numbers.get(name) {
            Some(known) => *known,
            None => {
                let made = Name(u32::try_from(self.names.len()).expect(
                    "idemkit: the memory store has seen more than 4 billion tool and tenant names",
                ));
                self.names.push(name.into());
                self.numbers.insert(name.into(), made);
                made
            }
        };
        self.recent = [Some(number), self.recent[0]];
        number
    }

    /// The name numbered `n`.
    fn str(&self, n: Name) -> &str {
        &self.names[n.0 as usize]
    }
}

/// What the map holds per key: the record, in an allocation of its own.
type Slot = Box<Rec>;

#[derive(Debug, Clone)]
struct Rec {
    tool: Name,
    fingerprint: Fingerprint,
    state: State,
    expires_at: Tick,
    /// When it was made (claimed new, or taken over) and last changed.
    created: Tick,
    updated: Tick,
    /// The scope it was made under (for operators).
    tenant: Option<Name>,
    /// S33: a tombstone an operator forgot: it no longer counts, and is kept only to show that
    /// decision (in `resolutions`) until its keep time.
    forgotten: bool,
}

impl Rec {
    /// Whether the record counts at `now`: before its expiry, or running or ambiguous (which
    /// never expire by time, S34: their expiry is `Tick::NEVER` until a decision), or completed
    /// (S33: past its expiry, a tombstone, never absent until pruned past the tombstone setting
    /// or forgotten). What does not count is a record released by a not-applied decision.
    fn counts(&self, now: Tick) -> bool {
        !self.forgotten && (self.expires_at > now || matches!(self.state, State::Completed { .. }))
    }

    /// S33: done, and past its time-to-live.
    fn is_tombstone(&self, now: Tick) -> bool {
        self.expires_at <= now && matches!(self.state, State::Completed { .. })
    }
}

#[derive(Debug, Clone)]
enum State {
    Running {
        token: LeaseToken,
        lease_until: Tick,
    },
    /// `by`: the holder that completed it, so that its completion sent again is applied again.
    Completed { outcome: Outcome, by: LeaseToken },
    /// `by`: the holder that marked it, likewise.
    Ambiguous { note: Box<str>, by: LeaseToken },
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store, keeping a tombstone (S33: a completed record past its time-to-live, its
    /// outcome dropped) for `keep` past that time-to-live before a prune may delete it; default
    /// [`DEFAULT_TOMBSTONES`](crate::store::DEFAULT_TOMBSTONES) (400 days). Until then a repeat
    /// of its key is answered "done on DATE; its result is no longer kept", never run.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = idem_runtime::MemoryStore::new().tombstones(Duration::from_secs(30 * 86_400));
    /// # let _ = store;
    /// ```
    pub fn tombstones(mut self, keep: std::time::Duration) -> Self {
        self.tombstones = Some(keep);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a record half-written (each operation
        // replaces whole values), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live record of `key` held by `token`, if it is still held by it.
    fn held<'a>(
        inner: &'a mut Inner,
        key: &IdempotencyKey,
        token: LeaseToken,
        now: Tick,
    ) -> Option<&'a mut Rec> {
        inner
            .records
            .get_mut(key.as_bytes())
            .map(|rec| &mut **rec)
            .filter(|rec| {
                rec.counts(now)
                    && matches!(rec.state, State::Running { token: t, .. } if t == token)
            })
    }
}

#[cfg(test)]
mod tests {
    /// A record: its times and names took no more room than before Store v2 added the times
    /// and the tenant (104 bytes); keeping the token of the holder that completed it (so that
    /// its completion sent again is applied again, issue 30 #8) adds 8 (a completed record
    /// holds its outcome and that token where a running one holds its token and lease end).
    /// The map holds a key and a pointer (24 bytes), so growing it moves little.
    #[test]
    fn a_record_fits_in_112_bytes_and_the_map_holds_24_per_key() {
        let record = std::mem::size_of::<super::Rec>();
        assert!(record <= 112, "{record} bytes");
        let entry = std::mem::size_of::<([u8; 16], super::Slot)>();
        assert_eq!(entry, 24);
    }

    /// S28: a record whose call kept its arguments costs an entry of the side map (32 bytes,
    /// beside its control byte) and the arguments' own allocation; any other record nothing.
    #[test]
    fn kept_arguments_cost_a_32_byte_entry_beside_the_record() {
        assert_eq!(std::mem::size_of::<([u8; 16], Box<[u8]>)>(), 32);
        assert!(std::mem::size_of::<super::Rec>() <= 112);
    }
}
