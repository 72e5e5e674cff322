//! The differential test against redis-server run through a 3-member
//! cluster (issue 26, Tests): the seeded random commands of
//! `crates/keyspace/tests/redis_diff.rs` (its generator, comparison rules
//! and run, shared from `crates/keyspace/tests/diff/`) go to redis-server
//! and to three real `pmwire kv --cluster` members, one connection to each;
//! outside a transaction every command goes to the next member in turn
//! (leader, follower, follower: a follower forwards writes and serves
//! linearizable reads, so a write answered by one member is read back
//! through another at once), a transaction stays on the member that began
//! it. Replies must be equal byte for byte, in RESP2 and RESP3; what is
//! random or read from the clock is compared as the single-node test
//! compares it (SPOP, SRANDMEMBER, HRANDFIELD, ZRANDMEMBER by shape, the
//! TTL family within a tolerance, RANDOMKEY by shape).
//!
//! Handled apart from the single-node run: HELLO goes to every connection
//! (each keeps the protocol), and its reply is compared, from the leader's
//! connection, with the `id` field left out (a member numbers its own
//! connections; the executor in `redis_diff.rs` takes redis-server's id).
//! Not generated at all, here as there: CLIENT, DEBUG, CONFIG, WATCH (the
//! generator does not produce them). Blocking pops are generated: here
//! they really block, for their short timeouts, on the member that
//! received them (a forwarded one waits on the leader). The tiny chunking
//! limits and the interleaved chunk collection of the single-node run are
//! the executor's; members run with their defaults.
//!
//! `PMWIRE_CLUSTER_DIFF_COMMANDS` sets how many commands (CI: 3,000),
//! `PMWIRE_DIFF_SEED` the seed (printed). Fails, saying why, when
//! redis-server is not installed.

#[path = "../../keyspace/tests/diff/mod.rs"]
mod diff;
mod resp;
mod cluster;

use cluster::Cluster;
use diff::{redis_version, start_redis, Conn, Target};
use pmwire_resp::client::encode_request;

/// One connection to each member; commands go to `active`.
struct Members {
    conns: Vec<Conn>,
    /// Member indexes, the leader first.
    order: Vec<usize>,
    /// Index into `order` of the member the next command goes to.
    active: usize,
    /// Commands each member received (by member index).
    sent: Vec<u64>,
}

/// Whether `request` (as `encode_request` writes it) is a HELLO.
fn is_hello(request: &[u8]) -> bool {
    let Some(start) = request.windows(2).position(|w| w == b"\r\n") else { return false };
    request[start + 2..].starts_with(b"$5\r\n") && request.len() >= start + 11 && request[start + 6..start + 11].eq_ignore_ascii_case(b"HELLO")
}

impl Target for Members {
    fn call(&mut self, request: &[u8]) -> (Vec<u8>, bool) {
        if is_hello(request) {
            // Every connection keeps the protocol; the leader's reply is compared.
            let leader = self.order[0];
            let mut replies: Vec<Vec<u8>> = self.conns.iter_mut().map(|c| c.call(request)).collect();
            for (i, r) in replies.iter().enumerate() {
                assert_eq!(r.first(), replies[leader].first(), "HELLO on member {} answered {:?}", i + 1, String::from_utf8_lossy(r));
            }
            return (replies.swap_remove(leader), false);
        }
        let m = self.order[self.active];
        self.sent[m] += 1;
        (self.conns[m].call(request), false)
    }
}

/// Ticks of 30 ms, as `kv_cluster.rs`'s follower test: thousands of round
/// trips through followers ride out a loaded machine without an election.
fn slow_ticks() -> Vec<String> {
    vec!["--tick-ms".into(), "30".into()]
}

#[test]
fn random_commands_through_three_members_match_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let count = diff::env_u64("PMWIRE_CLUSTER_DIFF_COMMANDS", 3_000);
    let seed = diff::seed();
    println!("cluster differential test: seed {seed} (PMWIRE_DIFF_SEED={seed} replays it), {count} commands");
    let cluster = Cluster::start_with(|_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let order: Vec<usize> = std::iter::once(l).chain((0..3).filter(|&i| i != l)).collect();
    let mut req = Vec::new();
    encode_request(&[&b"FLUSHALL"[..]], &mut req);
    // The leader probe's key goes; redis-server starts empty too.
    assert_eq!(Conn::new(cluster.resp[l].port()).call(&req), b"+OK\r\n");
    assert_eq!(Conn::new(redis.port).call(&req), b"+OK\r\n");
    let conns = cluster.resp.iter().map(|a| Conn::new(a.port())).collect();
    let members = Members { conns, order, active: 0, sent: vec![0; 3] };
    let mut d = diff::Differ::new(Conn::new(redis.port), members);
    d.ids_differ = true;
    let mut g = diff::gen::Gen::new(seed);
    let failures = diff::run_random(&mut d, &mut g, count, |d, i, in_multi| {
        if !in_multi {
            d.target.active = (i % 3) as usize;
        }
    });
    println!("redis-server {version}; commands per member (leader first): {:?}", d.target.order.iter().map(|&m| d.target.sent[m]).collect::<Vec<_>>());
    for &m in &d.target.order {
        assert!(d.target.sent[m] > count / 6, "member {} received {} of {count} commands", m + 1, d.target.sent[m]);
    }
    assert!(failures.is_empty(), "seed {seed}: {} differences (first 20):\n{}", failures.len(), failures.join("\n"));
}

/// The request matcher finds HELLO and only HELLO.
#[test]
fn hello_is_recognised() {
    let enc = |args: &[&[u8]]| {
        let mut r = Vec::new();
        encode_request(args, &mut r);
        r
    };
    assert!(is_hello(&enc(&[b"HELLO", b"3"])));
    assert!(is_hello(&enc(&[b"hello"])));
    assert!(!is_hello(&enc(&[b"HELLX", b"3"])));
    assert!(!is_hello(&enc(&[b"HELL"])));
    assert!(!is_hello(&enc(&[b"GET", b"HELLO"])));
}
