//! A random stream of entries: commands of every family (the random ones
//! included; drawn by `pmwire_kv_cluster::gen`, the simulation's generator
//! too), TTLs that run out as the time moves, transactions with and
//! without watches, sweeps, and now and then a corrupted entry.

use pmwire_kv_cluster::gen::Commands;
use pmwire_kv_cluster::Proposer;
use pmwire_resp::reply::Protocol;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

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

    /// The shared command generator (`pmwire_kv_cluster::gen`) on this
    /// stream's randomness.
    fn commands(&mut self) -> Commands<'_> {
        Commands { rng: &mut self.rng, ttl_max_ms: 2_000, random: self.random_commands, flush: self.flush }
    }

    /// One command of any family.
    pub fn command(&mut self) -> Vec<Vec<u8>> {
        self.commands().command()
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
            return Step::Watch(self.commands().any_key());
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
