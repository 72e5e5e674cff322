//! Blocking pops (BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP), XREAD and
//! XREADGROUP with BLOCK (woken by XADD, or unblocked by DEL, SET or FLUSHALL), with several
//! real connections, and WATCH
//! of a key that expires before EXEC: one scripted scenario run against `pmwire kv` and
//! against redis-server 7.0, compared reply for reply; and a served pop's durability.
//!
//! The script never relies on timing for order: after a client sends a blocking command it
//! waits until the server reports it blocked (`INFO clients`' `blocked_clients`), so the
//! push that follows surely finds it waiting. Timeouts are short (0.1 s) and only their
//! replies are checked.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pmwire_kv_server::client::RespClient;
use pmwire_kv_server::{KvServer, Mode};
use pmwire_resp::client::Value;

use crate::common::{options, start, start_with, Pool, RedisServer, MODES};

/// One step of a scenario over numbered connections.
enum Step {
    /// Send a command and record its reply.
    Call(usize, &'static [&'static str]),
    /// Send a command, record nothing (a reply that names the server: HELLO).
    Quiet(usize, &'static [&'static str]),
    /// Send a command without reading its reply.
    Send(usize, &'static [&'static str]),
    /// Read and record the next reply.
    Read(usize),
    /// Wait until the server reports this many blocked clients.
    Blocked(usize),
    /// Close the connection (it is opened again on its next use).
    Close(usize),
    /// Sleep (only to let a key's deadline pass).
    Sleep(u64),
    /// Ask the connection its CLIENT ID (kept, not recorded: the servers number apart).
    RememberId(usize),
    /// `CLIENT UNBLOCK <id of the second> [reason]` from the first; the reply recorded.
    Unblock(usize, usize, &'static [&'static str]),
}

use Step::*;

