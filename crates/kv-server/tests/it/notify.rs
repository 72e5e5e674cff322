//! Keyspace notifications, CLIENT KILL and CLIENT REPLY over a real
//! `pmwire kv` server: a subscriber with `notify-keyspace-events` set sees
//! the events of a SET, LPUSH, EXPIRE and DEL, and the `expired` of a key
//! that expires while nobody sends anything; CLIENT KILL ID closes the
//! other connection (it reads end of file), in both of its forms; CLIENT
//! REPLY OFF, SKIP and ON suppress replies as Redis does.

use std::io::Read;
use std::time::Duration;

use pmwire_kv_server::client::RespClient;
use pmwire_resp::client::Value;

use crate::common::{start, Pool, MODES};

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

fn pmessage(channel: &str, message: &str) -> Value {
    Value::Array(vec![bulk("pmessage"), bulk("__key*__:*"), bulk(channel), bulk(message)])
}

fn connect(addr: std::net::SocketAddr) -> RespClient {
    let mut c = RespClient::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    c
}

#[test]
fn a_subscriber_sees_the_keyspace_events_of_writes_and_expiry() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let (mut sub, mut w) = (connect(server.resp), connect(server.resp));
        assert_eq!(w.call(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).unwrap(), Value::Simple(b"OK".to_vec()));
        assert_eq!(
            w.call(&["CONFIG", "GET", "notify-keyspace-events"]).unwrap(),
            Value::Array(vec![bulk("notify-keyspace-events"), bulk("AKE")])
        );
        let refused = w.call(&["CONFIG", "SET", "notify-keyspace-events", "KQ"]).unwrap();
        let text = "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";
        assert_eq!(refused, Value::Error(text.as_bytes().to_vec()));
        assert_eq!(sub.call(&["PSUBSCRIBE", "__key*__:*"]).unwrap(), Value::Array(vec![bulk("psubscribe"), bulk("__key*__:*"), Value::Integer(1)]));
        for args in [&["SET", "k", "v"][..], &["LPUSH", "l", "a"], &["EXPIRE", "k", "100"], &["DEL", "k", "l"], &["LPOP", "nosuch"]] {
            w.call(args).unwrap();
        }
        let want = [
            ("__keyspace@0__:k", "set"),
            ("__keyevent@0__:set", "k"),
            ("__keyspace@0__:l", "lpush"),
            ("__keyevent@0__:lpush", "l"),
            ("__keyspace@0__:k", "expire"),
            ("__keyevent@0__:expire", "k"),
            ("__keyspace@0__:k", "del"),
            ("__keyevent@0__:del", "k"),
            ("__keyspace@0__:l", "del"),
            ("__keyevent@0__:del", "l"),
        ];
        for (channel, message) in want {
            assert_eq!(sub.read_reply().unwrap(), pmessage(channel, message), "{mode:?}");
        }
        // Background expiry: nothing is sent after the SET, yet the key expires and is reported.
        w.call(&["SET", "e", "v", "PX", "50"]).unwrap();
        for (channel, message) in [("__keyspace@0__:e", "set"), ("__keyevent@0__:set", "e"), ("__keyspace@0__:e", "expire"), ("__keyevent@0__:expire", "e")] {
            assert_eq!(sub.read_reply().unwrap(), pmessage(channel, message), "{mode:?}");
        }
        assert_eq!(sub.read_reply().unwrap(), pmessage("__keyspace@0__:e", "expired"), "{mode:?}");
        assert_eq!(sub.read_reply().unwrap(), pmessage("__keyevent@0__:expired", "e"), "{mode:?}");
        // Off again: writes publish nothing (the next message is the marker).
        w.call(&["CONFIG", "SET", "notify-keyspace-events", ""]).unwrap();
        w.call(&["SET", "quiet", "1"]).unwrap();
        w.call(&["PUBLISH", "__keyspace@0__:marker", "m"]).unwrap();
        assert_eq!(sub.read_reply().unwrap(), pmessage("__keyspace@0__:marker", "m"));
        drop((sub, w));
        server.stop();
    }
}

