//! RESP: commands, pipelines, values spanning buffers, batch failure.

use pmwire_kv_server::client::RespClient;
use pmwire_kv_server::{KvServer, Mode};
use pmwire_resp::client::Value;

use crate::common::*;

fn bulk(v: &[u8]) -> Value {
    Value::Bulk(v.to_vec())
}

#[test]
fn commands_and_pipelines_in_both_modes() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        assert_eq!(c.call(&["PING"]).unwrap(), Value::Simple(b"PONG".to_vec()));
        assert_eq!(c.call(&["SET", "k", "hello"]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.call(&["GET", "k"]).unwrap(), bulk(b"hello"));
        assert_eq!(c.call(&["APPEND", "k", " world"]).unwrap(), Value::Integer(11));
        assert_eq!(c.call(&["GET", "k"]).unwrap(), bulk(b"hello world"));
        assert_eq!(c.call(&["INCR", "n"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["HSET", "h", "f1", "v1", "f2", "v2"]).unwrap(), Value::Integer(2));
        assert_eq!(c.call(&["HGET", "h", "f2"]).unwrap(), bulk(b"v2"));
        assert_eq!(c.call(&["TYPE", "h"]).unwrap(), Value::Simple(b"hash".to_vec()));
        assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(3));
        // A pipeline: SETs and GETs of the same keys in one write, answered in order.
        let mut out = Vec::new();
        for i in 0..200u64 {
            RespClient::encode(&[b"SET".to_vec(), format!("p{i}").into_bytes(), value(i, 100 + i as usize)], &mut out);
            RespClient::encode(&[b"GET".to_vec(), format!("p{i}").into_bytes()], &mut out);
        }
        RespClient::encode(&["DEL", "p0", "p1", "missing"], &mut out);
        c.write_raw(&out).unwrap();
        for i in 0..200u64 {
            assert_eq!(c.read_reply().unwrap(), Value::Simple(b"OK".to_vec()));
            assert_eq!(c.read_reply().unwrap(), bulk(&value(i, 100 + i as usize)), "{mode} pipelined GET p{i}");
        }
        assert_eq!(c.read_reply().unwrap(), Value::Integer(2));
        let Value::Array(scan) = c.call(&["SCAN", "0", "COUNT", "1000"]).unwrap() else { panic!("SCAN reply") };
        let Value::Array(keys) = &scan[1] else { panic!("SCAN keys") };
        assert_eq!(keys.len(), 3 + 198);
        assert_eq!(c.call(&["FLUSHDB"]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(0));
        drop(c);
        server.stop();
    }
}

#[test]
fn values_spanning_buffers_are_stored_by_their_extents() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        let big = value(7, 64 << 10);
        let mut out = Vec::new();
        RespClient::encode(&[&b"SET"[..], b"big", &big], &mut out);
        RespClient::encode(&[&b"GET"[..], b"big"], &mut out);
        // Written in small pieces so the value lands in many receive buffers.
        for piece in out.chunks(1000) {
            c.write_raw(piece).unwrap();
        }
        assert_eq!(c.read_reply().unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.read_reply().unwrap(), bulk(&big));
        assert_eq!(c.get(b"big").unwrap().unwrap(), big);
        // Beyond the standing receive bound (192 KiB): received under a grant (issue 15).
        let large = value(8, 1 << 20);
        assert_eq!(c.call(&[&b"SET"[..], b"large", &large]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.get(b"large").unwrap().unwrap(), large);
        drop(c);
        let server = server.stop();
        let (_, extents) = server.store().engine().get(b"big").expect("stored");
        assert!(extents.len() >= 32, "{mode}: a 64 KB value over 2 KB buffers has many extents, got {}", extents.len());
    }
}

