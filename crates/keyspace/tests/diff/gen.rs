//! A seeded generator of commands over every family pmwire serves, with
//! keys shared between types (so WRONGTYPE comes up), numbers at their
//! edges, bad arities and bad options.
//! (Shared by `redis_diff.rs` and `crates/cli/tests/kv_cluster_diff.rs`.)

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "k4", "k5"];
const VALUES: &[&str] = &[
    "", "0", "1", "-1", "7", "42", "100", "3.5", "-0", "+1", " 1", "0x10", "1e3", "abc", "hello world",
    "9223372036854775807", "-9223372036854775808", "9223372036854775808", "\u{0}\u{7f}",
];
const INTS: &[&str] = &[
    "0", "1", "-1", "2", "-2", "3", "5", "-5", "10", "100", "-100", "9223372036854775807", "-9223372036854775808",
    "99999999999999999999", "x", "1.5", "",
];
const FLOATS: &[&str] = &[
    "0", "-0", "0.1", "1e308", "1e4932", "-1e4932", "1e4933", "1e-4950", "1e-5000", "inf", "-inf", "nan", ".", "1.",
    ".5", "+1.5", " 1", "1 ", "1e", "0x", "0x1p-16445", "5e-18", "1.5e-17", "9223372036854775807", "x",
];
const SCORES: &[&str] = &["0", "1", "-1", "1.5", "-2.25", "3", "1e2", "inf", "-inf", "+inf", "nan", "x", "0.1", "10"];
const BOUNDS: &[&str] = &["-inf", "+inf", "0", "1", "(1", "2", "(2.5", "-1", "x", "(", "1e1"];
const FIELDS: &[&str] = &["f0", "f1", "f2", "f3"];
const MEMBERS: &[&str] = &["a", "b", "c", "d", "e"];
const HASH_KEYS: &[&str] = &["h0", "h1"];
const ZSET_KEYS: &[&str] = &["z0", "z1", "z2"];
const LEX_BOUNDS: &[&str] = &["-", "+", "[a", "(b", "[c", "d", "(e", "[", "(", "+x", "[1"];
const LIST_KEYS: &[&str] = &["l0", "l1"];
const SET_KEYS: &[&str] = &["s0", "s1", "s2"];
/// Set members: strings and integers (Redis keeps an all-integer set
/// as an intset, others as a hash table). Fewer than 10, so SSCAN's
/// default COUNT covers a whole set, as Redis answers a small set.
const SET_MEMBERS: &[&str] = &["a", "b", "c", "d", "1", "2", "10", "-3", ""];
/// Counts for pops and draws: small, at the edges, and not numbers.
/// (No large negative SRANDMEMBER count: Redis 7.0 would answer with
/// that many members, pmwire refuses beyond `MAX_RANDOM_REPLY`.)
const COUNTS: &[&str] = &["0", "1", "2", "3", "5", "-1", "-2", "-7", "x", "", "9223372036854775807", "-9223372036854775808"];
/// Relative times (EXPIRE, SET EX, SETEX, GETEX EX): large, or at once
/// (0, negative), or refused.
const REL_SECONDS: &[&str] =
    &["1000000", "2000000", "3000000", "0", "-1", "x", "", "9223372036854775807", "9223372036854775"];
const REL_MS: &[&str] = &["1000000000", "2000000000", "3000000000", "0", "-5", "x", "9223372036854775807"];
/// Absolute times: far in the future, in the past, at the edges.
const ABS_SECONDS: &[&str] =
    &["4102444800", "4102444900", "4102444700", "1", "0", "-5", "9223372036854775807", "9223372036854775", "x"];
const ABS_MS: &[&str] =
    &["4102444800000", "4102444800123", "4102444899999", "1", "0", "9223372036854775807", "-9223372036854775808"];
/// Absolute times SET takes: none in the past (a key stored expired).
const SET_ABS_SECONDS: &[&str] =
    &["4102444800", "4102444900", "0", "-1", "x", "9223372036854775", "9223372036854776"];
const SET_ABS_MS: &[&str] = &["4102444800123", "4102444800500", "0", "x", "9223372036854775807"];

pub struct Gen {
    rng: Xoshiro256PlusPlus,
}

/// A generated command; `sort` when its reply's order is unspecified,
/// `random` when its reply is (SPOP, SRANDMEMBER).
pub struct Cmd {
    pub args: Vec<Vec<u8>>,
    pub sort: bool,
    pub random: bool,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { rng: Xoshiro256PlusPlus::seed_from_u64(seed) }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn pick(&mut self, from: &[&str]) -> Vec<u8> {
        from[self.rng.gen_range(0..from.len())].as_bytes().to_vec()
    }

    fn key(&mut self) -> Vec<u8> {
        self.pick(KEYS)
    }

    /// A key for a list or set command: mostly the family's own keys,
    /// so collections grow, else one shared with every family.
    fn family_key(&mut self, own: &[&str]) -> Vec<u8> {
        if self.rng.gen_bool(0.7) { self.pick(own) } else { self.pick(KEYS) }
    }

    fn value(&mut self) -> Vec<u8> {
        if self.rng.gen_bool(0.1) {
            let n = self.rng.gen_range(0..40);
            (0..n).map(|_| self.rng.gen::<u8>()).collect()
        } else {
            self.pick(VALUES)
        }
    }

    fn int(&mut self) -> Vec<u8> {
        if self.rng.gen_bool(0.7) {
            self.rng.gen_range(-12i64..12).to_string().into_bytes()
        } else {
            self.pick(INTS)
        }
    }

    /// A number for INCRBYFLOAT: decimals of up to 25 digits with a point
    /// and an exponent anywhere (rounding at every position of the
    /// 64-bit significand and of `%.17Lf`), hex floats, edges, non-numbers.
    fn float(&mut self) -> Vec<u8> {
        match self.rng.gen_range(0..10) {
            0 => self.pick(FLOATS),
            1 => self.int(),
            2 => {
                let (int, frac) = (self.rng.gen::<u16>(), self.rng.gen::<u16>());
                let exp = self.rng.gen_range(-80i32..80);
                format!("0x{int:x}.{frac:x}p{exp}").into_bytes()
            }
            _ => {
                let len = self.rng.gen_range(1..=25);
                let mut d: Vec<u8> = (0..len).map(|_| b'0' + self.rng.gen_range(0..10u8)).collect();
                d.insert(self.rng.gen_range(0..=len), b'.');
                if self.rng.gen_bool(0.5) {
                    d.insert(0, b'-');
                }
                if self.rng.gen_bool(0.3) {
                    d.extend(format!("e{}", self.rng.gen_range(-30i32..30)).into_bytes());
                }
                d
            }
        }
    }