#[test]
fn client_kill_closes_the_other_connection() {
    let pool = Pool::new();
    let server = start(&pool.path, pmwire_kv_server::Mode::Copy);
    let (mut victim, mut killer) = (connect(server.resp), connect(server.resp));
    let Value::Integer(id) = victim.call(&["CLIENT", "ID"]).unwrap() else { panic!("CLIENT ID") };
    let id = id.to_string();
    assert_eq!(killer.call(&["CLIENT", "KILL", "ID", "0"]).unwrap(), Value::Error(b"ERR client-id should be greater than 0".to_vec()));
    assert_eq!(killer.call(&["CLIENT", "KILL", "TYPE", "nosuch"]).unwrap(), Value::Error(b"ERR Unknown client type 'nosuch'".to_vec()));
    assert_eq!(killer.call(&["CLIENT", "KILL", "ID", "999999"]).unwrap(), Value::Integer(0));
    assert_eq!(killer.call(&["CLIENT", "KILL", "1.2.3.4:5"]).unwrap(), Value::Error(b"ERR No such client".to_vec()));
    // SKIPME yes (the default of the new form): the killer survives killing every normal client.
    assert_eq!(killer.call(&["CLIENT", "KILL", "ID", &id]).unwrap(), Value::Integer(1));
    let mut stream = victim.into_stream();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(stream.read_to_end(&mut rest).expect("end of file, not a time-out"), 0, "closed without a reply");
    assert_eq!(killer.call(&["PING"]).unwrap(), Value::Simple(b"PONG".to_vec()));
    // The old form, by address.
    let mut other = connect(server.resp);
    let Value::Bulk(info) = other.call(&["CLIENT", "INFO"]).unwrap() else { panic!("CLIENT INFO") };
    let info = String::from_utf8(info).unwrap();
    let addr = info.split(' ').find_map(|f| f.strip_prefix("addr=")).expect("addr").to_string();
    assert_eq!(killer.call(&["CLIENT", "KILL", &addr]).unwrap(), Value::Simple(b"OK".to_vec()));
    let mut stream = other.into_stream();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(stream.read_to_end(&mut rest).expect("end of file"), 0);
    // SKIPME no: the killer's own connection closes after its reply.
    let mut stream = {
        let mut me = connect(server.resp);
        let Value::Integer(mine) = me.call(&["CLIENT", "ID"]).unwrap() else { panic!("CLIENT ID") };
        assert_eq!(me.call(&["CLIENT", "KILL", "ID", &mine.to_string(), "SKIPME", "no"]).unwrap(), Value::Integer(1));
        me.into_stream()
    };
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(stream.read_to_end(&mut rest).expect("end of file"), 0);
    drop(killer);
    server.stop();
}

#[test]
fn client_reply_off_skip_and_on() {
    let pool = Pool::new();
    let server = start(&pool.path, pmwire_kv_server::Mode::Copy);
    let mut c = connect(server.resp);
    let mut bytes = Vec::new();
    for args in [
        &["CLIENT", "REPLY", "OFF"][..],
        &["SET", "a", "1"],
        &["GET", "a"],
        &["CLIENT", "REPLY", "ON"],
        &["CLIENT", "REPLY", "SKIP"],
        &["SET", "b", "2"],
        &["GET", "b"],
        &["CLIENT", "REPLY", "MAYBE"],
    ] {
        RespClient::encode(args, &mut bytes);
    }
    c.write_raw(&bytes).unwrap();
    assert_eq!(c.read_reply().unwrap(), Value::Simple(b"OK".to_vec()), "only ON's reply while OFF");
    assert_eq!(c.read_reply().unwrap(), bulk("2"), "SKIP: nothing for itself and the SET");
    assert_eq!(c.read_reply().unwrap(), Value::Error(b"ERR syntax error".to_vec()));
    // The writes were made.
    assert_eq!(c.call(&["MGET", "a", "b"]).unwrap(), Value::Array(vec![bulk("1"), bulk("2")]));
    drop(c);
    server.stop();
}

/// MONITOR: the lines of other clients' commands in Redis's format (the
/// client's address, a script's commands as `[0 lua]` after its EVAL, MULTI,
/// the command and EXEC in order, administrative commands and refused ones
/// not shown, AUTH's arguments redacted).
#[test]
fn monitor_shows_commands_as_redis_does() {
    let pool = Pool::new();
    let server = start(&pool.path, pmwire_kv_server::Mode::Copy);
    let (mut mon, mut c) = (connect(server.resp), connect(server.resp));
    assert_eq!(mon.call(&["MONITOR"]).unwrap(), Value::Simple(b"OK".to_vec()));
    let Value::Bulk(info) = c.call(&["CLIENT", "INFO"]).unwrap() else { panic!("CLIENT INFO") };
    let info = String::from_utf8(info).unwrap();
    let addr = info.split(' ').find_map(|f| f.strip_prefix("addr=")).expect("addr").to_string();
    for args in [
        &["SET", "foo", "bar baz\n"][..],
        &["CONFIG", "GET", "maxclients"],
        &["NOSUCH"],
        &["EVAL", "return redis.call('get', KEYS[1])", "1", "foo"],
        &["MULTI"],
        &["INCR", "n"],
        &["EXEC"],
        &["AUTH", "secret"],
        &["GET", "foo"],
    ] {
        c.call(args).unwrap();
    }
    let want = [
        format!("[0 {addr}] \"CLIENT\" \"INFO\""),
        format!("[0 {addr}] \"SET\" \"foo\" \"bar baz\\n\""),
        format!("[0 {addr}] \"EVAL\" \"return redis.call('get', KEYS[1])\" \"1\" \"foo\""),
        "[0 lua] \"get\" \"foo\"".to_string(),
        format!("[0 {addr}] \"MULTI\""),
        format!("[0 {addr}] \"INCR\" \"n\""),
        format!("[0 {addr}] \"EXEC\""),
        format!("[0 {addr}] \"AUTH\" \"(redacted)\""),
        format!("[0 {addr}] \"GET\" \"foo\""),
    ];
    for want in want {
        let Value::Simple(line) = mon.read_reply().unwrap() else { panic!("a status line") };
        let line = String::from_utf8(line).unwrap();
        let (time, rest) = line.split_once(' ').expect("time, then the rest");
        let (s, us) = time.split_once('.').expect("seconds.microseconds");
        assert!(s.parse::<u64>().is_ok() && us.len() == 6 && us.parse::<u32>().is_ok(), "{line}");
        assert_eq!(rest, want);
    }
    drop((mon, c));
    server.stop();
}
