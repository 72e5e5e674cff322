//! WATCH decided by the write index (Redis 7.0's rules), blocking pops,
//! restarts of a persistent keyspace, and snapshots refused.

use crate::durable::Durable;
use pmwire_kv_cluster::{Proposer, RedisMachine, Watched, WatchedState};
use pmwire_keyspace::chunked::ChunkConfig;
use pmwire_keyspace::exec::ServerConfig;
use pmwire_keyspace::store::MemKeyspace;
use pmwire_resp::reply::Protocol;
use pmwire_smr::state::{RestoreError, StateMachine};

fn config() -> ServerConfig {
    ServerConfig { collections: ChunkConfig::tiny(), ..ServerConfig::default() }
}

/// A member and its leader, applying entries in order.
struct Member<K: pmwire_kv_cluster::MachineKeyspace> {
    m: RedisMachine<K>,
    p: Proposer,
    now: u64,
}

impl Member<MemKeyspace> {
    fn new() -> Self {
        Member { m: RedisMachine::in_memory(config()), p: Proposer::with_key(11), now: 1_000 }
    }
}

impl<K: pmwire_kv_cluster::MachineKeyspace> Member<K> {
    fn apply(&mut self, entry: Vec<u8>) -> pmwire_kv_cluster::Applied {
        let index = self.m.applied() + 1;
        self.m.apply(index, &entry)
    }

    fn cmd(&mut self, args: &[&str]) -> String {
        let e = self.p.command(self.now, Protocol::Resp2, args);
        String::from_utf8_lossy(&self.apply(e).reply).into_owned()
    }

    fn exec(&mut self, watched: Vec<Watched>, queued: &[&[&str]]) -> String {
        let queued: Vec<Vec<&str>> = queued.iter().map(|q| q.to_vec()).collect();
        let e = self.p.transaction(self.now, Protocol::Resp2, watched, &queued);
        String::from_utf8_lossy(&self.apply(e).reply).into_owned()
    }

    fn watch(&mut self, key: &str) -> Watched {
        self.m.watch(key.as_bytes(), self.now)
    }
}

const ABORTED: &str = "*-1\r\n";
const RAN: &str = "*1\r\n+OK\r\n";

#[test]
fn watch_aborts_as_on_one_node() {
    let mut t = Member::new();
    t.cmd(&["SET", "k", "1"]);
    // Unchanged: runs.
    let w = t.watch("k");
    assert_eq!(w.state, WatchedState::Live(None));
    assert_eq!(t.exec(vec![w], &[&["SET", "k", "2"]]), RAN);
    // Written after the watch (by anyone): aborts, nothing run.
    let w = t.watch("k");
    t.cmd(&["INCR", "k"]);
    assert_eq!(t.exec(vec![w], &[&["SET", "k", "x"]]), ABORTED);
    assert_eq!(t.cmd(&["GET", "k"]), "$1\r\n3\r\n");
    // Another key written: runs.
    let w = t.watch("k");
    t.cmd(&["SET", "other", "1"]);
    assert_eq!(t.exec(vec![w], &[&["SET", "k", "4"]]), RAN);
    // A write that changes nothing visible still touches it (as Redis).
    let w = t.watch("k");
    t.cmd(&["SET", "k", "4"]);
    assert_eq!(t.exec(vec![w], &[&["SET", "k", "5"]]), ABORTED);
    // A delete of an absent key is no write.
    let w = t.watch("absent");
    assert_eq!(w.state, WatchedState::Absent);
    t.cmd(&["DEL", "absent"]);
    assert_eq!(t.exec(vec![w], &[&["SET", "absent", "1"]]), RAN);
}

#[test]
fn watch_sees_expiry_and_flushes_as_redis_does() {
    let mut t = Member::new();
    // Live at WATCH with a deadline, expired by EXEC: aborts, swept or not.
    t.cmd(&["SET", "e", "1", "PX", "100"]);
    let w = t.watch("e");
    assert_eq!(w.state, WatchedState::Live(Some(1_100)));
    t.now = 1_200;
    assert_eq!(t.exec(vec![w.clone()], &[&["SET", "y", "1"]]), ABORTED);
    let sweep = t.p.sweep(t.now, 10, 10);
    assert_eq!(t.apply(sweep).swept.map(|s| s.expired), Some(1));
    assert_eq!(t.exec(vec![w], &[&["SET", "y", "1"]]), ABORTED);
    // Already expired at WATCH (not yet swept): watched as absent; the
    // sweep's delete is no change.
    t.cmd(&["SET", "f", "1", "PX", "10"]);
    t.now = 1_300;
    let w = t.watch("f");
    assert_eq!(w.state, WatchedState::Absent);
    let sweep = t.p.sweep(t.now, 10, 10);
    assert_eq!(t.apply(sweep).swept.map(|s| s.expired), Some(1));
    assert_eq!(t.exec(vec![w], &[&["SET", "y", "2"]]), RAN);
    // A flush while the key is live aborts; while it is absent, it does not.
    t.cmd(&["SET", "g", "1"]);
    let (live, absent) = (t.watch("g"), t.watch("h"));
    t.cmd(&["FLUSHALL"]);
    assert_eq!(t.exec(vec![live], &[&["SET", "y", "3"]]), ABORTED);
    assert_eq!(t.exec(vec![absent], &[&["SET", "y", "3"]]), RAN);
}