    /// EVAL or EVALSHA of one of [`SCRIPT_BODIES`] (its keys and arguments
    /// drawn as its slots ask, the key count now and then wrong), or SCRIPT
    /// LOAD, EXISTS, FLUSH of them.
    fn script_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        let (body, keys, args) = SCRIPT_BODIES[self.rng.gen_range(0..SCRIPT_BODIES.len())];
        let sha = || pmwire_keyspace::script::sha1_hex(body.as_bytes()).into_bytes();
        match name {
            "SCRIPT" => match self.rng.gen_range(0..20) {
                0 => a.push(b"FLUSH".to_vec()),
                1..=9 => a.extend([b"LOAD".to_vec(), body.as_bytes().to_vec()]),
                _ => {
                    a.push(b"EXISTS".to_vec());
                    a.push(sha());
                    let (other, _, _) = SCRIPT_BODIES[self.rng.gen_range(0..SCRIPT_BODIES.len())];
                    a.push(pmwire_keyspace::script::sha1_hex(other.as_bytes()).into_bytes());
                }
            },
            _ => {
                a.push(if name == "EVAL" { body.as_bytes().to_vec() } else { sha() });
                let keys: Vec<Vec<u8>> = keys.chars().map(|slot| self.slot(slot)).collect();
                let args: Vec<Vec<u8>> = args.chars().map(|slot| self.slot(slot)).collect();
                a.push(match self.rng.gen_range(0..30) {
                    0 => b"-1".to_vec(),
                    1 => (keys.len() + args.len() + 1).to_string().into_bytes(),
                    2 => b"x".to_vec(),
                    _ => keys.len().to_string().into_bytes(),
                });
                a.extend(keys);
                a.extend(args);
            }
        }
    }

    /// A key or argument for a script's slot: `k` any key, `h` `z` `l` `s`
    /// a hash, sorted-set, list or set key, `v` a value, `i` an integer, `f`
    /// a float, `m` a member, `F` a hash field, `S` a set member, `c` a
    /// command name (members and fields from the small universes, so
    /// collections stay small as the other commands keep them).
    fn slot(&mut self, slot: char) -> Vec<u8> {
        match slot {
            'k' => self.key(),
            'h' => self.family_key(HASH_KEYS),
            'z' => self.family_key(ZSET_KEYS),
            'l' => self.family_key(LIST_KEYS),
            's' => self.family_key(SET_KEYS),
            'v' => self.value(),
            'i' => self.int(),
            'f' => self.float(),
            'm' => self.pick(MEMBERS),
            'F' => self.pick(FIELDS),
            'S' => self.pick(SET_MEMBERS),
            _ => self.pick(SCRIPT_COMMANDS),
        }
    }

    fn any_key(&mut self) -> Vec<u8> {
        let family = ALL_KEYS[self.rng.gen_range(0..ALL_KEYS.len())];
        self.pick(family)
    }

    /// RESTORE key ttl payload [options]: mostly a DUMP of another key of
    /// the same family (or the same key; or one shared by every family, as
    /// the other commands mix them: a set moved into a list key would meet
    /// `SORT ... BY nosort`, whose order is Redis's hash table's), else a
    /// payload refused for its footer; TTLs and options at their edges.
    fn restore_args(&mut self, a: &mut Vec<Vec<u8>>) {
        let family = ALL_KEYS[self.rng.gen_range(0..ALL_KEYS.len())];
        a.push(self.family_key(family));
        a.push(self.pick(&["0", "0", "0", "0", "100000000", "4102444800000", "-1", "x"]));
        if self.rng.gen_bool(0.85) {
            let mut p = DUMP_OF.to_vec();
            p.extend(self.family_key(family));
            a.push(p);
        } else {
            a.push(self.value());
        }
        for _ in 0..self.n(0, 3) {
            match self.rng.gen_range(0..8) {
                0..=2 => a.push(b"REPLACE".to_vec()),
                3 => a.push(b"ABSTTL".to_vec()),
                4 => a.extend([b"IDLETIME".to_vec(), self.pick(&["5", "0", "-1", "x"])]),
                5 => a.extend([b"FREQ".to_vec(), self.pick(&["7", "255", "256", "-1"])]),
                6 => a.push(self.pick(&["IDLETIME", "FREQ"])),
                _ => a.push(b"BAD".to_vec()),
            }
        }
    }

    fn n(&mut self, lo: usize, hi: usize) -> usize {
        self.rng.gen_range(lo..=hi)
    }

    fn element(&mut self) -> Vec<u8> {
        if self.rng.gen_bool(0.8) { self.pick(MEMBERS) } else { self.value() }
    }

    fn name(&mut self) -> &'static str {
        let family: &[&str] = match self.rng.gen_range(0..116) {
            0..=23 => STRINGS,
            24..=33 => KEYCMDS,
            34..=45 => HASHES,
            46..=62 => ZSETS,
            63..=73 => LISTS,
            74..=84 => SETS,
            85..=90 => EXPIRY,
            91..=94 => SCRIPTS,
            95..=99 => STREAMS,
            100..=107 => GROUPS,
            _ => GEO,
        };
        family[self.rng.gen_range(0..family.len())]
    }

    pub fn next(&mut self) -> Cmd {
        let name = self.name();
        let mut a: Vec<Vec<u8>> = vec![name.as_bytes().to_vec()];
        let sort = self.args(name, &mut a);
        let random = matches!(name, "SPOP" | "SRANDMEMBER" | "HRANDFIELD" | "ZRANDMEMBER");
        // Now and then a wrong arity: one argument too few.
        if a.len() > 1 && self.rng.gen_bool(0.03) {
            a.pop();
        }
        Cmd { args: a, sort, random }
    }

    /// Pushes the arguments of `name`; true if its reply's order is unspecified.
    fn args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
        if name == "SORT" || name == "SORT_RO" {
            return self.sort_args(name, a);
        }
        if LISTS.contains(&name) {
            self.list_args(name, a);
            return false;
        }
        if SETS.contains(&name) {
            return self.set_args(name, a);
        }
        if EXPIRY.contains(&name) {
            self.expiry_args(name, a);
            return false;
        }
        if SCRIPTS.contains(&name) {
            self.script_args(name, a);
            return false;
        }
        if STREAMS.contains(&name) {
            self.stream_args(name, a);
            return false;
        }
        if GROUPS.contains(&name) {
            self.group_args(name, a);
            return false;
        }
        if HASHES.contains(&name) {
            return self.hash_args(name, a);
        }
        if ZSETS.contains(&name) {
            return self.zset_args(name, a);
        }
        if GEO.contains(&name) {
            self.geo_args(name, a);
            return false;
        }
        let mut sort = false;
        match name {
            "GET" | "STRLEN" | "GETDEL" | "INCR" | "DECR" | "TYPE" => a.push(self.key()),
            "SET" => {
                a.push(self.key());
                a.push(self.value());
                for _ in 0..self.n(0, 2) {
                    match self.rng.gen_range(0..12) {
                        0 => a.extend([b"EX".to_vec(), self.pick(REL_SECONDS)]),
                        1 => a.extend([b"px".to_vec(), self.pick(REL_MS)]),
                        2 => a.extend([b"EXAT".to_vec(), self.pick(SET_ABS_SECONDS)]),
                        3 => a.extend([b"PXAT".to_vec(), self.pick(SET_ABS_MS)]),
                        _ => a.push(self.pick(&["NX", "XX", "GET", "KEEPTTL", "nx", "get", "keepttl", "BAD"])),
                    }
                }
            }
            "SETNX" | "GETSET" | "APPEND" => {
                a.push(self.key());
                a.push(self.value());
            }
            "INCRBY" | "DECRBY" => {
                a.push(self.key());
                a.push(self.int());
            }
            "INCRBYFLOAT" => {
                a.push(self.key());
                a.push(self.float());
            }
            "MGET" | "DEL" | "UNLINK" | "EXISTS" | "TOUCH" => {
                for _ in 0..self.n(1, 4) {
                    a.push(self.key());
                }
            }
            "MSET" | "MSETNX" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.key());
                    a.push(self.value());
                }
            }
            "SETRANGE" => {
                a.push(self.key());
                a.push(self.int());
                a.push(self.value());
            }
            "GETRANGE" | "SUBSTR" => {
                a.push(self.key());
                a.push(self.int());
                a.push(self.int());
            }
            "SETBIT" => {
                a.push(self.key());
                // Not the largest valid offset: that SETBIT makes a 512 MiB string.
                let offset = if self.chance(0.1) { b"4294967296".to_vec() } else { self.pick(&BIT_OFFSETS[..BIT_OFFSETS.len() - 2]) };
                a.push(offset);
                a.push(self.pick(&["0", "1", "1", "2", "-1", "x", "01"]));
            }
            "GETBIT" => {
                a.push(self.key());
                a.push(self.pick(BIT_OFFSETS));
            }
            "BITCOUNT" => {
                a.push(self.key());
                match self.rng.gen_range(0..6) {
                    0 | 1 => {}
                    2 => a.push(self.pick(BIT_RANGE)),
                    _ => {
                        a.push(self.pick(BIT_RANGE));
                        a.push(self.pick(BIT_RANGE));
                        if self.chance(0.5) {
                            a.push(self.pick(&["BIT", "byte", "bit", "BYTE", "bad"]));
                        }
                    }
                }
            }
            "BITPOS" => {
                a.push(self.key());
                a.push(self.pick(&["0", "1", "1", "0", "2", "x"]));
                let extra = self.n(0, 4);
                for i in 0..extra {
                    if i == 2 {
                        a.push(self.pick(&["BIT", "byte", "bit", "BYTE", "bad"]));
                    } else {
                        a.push(self.pick(BIT_RANGE));
                    }
                }
            }
            "BITOP" => {
                let op = self.pick(&["AND", "or", "XOR", "NOT", "not", "bad"]);
                a.push(op);
                a.push(self.key());
                for _ in 0..self.n(1, 3) {
                    a.push(self.key());
                }
            }
            "RENAME" | "RENAMENX" => {
                a.push(self.key());
                a.push(self.key());
            }
            "COPY" => {
                a.push(self.key());
                a.push(self.key());
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(&["REPLACE", "replace", "DB", "BAD"]));
                    if a.last().is_some_and(|w| w == b"DB") {
                        a.push(self.pick(&["0", "x", "99999999999"]));
                    }
                }
            }
            "DBSIZE" => {}
            "DUMP" => a.push(self.any_key()),
            "RESTORE" => self.restore_args(a),
            "KEYS" => {
                a.push(self.pick(&["*", "k?", "k[0-2]", "h*", "k[^1]"]));
                sort = true;
            }
            other => unreachable!("{other}"),
        }
        sort
    }

    fn list_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        a.push(self.family_key(LIST_KEYS));
        match name {
            "LPUSH" | "RPUSH" | "LPUSHX" | "RPUSHX" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.element());
                }
            }
            "LPOP" | "RPOP" => {
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(COUNTS));
                }
            }
            "LRANGE" | "LTRIM" => {
                a.push(self.int());
                a.push(self.int());
            }
            "LINDEX" => a.push(self.int()),
            "LSET" | "LREM" => {
                a.push(self.int());
                a.push(self.element());
            }
            "LINSERT" => {
                a.push(self.pick(&["BEFORE", "AFTER", "after", "middle"]));
                a.push(self.element());
                a.push(self.element());
            }
            "LPOS" => {
                a.push(self.element());
                for _ in 0..self.n(0, 3) {
                    a.push(self.pick(&["RANK", "COUNT", "MAXLEN", "rank", "BAD"]));
                    a.push(self.int());
                }
            }
            "LMOVE" | "RPOPLPUSH" => {
                a.push(self.family_key(LIST_KEYS));
                if name == "LMOVE" {
                    for _ in 0..2 {
                        a.push(self.pick(&["LEFT", "RIGHT", "left", "UP"]));
                    }
                }
            }
            "BLPOP" | "BRPOP" => {
                for _ in 0..self.n(0, 2) {
                    a.push(self.family_key(LIST_KEYS));
                }
                a.push(self.pick(BLOCK_TIMEOUTS));
            }
            "BLMOVE" | "BRPOPLPUSH" => {
                a.push(self.family_key(LIST_KEYS));
                if name == "BLMOVE" {
                    for _ in 0..2 {
                        a.push(self.pick(&["LEFT", "RIGHT", "left", "UP"]));
                    }
                }
                a.push(self.pick(BLOCK_TIMEOUTS));
            }
            "LMPOP" | "BLMPOP" => {
                self.mpop_keys(a, name == "BLMPOP", |g| g.family_key(LIST_KEYS));
                a.push(self.pick(&["LEFT", "RIGHT", "right", "UP"]));
                if self.rng.gen_bool(0.5) {
                    a.push(self.pick(&["COUNT", "count", "COUNT", "FOO"]));
                    a.push(self.pick(COUNTS));
                }
            }
            "LLEN" => {}
            other => unreachable!("{other}"),
        }
    }

    /// LMPOP/ZMPOP's head after the key already pushed: the timeout if
    /// `blocking`, numkeys (now and then a wrong one), that key, then the
    /// others drawn by `key`.
    fn mpop_keys(&mut self, a: &mut Vec<Vec<u8>>, blocking: bool, mut key: impl FnMut(&mut Gen) -> Vec<u8>) {
        let first = a.pop().expect("the key pushed above");
        if blocking {
            a.push(self.pick(BLOCK_TIMEOUTS));
        }
        let n = self.n(1, 3);
        let numkeys = if self.rng.gen_bool(0.85) { n.to_string().into_bytes() } else { self.pick(COUNTS) };
        a.push(numkeys);
        a.push(first);
        for _ in 1..n {
            a.push(key(self));
        }
    }

    /// SORT / SORT_RO of a list (sets and sorted sets are left to the corpus:
    /// redis-server converts a sorted set it sorts to a skiplist, after which
    /// its BYLEX answers over members of different scores follow the
    /// skiplist's random levels; a set unsorted has no order to compare).
    /// Three shapes whose replies are fixed: BY nosort (the list's order;
    /// SORT stores it, and SORT_RO's reply is compared sorted and takes no
    /// LIMIT, because a RENAME or COPY may have put a set at a list key, and
    /// an unsorted set is in Redis's hash table order unless STORE sorts
    /// it), ALPHA with STORE (bytes compared: a total order), and ALPHA without
    /// LIMIT or STORE compared sorted (true: redis-server compares C strings
    /// there, so `""` and `"\0\x7f"` tie and its qsort may order them either
    /// way). Numeric sorts are left to the corpus too: redis-server reads
    /// `errno` after `strtod` without clearing it, so an earlier command's
    /// ERANGE (a `1e400` argument) fails a later numeric SORT.
    fn sort_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
        a.push(self.pick(LIST_KEYS));
        let shape = if name == "SORT" { self.rng.gen_range(0..3) } else { [0, 2][self.rng.gen_range(0..2)] };
        if shape == 0 {
            a.push(b"BY".to_vec());
            a.push(b"nosort".to_vec());
        } else {
            a.push(self.pick(&["ALPHA", "alpha"]));
        }
        if self.rng.gen_bool(0.4) {
            a.push(self.pick(&["DESC", "ASC", "desc"]));
        }
        let unordered = shape == 2 || (shape == 0 && name == "SORT_RO");
        if !unordered && self.rng.gen_bool(0.4) {
            a.push(b"LIMIT".to_vec());
            a.push(self.int());
            a.push(self.int());
        }
        if self.rng.gen_bool(0.2) {
            a.push(b"GET".to_vec());
            a.push(self.pick(&["#", "nostar", "*"]));
        }
        if shape == 1 || (shape == 0 && name == "SORT") {
            a.push(b"STORE".to_vec());
            a.push(self.family_key(LIST_KEYS));
        } else if self.rng.gen_bool(0.03) {
            a.push(b"BOGUS".to_vec());
        }
        unordered
    }

    /// Pushes an expiry command's arguments (times as in the module's header).
    fn expiry_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        // Any key of any family: TTLs ride on every type.
        let key = match self.rng.gen_range(0..3) {
            0 => self.pick(LIST_KEYS),
            1 => self.pick(SET_KEYS),
            _ => self.key(),
        };
        a.push(key);
        match name {
            "EXPIRE" | "PEXPIRE" => {
                a.push(self.pick(if name == "EXPIRE" { REL_SECONDS } else { REL_MS }));
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(&["NX", "XX", "xx", "BAD"]));
                }
            }
            "EXPIREAT" | "PEXPIREAT" => {
                a.push(self.pick(if name == "EXPIREAT" { ABS_SECONDS } else { ABS_MS }));
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(&["NX", "XX", "GT", "LT", "gt", "BAD"]));
                }
            }
            "SETEX" | "PSETEX" => {
                a.push(self.pick(if name == "SETEX" { REL_SECONDS } else { REL_MS }));
                a.push(self.value());
            }
            "GETEX" => {
                for _ in 0..self.n(0, 2) {
                    match self.rng.gen_range(0..6) {
                        0 => a.extend([b"EX".to_vec(), self.pick(REL_SECONDS)]),
                        1 => a.extend([b"PX".to_vec(), self.pick(REL_MS)]),
                        2 => a.extend([b"EXAT".to_vec(), self.pick(ABS_SECONDS)]),
                        3 => a.extend([b"pxat".to_vec(), self.pick(ABS_MS)]),
                        _ => a.push(self.pick(&["PERSIST", "persist", "KEEPTTL", "NX"])),
                    }
                }
            }
            "RANDOMKEY" => _ = a.pop(),
            "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" | "PERSIST" => {}
            other => unreachable!("{other}"),
        }
    }

    /// Pushes a hash command's arguments; true if the reply is unordered.
    fn hash_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
        a.push(self.family_key(HASH_KEYS));
        match name {
            "HSET" | "HMSET" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.pick(FIELDS));
                    a.push(self.value());
                }
            }
            "HGET" | "HEXISTS" | "HSTRLEN" => a.push(self.pick(FIELDS)),
            "HMGET" | "HDEL" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.pick(FIELDS));
                }
            }
            "HSETNX" => {
                a.push(self.pick(FIELDS));
                a.push(self.value());
            }
            "HINCRBY" => {
                a.push(self.pick(FIELDS));
                a.push(self.int());
            }
            "HINCRBYFLOAT" => {
                a.push(self.pick(FIELDS));
                a.push(self.float());
            }
            "HRANDFIELD" => self.random_count(a, "WITHVALUES"),
            "HSCAN" => self.scan_opts(a),
            _ => {}
        }
        matches!(name, "HGETALL" | "HKEYS" | "HVALS" | "HSCAN")
    }

    /// COUNT [WITHVALUES|WITHSCORES] of HRANDFIELD / ZRANDMEMBER.
    fn random_count(&mut self, a: &mut Vec<Vec<u8>>, with: &str) {
        if self.rng.gen_bool(0.8) {
            a.push(self.pick(COUNTS));
            if self.rng.gen_bool(0.5) {
                a.push(self.pick(&[with, &with.to_lowercase(), "BAD"]));
            }
        }
    }

    /// HSCAN / ZSCAN: cursor 0 (or not a cursor), MATCH, and a COUNT
    /// covering the whole collection (Redis answers a small one whole,
    /// pmwire pages by COUNT).
    fn scan_opts(&mut self, a: &mut Vec<Vec<u8>>) {
        a.push(self.pick(&["0", "0", "0", "0", "0", "0", "0", "0", "0", "x"]));
        for _ in 0..self.n(0, 2) {
            match self.rng.gen_range(0..10) {
                0..=5 => a.extend([b"MATCH".to_vec(), self.pick(&["*", "[a-c]", "f*", "x", "?"])]),
                6 | 7 => a.extend([b"COUNT".to_vec(), self.pick(&["100", "1000", "100", "0", "x"])]),
                8 => a.push(b"COUNT".to_vec()),
                _ => a.extend([self.pick(&["TYPE", "BAD"]), b"x".to_vec()]),
            }
        }
        if !a.iter().any(|w| w == b"COUNT") {
            a.extend([b"COUNT".to_vec(), b"100".to_vec()]);
        }
    }

    /// A sorted-set key; now and then a set's (the set operations read
    /// sets) or a key of any family.
    fn zkey(&mut self) -> Vec<u8> {
        match self.rng.gen_range(0..20) {
            0 | 1 => self.pick(SET_KEYS),
            2 => self.key(),
            _ => self.pick(ZSET_KEYS),
        }
    }

    /// LIMIT offset count, now and then.
    fn limit(&mut self, a: &mut Vec<Vec<u8>>) {
        if self.rng.gen_bool(0.3) {
            a.push(self.pick(&["LIMIT", "limit"]));
            a.push(self.int());
            a.push(self.int());
        }
    }

    /// Pushes a sorted-set command's arguments; true if the reply is unordered.
    fn zset_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
        match name {
            "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" | "ZUNION" | "ZINTER" | "ZDIFF" | "ZINTERCARD" => {
                self.zset_op_args(name, a);
                return false;
            }
            "ZRANGESTORE" => {
                a.push(self.zkey());
                a.push(self.zkey());
                self.zrange_args(a, false);
                return false;
            }
            _ => a.push(self.zkey()),
        }
        match name {
            "ZADD" => {
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(&["NX", "XX", "GT", "LT", "CH", "INCR"]));
                }
                for _ in 0..self.n(1, 3) {
                    a.push(self.pick(SCORES));
                    a.push(self.pick(MEMBERS));
                }
            }
            "ZREM" | "ZMSCORE" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.pick(MEMBERS));
                }
            }
            "ZSCORE" | "ZRANK" | "ZREVRANK" => a.push(self.pick(MEMBERS)),
            "ZINCRBY" => {
                a.push(self.pick(SCORES));
                a.push(self.pick(MEMBERS));
            }
            "ZRANGE" => self.zrange_args(a, true),
            "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" => {
                a.push(self.pick(BOUNDS));
                a.push(self.pick(BOUNDS));
                if self.rng.gen_bool(0.3) {
                    a.push(b"WITHSCORES".to_vec());
                }
                self.limit(a);
            }
            "ZRANGEBYLEX" | "ZREVRANGEBYLEX" => {
                a.push(self.pick(LEX_BOUNDS));
                a.push(self.pick(LEX_BOUNDS));
                self.limit(a);
            }
            "ZREVRANGE" | "ZREMRANGEBYRANK" => {
                a.push(self.int());
                a.push(self.int());
                if name == "ZREVRANGE" && self.rng.gen_bool(0.3) {
                    a.push(self.pick(&["WITHSCORES", "withscores", "REV", "LIMIT"]));
                }
            }
            "ZCOUNT" | "ZREMRANGEBYSCORE" => {
                a.push(self.pick(BOUNDS));
                a.push(self.pick(BOUNDS));
            }
            "ZLEXCOUNT" | "ZREMRANGEBYLEX" => {
                a.push(self.pick(LEX_BOUNDS));
                a.push(self.pick(LEX_BOUNDS));
            }
            "ZPOPMIN" | "ZPOPMAX" => {
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(COUNTS));
                }
            }
            "BZPOPMIN" | "BZPOPMAX" => {
                for _ in 0..self.n(0, 2) {
                    a.push(self.zkey());
                }
                a.push(self.pick(BLOCK_TIMEOUTS));
            }
            "ZMPOP" | "BZMPOP" => {
                self.mpop_keys(a, name == "BZMPOP", Gen::zkey);
                a.push(self.pick(&["MIN", "MAX", "max", "LEFT"]));
                if self.rng.gen_bool(0.5) {
                    a.push(self.pick(&["COUNT", "count", "COUNT", "FOO"]));
                    a.push(self.pick(COUNTS));
                }
            }
            "ZRANDMEMBER" => self.random_count(a, "WITHSCORES"),
            "ZSCAN" => self.scan_opts(a),
            _ => {}
        }
        name == "ZSCAN"
    }

    /// A geo set's key: mostly the family's own, now and then a sorted
    /// set's (scores that are not positions) or any key.
    fn geo_key(&mut self) -> Vec<u8> {
        match self.rng.gen_range(0..10) {
            0 | 1 => self.pick(ZSET_KEYS),
            2 => self.key(),
            _ => self.pick(GEO_KEYS),
        }
    }

    /// A longitude or a latitude: on a grid of 0.01 degrees around Sicily
    /// (so points share positions and distances tie), anywhere, the edges,
    /// or refused.
    fn coordinate(&mut self, lon: bool) -> Vec<u8> {
        let (centre, span) = if lon { (13.0, 180.0) } else { (37.0, 85.05112878) };
        match self.rng.gen_range(0..20) {
            0..=6 => format!("{:.2}", centre + f64::from(self.rng.gen_range(-150i32..150)) / 100.0).into_bytes(),
            // Half-degree steps: points share positions, so distances tie.
            7..=13 => format!("{:.1}", centre + f64::from(self.rng.gen_range(-3i32..=3)) / 2.0).into_bytes(),
            14..=17 => format!("{:.6}", self.rng.gen_range(-span..span)).into_bytes(),
            18 => self.pick(if lon { &["-180", "180", "180.0000001", "-181", "0"] } else { &["85.05112878", "-85.05112878", "85.06", "-90", "0"] }),
            _ => self.pick(&["x", "", "inf", "nan", "1e400", " 1"]),
        }
    }

    fn geo_member(&mut self) -> Vec<u8> {
        self.pick(GEO_MEMBERS)
    }

    /// A radius or box side and a unit.
    fn geo_distance(&mut self, a: &mut Vec<Vec<u8>>) {
        a.push(self.pick(&["0", "1", "10", "50", "100", "150", "200", "300", "1000", "5000", "-1", "x", "1e-3"]));
        a.push(self.pick(&["km", "km", "km", "m", "mi", "ft", "KM", "yd"]));
    }

    /// Pushes a GEO command's arguments (as `georadiusGeneric` reads them,
    /// with options drawn in any order, now and then in conflict).
    fn geo_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        if name == "GEOSEARCHSTORE" {
            a.push(self.geo_key());
        }
        a.push(self.geo_key());
        match name {
            "GEOADD" => {
                for _ in 0..self.n(0, 2) / 2 + usize::from(self.rng.gen_bool(0.1)) {
                    a.push(self.pick(&["NX", "XX", "CH", "ch", "GT"]));
                }
                for _ in 0..self.n(1, 4) {
                    a.push(self.coordinate(true));
                    a.push(self.coordinate(false));
                    a.push(self.geo_member());
                }
            }
            "GEOPOS" | "GEOHASH" => {
                for _ in 0..self.n(0, 4) {
                    a.push(self.geo_member());
                }
            }
            "GEODIST" => {
                a.push(self.geo_member());
                a.push(self.geo_member());
                for _ in 0..self.n(0, 1) + usize::from(self.rng.gen_bool(0.05)) {
                    a.push(self.pick(&["km", "m", "mi", "ft", "MI", "yd"]));
                }
            }
            "GEORADIUS" | "GEORADIUS_RO" => {
                a.push(self.coordinate(true));
                a.push(self.coordinate(false));
                self.geo_distance(a);
            }
            "GEORADIUSBYMEMBER" | "GEORADIUSBYMEMBER_RO" => {
                a.push(self.geo_member());
                self.geo_distance(a);
            }
            _ => {}
        }
        if name.starts_with("GEOSEARCH") {
            self.geo_search_shape(a);
        }
        if name.starts_with("GEORADIUS") || name.starts_with("GEOSEARCH") {
            self.geo_options(name, a);
        }
    }

    /// FROMMEMBER|FROMLONLAT and BYRADIUS|BYBOX: one of each mostly.
    fn geo_search_shape(&mut self, a: &mut Vec<Vec<u8>>) {
        let froms = if self.rng.gen_bool(0.9) { 1 } else { self.n(0, 2) };
        for _ in 0..froms {
            if self.rng.gen_bool(0.5) {
                a.push(self.pick(&["FROMMEMBER", "frommember"]));
                a.push(self.geo_member());
            } else {
                a.push(self.pick(&["FROMLONLAT", "fromlonlat"]));
                a.push(self.coordinate(true));
                a.push(self.coordinate(false));
            }
        }
        let bys = if self.rng.gen_bool(0.9) { 1 } else { self.n(0, 2) };
        for _ in 0..bys {
            if self.rng.gen_bool(0.5) {
                a.push(self.pick(&["BYRADIUS", "byradius"]));
                self.geo_distance(a);
            } else {
                a.push(self.pick(&["BYBOX", "bybox"]));
                let side = self.pick(&["0", "10", "100", "200", "400", "1000", "-1", "x"]);
                a.push(side);
                self.geo_distance(a);
            }
        }
    }

    /// WITH*, ASC|DESC, COUNT [ANY], STORE|STOREDIST.
    fn geo_options(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        for _ in 0..self.n(0, 4) {
            match self.rng.gen_range(0..12) {
                0 => a.push(self.pick(&["WITHDIST", "withdist"])),
                1 => a.push(self.pick(&["WITHCOORD", "withcoord"])),
                2 => a.push(self.pick(&["WITHHASH", "withhash"])),
                3 | 4 => a.push(self.pick(&["ASC", "DESC", "desc"])),
                5..=7 => {
                    a.push(self.pick(&["COUNT", "count"]));
                    a.push(self.pick(&["1", "2", "3", "5", "1", "2", "0", "-1", "x", "100"]));
                    if self.rng.gen_bool(0.3) {
                        a.push(self.pick(&["ANY", "any"]));
                    }
                }
                8 => a.push(self.pick(&["ANY", "FOO"])),
                _ => {
                    if name == "GEOSEARCHSTORE" {
                        a.push(self.pick(&["STOREDIST", "storedist", "STORE"]));
                    } else if self.rng.gen_bool(0.7) || name.starts_with("GEORADIUS") {
                        a.push(self.pick(&["STORE", "STOREDIST", "store"]));
                        a.push(self.geo_key());
                    }
                }
            }
        }
    }

    /// ZRANGE's (and ZRANGESTORE's) range and options.
    fn zrange_args(&mut self, a: &mut Vec<Vec<u8>>, withscores: bool) {
        match self.rng.gen_range(0..3) {
            0 => {
                a.push(self.int());
                a.push(self.int());
            }
            1 => {
                a.push(self.pick(BOUNDS));
                a.push(self.pick(BOUNDS));
                a.push(self.pick(&["BYSCORE", "byscore"]));
            }
            _ => {
                a.push(self.pick(LEX_BOUNDS));
                a.push(self.pick(LEX_BOUNDS));
                a.push(b"BYLEX".to_vec());
            }
        }
        for _ in 0..self.n(0, 2) {
            match self.rng.gen_range(0..4) {
                0 => a.push(b"REV".to_vec()),
                1 if withscores => a.push(b"WITHSCORES".to_vec()),
                1 => a.push(self.pick(&["WITHSCORES", "BYSCORE"])),
                _ => {
                    a.push(b"LIMIT".to_vec());
                    a.push(self.int());
                    a.push(self.int());
                }
            }
        }
    }

    /// The set operations: [destination] numkeys key... [WEIGHTS w...]
    /// [AGGREGATE how] [WITHSCORES] [LIMIT n].
    fn zset_op_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        if name.ends_with("STORE") {
            a.push(self.zkey());
        }
        let n = self.n(1, 3);
        a.push(if self.rng.gen_bool(0.9) { n.to_string().into_bytes() } else { self.pick(&["0", "-1", "x", "9"]) });
        for _ in 0..n {
            a.push(self.zkey());
        }
        // Mostly the options the command takes, now and then any.
        let fitting: &[u8] = match name {
            "ZINTERCARD" => &[3],
            "ZDIFF" => &[2],
            "ZDIFFSTORE" => &[],
            "ZUNION" | "ZINTER" => &[0, 1, 2],
            _ => &[0, 1],
        };
        for _ in 0..self.n(0, 2) {
            let pick = match fitting.len() {
                n if n > 0 && self.rng.gen_bool(0.85) => fitting[self.rng.gen_range(0..n)],
                0 if self.rng.gen_bool(0.8) => continue,
                _ => self.rng.gen_range(0..5),
            };
            match pick {
                0 => {
                    a.push(b"WEIGHTS".to_vec());
                    let given = if self.rng.gen_bool(0.9) { n } else { n - 1 };
                    for _ in 0..given {
                        a.push(self.pick(&["1", "2", "-1", "0.5", "0", "inf", "-inf", "3", "0.1", "x", "nan"]));
                    }
                }
                1 => a.extend([b"AGGREGATE".to_vec(), self.pick(&["SUM", "min", "MAX", "avg"])]),
                2 => a.push(b"WITHSCORES".to_vec()),
                3 => a.extend([b"LIMIT".to_vec(), self.pick(&["0", "1", "2", "-1", "x"])]),
                _ => a.push(b"BAD".to_vec()),
            }
        }
    }

    fn set_keys(&mut self, a: &mut Vec<Vec<u8>>, lo: usize, hi: usize) {
        for _ in 0..self.n(lo, hi) {
            a.push(self.family_key(SET_KEYS));
        }
    }

    /// Pushes a set command's arguments; true if the reply is unordered.
    /// A stream entry ID: mostly `ms-seq` with small parts (so entries
    /// go in order and out of order), the other forms, and bad ones.
    fn stream_id(&mut self, xadd: bool) -> Vec<u8> {
        let ms = self.rng.gen_range(0..60u64);
        let seq = self.rng.gen_range(0..3u64);
        match self.rng.gen_range(0..20) {
            0..=11 => format!("{ms}-{seq}").into_bytes(),
            12..=13 => ms.to_string().into_bytes(),
            14..=15 if xadd => format!("{ms}-*").into_bytes(),
            14..=15 => self.pick(&["-", "+", "(5-0", "(0-0", "(18446744073709551615-18446744073709551615"]),
            16 => b"0-0".to_vec(),
            _ => self.pick(&["x", "1-x", "-1", "1--1", "18446744073709551615-18446744073709551615", "18446744073709551616", " 7", "+3", "1-2-3", ""]),
        }
    }

    /// MAXLEN or MINID with `=`, `~` or neither, and sometimes LIMIT.
    fn trim_args(&mut self, a: &mut Vec<Vec<u8>>) {
        let minid = self.rng.gen_bool(0.4);
        a.push(self.pick(if minid { &["MINID", "minid"] } else { &["MAXLEN", "maxlen"] }));
        let approx = self.rng.gen_range(0..3);
        match approx {
            0 => a.push(b"~".to_vec()),
            1 => a.push(b"=".to_vec()),
            _ => {}
        }
        if minid {
            a.push(self.stream_id(false));
        } else {
            a.push(self.pick(&["0", "1", "2", "3", "5", "8", "-1", "x"]));
        }
        if self.rng.gen_bool(0.2) {
            a.extend([b"LIMIT".to_vec(), self.pick(&["0", "1", "2", "5", "100", "-1", "x"])]);
        }
    }

    fn stream_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        if name == "XREAD" {
            // Never BLOCK: the cluster diff's members refuse it (a read waits
            // nowhere there); kv-server's blocking test compares it.
            if self.rng.gen_bool(0.4) {
                a.extend([self.pick(&["COUNT", "count"]), self.pick(&["0", "1", "2", "-1", "x"])]);
            }
            if self.rng.gen_bool(0.05) {
                a.push(self.pick(&["NOACK", "BAD"]));
            }
            a.push(self.pick(&["STREAMS", "streams"]));
            let n = self.n(1, 2);
            for _ in 0..n {
                a.push(self.family_key(STREAM_KEYS));
            }
            for _ in 0..n {
                a.push(if self.rng.gen_bool(0.2) { self.pick(&["$", ">"]) } else { self.stream_id(false) });
            }
            return;
        }
        a.push(self.family_key(STREAM_KEYS));
        match name {
            "XADD" => {
                if self.rng.gen_bool(0.1) {
                    a.push(b"NOMKSTREAM".to_vec());
                }
                if self.rng.gen_bool(0.3) {
                    self.trim_args(a);
                }
                a.push(self.stream_id(true));
                for _ in 0..self.n(1, 3) {
                    a.push(self.pick(FIELDS));
                    a.push(self.value());
                }
                if self.rng.gen_bool(0.03) {
                    a.push(self.pick(FIELDS));
                }
            }
            "XRANGE" | "XREVRANGE" => {
                a.push(self.stream_id(false));
                a.push(self.stream_id(false));
                if self.rng.gen_bool(0.4) {
                    a.extend([self.pick(&["COUNT", "count", "BAD"]), self.pick(&["0", "1", "2", "3", "-1", "x"])]);
                }
            }
            "XDEL" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.stream_id(false));
                }
            }
            "XTRIM" => {
                if self.rng.gen_bool(0.05) {
                    a.push(b"BAD".to_vec());
                } else {
                    self.trim_args(a);
                }
            }
            _ => {} // XLEN
        }
    }

    /// A consumer group command's arguments (no BLOCK, no IDLE or TIME, a
    /// minimum idle time of 0: nothing here depends on the two servers'
    /// clocks but the idle times XPENDING and XINFO CONSUMERS show, which
    /// the differ masks).
    fn group_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
        let id_or_last = |g: &mut Gen| if g.rng.gen_bool(0.3) { b"$".to_vec() } else { g.stream_id(false) };
        let entries_read = |g: &mut Gen, a: &mut Vec<Vec<u8>>| {
            if g.rng.gen_bool(0.2) {
                a.extend([b"ENTRIESREAD".to_vec(), g.pick(&["0", "1", "3", "-1", "-2", "x"])]);
            }
        };
        if name == "XREADGROUP" {
            a.extend([b"GROUP".to_vec(), self.pick(GROUP_NAMES), self.pick(CONSUMERS)]);
            if self.rng.gen_bool(0.4) {
                a.extend([self.pick(&["COUNT", "count"]), self.pick(&["0", "1", "2", "-1", "x"])]);
            }
            if self.rng.gen_bool(0.2) {
                a.push(b"NOACK".to_vec());
            }
            a.push(b"STREAMS".to_vec());
            let n = self.n(1, 2);
            for _ in 0..n {
                a.push(self.family_key(STREAM_KEYS));
            }
            for _ in 0..n {
                a.push(if self.rng.gen_bool(0.7) { b">".to_vec() } else { self.pick(&["0", "0-0", "3-0", "$", "x"]) });
            }
            return;
        }
        if name == "XGROUP" || name == "XINFO" {
            let sub = match name {
                "XGROUP" => self.pick(&["CREATE", "CREATE", "create", "SETID", "DESTROY", "CREATECONSUMER", "DELCONSUMER", "HELP"]),
                _ => self.pick(&["GROUPS", "CONSUMERS", "CONSUMERS", "STREAM", "groups"]),
            };
            a.push(sub.clone());
            if sub == b"HELP" {
                return;
            }
            a.push(self.family_key(STREAM_KEYS));
            match &sub.to_ascii_uppercase()[..] {
                b"CREATE" => {
                    a.push(self.pick(GROUP_NAMES));
                    a.push(id_or_last(self));
                    if self.rng.gen_bool(0.5) {
                        a.push(b"MKSTREAM".to_vec());
                    }
                    entries_read(self, a);
                }
                b"SETID" => {
                    a.push(self.pick(GROUP_NAMES));
                    a.push(id_or_last(self));
                    entries_read(self, a);
                }
                b"DESTROY" | b"CONSUMERS" => a.push(self.pick(GROUP_NAMES)),
                b"CREATECONSUMER" | b"DELCONSUMER" => {
                    a.push(self.pick(GROUP_NAMES));
                    a.push(self.pick(CONSUMERS));
                }
                _ => {}
            }
            return;
        }
        a.push(self.family_key(STREAM_KEYS));
        if name == "XSETID" {
            a.push(self.stream_id(false));
            if self.rng.gen_bool(0.3) {
                a.extend([b"ENTRIESADDED".to_vec(), self.pick(&["0", "5", "50", "-1", "x"])]);
            }
            if self.rng.gen_bool(0.3) {
                a.extend([b"MAXDELETEDID".to_vec(), self.stream_id(false)]);
            }
            return;
        }
        a.push(self.pick(GROUP_NAMES));
        match name {
            "XACK" => {
                for _ in 0..self.n(1, 3) {
                    a.push(self.stream_id(false));
                }
            }
            "XPENDING" => {
                if self.rng.gen_bool(0.6) {
                    a.push(self.stream_id(false));
                    a.push(self.stream_id(false));
                    a.push(self.pick(&["0", "1", "2", "10", "-1", "x"]));
                    if self.rng.gen_bool(0.4) {
                        a.push(self.pick(CONSUMERS));
                    }
                }
            }
            "XCLAIM" => {
                a.push(self.pick(CONSUMERS));
                a.push(self.pick(&["0", "0", "0", "-5", "x"]));
                for _ in 0..self.n(1, 3) {
                    a.push(self.stream_id(false));
                }
                for _ in 0..self.n(0, 2) {
                    match self.rng.gen_range(0..6) {
                        0 => a.push(b"JUSTID".to_vec()),
                        1 => a.push(b"FORCE".to_vec()),
                        2 => a.extend([b"RETRYCOUNT".to_vec(), self.pick(&["0", "3", "-1", "x"])]),
                        3 => a.extend([b"LASTID".to_vec(), self.stream_id(false)]),
                        4 => a.push(b"BAD".to_vec()),
                        _ => a.push(b"justid".to_vec()),
                    }
                }
            }
            _ => {
                // XAUTOCLAIM
                a.push(self.pick(CONSUMERS));
                a.push(self.pick(&["0", "0", "0", "x"]));
                a.push(self.stream_id(false));
                if self.rng.gen_bool(0.4) {
                    a.extend([b"COUNT".to_vec(), self.pick(&["1", "2", "3", "100", "0", "-1", "x"])]);
                }
                if self.rng.gen_bool(0.3) {
                    a.push(self.pick(&["JUSTID", "BAD"]));
                }
            }
        }
    }

    fn set_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
        match name {
            "SADD" | "SREM" | "SMISMEMBER" => {
                a.push(self.family_key(SET_KEYS));
                for _ in 0..self.n(1, 3) {
                    a.push(self.pick(SET_MEMBERS));
                }
            }
            "SISMEMBER" => {
                a.push(self.family_key(SET_KEYS));
                a.push(self.pick(SET_MEMBERS));
            }
            "SMEMBERS" | "SCARD" => a.push(self.family_key(SET_KEYS)),
            "SPOP" | "SRANDMEMBER" => {
                a.push(self.family_key(SET_KEYS));
                for _ in 0..self.n(0, 2) {
                    a.push(self.pick(COUNTS));
                }
            }
            "SMOVE" => {
                a.push(self.family_key(SET_KEYS));
                a.push(self.family_key(SET_KEYS));
                a.push(self.pick(SET_MEMBERS));
            }
            "SINTER" | "SUNION" | "SDIFF" => self.set_keys(a, 1, 3),
            "SINTERSTORE" | "SUNIONSTORE" | "SDIFFSTORE" => self.set_keys(a, 2, 4),
            "SINTERCARD" => {
                a.push(self.pick(&["1", "2", "3", "0", "x", "4"]));
                self.set_keys(a, 1, 3);
                if self.rng.gen_bool(0.4) {
                    a.push(self.pick(&["LIMIT", "limit", "BAD"]));
                    a.push(self.pick(&["0", "1", "2", "-1", "x"]));
                }
            }
            "SSCAN" => {
                a.push(self.family_key(SET_KEYS));
                a.push(self.pick(&["0", "0", "0", "x"]));
                for _ in 0..self.n(0, 2) {
                    match self.rng.gen_range(0..3) {
                        0 => a.push(b"MATCH".to_vec()),
                        1 => a.push(b"COUNT".to_vec()),
                        _ => a.push(self.pick(&["TYPE", "BAD"])),
                    }
                    let v = self.pick(&["*", "[a-c]", "1*", "10", "100", "0", "x"]);
                    a.push(v);
                }
            }
            other => unreachable!("{other}"),
        }
        !matches!(name, "SADD" | "SREM" | "SMISMEMBER" | "SISMEMBER" | "SCARD" | "SMOVE" | "SINTERCARD")
    }
}