#[test]
fn a_batch_that_cannot_persist_is_answered_with_errors_and_rolled_back() {
    let pool = Pool::new();
    let mut server = KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap();
    server.fail_commit(1);
    let server = start_with(server);
    let mut c = RespClient::connect(server.resp).unwrap();
    let mut out = Vec::new();
    RespClient::encode(&["SET", "a", "1"], &mut out);
    RespClient::encode(&["GET", "a"], &mut out);
    c.write_raw(&out).unwrap();
    let Value::Error(e) = c.read_reply().unwrap() else { panic!("SET of a failed batch must fail") };
    assert!(e.starts_with(b"ERR pmwire could not persist"), "{}", String::from_utf8_lossy(&e));
    // The GET was in the same batch (error) or in a later one (the SET was rolled back).
    match c.read_reply().unwrap() {
        Value::Error(_) | Value::NilBulk => {}
        other => panic!("GET after a failed SET: {other:?}"),
    }
    assert_eq!(c.get(b"a").unwrap(), None);
    assert_eq!(c.call(&["SET", "a", "2"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.get(b"a").unwrap(), Some(b"2".to_vec()));
    drop(c);
    let server = server.stop();
    assert_eq!(server.service().stats().failed_batches, 1);
}

/// A pipeline of MSETs, with the first commit failing: every MSET answered OK is wholly
/// present and every one answered with the error wholly absent, however the pipeline was
/// batched (the service's unit tests drive batches that outgrow one commit).
#[test]
fn commands_are_never_split_across_commits() {
    const MSETS: u64 = 24;
    const KEYS: u64 = 150;
    for fail in [false, true] {
        let pool = Pool::new();
        let mut server = KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap();
        if fail {
            server.fail_commit(1);
        }
        let server = start_with(server);
        let mut c = RespClient::connect(server.resp).unwrap();
        let mut out = Vec::new();
        for m in 0..MSETS {
            let mut args = vec![b"MSET".to_vec()];
            for k in 0..KEYS {
                args.push(format!("m{m}k{k}").into_bytes());
                args.push(value(m * KEYS + k, 8));
            }
            RespClient::encode(&args, &mut out);
        }
        c.write_raw(&out).unwrap();
        let answers: Vec<bool> = (0..MSETS)
            .map(|_| match c.read_reply().unwrap() {
                Value::Simple(s) => s == b"OK",
                Value::Error(e) => {
                    assert!(e.starts_with(b"ERR pmwire could not persist"), "{}", String::from_utf8_lossy(&e));
                    false
                }
                other => panic!("MSET reply {other:?}"),
            })
            .collect();
        let failed = answers.iter().filter(|ok| !**ok).count();
        for (m, &ok) in (0..MSETS).zip(&answers) {
            for k in 0..KEYS {
                let got = c.get(format!("m{m}k{k}").as_bytes()).unwrap();
                assert_eq!(got, ok.then(|| value(m * KEYS + k, 8)), "fail {fail}: MSET {m} answered ok={ok}, key {k}");
            }
        }
        assert_eq!(failed > 0, fail, "{failed} MSETs failed");
        drop(c);
        server.stop();
    }
}

/// An MSET of `pairs` keys `{prefix}{k}`.
fn mset(prefix: &str, pairs: u64) -> Vec<Vec<u8>> {
    let mut args = vec![b"MSET".to_vec()];
    for k in 0..pairs {
        args.push(format!("{prefix}{k}").into_bytes());
        args.push(value(k, 1 + k as usize % 40));
    }
    args
}

/// An EXEC larger than the whole WAL (and a single MSET larger than it) commits whole as a
/// chained transaction (its records in pool buffers, two WAL words), and is there whole after a
/// restart; the connection goes on. (Before issue 15 both were refused with `-OOM` naming the
/// WAL's size.)
#[test]
fn a_command_larger_than_the_wal_commits_whole_as_a_chained_transaction() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = RespClient::connect(server.resp).unwrap();
    assert_eq!(c.call(&["SET", "before", "1"]).unwrap(), Value::Simple(b"OK".to_vec()));
    // 3 WAL words a pair: 10 MSETs of 3,000 pairs are more than the WAL of a 64 MB pool.
    assert_eq!(c.call(&["MULTI"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.call(&["SET", "inside", "1"]).unwrap(), Value::Simple(b"QUEUED".to_vec()));
    for m in 0..10 {
        assert_eq!(c.call(&mset(&format!("tx{m}-"), 3_000)).unwrap(), Value::Simple(b"QUEUED".to_vec()));
    }
    let ok = Value::Simple(b"OK".to_vec());
    assert_eq!(c.call(&["EXEC"]).unwrap(), Value::Array(vec![ok.clone(); 11]));
    assert_eq!(c.call(&mset("one-", 12_000)).unwrap(), ok, "one MSET of 36,000 WAL words");
    assert_eq!(c.call(&["SET", "after", "2"]).unwrap(), ok);
    assert_eq!(c.call(&["EXEC"]).unwrap(), Value::Error(b"ERR EXEC without MULTI".to_vec()));
    drop(c);
    let server = server.stop();
    let engine = server.store().engine();
    assert!(engine.max_batch_words() < 3 * 30_000, "the EXEC is larger than the WAL");
    assert_eq!(engine.stats().chained_transactions, 2, "{:?}", engine.stats());
    drop(server);
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = RespClient::connect(server.resp).unwrap();
    for key in ["before", "inside", "tx0-0", "tx9-2999", "one-0", "one-11999", "after"] {
        assert!(c.get(key.as_bytes()).unwrap().is_some(), "{key} after a restart");
    }
    assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(3 + 30_000 + 12_000));
    drop(c);
    server.stop();
}

/// An MSET and an EXEC each larger than one WAL group commit as transactions over several
/// groups, and are there whole after a restart; a pipeline of them too.
#[test]
fn a_large_mset_and_an_exec_survive_restart_whole() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        assert_eq!(c.call(&mset("m", 5_000)).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.call(&["MULTI"]).unwrap(), Value::Simple(b"OK".to_vec()));
        for k in 0..600u64 {
            let reply = c.call(&[b"SET".to_vec(), format!("x{k}").into_bytes(), value(k + 7, 100)]).unwrap();
            assert_eq!(reply, Value::Simple(b"QUEUED".to_vec()));
        }
        assert_eq!(c.call(&["DEL", "m0"]).unwrap(), Value::Simple(b"QUEUED".to_vec()));
        match c.call(&["EXEC"]).unwrap() {
            Value::Array(replies) => {
                assert_eq!(replies.len(), 601);
                assert!(replies[..600].iter().all(|r| *r == Value::Simple(b"OK".to_vec())));
                assert_eq!(replies[600], Value::Integer(1));
            }
            other => panic!("EXEC {other:?}"),
        }
        drop(c);
        let first = server.stop();
        assert!(first.store().engine().stats().transactions >= 2, "{:?}", first.store().engine().stats());
        drop(first);
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        assert_eq!(c.get(b"m0").unwrap(), None);
        for k in 1..5_000u64 {
            assert_eq!(c.get(format!("m{k}").as_bytes()).unwrap(), Some(value(k, 1 + k as usize % 40)), "m{k}");
        }
        for k in 0..600u64 {
            assert_eq!(c.get(format!("x{k}").as_bytes()).unwrap(), Some(value(k + 7, 100)), "x{k}");
        }
        drop(c);
        server.stop();
    }
}

