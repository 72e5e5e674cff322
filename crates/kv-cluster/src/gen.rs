//! Random Redis commands of every family for the machine's tests and the
//! simulation (feature `sim`, test-only): strings and counters, hashes,
//! lists (a blocking pop included), sets, sorted sets (GEO commands on
//! them included), TTLs, and the
//! commands whose outcome the machine's seeded generator decides (SPOP,
//! SRANDMEMBER, HRANDFIELD, ZRANDMEMBER, RANDOMKEY, SCAN). One generator,
//! drawn by [`crate::sim::SimRedis`]'s clients and by the integration
//! tests' entry stream (`tests/it/gen.rs`).
//!
//! Keys never start with `k`: the simulation checks the histories of the
//! keys `k0..` itself, so a command drawn here stays outside them.

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

const STRINGS: &[&str] = &["s0", "s1", "s2", "n0", "n1"];
const HASHES: &[&str] = &["h0", "h1"];
const LISTS: &[&str] = &["l0", "l1"];
const SETS: &[&str] = &["t0", "t1", "t2"];
const ZSETS: &[&str] = &["z0", "z1"];

fn s(v: &str) -> Vec<u8> {
    v.as_bytes().to_vec()
}

/// Draws commands from `rng`.
pub struct Commands<'a> {
    /// The randomness.
    pub rng: &'a mut Xoshiro256PlusPlus,
    /// TTLs (PX, PEXPIRE) are drawn from 1 to this many ms.
    pub ttl_max_ms: u64,
    /// Whether the random commands (SPOP...) and SCAN may be drawn.
    pub random: bool,
    /// Whether FLUSHALL may be drawn.
    pub flush: bool,
}

impl<'a> Commands<'a> {
    /// Every kind drawn but FLUSHALL; TTLs up to `ttl_max_ms`.
    pub fn new(rng: &'a mut Xoshiro256PlusPlus, ttl_max_ms: u64) -> Commands<'a> {
        assert!(ttl_max_ms >= 2);
        Commands { rng, ttl_max_ms, random: true, flush: false }
    }

    fn pick(&mut self, from: &[&str]) -> Vec<u8> {
        s(from[self.rng.gen_range(0..from.len())])
    }

    fn member(&mut self) -> Vec<u8> {
        format!("m{}", self.rng.gen_range(0..12)).into_bytes()
    }

    /// A small integer, -3 to 5.
    pub fn small(&mut self) -> Vec<u8> {
        self.rng.gen_range(-3i64..6).to_string().into_bytes()
    }

    fn ttl_ms(&mut self) -> Vec<u8> {
        self.rng.gen_range(1..self.ttl_max_ms).to_string().into_bytes()
    }

    /// A key of any family.
    pub fn any_key(&mut self) -> Vec<u8> {
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
        match self.rng.gen_range(0..20) {
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
            17 => vec![s("SETBIT"), k, self.rng.gen_range(0..200u32).to_string().into_bytes(), s(if self.rng.gen_bool(0.7) { "1" } else { "0" })],
            18 => vec![s("BITOP"), s("OR"), k, self.pick(STRINGS), self.any_key()],
            _ => vec![s("INCRBYFLOAT"), k, s("1.5")],
        }
    }

    fn hash_command(&mut self) -> Vec<Vec<u8>> {
        let k = self.pick(HASHES);
        match self.rng.gen_range(0..7) {
            0 | 1 => self.members(vec![s("HSET"), k], 4, true),
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
        match self.rng.gen_range(0..10) {
            0 | 1 => self.members(vec![s("ZADD"), k], 4, true),
            2 => vec![s("ZINCRBY"), k, self.small(), self.member()],
            3 => vec![s("ZRANGE"), k, s("0"), s("-1"), s("WITHSCORES")],
            4 => vec![s("ZPOPMIN"), k],
            5 => vec![s("ZREM"), k, self.member()],
            6 => vec![s("ZUNIONSTORE"), self.pick(ZSETS), s("2"), k, self.pick(ZSETS)],
            _ => self.geo_command(k),
        }
    }

    /// A GEO command on a sorted set: points on a grid of 0.1 degrees (so
    /// distances tie), searches that store into another sorted set (units
    /// in miles: no argument starts with `k`).
    fn geo_command(&mut self, k: Vec<u8>) -> Vec<Vec<u8>> {
        let mut grid = |centre: f64| format!("{:.1}", centre + f64::from(self.rng.gen_range(0..5u8)) / 10.0).into_bytes();
        let (lon, lat) = (grid(13.0), grid(37.0));
        match self.rng.gen_range(0..4) {
            0 | 1 => vec![s("GEOADD"), k, lon, lat, self.member()],
            2 => vec![s("GEORADIUS"), k, lon, lat, s("20"), s("mi"), s("STOREDIST"), self.pick(ZSETS), s("DESC"), s("COUNT"), s("3")],
            _ => vec![s("GEOSEARCH"), k, s("FROMMEMBER"), self.member(), s("BYBOX"), s("25"), s("20"), s("mi"), s("ASC"), s("WITHDIST")],
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

    /// One command of any family (a string command where a random one or
    /// FLUSHALL is drawn but not allowed).
    pub fn command(&mut self) -> Vec<Vec<u8>> {
        match self.rng.gen_range(0..100) {
            0..=24 => self.string_command(),
            25..=39 => self.hash_command(),
            40..=56 => self.list_command(),
            57..=74 => self.set_command(),
            75..=89 => self.zset_command(),
            90..=98 if self.random => self.random_command(),
            99 if self.flush => vec![s("FLUSHALL")],
            _ => self.string_command(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_family_is_drawn_and_no_checked_key() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let mut g = Commands::new(&mut rng, 300);
        let names: std::collections::BTreeSet<Vec<u8>> = (0..5_000)
            .map(|_| g.command())
            .inspect(|c| assert!(c[1..].iter().all(|a| !a.starts_with(b"k")), "{c:?}"))
            .map(|c| c[0].clone())
            .collect();
        for n in ["SET", "HSET", "RPUSH", "BLPOP", "SADD", "ZADD", "GEOADD", "GEORADIUS", "GEOSEARCH", "SPOP", "SCAN"] {
            assert!(names.contains(n.as_bytes()), "{n} never drawn");
        }
        assert!(!names.contains(&b"FLUSHALL"[..]), "FLUSHALL only when asked");
    }
}
