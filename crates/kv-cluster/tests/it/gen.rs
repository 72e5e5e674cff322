//! A random stream of entries: commands of every family (the random ones
//! included), TTLs that run out as the time moves, transactions with and
//! without watches, sweeps, and now and then a corrupted entry.

use pmwire_kv_cluster::Proposer;
use pmwire_resp::reply::Protocol;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const STRINGS: &[&str] = &["s0", "s1", "s2", "n0", "n1"];
const HASHES: &[&str] = &["h0", "h1"];
const LISTS: &[&str] = &["l0", "l1"];
const SETS: &[&str] = &["t0", "t1", "t2"];
const ZSETS: &[&str] = &["z0", "z1"];

/// What the stream does next.
pub enum Step {
    /// Apply this entry.
    Entry(Vec<u8>),
    /// Record a WATCH of this key now (the harness asks a member), for a
    /// later transaction.
    Watch(Vec<u8>),
}

/// The generator.
pub struct Gen {
    rng: Xoshiro256PlusPlus,
    /// The leader's stamp.
    pub proposer: Proposer,
    /// The leader's clock, ms.
    pub now_ms: u64,
    /// Whether random commands (SPOP...) and SCAN may be drawn.
    pub random_commands: bool,
    /// Whether transactions may be drawn.
    pub transactions: bool,
    /// Whether corrupted entries may be drawn.
    pub corrupt: bool,
    /// Whether FLUSHALL may be drawn.
    pub flush: bool,
}

fn s(v: &str) -> Vec<u8> {
    v.as_bytes().to_vec()
}