const STRINGS: &[&str] = &[
    "GET", "SET", "SETNX", "GETSET", "GETDEL", "MGET", "MSET", "MSETNX", "INCR", "DECR", "INCRBY", "DECRBY",
    "INCRBYFLOAT", "INCRBYFLOAT", "APPEND", "STRLEN", "SETRANGE", "GETRANGE", "SUBSTR", "SETBIT", "SETBIT", "GETBIT",
    "BITCOUNT", "BITPOS", "BITOP",
];
/// Bit offsets: within a few bytes, past them, and refused ones.
const BIT_OFFSETS: &[&str] = &["0", "1", "7", "8", "13", "31", "100", "-1", "x", "01", "4294967295", "4294967296"];
/// BITCOUNT's start and end, in bytes or bits.
const BIT_RANGE: &[&str] = &["0", "1", "2", "5", "13", "-1", "-2", "-9", "100", "x"];
/// Expiry (TTL and PERSIST twice over: they read what the others set).
pub const EXPIRY: &[&str] = &[
    "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "TTL", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "PEXPIRETIME",
    "PERSIST", "SETEX", "PSETEX", "GETEX", "GETEX", "RANDOMKEY",
];
/// EVAL twice over, so most script commands run a script.
const STREAMS: &[&str] = &["XADD", "XADD", "XADD", "XLEN", "XRANGE", "XREVRANGE", "XDEL", "XTRIM", "XREAD"];
const STREAM_KEYS: &[&str] = &["x0", "x1"];
/// Consumer group commands (XREADGROUP and XACK more often, so PELs fill
/// and drain; XGROUP CREATE is one XGROUP in three).
const GROUPS: &[&str] = &[
    "XGROUP", "XGROUP", "XGROUP", "XREADGROUP", "XREADGROUP", "XREADGROUP", "XACK", "XACK", "XPENDING", "XPENDING",
    "XCLAIM", "XAUTOCLAIM", "XINFO", "XSETID",
];
const GROUP_NAMES: &[&str] = &["g0", "g1"];
const CONSUMERS: &[&str] = &["c0", "c1", "c2"];
const SCRIPTS: &[&str] = &["EVAL", "EVAL", "EVALSHA", "SCRIPT"];
/// Scripts with their key slots and argument slots ([`Gen::slot`]); none
/// draws randomness or reads the clock, and none answers in an order
/// Redis leaves unspecified (a hash is sorted first).
const SCRIPT_BODIES: &[(&str, &str, &str)] = &[
    ("return redis.pcall(ARGV[1], KEYS[1])", "k", "c"),
    ("return redis.call(ARGV[1], KEYS[1])", "k", "c"),
    ("return redis.pcall('incrby', KEYS[1], ARGV[1])", "k", "i"),
    ("redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])", "k", "v"),
    ("local v = redis.call('get', KEYS[1]) if v then return {v, #v} end return {false, 'none'}", "k", ""),
    ("return {redis.call('exists', KEYS[1], KEYS[2]), redis.call('type', KEYS[2])}", "kk", ""),
    ("local n = redis.call('rpush', KEYS[1], ARGV[1], ARGV[2]) return {n, redis.call('lrange', KEYS[1], 0, -1)}", "l", "mm"),
    ("return redis.pcall('hset', KEYS[1], ARGV[1], ARGV[2])", "h", "Fv"),
    ("local t = redis.pcall('hgetall', KEYS[1]) if t.err then return t end table.sort(t) return t", "h", ""),
    ("return cjson.encode(redis.pcall('zrange', KEYS[1], 0, -1, 'withscores'))", "z", ""),
    ("return tonumber(ARGV[1])", "", "f"),
    ("return redis.pcall('setrange', KEYS[1], ARGV[1], ARGV[2])", "k", "iv"),
    ("local r = redis.pcall('hget', KEYS[1], ARGV[1]) if type(r) == 'table' then return r.err end return r", "h", "F"),
    ("return {KEYS[1], ARGV[1], #ARGV, #KEYS}", "k", "vv"),
    ("return redis.pcall('sadd', KEYS[1], ARGV[1], ARGV[2])", "s", "SS"),
    ("return redis.pcall('zincrby', KEYS[1], ARGV[1], ARGV[2])", "z", "fm"),
    ("return redis.pcall('incrbyfloat', KEYS[1], ARGV[1])", "k", "f"),
    ("return {redis.pcall('llen', KEYS[1]), redis.pcall('lindex', KEYS[1], ARGV[1])}", "l", "i"),
    ("local s = 0 for _, v in ipairs(redis.call('lrange', KEYS[1], 0, -1)) do s = s + #v end return s", "l", ""),
    ("return redis.status_reply(ARGV[1])", "", "v"),
    ("return redis.error_reply(ARGV[1])", "", "v"),
    ("return redis.pcall('getrange', KEYS[1], ARGV[1], ARGV[2])", "k", "ii"),
    ("return redis.sha1hex(ARGV[1])", "", "v"),
    ("return bit.tohex(tonumber(ARGV[1]) or 0)", "", "i"),
    ("return redis.pcall('copy', KEYS[1], KEYS[2])", "kk", ""),
    ("redis.call('del', KEYS[1]) return redis.call('exists', KEYS[1])", "k", ""),
    ("return redis.call('incr', KEYS[1]) + 0.5", "k", ""),
    ("return {1, 2.9, -2.9, 'x', false, true, {ok = ARGV[1]}, {err = ARGV[1]}}", "", "v"),
];
/// Commands a script calls by name from its arguments: some it may not.
const SCRIPT_COMMANDS: &[&str] = &[
    "get", "strlen", "type", "incr", "decr", "llen", "hlen", "scard", "zcard", "getdel", "exists", "del", "persist",
    "lpop", "rpop", "nosuch", "multi", "blpop", "bzpopmin", "GET", "ping", "echo",
];
const KEYCMDS: &[&str] =
    &["DEL", "UNLINK", "EXISTS", "TOUCH", "TYPE", "RENAME", "RENAMENX", "COPY", "DBSIZE", "KEYS", "DUMP", "RESTORE", "RESTORE"];
