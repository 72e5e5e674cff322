//! The leader's side of an entry: [`Proposer`] stamps each with a time that
//! never goes back and a fresh random seed, and encodes it.
//!
//! Seeds are SipHash of a counter under a key drawn from the OS when the
//! proposer is made ([`crate::prf`]): a client sees neither, and cannot
//! predict the next entry's draws or the secret the first entry installs.

use pmwire_resp::reply::Protocol;

use std::borrow::Cow;

use crate::entry::{Entry, Kind, Watched};
use crate::extent::{Arg, ExtEntry, ExtKind, PieceHead, StreamId, PIECE_NAME};
use crate::prf;

/// Stamps and encodes entries on the member that proposes them.
#[derive(Debug, Clone)]
pub struct Proposer {
    last_time_ms: u64,
    key: u64,
    counter: u64,
}

impl Default for Proposer {
    fn default() -> Self {
        Proposer::new()
    }
}

impl Proposer {
    /// A proposer whose seeds are keyed by the OS's randomness.
    pub fn new() -> Self {
        use std::hash::BuildHasher;
        let key = std::collections::hash_map::RandomState::new().hash_one(0x6b76_2d63_6c75_7374u64);
        Proposer::with_key(key)
    }

    /// A proposer with a fixed key (tests and simulations: a run is a
    /// function of its seed).
    pub fn with_key(key: u64) -> Self {
        Proposer { last_time_ms: 0, key, counter: 0 }
    }

    /// The applied state's last entry time (a new leader calls it with
    /// [`crate::RedisMachine::last_time_ms`]): no entry is stamped before it.
    pub fn observe(&mut self, time_ms: u64) {
        self.last_time_ms = self.last_time_ms.max(time_ms);
    }

    /// The time and seed of the next entry, at the proposer's clock `now_ms`.
    fn stamp(&mut self, now_ms: u64) -> (u64, u64) {
        self.last_time_ms = self.last_time_ms.max(now_ms);
        self.counter += 1;
        (self.last_time_ms, prf::derive(self.key, self.counter))
    }

    /// An entry of one command.
    pub fn command<A: AsRef<[u8]>>(&mut self, now_ms: u64, protocol: Protocol, args: &[A]) -> Vec<u8> {
        self.commands(now_ms, protocol, Kind::Command, Vec::new(), std::slice::from_ref(&args))
    }

    /// An entry of a transaction: its queued commands (each as its
    /// arguments) and the keys its session watched.
    pub fn transaction<A: AsRef<[u8]>>(
        &mut self,
        now_ms: u64,
        protocol: Protocol,
        watched: Vec<Watched>,
        queued: &[Vec<A>],
    ) -> Vec<u8> {
        self.commands(now_ms, protocol, Kind::Exec, watched, queued)
    }

    /// An entry of `queued` commands, each encoded as RESP multibulk
    /// straight into the entry.
    fn commands<Q: AsRef<[A]>, A: AsRef<[u8]>>(&mut self, now_ms: u64, protocol: Protocol, kind: Kind, watched: Vec<Watched>, queued: &[Q]) -> Vec<u8> {
        let len = queued.iter().map(|args| multibulk_len(args.as_ref())).sum();
        let (time_ms, seed) = self.stamp(now_ms);
        let e = Entry {
            kind,
            protocol,
            time_ms,
            seed,
            count: u32::try_from(queued.len()).expect("a transaction's commands fit u32"),
            expire_budget: 0,
            garbage_budget: 0,
            watched,
            commands: &[],
        };
        e.encode_with(len, |out| queued.iter().for_each(|args| pmwire_resp::client::encode_request(args.as_ref(), out)))
    }

    /// An extent-form entry of one command ([`crate::extent`]): its
    /// arguments inline or named by their pool extents.
    pub fn command_extents(&mut self, now_ms: u64, protocol: Protocol, args: Vec<Arg<'_>>) -> Vec<u8> {
        let (time_ms, seed) = self.stamp(now_ms);
        ExtEntry { kind: ExtKind::Command, protocol, time_ms, seed, args }.encode()
    }

    /// A new streamed value's name: the proposer's time and a fresh draw.
    pub fn stream_id(&mut self, now_ms: u64) -> StreamId {
        let (time_ms, nonce) = self.stamp(now_ms);
        StreamId { time_ms, nonce }
    }

    /// A piece entry ([`ExtKind::Piece`]): piece `head` of a streamed
    /// value, its bytes inline or named by their pool extents.
    pub fn piece(&mut self, now_ms: u64, head: PieceHead, value: Arg<'_>) -> Vec<u8> {
        let (time_ms, seed) = self.stamp(now_ms);
        let head = head.encode();
        let args = vec![Arg::Inline(Cow::Borrowed(PIECE_NAME)), Arg::Inline(Cow::Borrowed(&head[..])), value];
        ExtEntry { kind: ExtKind::Piece, protocol: Protocol::Resp2, time_ms, seed, args }.encode()
    }

    /// A sweep entry: at most `expire_budget` expired keys and
    /// `garbage_budget` dead chunks deleted at the entry's time.
    pub fn sweep(&mut self, now_ms: u64, expire_budget: u32, garbage_budget: u32) -> Vec<u8> {
        let (time_ms, seed) = self.stamp(now_ms);
        let e = Entry {
            kind: Kind::Sweep,
            protocol: Protocol::Resp2,
            time_ms,
            seed,
            count: 0,
            expire_budget,
            garbage_budget,
            watched: Vec::new(),
            commands: &[],
        };
        e.encode()
    }
}

/// The bytes `pmwire_resp::client::encode_request` writes for `args`:
/// `*N\r\n`, then `$LEN\r\nARG\r\n` per argument.
fn multibulk_len<A: AsRef<[u8]>>(args: &[A]) -> usize {
    let digits = |n: usize| n.checked_ilog10().unwrap_or(0) as usize + 1;
    3 + digits(args.len()) + args.iter().map(|a| a.as_ref().len()).map(|n| 5 + digits(n) + n).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_never_goes_back_and_seeds_differ() {
        let mut p = Proposer::with_key(1);
        p.observe(500);
        let a = p.command(100, Protocol::Resp2, &["PING"]);
        let a = Entry::decode(&a).unwrap();
        assert_eq!(a.time_ms, 500);
        let (a_time, a_seed) = (a.time_ms, a.seed);
        let b = p.command(900, Protocol::Resp2, &["PING"]);
        let b = Entry::decode(&b).unwrap();
        assert_eq!(b.time_ms, 900);
        assert_ne!(b.seed, a_seed);
        let c = p.sweep(800, 10, 10);
        assert_eq!(Entry::decode(&c).unwrap().time_ms, 900);
        assert!(a_time <= b.time_ms);
        assert_ne!(Proposer::new().key, Proposer::new().key, "keys from the OS");
    }

    #[test]
    fn the_multibulk_length_is_what_the_encoder_writes() {
        for args in [vec![&b""[..]], vec![&b"SET"[..], b"k", &[7u8; 1000][..]], vec![&[1u8; 9][..]; 12]] {
            let mut out = Vec::new();
            pmwire_resp::client::encode_request(&args, &mut out);
            assert_eq!(multibulk_len(&args), out.len());
        }
    }
}