impl Gen {
    /// A generator drawn from `seed`.
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            proposer: Proposer::with_key(seed ^ 0x5eed),
            now_ms: 1_700_000_000_000,
            random_commands: true,
            transactions: true,
            corrupt: true,
            flush: true,
        }
    }

    fn pick(&mut self, from: &[&str]) -> Vec<u8> {
        s(from[self.rng.gen_range(0..from.len())])
    }

    fn member(&mut self) -> Vec<u8> {
        format!("m{}", self.rng.gen_range(0..12)).into_bytes()
    }

    fn small(&mut self) -> Vec<u8> {
        self.rng.gen_range(-3i64..6).to_string().into_bytes()
    }

    fn ttl_ms(&mut self) -> Vec<u8> {
        self.rng.gen_range(1u64..2_000).to_string().into_bytes()
    }

    fn any_key(&mut self) -> Vec<u8> {
        let all = [STRINGS, HASHES, LISTS, SETS, ZSETS].concat();
        self.pick(&all)
    }

    fn members(&mut self, lead: Vec<Vec<u8>>, max: usize, pairs: bool) -> Vec<Vec<u8>> {
        let mut args = lead;
        for _ in 0..self.rng.gen_range(1..=max) {
            if pairs {
                args.push(self.small());
            }
            args.push(self.member());
        }
        args
    }

    /// A string, counter or key command.
    fn string_command(&mut self) -> Vec<Vec<u8>> {
        let k = self.pick(STRINGS);
        match self.rng.gen_range(0..18) {
            0 => vec![s("SET"), k, self.member()],
            1 => vec![s("SET"), k, self.member(), s("PX"), self.ttl_ms()],
            2 => vec![s("GET"), k],
            3 => vec![s("INCR"), k],
            4 => vec![s("INCRBY"), k, self.small()],
            5 => vec![s("APPEND"), k, self.member()],
            6 => vec![s("DEL"), k, self.any_key()],
            7 => vec![s("MSET"), k, self.member(), self.pick(STRINGS), self.small()],
            8 => vec![s("GETDEL"), k],
            9 => vec![s("GETEX"), k, s("PX"), self.ttl_ms()],
            10 => vec![s("PEXPIRE"), self.any_key(), self.ttl_ms()],
            11 => vec![s("PERSIST"), self.any_key()],
            12 => vec![s("PTTL"), self.any_key()],
            13 => vec![s("EXISTS"), k, self.any_key()],
            14 => vec![s("RENAME"), self.any_key(), self.any_key()],
            15 => vec![s("COPY"), self.any_key(), self.any_key(), s("REPLACE")],
            16 => vec![s("DBSIZE")],
            _ => vec![s("INCRBYFLOAT"), k, s("1.5")],
        }
    }

    fn hash_command(&mut self) -> Vec<Vec<u8>> {
        let k = self.pick(HASHES);
        match self.rng.gen_range(0..7) {
            0 | 1 => {
                let mut args = vec![s("HSET"), k];
                for _ in 0..self.rng.gen_range(1..4) {
                    args.push(self.member());
                    args.push(self.small());
                }
                args
            }
            2 => vec![s("HDEL"), k, self.member()],
            3 => vec![s("HGETALL"), k],
            4 => vec![s("HINCRBY"), k, self.member(), self.small()],
            5 => vec![s("HLEN"), k],
            _ => vec![s("HGET"), k, self.member()],
        }
    }

    fn list_command(&mut self) -> Vec<Vec<u8>> {
        let k = self.pick(LISTS);
        match self.rng.gen_range(0..10) {
            0 | 1 => self.members(vec![s("RPUSH"), k], 4, false),
            2 => self.members(vec![s("LPUSH"), k], 3, false),
            3 => vec![s("LPOP"), k],
            4 => vec![s("RPOP"), k, s("2")],
            5 => vec![s("LRANGE"), k, s("0"), s("-1")],
            6 => vec![s("LMOVE"), k, self.pick(LISTS), s("LEFT"), s("RIGHT")],
            7 => vec![s("LREM"), k, s("0"), self.member()],
            8 => vec![s("BLPOP"), k, self.pick(LISTS), s("0")],
            _ => vec![s("LTRIM"), k, s("0"), s("5")],
        }
    }

    fn set_command(&mut self) -> Vec<Vec<u8>> {
        let k = self.pick(SETS);
        match self.rng.gen_range(0..9) {
            0 | 1 => self.members(vec![s("SADD"), k], 5, false),
            2 => vec![s("SREM"), k, self.member()],
            3 => vec![s("SMEMBERS"), k],
            4 => vec![s("SINTER"), k, self.pick(SETS)],
            5 => vec![s("SUNIONSTORE"), self.pick(SETS), k, self.pick(SETS)],
            6 => vec![s("SMOVE"), k, self.pick(SETS), self.member()],
            7 => vec![s("SCARD"), k],
            _ => vec![s("SISMEMBER"), k, self.member()],
        }
    }

    fn zset_command(&mut self) -> Vec<Vec<u8>> {
        let k = self.pick(ZSETS);
        match self.rng.gen_range(0..7) {
            0 | 1 => self.members(vec![s("ZADD"), k], 4, true),
            2 => vec![s("ZINCRBY"), k, self.small(), self.member()],
            3 => vec![s("ZRANGE"), k, s("0"), s("-1"), s("WITHSCORES")],
            4 => vec![s("ZPOPMIN"), k],
            5 => vec![s("ZREM"), k, self.member()],
            _ => vec![s("ZUNIONSTORE"), self.pick(ZSETS), s("2"), k, self.pick(ZSETS)],
        }
    }

    /// A command whose outcome the executor's generator decides (or SCAN).
    fn random_command(&mut self) -> Vec<Vec<u8>> {
        match self.rng.gen_range(0..7) {
            0 => vec![s("SPOP"), self.pick(SETS)],
            1 => vec![s("SPOP"), self.pick(SETS), s("2")],
            2 => vec![s("SRANDMEMBER"), self.pick(SETS), s("-3")],
            3 => vec![s("HRANDFIELD"), self.pick(HASHES), s("2"), s("WITHVALUES")],
            4 => vec![s("ZRANDMEMBER"), self.pick(ZSETS), s("-2"), s("WITHSCORES")],
            5 => vec![s("RANDOMKEY")],
            _ => vec![s("SCAN"), s("0"), s("COUNT"), s("5")],
        }
    }

    /// One command of any family.
    pub fn command(&mut self) -> Vec<Vec<u8>> {
        let roll = self.rng.gen_range(0..100);
        match roll {
            0..=24 => self.string_command(),
            25..=39 => self.hash_command(),
            40..=56 => self.list_command(),
            57..=74 => self.set_command(),
            75..=89 => self.zset_command(),
            90..=98 if self.random_commands => self.random_command(),
            99 if self.flush => vec![s("FLUSHALL")],
            _ => self.string_command(),
        }
    }

    fn protocol(&mut self) -> Protocol {
        if self.rng.gen_bool(0.2) {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        }
    }

    /// The next step; `watched` are the watches recorded so far (a
    /// transaction takes them).
    pub fn next(&mut self, watched: &mut Vec<pmwire_kv_cluster::Watched>) -> Step {
        self.now_ms += self.rng.gen_range(0..250);
        let roll = self.rng.gen_range(0..100);
        if roll < 4 && self.transactions {
            return Step::Watch(self.any_key());
        }
        let protocol = self.protocol();
        let mut entry = match roll {
            4..=13 if self.transactions => {
                let queued: Vec<Vec<Vec<u8>>> = (0..self.rng.gen_range(1..4)).map(|_| self.command()).collect();
                self.proposer.transaction(self.now_ms, protocol, std::mem::take(watched), &queued)
            }
            14..=22 => self.proposer.sweep(self.now_ms, self.rng.gen_range(0..4), self.rng.gen_range(0..8)),
            _ => {
                let args = self.command();
                self.proposer.command(self.now_ms, protocol, &args)
            }
        };
        if self.corrupt && self.rng.gen_bool(0.03) {
            let bit = self.rng.gen_range(0..entry.len() * 8);
            entry[bit / 8] ^= 1 << (bit % 8);
        }
        Step::Entry(entry)
    }
}