/// Every key of every family (DUMP and RESTORE move any).
const ALL_KEYS: &[&[&str]] = &[KEYS, HASH_KEYS, ZSET_KEYS, LIST_KEYS, SET_KEYS, STREAM_KEYS];
/// What a generated RESTORE carries in place of its payload to say "each
/// server's own DUMP of this key" (`Differ::check_restore`).
const DUMP_OF: &[u8] = b"\0DUMP OF:";

/// The source key of a generated `RESTORE key ttl <DUMP of source> ...`.
pub fn dump_source(args: &[Vec<u8>]) -> Option<&[u8]> {
    if args[0].as_slice() != b"RESTORE" {
        return None;
    }
    args.get(3)?.strip_prefix(DUMP_OF)
}
/// HSET twice over, so hashes grow.
const HASHES: &[&str] = &[
    "HSET", "HSET", "HMSET", "HGET", "HMGET", "HDEL", "HLEN", "HEXISTS", "HGETALL", "HSETNX", "HKEYS", "HVALS",
    "HSTRLEN", "HINCRBY", "HINCRBYFLOAT", "HRANDFIELD", "HSCAN",
];
/// ZADD three times over, so sorted sets grow past the pops and removals.
const ZSETS: &[&str] = &[
    "ZADD", "ZADD", "ZADD", "ZREM", "ZSCORE", "ZCARD", "ZRANGE", "ZRANGE", "ZRANGEBYSCORE", "ZINCRBY", "ZRANK",
    "ZREVRANK", "ZREVRANGE", "ZRANGEBYLEX", "ZREVRANGEBYSCORE", "ZREVRANGEBYLEX", "ZCOUNT", "ZLEXCOUNT",
    "ZPOPMIN", "ZPOPMAX", "ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREMRANGEBYLEX", "ZMSCORE", "ZRANDMEMBER",
    "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZUNION", "ZINTER", "ZDIFF", "ZINTERCARD", "ZRANGESTORE", "ZSCAN",
    "ZMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
];
/// GEOADD three times over, so geo sets grow past a few points.
const GEO: &[&str] = &[
    "GEOADD", "GEOADD", "GEOADD", "GEOPOS", "GEODIST", "GEOHASH", "GEOSEARCH", "GEOSEARCH", "GEOSEARCHSTORE", "GEORADIUS",
    "GEORADIUS_RO", "GEORADIUSBYMEMBER", "GEORADIUSBYMEMBER_RO",
];
const GEO_KEYS: &[&str] = &["g0", "g1"];
const GEO_MEMBERS: &[&str] = &["a", "b", "c", "d", "e", "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"];
const LISTS: &[&str] = &[
    "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LRANGE", "LLEN", "LINDEX", "LSET", "LREM", "LTRIM",
    "LINSERT", "LPOS", "LMOVE", "RPOPLPUSH", "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "LMPOP", "BLMPOP", "SORT",
    "SORT_RO",
];
/// Timeouts of blocking pops: short (one connection: nobody pushes, so
/// an empty wait times out; 0 would block for ever), and refused ones.
pub const BLOCK_TIMEOUTS: &[&str] = &["0.01", "0.02", "-1", "x", "inf", "1e400"];
/// SADD three times over: sets grow past one member, where SPOP and
/// SRANDMEMBER become random.
const SETS: &[&str] = &[
    "SADD", "SADD", "SADD", "SREM", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SPOP", "SRANDMEMBER", "SMOVE", "SINTER",
    "SUNION", "SDIFF", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE", "SINTERCARD", "SSCAN",
];