/// WATCH on the server: a write by another connection makes EXEC answer the null array and
/// run nothing; an untouched watch lets it run.
#[test]
fn watch_sees_writes_from_other_connections() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut a = RespClient::connect(server.resp).unwrap();
    let mut b = RespClient::connect(server.resp).unwrap();
    assert_eq!(a.call(&["WATCH", "w"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(b.call(&["SET", "w", "theirs"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(a.call(&["MULTI"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(a.call(&["SET", "w", "mine"]).unwrap(), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(a.call(&["EXEC"]).unwrap(), Value::NilArray);
    assert_eq!(a.get(b"w").unwrap(), Some(b"theirs".to_vec()));
    assert_eq!(a.call(&["WATCH", "w"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(b.call(&["GET", "w"]).unwrap(), bulk(b"theirs"));
    assert_eq!(a.call(&["MULTI"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(a.call(&["SET", "w", "mine"]).unwrap(), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(a.call(&["EXEC"]).unwrap(), Value::Array(vec![Value::Simple(b"OK".to_vec())]));
    assert_eq!(b.get(b"w").unwrap(), Some(b"mine".to_vec()));
    drop((a, b));
    server.stop();
}

#[test]
fn a_protocol_error_is_answered_after_the_good_commands_then_closed() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = RespClient::connect(server.resp).unwrap();
    c.write_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\n*1\r\n+bad\r\n").unwrap();
    assert_eq!(c.read_reply().unwrap(), Value::Simple(b"OK".to_vec()));
    assert!(matches!(c.read_reply().unwrap(), Value::Error(_)));
    assert!(c.read_reply().is_err(), "closed after a protocol error");
    let mut c = RespClient::connect(server.resp).unwrap();
    assert_eq!(c.get(b"x").unwrap(), Some(b"1".to_vec()));
    drop(c);
    server.stop();
}

#[test]
fn a_full_pool_refuses_writes_keeps_serving_and_recovers_after_deletes() {
    let pool = Pool::new();
    let mut opts = options(&pool.path, Mode::ZeroCopy);
    opts.size = 16 << 20;
    let server = start_with(KvServer::open(&opts).unwrap());
    let mut c = RespClient::connect(server.resp).unwrap();
    let big = value(3, 64 << 10);
    let mut stored = 0u32;
    loop {
        match c.call(&[b"SET".to_vec(), format!("fill{stored}").into_bytes(), big.clone()]).unwrap() {
            Value::Simple(_) => stored += 1,
            Value::Error(e) => {
                assert!(e.starts_with(b"OOM"), "{}", String::from_utf8_lossy(&e));
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(stored < 256, "a 16 MB pool cannot hold 256 values of 64 KB");
    }
    assert!(stored > 100, "most of the pool holds values: {stored}");
    assert_eq!(c.get(b"fill0").unwrap().unwrap(), big, "reads go on");
    for i in 0..stored {
        assert_eq!(c.call(&[b"DEL".to_vec(), format!("fill{i}").into_bytes()]).unwrap(), Value::Integer(1));
    }
    for i in 0..stored {
        assert_eq!(
            c.call(&[b"SET".to_vec(), format!("again{i}").into_bytes(), big.clone()]).unwrap(),
            Value::Simple(b"OK".to_vec()),
            "again{i}"
        );
    }
    drop(c);
    server.stop();
}

/// The string and key commands that rewrite or move values (SETRANGE,
/// GETSET, GETDEL, MSETNX, RENAME, COPY) on the pool, with a value that
/// spans buffers, in both modes; what they wrote is there after a restart.
#[test]
fn values_moved_and_rewritten_by_key_commands_survive_restart() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        let big = value(7, 100 << 10);
        c.call(&[b"SET".to_vec(), b"big".to_vec(), big.clone()]).unwrap();
        assert_eq!(c.call(&["RENAME", "big", "moved"]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.call(&["COPY", "moved", "copied"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["SETRANGE", "copied", "3", "XYZ"]).unwrap(), Value::Integer(big.len() as i64));
        assert_eq!(c.call(&["SETNX", "n", "1"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["GETSET", "n", "2"]).unwrap(), bulk(b"1"));
        assert_eq!(c.call(&["MSETNX", "a", "x", "b", "y"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["MSETNX", "b", "z", "c", "w"]).unwrap(), Value::Integer(0));
        assert_eq!(c.call(&["GETDEL", "a"]).unwrap(), bulk(b"x"));
        assert_eq!(c.call(&["HSET", "h", "f", "v"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["RENAMENX", "h", "hh"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["GETRANGE", "copied", "0", "5"]).unwrap(), bulk(&[&big[..3], b"XYZ"].concat()));
        drop(c);
        drop(server.stop());
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        assert_eq!(c.get(b"big").unwrap(), None);
        assert!(c.get(b"moved").unwrap().unwrap() == big, "{mode}: the renamed value");
        let mut edited = big.clone();
        edited[3..6].copy_from_slice(b"XYZ");
        assert!(c.get(b"copied").unwrap().unwrap() == edited, "{mode}: the copied and edited value");
        assert_eq!(c.get(b"n").unwrap(), Some(b"2".to_vec()));
        assert_eq!(c.get(b"a").unwrap(), None);
        assert_eq!(c.get(b"b").unwrap(), Some(b"y".to_vec()));
        assert_eq!(c.get(b"c").unwrap(), None);
        assert_eq!(c.call(&["HGET", "hh", "f"]).unwrap(), bulk(b"v"));
        assert_eq!(c.call(&["EXISTS", "h"]).unwrap(), Value::Integer(0));
        drop(c);
        server.stop();
    }
}

/// With a password: RESP needs AUTH (or HELLO AUTH) before anything else,
/// HTTP a bearer token; without one, protected mode lets loopback in.
#[test]
fn a_password_guards_resp_and_http() {
    let pool = Pool::new();
    let mut options = options(&pool.path, Mode::ZeroCopy);
    options.requirepass = Some(b"s3cret".to_vec());
    let server = start_with(KvServer::open(&options).unwrap());
    let mut c = RespClient::connect(server.resp).unwrap();
    let noauth = Value::Error(b"NOAUTH Authentication required.".to_vec());
    assert_eq!(c.call(&["SET", "k", "v"]).unwrap(), noauth);
    assert_eq!(
        c.call(&["AUTH", "wrong"]).unwrap(),
        Value::Error(b"WRONGPASS invalid username-password pair or user is disabled.".to_vec())
    );
    assert_eq!(c.call(&["AUTH", "s3cret"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.call(&["SET", "k", "v"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.call(&["ACL", "WHOAMI"]).unwrap(), bulk(b"default"));
    let mut other = RespClient::connect(server.resp).unwrap();
    assert_eq!(other.call(&["GET", "k"]).unwrap(), noauth);
    assert!(matches!(other.call(&["HELLO", "3", "AUTH", "default", "s3cret"]).unwrap(), Value::Map(_)));
    assert_eq!(other.call(&["GET", "k"]).unwrap(), bulk(b"v"));
    let mut h = pmwire_kv_server::client::HttpClient::connect(server.http).unwrap();
    let refused = h.request("GET", "/kv/k", b"").unwrap();
    assert_eq!(refused.status, 401);
    assert_eq!(h.request("POST", "/kv/h", b"x").unwrap().status, 401);
    drop((c, other, h));
    server.stop();
    // The raw exchange with a token: the HTTP client has no header option.
    let server = start_with(KvServer::open(&options).unwrap());
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.http).unwrap();
    s.write_all(b"GET /kv/k HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nv"), "{text}");
    let mut s = std::net::TcpStream::connect(server.http).unwrap();
    s.write_all(b"GET /kv/k HTTP/1.1\r\nAuthorization: Bearer s3creT\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    server.stop();
}

/// A non-loopback address of this host (the source address of a route out), if any.
fn outward_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Protected mode: with no password, a peer on a non-loopback address gets
/// Redis's DENIED and the connection closes; with it off, or with a
/// password, the peer is served.
#[test]
fn protected_mode_denies_remote_peers_without_a_password() {
    let Some(ip) = outward_ip() else {
        println!("SKIPPED: this host has no non-loopback address to connect from");
        return;
    };
    for (protected, password) in [(true, None), (false, None), (true, Some(b"pw".to_vec()))] {
        let pool = Pool::new();
        let mut options = options(&pool.path, Mode::Copy);
        options.resp = "0.0.0.0:0".parse().unwrap();
        options.protected_mode = protected;
        options.requirepass = password.clone();
        let server = start_with(KvServer::open(&options).unwrap());
        let addr = std::net::SocketAddr::new(ip, server.resp.port());
        let mut c = RespClient::connect(addr).unwrap();
        let reply = c.call(&["PING"]).unwrap();
        match (protected, &password) {
            (true, None) => {
                let Value::Error(e) = reply else { panic!("{reply:?}") };
                assert!(e.starts_with(b"DENIED Redis is running in protected mode"), "{}", String::from_utf8_lossy(&e));
                assert!(c.call(&["PING"]).is_err(), "the connection is closed");
            }
            (false, None) => assert_eq!(reply, Value::Simple(b"PONG".to_vec())),
            (_, Some(_)) => assert_eq!(reply, Value::Error(b"NOAUTH Authentication required.".to_vec())),
        }
        // Loopback is always let in.
        let local = std::net::SocketAddr::from(([127, 0, 0, 1], server.resp.port()));
        let mut l = RespClient::connect(local).unwrap();
        assert!(matches!(l.call(&["PING"]).unwrap(), Value::Simple(_) | Value::Error(_)));
        drop((c, l));
        server.stop();
    }
}

fn bulks(items: &[&[u8]]) -> Value {
    Value::Array(items.iter().map(|i| bulk(i)).collect())
}

/// The members of a set reply, sorted (set order is unspecified).
fn sorted_members(reply: Value) -> Vec<Vec<u8>> {
    let (Value::Array(items) | Value::Set(items)) = reply else { panic!("not a set reply: {reply:?}") };
    let mut members: Vec<Vec<u8>> =
        items.into_iter().map(|v| if let Value::Bulk(b) = v { b } else { panic!("{v:?}") }).collect();
    members.sort();
    members
}

/// Lists and sets written by every kind of write command, one of each
/// spanning many pool buffers, in both modes: what was acknowledged is there
/// after a restart, with its type and encoding.
#[test]
fn lists_and_sets_survive_restart() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        let int = |n| Value::Integer(n);
        assert_eq!(c.call(&["RPUSH", "l", "b", "c", "d"]).unwrap(), int(3));
        assert_eq!(c.call(&["LPUSH", "l", "a"]).unwrap(), int(4));
        assert_eq!(c.call(&["LSET", "l", "1", "B"]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(c.call(&["LINSERT", "l", "AFTER", "B", "x"]).unwrap(), int(5));
        assert_eq!(c.call(&["RPUSHX", "l", "x"]).unwrap(), int(6));
        assert_eq!(c.call(&["LREM", "l", "-1", "x"]).unwrap(), int(1));
        assert_eq!(c.call(&["LMOVE", "l", "m", "LEFT", "RIGHT"]).unwrap(), bulk(b"a"));
        assert_eq!(c.call(&["RPOPLPUSH", "l", "m"]).unwrap(), bulk(b"d"));
        assert_eq!(c.call(&["LPOP", "l"]).unwrap(), bulk(b"B"));
        assert_eq!(c.call(&["RPUSH", "gone", "1"]).unwrap(), int(1));
        assert_eq!(c.call(&["LTRIM", "gone", "1", "0"]).unwrap(), Value::Simple(b"OK".to_vec()));
        // A list of 60 elements of 1 KiB: its blob spans about 30 buffers.
        let elements: Vec<Vec<u8>> = (0..60).map(|i| value(100 + i, 1024)).collect();
        let mut push = vec![b"RPUSH".to_vec(), b"big".to_vec()];
        push.extend(elements.iter().cloned());
        assert_eq!(c.call(&push).unwrap(), int(60));
        assert_eq!(c.call(&["SADD", "s", "a", "b", "c", "d"]).unwrap(), int(4));
        assert_eq!(c.call(&["SREM", "s", "d"]).unwrap(), int(1));
        assert_eq!(c.call(&["SADD", "t", "b", "c", "e"]).unwrap(), int(3));
        assert_eq!(c.call(&["SMOVE", "t", "s", "e"]).unwrap(), int(1));
        assert_eq!(c.call(&["SINTERSTORE", "i", "s", "t"]).unwrap(), int(2));
        assert_eq!(c.call(&["SUNIONSTORE", "u", "s", "t"]).unwrap(), int(4));
        assert_eq!(c.call(&["SDIFFSTORE", "d", "s", "t"]).unwrap(), int(2));
        assert_eq!(c.call(&["SADD", "p", "1", "2", "3"]).unwrap(), int(3));
        let popped = sorted_members(c.call(&["SPOP", "p", "2"]).unwrap());
        let left = sorted_members(c.call(&["SMEMBERS", "p"]).unwrap());
        assert_eq!(popped.len() + left.len(), 3);
        let mut add = vec![b"SADD".to_vec(), b"bigset".to_vec()];
        add.extend(elements.iter().cloned());
        assert_eq!(c.call(&add).unwrap(), int(60));
        drop(c);
        drop(server.stop());
        let server = start(&pool.path, mode);
        let mut c = RespClient::connect(server.resp).unwrap();
        assert_eq!(c.call(&["LRANGE", "l", "0", "-1"]).unwrap(), bulks(&[b"x", b"c"]), "{mode}");
        assert_eq!(c.call(&["LRANGE", "m", "0", "-1"]).unwrap(), bulks(&[b"d", b"a"]));
        assert_eq!(c.call(&["EXISTS", "gone"]).unwrap(), int(0));
        let big: Vec<&[u8]> = elements.iter().map(|e| e.as_slice()).collect();
        assert!(c.call(&["LRANGE", "big", "0", "-1"]).unwrap() == bulks(&big), "{mode}: the big list");
        let abce: Vec<Vec<u8>> = ["a", "b", "c", "e"].iter().map(|m| m.as_bytes().to_vec()).collect();
        assert_eq!(sorted_members(c.call(&["SMEMBERS", "s"]).unwrap()), abce);
        assert_eq!(sorted_members(c.call(&["SMEMBERS", "t"]).unwrap()), vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(sorted_members(c.call(&["SMEMBERS", "i"]).unwrap()), vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(sorted_members(c.call(&["SMEMBERS", "u"]).unwrap()), abce);
        assert_eq!(sorted_members(c.call(&["SMEMBERS", "d"]).unwrap()), vec![b"a".to_vec(), b"e".to_vec()]);
        assert_eq!(sorted_members(c.call(&["SMEMBERS", "p"]).unwrap()), left, "{mode}: what SPOP left");
        let mut want_big = elements.clone();
        want_big.sort();
        assert!(sorted_members(c.call(&["SMEMBERS", "bigset"]).unwrap()) == want_big, "{mode}: the big set");
        // 60 KiB is over a blob's 8 KiB: the big ones are chunked (pmwire_keyspace::chunked).
        // OBJECT ENCODING answers in Redis's terms (a list is a quicklist in 7.0).
        let kinds = [("l", "list", "quicklist"), ("big", "list", "quicklist"), ("s", "set", "hashtable")];
        for (key, kind, encoding) in kinds.into_iter().chain([("bigset", "set", "hashtable")]) {
            assert_eq!(c.call(&["TYPE", key]).unwrap(), Value::Simple(kind.as_bytes().to_vec()));
            assert_eq!(c.call(&["OBJECT", "ENCODING", key]).unwrap(), bulk(encoding.as_bytes()), "{key}");
        }
        drop(c);
        server.stop();
    }
}

/// Deadlines are durable with their keys, and absolute: with the server's clock fixed at
/// `t0`, keys get deadlines (strings, a value of ~50 extents, collections, RENAME and COPY
/// carrying them, PERSIST dropping one); after a restart at `t0 + 2 s`, a key whose deadline
/// passed is not served, not even by the first command, and is swept; a key with a later
/// deadline keeps it to the millisecond.
#[test]
fn deadlines_survive_restart_and_past_ones_are_never_served() {
    use pmwire_keyspace::store::Clock;
    const T0: u64 = 1_700_000_000_000;
    let far = T0 + 1_000_000_000;
    for mode in MODES {
        let pool = Pool::new();
        let mut open = KvServer::open(&options(&pool.path, mode)).expect("open");
        open.set_clock(Clock::Fixed(T0));
        let server = start_with(open);
        let mut c = RespClient::connect(server.resp).unwrap();
        let big = value(3, 100 << 10);
        let ok = Value::Simple(b"OK".to_vec());
        assert_eq!(
            c.call(&[b"SET".to_vec(), b"big".to_vec(), big.clone(), b"PXAT".to_vec(), far.to_string().into_bytes()])
                .unwrap(),
            ok
        );
        assert_eq!(c.call(&["SET", "soon", "v", "PX", "1000"]).unwrap(), ok);
        assert_eq!(c.call(&["SET", "soon-http", "v", "PXAT", &(T0 + 1_999).to_string()]).unwrap(), ok);
        assert_eq!(c.call(&["SETEX", "later", "1000000", "v"]).unwrap(), ok);
        assert_eq!(c.call(&["RPUSH", "list", "a", "b"]).unwrap(), Value::Integer(2));
        assert_eq!(c.call(&["PEXPIRE", "list", "5000"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["SADD", "set", "m"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["PEXPIRE", "set", "1999"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["SET", "moved", "v", "PX", "3000"]).unwrap(), ok);
        assert_eq!(c.call(&["RENAME", "moved", "renamed"]).unwrap(), ok);
        assert_eq!(c.call(&["COPY", "renamed", "copied"]).unwrap(), Value::Integer(1));
        assert_eq!(c.call(&["SET", "kept", "v", "PX", "10"]).unwrap(), ok);
        assert_eq!(c.call(&["PERSIST", "kept"]).unwrap(), Value::Integer(1));
        for i in 0..100 {
            assert_eq!(c.call(&["SET", &format!("gone{i}"), "v", "PX", "1500"]).unwrap(), ok);
        }
        assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(109));
        drop(c);
        drop(server.stop());

        let mut open = KvServer::open(&options(&pool.path, mode)).expect("reopen");
        open.set_clock(Clock::Fixed(T0 + 2_000));
        let server = start_with(open);
        // The first request after the restart, over HTTP: past its deadline, not served.
        let mut h = pmwire_kv_server::client::HttpClient::connect(server.http).unwrap();
        assert_eq!(h.request("GET", "/kv/soon-http", b"").unwrap().status, 404, "{mode}");
        assert_eq!(h.request("GET", "/kv/later", b"").unwrap().body, b"v");
        drop(h);
        let mut c = RespClient::connect(server.resp).unwrap();
        assert_eq!(c.get(b"soon").unwrap(), None, "{mode}: past its deadline");
        assert_eq!(c.call(&["TTL", "set"]).unwrap(), Value::Integer(-2));
        assert_eq!(c.call(&["EXISTS", "soon", "set", "gone7"]).unwrap(), Value::Integer(0));
        assert_eq!(c.call(&["SMEMBERS", "set"]).unwrap(), Value::Array(vec![]));
        assert_eq!(c.call(&["PEXPIRETIME", "big"]).unwrap(), Value::Integer(far as i64));
        assert!(c.get(b"big").unwrap().unwrap() == big, "{mode}: the expiring value's bytes");
        assert_eq!(c.call(&["PTTL", "later"]).unwrap(), Value::Integer(1_000_000_000 - 2_000));
        assert_eq!(c.call(&["PTTL", "list"]).unwrap(), Value::Integer(3_000));
        assert_eq!(c.call(&["LRANGE", "list", "0", "-1"]).unwrap(), Value::Array(vec![bulk(b"a"), bulk(b"b")]));
        assert_eq!(c.call(&["PTTL", "renamed"]).unwrap(), Value::Integer(1_000));
        assert_eq!(c.call(&["PTTL", "copied"]).unwrap(), Value::Integer(1_000));
        assert_eq!(c.call(&["PTTL", "kept"]).unwrap(), Value::Integer(-1));
        // Every call was a batch with its sweep of up to 64: the 100 expired keys are gone.
        assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(6), "{mode}");
        assert_eq!(c.call(&["INFO", "keyspace"]).unwrap(), bulk(b"# Keyspace\r\ndb0:keys=6,expires=5,avg_ttl=0\r\n"));
        drop(c);
        let stopped = server.stop();
        assert!(stopped.service().stats().expired_swept >= 100, "{:?}", stopped.service().stats());
    }
}

/// Internal entries (a chunked collection's chunks) never show as keys: KEYS, SCAN and
/// DBSIZE see user keys only, in byte order, a user key beginning with `FF` among them
/// (stored escaped); after a restart too; a deleted collection's chunks are collected by
/// later batches.
#[test]
fn chunks_stay_out_of_the_keyspace() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = RespClient::connect(server.resp).unwrap();
    let high: &[u8] = b"\xffhigh";
    assert_eq!(c.call(&[&b"SET"[..], high, b"v"]).unwrap(), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.call(&["SET", "a", "1"]).unwrap(), Value::Simple(b"OK".to_vec()));
    let mut add = vec![b"SADD".to_vec(), b"big".to_vec()];
    add.extend((0..1000).map(|i| format!("member{i}").into_bytes()));
    assert_eq!(c.call(&add).unwrap(), Value::Integer(1000));
    assert_eq!(c.call(&["OBJECT", "ENCODING", "big"]).unwrap(), bulk(b"hashtable"));
    let all = bulks(&[b"a", b"big", high]);
    assert_eq!(c.call(&["KEYS", "*"]).unwrap(), all);
    assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(3));
    assert_eq!(c.call(&["SCAN", "0", "COUNT", "2"]).unwrap(), Value::Array(vec![bulk(b"1"), bulks(&[b"a", b"big"])]));
    assert_eq!(c.call(&["SCAN", "1", "COUNT", "2"]).unwrap(), Value::Array(vec![bulk(b"0"), bulks(&[high])]));
    assert_eq!(c.call(&[&b"GET"[..], high]).unwrap(), bulk(b"v"));
    drop(c);
    let server = {
        drop(server.stop());
        start(&pool.path, Mode::ZeroCopy)
    };
    let mut c = RespClient::connect(server.resp).unwrap();
    assert_eq!(c.call(&["KEYS", "*"]).unwrap(), all);
    assert_eq!(c.call(&["SCARD", "big"]).unwrap(), Value::Integer(1000));
    assert_eq!(c.call(&["SISMEMBER", "big", "member999"]).unwrap(), Value::Integer(1));
    assert_eq!(c.call(&["DEL", "big"]).unwrap(), Value::Integer(1));
    for _ in 0..200 {
        c.call(&["PING"]).unwrap();
    }
    assert_eq!(c.call(&["DBSIZE"]).unwrap(), Value::Integer(2));
    assert_eq!(c.call(&["KEYS", "*"]).unwrap(), bulks(&[b"a", high]));
    drop(c);
    // The collector took the dead set's chunks and its tombstone (64 per batch): the engine
    // holds the two keys and the generation counter.
    let stopped = server.stop();
    assert_eq!(stopped.store().engine().len(), 3);
}

/// SHUTDOWN: refused inside MULTI; otherwise the connection is closed
/// unanswered, as Redis's, and the loop stops by itself; what was
/// acknowledged before is in the pool when it is opened again.
#[test]
fn shutdown_stops_the_server_and_keeps_every_write() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = RespClient::connect(server.resp).expect("connect");
    assert_eq!(c.call(&["SET", "k", "v"]).expect("set"), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.call(&["SHUTDOWN", "ABORT"]).expect("abort"), Value::Error(b"ERR No shutdown in progress.".to_vec()));
    c.call(&["MULTI"]).expect("multi");
    assert_eq!(c.call(&["SHUTDOWN"]).expect("refused"), Value::Error(b"ERR Command not allowed inside a transaction".to_vec()));
    c.call(&["DISCARD"]).expect("discard");
    assert!(c.call(&["SHUTDOWN", "NOSAVE"]).is_err(), "closed without a reply");
    server.wait();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = RespClient::connect(server.resp).expect("connect");
    assert_eq!(c.call(&["GET", "k"]).expect("get"), Value::Bulk(b"v".to_vec()));
    server.stop();
}