const SCENARIO: &[Step] = &[
    Call(0, &["FLUSHALL"]),
    // Block, then a push from another client serves it; the rest stays.
    Send(0, &["BLPOP", "q", "0"]),
    Blocked(1),
    Call(1, &["RPUSH", "q", "x", "y"]),
    Read(0),
    Call(1, &["LRANGE", "q", "0", "-1"]),
    // Two blocked clients are served in the order they blocked.
    Send(0, &["BLPOP", "f", "0"]),
    Blocked(1),
    Send(2, &["BLPOP", "f", "0"]),
    Blocked(2),
    Call(1, &["RPUSH", "f", "1", "2", "3"]),
    Read(0),
    Read(2),
    Call(1, &["LRANGE", "f", "0", "-1"]),
    // A key pushed while one waits on several: served from the key that became ready.
    Send(0, &["BRPOP", "m1", "m2", "m1", "0"]),
    Blocked(1),
    Call(1, &["LPUSH", "m2", "a", "b"]),
    Read(0),
    // One element for two waiters: the first takes it, the second waits on.
    Send(0, &["BRPOP", "one", "0"]),
    Blocked(1),
    Send(2, &["BRPOP", "one", "0"]),
    Blocked(2),
    Call(1, &["RPUSH", "one", "first"]),
    Read(0),
    Blocked(1),
    Call(1, &["RPUSH", "one", "second"]),
    Read(2),
    // BLMPOP served with its count, from the key that became ready; LMPOP at once.
    Send(0, &["BLMPOP", "0", "2", "m3", "m4", "RIGHT", "COUNT", "2"]),
    Blocked(1),
    Call(1, &["RPUSH", "m4", "a", "b", "c"]),
    Read(0),
    Call(1, &["LMPOP", "2", "m3", "m4", "LEFT", "COUNT", "5"]),
    Call(1, &["LMPOP", "1", "m4", "LEFT"]),
    Send(0, &["BLMPOP", "0.1", "1", "m4", "LEFT"]),
    Read(0),
    // CLIENT UNBLOCK ends a wait as a time-out or with an error; 0 for one not waiting.
    RememberId(2),
    Send(2, &["BLPOP", "cu", "0"]),
    Blocked(1),
    Unblock(1, 2, &[]),
    Read(2),
    Send(2, &["BLMOVE", "cu", "x", "LEFT", "LEFT", "0"]),
    Blocked(1),
    Unblock(1, 2, &["error"]),
    Read(2),
    Blocked(0),
    Unblock(1, 2, &["TIMEOUT"]),
    Send(2, &["BLPOP", "cu", "0"]),
    Blocked(1),
    Call(1, &["RPUSH", "cu", "after"]),
    Read(2),
    Call(1, &["CLIENT", "UNBLOCK", "x"]),
    Call(1, &["CLIENT", "UNBLOCK", "1", "FOO"]),
    Call(1, &["CLIENT", "UNBLOCK", "1", "timeout", "extra"]),
    Call(1, &["CLIENT", "UNBLOCK", "-1", "error"]),
    // Time-outs answer the null array, in RESP2 and RESP3, for every blocking command.
    Send(0, &["BLPOP", "t", "0.1"]),
    Read(0),
    Send(0, &["BLMOVE", "t", "u", "LEFT", "LEFT", "0.1"]),
    Read(0),
    // A fraction of a millisecond is rounded up to one (Redis 7.0's `ceill`), not to 0 (for ever).
    Send(0, &["BLPOP", "t", "0.001"]),
    Read(0),
    Send(0, &["BRPOP", "t", "1e-5"]),
    Read(0),
    Quiet(0, &["HELLO", "3"]),
    Send(0, &["BRPOP", "t", "0.1"]),
    Read(0),
    Send(0, &["BRPOPLPUSH", "t", "u", "0.1"]),
    Read(0),
    Send(0, &["BLPOP", "r3", "0"]),
    Blocked(1),
    Call(1, &["RPUSH", "r3", "resp3"]),
    Read(0),
    Quiet(0, &["HELLO", "2"]),
    // BLMOVE: the move is one command; its destination serves the next waiter at once.
    Send(2, &["BLPOP", "dst", "0"]),
    Blocked(1),
    Send(0, &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"]),
    Blocked(2),
    Call(1, &["LPUSH", "src", "v"]),
    Read(0),
    Read(2),
    Call(1, &["EXISTS", "src", "dst"]),
    // A blocked BLMOVE whose destination is no list gets WRONGTYPE and leaves the source.
    Send(0, &["BRPOPLPUSH", "s2", "str2", "0"]),
    Blocked(1),
    Call(1, &["SET", "str2", "x"]),
    Call(1, &["RPUSH", "s2", "kept"]),
    Read(0),
    Call(1, &["LRANGE", "s2", "0", "-1"]),
    // A client that disconnects while blocked takes nothing.
    Send(3, &["BLPOP", "dq", "0"]),
    Blocked(1),
    Close(3),
    Blocked(0),
    Call(1, &["RPUSH", "dq", "stays"]),
    Call(1, &["LRANGE", "dq", "0", "-1"]),
    // Inside MULTI a blocking command does not block.
    Call(0, &["MULTI"]),
    Call(0, &["BLPOP", "none", "0"]),
    Call(0, &["BRPOPLPUSH", "none", "x", "0"]),
    Call(0, &["BLMOVE", "none", "x", "LEFT", "LEFT", "0"]),
    Call(0, &["RPUSH", "inmulti", "1"]),
    Call(0, &["BLPOP", "inmulti", "0"]),
    Call(0, &["EXEC"]),
    // Wrong types, bad timeouts, and a list with elements answer at once.
    Call(1, &["SET", "str", "1"]),
    Call(0, &["BLPOP", "nokey", "str", "0"]),
    Call(0, &["BLMOVE", "str", "x", "LEFT", "LEFT", "0"]),
    Call(0, &["BLPOP", "k", "abc"]),
    Call(0, &["BLPOP", "k", "-1"]),
    Call(0, &["BLPOP", "k", "inf"]),
    Call(0, &["BLMOVE", "k", "x", "UP", "LEFT", "abc"]),
    Call(0, &["BLPOP", "k"]),
    Call(1, &["RPUSH", "i", "1", "2"]),
    Call(0, &["BLPOP", "none", "i", "0"]),
    Call(0, &["BRPOP", "i", "0"]),
    Call(0, &["EXISTS", "i"]),
    // The pipeline behind a blocked command waits for it.
    Send(0, &["BLPOP", "p", "0"]),
    Send(0, &["PING"]),
    Blocked(1),
    Call(1, &["RPUSH", "p", "z"]),
    Read(0),
    Read(0),
    // The pusher's next command sees the element already taken.
    Send(0, &["BLPOP", "g", "0"]),
    Blocked(1),
    Send(1, &["RPUSH", "g", "1"]),
    Send(1, &["LLEN", "g"]),
    Read(1),
    Read(1),
    Read(0),
    // Pushes inside EXEC serve after it; RENAME onto a waited key serves too.
    Send(0, &["BLPOP", "e", "0"]),
    Blocked(1),
    Call(1, &["MULTI"]),
    Call(1, &["RPUSH", "e", "a"]),
    Call(1, &["RPUSH", "e", "b"]),
    Call(1, &["LLEN", "e"]),
    Call(1, &["EXEC"]),
    Read(0),
    Call(1, &["LRANGE", "e", "0", "-1"]),
    Send(0, &["BLPOP", "r", "0"]),
    Blocked(1),
    Call(1, &["RPUSH", "tmp", "moved"]),
    Call(1, &["RENAME", "tmp", "r"]),
    Read(0),
    // WATCH: a key live at WATCH that expires before EXEC aborts it, accessed or not...
    Call(0, &["SET", "w", "v", "PX", "100"]),
    Call(0, &["WATCH", "w"]),
    Sleep(300),
    Call(0, &["MULTI"]),
    Call(0, &["SET", "x", "1"]),
    Call(0, &["EXEC"]),
    Call(0, &["SET", "w", "v", "PX", "100"]),
    Call(0, &["WATCH", "w"]),
    Sleep(300),
    Call(1, &["GET", "w"]),
    Call(0, &["MULTI"]),
    Call(0, &["SET", "x", "2"]),
    Call(0, &["EXEC"]),
    // ... a key already expired at WATCH does not, unless it is written again.
    Call(0, &["SET", "w", "v", "PX", "50"]),
    Sleep(200),
    Call(0, &["WATCH", "w"]),
    Call(0, &["GET", "w"]),
    Call(0, &["MULTI"]),
    Call(0, &["SET", "x", "3"]),
    Call(0, &["EXEC"]),
    Call(0, &["SET", "w", "v", "PX", "50"]),
    Sleep(200),
    Call(0, &["WATCH", "w"]),
    Call(1, &["SET", "w", "again"]),
    Call(0, &["MULTI"]),
    Call(0, &["SET", "x", "4"]),
    Call(0, &["EXEC"]),
    // An unwatched key's expiry changes nothing.
    Call(0, &["SET", "w", "v"]),
    Call(0, &["SET", "other", "v", "PX", "50"]),
    Call(0, &["WATCH", "w"]),
    Sleep(200),
    Call(1, &["GET", "other"]),
    Call(0, &["MULTI"]),
    Call(0, &["SET", "x", "5"]),
    Call(0, &["EXEC"]),
    Call(0, &["GET", "x"]),
    // XREAD BLOCK: a waiter on `$` is served by the next XADD, with that stream's entries.
    Call(1, &["XADD", "st", "1-0", "f", "v"]),
    Send(0, &["XREAD", "BLOCK", "0", "STREAMS", "st", "st2", "$", "$"]),
    Blocked(1),
    Call(1, &["XADD", "st2", "5-0", "g", "w"]),
    Read(0),
    // Two waiters beyond different IDs: an entry between them serves the first alone.
    Send(0, &["XREAD", "BLOCK", "0", "STREAMS", "st", "1-0"]),
    Blocked(1),
    Send(2, &["XREAD", "BLOCK", "0", "COUNT", "1", "STREAMS", "st", "3-0"]),
    Blocked(2),
    Call(1, &["XADD", "st", "2-0", "f", "x"]),
    Read(0),
    Blocked(1),
    Call(1, &["XADD", "st", "4-0", "f", "y", "h", "z"]),
    Read(2),
    // Its time runs out: the null array; inside EXEC it answers at once.
    Call(0, &["XREAD", "BLOCK", "50", "STREAMS", "st", "$"]),
    Call(0, &["MULTI"]),
    Call(0, &["XREAD", "BLOCK", "0", "STREAMS", "st", "$"]),
    Call(0, &["EXEC"]),
    Call(0, &["XREAD", "STREAMS", "st", "st2", "0", "0"]),
    // XREADGROUP BLOCK: served by the next XADD past the group's last ID
    // (the entry joins the waiter's PEL); two waiters in one group get one
    // entry each; XGROUP DESTROY answers a waiter NOGROUP, DEL UNBLOCKED.
    Call(1, &["XGROUP", "CREATE", "gs", "g", "$", "MKSTREAM"]),
    Send(0, &["XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "gs", ">"]),
    Blocked(1),
    Send(2, &["XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "BLOCK", "0", "STREAMS", "gs", ">"]),
    Blocked(2),
    Call(1, &["XADD", "gs", "1-0", "f", "v"]),
    Read(0),
    Blocked(1),
    Call(1, &["XADD", "gs", "2-0", "f", "w"]),
    Read(2),
    Call(1, &["XPENDING", "gs", "g"]),
    Send(0, &["XREADGROUP", "GROUP", "g", "alice", "NOACK", "BLOCK", "0", "STREAMS", "gs", ">"]),
    Blocked(1),
    Call(1, &["XGROUP", "DESTROY", "gs", "g"]),
    Read(0),
    Call(1, &["XGROUP", "CREATE", "gs", "h", "$"]),
    Send(2, &["XREADGROUP", "GROUP", "h", "bob", "BLOCK", "0", "STREAMS", "gs", ">"]),
    Blocked(1),
    Call(1, &["DEL", "gs"]),
    Read(2),
    Call(1, &["XGROUP", "CREATE", "gs", "h", "$", "MKSTREAM"]),
    Call(0, &["XREADGROUP", "GROUP", "h", "bob", "BLOCK", "50", "STREAMS", "gs", ">"]),
    // SET over the stream answers the waiter UNBLOCKED; FLUSHALL too, while a
    // plain XREAD waits on and is served by the next XADD.
    Send(0, &["XREADGROUP", "GROUP", "h", "bob", "BLOCK", "0", "STREAMS", "gs", ">"]),
    Blocked(1),
    Call(1, &["SET", "gs", "v"]),
    Read(0),
    Call(1, &["XGROUP", "CREATE", "fs", "g", "$", "MKSTREAM"]),
    Send(0, &["XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "fs", ">"]),
    Blocked(1),
    Send(2, &["XREAD", "BLOCK", "0", "STREAMS", "fx", "$"]),
    Blocked(2),
    Call(1, &["FLUSHALL"]),
    Read(0),
    Blocked(1),
    Call(1, &["XADD", "fx", "1-0", "f", "v"]),
    Read(2),
    // BZPOPMIN, BZMPOP: served by ZADD in the order they blocked, the
    // second from the key made ready, with its count.
    Send(0, &["BZPOPMIN", "bz", "0"]),
    Blocked(1),
    Send(2, &["BZMPOP", "0", "2", "bz2", "bz", "MAX", "COUNT", "2"]),
    Blocked(2),
    Call(1, &["ZADD", "bz", "1", "a", "2", "b", "3", "c", "4", "d"]),
    Read(0),
    Read(2),
    Call(1, &["ZRANGE", "bz", "0", "-1", "WITHSCORES"]),
    // One member for two waiters: the first takes it; ZUNIONSTORE serves the second.
    Send(0, &["BZPOPMAX", "bz3", "0"]),
    Blocked(1),
    Send(2, &["BZPOPMIN", "bz3", "0"]),
    Blocked(2),
    Call(1, &["ZADD", "bz3", "5", "x"]),
    Read(0),
    Blocked(1),
    Call(1, &["ZUNIONSTORE", "bz3", "1", "bz"]),
    Read(2),
    Call(1, &["EXISTS", "bz3"]),
    // A list at the key serves no sorted-set waiter; a sorted set then does.
    Send(0, &["BZPOPMIN", "bl", "0"]),
    Blocked(1),
    Call(1, &["RPUSH", "bl", "v"]),
    Blocked(1),
    Call(1, &["DEL", "bl"]),
    Call(1, &["ZADD", "bl", "1.5", "m"]),
    Read(0),
    // Time-outs, RESP3's double, sets with members at once, wrong types, MULTI.
    Send(0, &["BZMPOP", "0.1", "1", "none", "MIN"]),
    Read(0),
    Quiet(0, &["HELLO", "3"]),
    Send(0, &["BZPOPMAX", "r3z", "0"]),
    Blocked(1),
    Call(1, &["ZADD", "r3z", "2.5", "m", "3.5", "n"]),
    Read(0),
    Call(0, &["BZMPOP", "0", "1", "r3z", "MIN"]),
    Send(0, &["BZPOPMIN", "none", "0.1"]),
    Read(0),
    Quiet(0, &["HELLO", "2"]),
    Call(1, &["ZADD", "zn", "1", "a", "2", "b"]),
    Call(0, &["BZPOPMAX", "none", "zn", "0"]),
    Call(0, &["BZMPOP", "0", "2", "none", "zn", "MIN", "COUNT", "5"]),
    Call(1, &["SET", "zstr", "1"]),
    Call(0, &["BZPOPMIN", "zstr", "0"]),
    Call(0, &["BZMPOP", "0", "1", "zstr", "MAX"]),
    Call(0, &["BZMPOP", "0", "0", "zstr", "MAX"]),
    Call(0, &["BZPOPMIN", "z", "-1"]),
    Call(0, &["MULTI"]),
    Call(0, &["BZPOPMIN", "none", "0"]),
    Call(0, &["BZMPOP", "0", "1", "none", "MAX"]),
    Call(0, &["EXEC"]),
];

/// The number `INFO clients` reports as `blocked_clients`.
fn blocked_clients(control: &mut RespClient) -> usize {
    let info = match control.call(&["INFO", "clients"]).expect("INFO") {
        Value::Bulk(b) => b,
        other => panic!("INFO answered {other:?}"),
    };
    let text = String::from_utf8_lossy(&info);
    let line = text.lines().find_map(|l| l.strip_prefix("blocked_clients:")).expect("blocked_clients in INFO");
    line.trim().parse().expect("a count")
}

/// Runs the scenario against `addr`: the recorded replies, each with its step.
fn run(addr: SocketAddr) -> Vec<(usize, Value)> {
    let mut clients: Vec<Option<RespClient>> = (0..4).map(|_| None).collect();
    let mut control = RespClient::connect(addr).expect("connect");
    let mut said = Vec::new();
    let mut ids = [0i64; 4];
    for (i, step) in SCENARIO.iter().enumerate() {
        fn client(clients: &mut [Option<RespClient>], addr: SocketAddr, c: usize) -> &mut RespClient {
            clients[c].get_or_insert_with(|| RespClient::connect(addr).expect("connect"))
        }
        match *step {
            Call(c, args) => said.push((i, client(&mut clients, addr, c).call(args).expect("reply"))),
            Quiet(c, args) => drop(client(&mut clients, addr, c).call(args).expect("reply")),
            Send(c, args) => {
                let mut bytes = Vec::new();
                RespClient::encode(args, &mut bytes);
                client(&mut clients, addr, c).write_raw(&bytes).expect("send");
            }
            Read(c) => said.push((i, client(&mut clients, addr, c).read_reply().expect("reply"))),
            Blocked(n) => {
                let deadline = Instant::now() + Duration::from_secs(10);
                while blocked_clients(&mut control) != n {
                    assert!(Instant::now() < deadline, "step {i}: never {n} blocked clients");
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            Close(c) => clients[c] = None,
            Sleep(ms) => std::thread::sleep(Duration::from_millis(ms)),
            RememberId(c) => match client(&mut clients, addr, c).call(&["CLIENT", "ID"]).expect("reply") {
                Value::Integer(id) => ids[c] = id,
                other => panic!("CLIENT ID answered {other:?}"),
            },
            Unblock(by, target, reason) => {
                let id = ids[target].to_string();
                let mut args = vec!["CLIENT", "UNBLOCK", &id];
                args.extend_from_slice(reason);
                said.push((i, client(&mut clients, addr, by).call(&args).expect("reply")));
            }
        }
    }
    said
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

#[test]
fn blocking_pops_and_expiring_watches_answer_as_redis_server_does() {
    let redis = RedisServer::start();
    let want = run(([127, 0, 0, 1], redis.1).into());
    drop(redis);
    // The scenario means what it says (against redis-server itself).
    let first = |step: usize| &want.iter().find(|(i, _)| *i >= step).expect("a reply").1;
    assert_eq!(*first(4), Value::Array(vec![bulk("q"), bulk("x")]));
    assert!(want.iter().filter(|(_, v)| *v == Value::NilArray).count() >= 4, "time-outs and aborted EXECs");
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let got = run(server.resp);
        for ((step, want), (_, got)) in want.iter().zip(&got) {
            assert_eq!(got, want, "{mode:?}: step {step}");
        }
        assert_eq!(got.len(), want.len());
        let server = server.stop();
        let stats = server.service().stats();
        assert!(stats.blocked_served >= 26 && stats.blocked_timeouts == 11, "{stats:?}");
    }
}

/// A served pop is durable before its reply: the pool as the reply leaves it (a copy taken
/// then, with the server idle: what a kill -9 at that moment leaves on tmpfs) recovers
/// without the element, and the BLMOVE's destination with it. With the planted bug (replies
/// acknowledged before the commit) the check fails.
fn served_pops_survive_a_crash(mode: Mode, planted: bool) -> bool {
    let pool = Pool::new();
    let mut server = KvServer::open(&options(&pool.path, mode)).expect("open");
    if planted {
        server.plant_ack_before_commit();
    }
    let server = start_with(server);
    let mut a = RespClient::connect(server.resp).expect("connect");
    let mut b = RespClient::connect(server.resp).expect("connect");
    let mut control = RespClient::connect(server.resp).expect("connect");
    let mut bytes = Vec::new();
    RespClient::encode(&["BLPOP", "k", "0"], &mut bytes);
    RespClient::encode(&["BLMOVE", "src", "dst", "RIGHT", "LEFT", "0"], &mut bytes);
    a.write_raw(&bytes).expect("send");
    wait_blocked(&mut control, 1);
    assert_eq!(b.call(&["RPUSH", "k", "v1", "v2"]).expect("push"), Value::Integer(2));
    assert_eq!(a.read_reply().expect("served"), Value::Array(vec![bulk("k"), bulk("v1")]));
    wait_blocked(&mut control, 1);
    assert_eq!(b.call(&["RPUSH", "src", "s1", "s2"]).expect("push"), Value::Integer(2));
    assert_eq!(a.read_reply().expect("served"), bulk("s2"));
    let crashed = pool.path.with_extension("crashed");
    std::fs::copy(&pool.path, &crashed).expect("copy the pool as it is");
    drop((a, b, control));
    server.stop();
    let restarted = start(&crashed, mode);
    let mut c = RespClient::connect(restarted.resp).expect("connect");
    let list = |c: &mut RespClient, key: &str| c.call(&["LRANGE", key, "0", "-1"]).expect("LRANGE");
    let durable = list(&mut c, "k") == Value::Array(vec![bulk("v2")])
        && list(&mut c, "src") == Value::Array(vec![bulk("s1")])
        && list(&mut c, "dst") == Value::Array(vec![bulk("s2")]);
    drop(c);
    restarted.stop();
    durable
}

fn wait_blocked(control: &mut RespClient, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while blocked_clients(control) != n {
        assert!(Instant::now() < deadline, "never {n} blocked clients");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_served_pop_is_durable_before_its_reply() {
    for mode in MODES {
        assert!(served_pops_survive_a_crash(mode, false), "{mode:?}");
    }
    assert!(!served_pops_survive_a_crash(Mode::Copy, true), "the planted ack-before-commit must be caught");
}

/// A batch whose commit fails takes its served pops back: the pusher and the served waiter
/// both get the error, the list is as before the push (absent), and the waiter, answered,
/// no longer waits; the next push is kept.
#[test]
fn a_served_pop_whose_batch_cannot_persist_answers_the_error() {
    let pool = Pool::new();
    let mut server = KvServer::open(&options(&pool.path, Mode::Copy)).expect("open");
    server.fail_commit(1);
    let server = start_with(server);
    let mut a = RespClient::connect(server.resp).expect("connect");
    let mut b = RespClient::connect(server.resp).expect("connect");
    let mut control = RespClient::connect(server.resp).expect("connect");
    let mut bytes = Vec::new();
    RespClient::encode(&["BLPOP", "k", "0"], &mut bytes);
    a.write_raw(&bytes).expect("send");
    wait_blocked(&mut control, 1);
    let error = Value::Error(b"ERR pmwire could not persist: injected commit failure".to_vec());
    assert_eq!(b.call(&["RPUSH", "k", "v"]).expect("push"), error);
    assert_eq!(a.read_reply().expect("answered"), error);
    assert_eq!(blocked_clients(&mut control), 0);
    assert_eq!(b.call(&["EXISTS", "k"]).expect("EXISTS"), Value::Integer(0));
    assert_eq!(b.call(&["RPUSH", "k", "w"]).expect("push"), Value::Integer(1));
    assert_eq!(a.call(&["LRANGE", "k", "0", "-1"]).expect("LRANGE"), Value::Array(vec![bulk("w")]));
    drop((a, b, control));
    server.stop();
}