#[test]
fn a_transaction_is_one_entry_with_redis_replies() {
    let mut t = Member::new();
    assert_eq!(
        t.exec(vec![], &[&["SET", "a", "1"], &["INCR", "a"], &["LPUSH", "a", "x"], &["GET", "a"]]),
        "*4\r\n+OK\r\n:2\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n$1\r\n2\r\n"
    );
    // A command refused while queuing aborts the whole transaction.
    assert_eq!(
        t.exec(vec![], &[&["SET", "a", "9"], &["NOSUCH"]]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(t.cmd(&["GET", "a"]), "$1\r\n2\r\n");
    // A blocking pop inside never waits.
    assert_eq!(t.exec(vec![], &[&["BLPOP", "empty", "0"]]), "*1\r\n*-1\r\n");
    // A session command inside is refused, the entry whole.
    let e = t.p.transaction(t.now, Protocol::Resp2, vec![], &[vec!["SET", "a", "7"], vec!["WATCH", "a"]]);
    assert!(t.apply(e).refused.is_some());
    assert_eq!(t.cmd(&["GET", "a"]), "$1\r\n2\r\n");
}

#[test]
fn blocking_pops_wait_and_lists_report_ready_keys() {
    let mut t = Member::new();
    t.cmd(&["PING"]); // the first entry installs the secret
    let e = t.p.command(t.now, Protocol::Resp2, &["BLPOP", "q", "0"]);
    let before = t.m.snapshot();
    let a = t.apply(e);
    assert!(a.blocked);
    assert!(a.reply.is_empty());
    let after_bytes = t.m.snapshot();
    let mut after = pmwire_kv_cluster::snapshot::decode(&after_bytes).unwrap();
    after.state.applied -= 1;
    assert_eq!(after, pmwire_kv_cluster::snapshot::decode(&before).unwrap(), "a wait changes nothing");
    let e = t.p.command(t.now, Protocol::Resp2, &["RPUSH", "q", "x"]);
    assert_eq!(t.apply(e).ready, vec![b"q".to_vec()]);
    // The serving member proposes the waiter's non-blocking form.
    assert_eq!(t.cmd(&["LPOP", "q"]), "$1\r\nx\r\n");
    let e = t.p.command(t.now, Protocol::Resp2, &["BLPOP", "q", "r", "0"]);
    assert!(t.apply(e).blocked);
}

#[test]
fn a_persistent_keyspace_keeps_its_applied_index_and_write_index_across_a_crash() {
    let mut d =
        Member { m: RedisMachine::open(Durable::default(), config()).unwrap(), p: Proposer::with_key(5), now: 1_000 };
    let mut v = Member::new();
    let both = |args: &[&str], d: &mut Member<Durable>, v: &mut Member<MemKeyspace>| {
        let e = d.p.command(d.now, Protocol::Resp2, args);
        let (rd, rv) = (d.apply(e.clone()), v.apply(e));
        assert_eq!(rd, rv);
    };
    both(&["SADD", "s", "a", "b", "c", "d"], &mut d, &mut v);
    both(&["SET", "k", "1"], &mut d, &mut v);
    let w = d.watch("k");
    both(&["SET", "k", "2"], &mut d, &mut v);
    d.m.persist_applied().unwrap();
    both(&["SET", "lost", "1"], &mut d, &mut v); // applied, not persisted: lost in the crash
    let crashed = d.m.keyspace().crash();
    let mut r = RedisMachine::open(crashed, config()).unwrap();
    assert_eq!(r.applied(), 3);
    assert_eq!(r.last_time_ms(), 1_000);
    // It replays what was not persisted, then agrees with the volatile member.
    let lost = d.p.command(1_000, Protocol::Resp2, &["SET", "lost", "1"]);
    r.apply(4, &lost);
    assert_eq!(r.snapshot(), v.m.snapshot(), "the same state after the replay");
    // Its write index came back: the WATCH taken before the crash aborts alike.
    let e = d.p.transaction(1_000, Protocol::Resp2, vec![w], &[vec!["SET", "k", "3"]]);
    let (rr, rv) = (r.apply(5, &e), v.apply(e));
    assert_eq!(rr, rv);
    assert_eq!(rr.reply, b"*-1\r\n");
    // A flush wipes the internal entries; the next persist writes them again.
    let e = d.p.command(1_000, Protocol::Resp2, &["FLUSHALL"]);
    r.apply(6, &e);
    v.apply(e);
    r.persist_applied().unwrap();
    let again = RedisMachine::open(r.keyspace().crash(), config()).unwrap();
    assert_eq!(again.applied(), 6);
    assert_eq!(again.snapshot(), v.m.snapshot());
    assert_eq!(again.writes().len(), v.m.writes().len());
}

#[test]
fn a_corrupt_or_foreign_snapshot_is_refused_and_changes_nothing() {
    let mut t = Member::new();
    t.cmd(&["SADD", "s", "a", "b", "c", "d", "e"]);
    t.cmd(&["SET", "k", "v", "PX", "5"]);
    let snap = t.m.snapshot();
    let mut other = Member::new();
    other.cmd(&["SET", "mine", "1"]);
    let before = other.m.snapshot();
    for bit in (0..snap.len() * 8).step_by(5) {
        let mut bad = snap.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(matches!(other.m.restore(2, &bad), Err(RestoreError::Corrupt(_))), "bit {bit}");
    }
    for n in (0..snap.len()).step_by(3) {
        assert!(other.m.restore(2, &snap[..n]).is_err(), "cut at {n}");
    }
    assert!(other.m.restore(1, &snap).is_err(), "an index before the snapshot's");
    let mut default_limits = RedisMachine::in_memory(ServerConfig::default());
    assert!(default_limits.restore(2, &snap).is_err(), "other collection limits");
    assert_eq!(other.m.snapshot(), before);
    other.m.restore(2, &snap).unwrap();
    assert_eq!(other.m.snapshot(), snap);
    // A replica labels a snapshot with its own applied index, past the
    // machine's when its last entries were not the machine's.
    let mut later = Member::new();
    later.m.restore(5, &snap).unwrap();
    assert_eq!(later.m.applied(), 5);
}
