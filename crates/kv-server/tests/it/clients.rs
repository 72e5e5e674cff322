//! CLIENT LIST and CLIENT INFO against redis-server: three connections in
//! three states (named, subscribed, inside MULTI), every line's fields
//! compared but those that name the server's own numbering, addresses,
//! buffers and clock; the filters and their errors.

use std::net::SocketAddr;

use pmwire_kv_server::client::RespClient;
use pmwire_resp::client::Value;

use crate::common::{start, Pool, RedisServer};

/// Fields that differ between two servers by nature: ids, addresses,
/// descriptors, buffer sizes, times.
const MASKED: &[&str] = &["id", "addr", "laddr", "fd", "age", "idle", "qbuf", "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll", "omem", "tot-mem"];

fn text(v: Value) -> String {
    match v {
        Value::Bulk(b) | Value::Verbatim(_, b) => String::from_utf8(b).expect("text"),
        Value::Error(e) => format!("-{}", String::from_utf8_lossy(&e)),
        other => format!("{other:?}"),
    }
}

/// A CLIENT LIST answer with the masked fields' values removed, lines sorted.
fn masked(list: &str) -> Vec<String> {
    let mut lines: Vec<String> = list
        .lines()
        .map(|line| {
            line.split(' ')
                .map(|field| match field.split_once('=') {
                    Some((k, _)) if MASKED.contains(&k) => format!("{k}=*"),
                    _ => field.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// The answers of the scenario on the server at `addr`.
fn run(addr: SocketAddr) -> Vec<Vec<String>> {
    let mut a = RespClient::connect(addr).expect("connect");
    let mut b = RespClient::connect(addr).expect("connect");
    let mut c = RespClient::connect(addr).expect("connect");
    a.call(&["CLIENT", "SETNAME", "alpha"]).expect("setname");
    b.call(&["SUBSCRIBE", "ch"]).expect("subscribe");
    c.call(&["MULTI"]).expect("multi");
    c.call(&["SET", "k", "v"]).expect("queued");
    let mut said = Vec::new();
    for args in [
        &["CLIENT", "LIST"][..],
        &["CLIENT", "INFO"],
        &["CLIENT", "LIST", "TYPE", "pubsub"],
        &["CLIENT", "LIST", "TYPE", "normal"],
        &["CLIENT", "LIST", "TYPE", "replica"],
        &["CLIENT", "LIST", "TYPE", "bad"],
        &["CLIENT", "LIST", "ID", "x"],
        &["CLIENT", "LIST", "ID", "999999"],
        &["CLIENT", "LIST", "foo"],
    ] {
        said.push(masked(&text(a.call(args).expect("reply"))));
    }
    let a_id = match a.call(&["CLIENT", "ID"]).expect("id") {
        Value::Integer(n) => n.to_string(),
        other => panic!("CLIENT ID: {other:?}"),
    };
    said.push(masked(&text(a.call(&["CLIENT", "LIST", "ID", &a_id]).expect("reply"))));
    said
}

#[test]
fn client_list_and_info_answer_as_redis_server_does() {
    let redis = RedisServer::start();
    let want = run(([127, 0, 0, 1], redis.1).into());
    drop(redis);
    assert_eq!(want[0].len(), 3, "three clients: {want:?}");
    assert!(want[0].iter().any(|l| l.contains("flags=P") && l.contains("sub=1")), "{want:?}");
    let pool = Pool::new();
    let server = start(&pool.path, pmwire_kv_server::Mode::Copy);
    let got = run(server.resp);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g, w, "answer {i}");
    }
    server.stop();
}

/// `CONFIG SET timeout`: an idle client is closed, one that keeps talking is
/// not, and (as Redis) a client blocked in BLPOP and a subscriber are spared.
/// `CONFIG SET maxclients` below the open count closes nobody and refuses the
/// next client with Redis's message.
#[test]
fn timeout_closes_idle_clients_and_maxclients_refuses_newcomers() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let pool = Pool::new();
    let srv = start(&pool.path, pmwire_kv_server::Mode::ZeroCopy);
    let mut admin = RespClient::connect(srv.resp).expect("connect");
    assert_eq!(admin.call(&["CONFIG", "GET", "maxclients"]).unwrap(), Value::Array(vec![Value::Bulk(b"maxclients".to_vec()), Value::Bulk(b"10000".to_vec())]));
    let mut idle = RespClient::connect(srv.resp).expect("connect");
    idle.call(&["PING"]).unwrap();
    let silent = RespClient::connect(srv.resp).expect("connect"); // never sends a byte
    let mut blocked = RespClient::connect(srv.resp).expect("connect");
    blocked.write_raw(b"*3\r\n$5\r\nBLPOP\r\n$4\r\nlist\r\n$1\r\n0\r\n").unwrap();
    let mut subscriber = RespClient::connect(srv.resp).expect("connect");
    subscriber.call(&["SUBSCRIBE", "news"]).unwrap();
    assert_eq!(admin.call(&["CONFIG", "SET", "timeout", "1"]).unwrap(), Value::Simple(b"OK".to_vec()));
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(3500) {
        assert_eq!(admin.call(&["PING"]).unwrap(), Value::Simple(b"PONG".to_vec()));
        std::thread::sleep(Duration::from_millis(50));
    }
    for c in [idle, silent] {
        let mut s = c.into_stream();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        assert!(s.read_to_end(&mut rest).is_ok() && rest.is_empty(), "an idle client is closed with nothing sent: {rest:?}");
    }
    // The spared ones still work: the subscriber gets a message, the blocked pop its value.
    assert_eq!(admin.call(&["PUBLISH", "news", "hello"]).unwrap(), Value::Integer(1));
    let message = subscriber.read_reply().unwrap();
    assert_eq!(message, Value::Array(vec![Value::Bulk(b"message".to_vec()), Value::Bulk(b"news".to_vec()), Value::Bulk(b"hello".to_vec())]));
    assert_eq!(admin.call(&["RPUSH", "list", "v"]).unwrap(), Value::Integer(1));
    assert_eq!(blocked.read_reply().unwrap(), Value::Array(vec![Value::Bulk(b"list".to_vec()), Value::Bulk(b"v".to_vec())]));
    assert_eq!(admin.call(&["CONFIG", "SET", "timeout", "0"]).unwrap(), Value::Simple(b"OK".to_vec()));
    // maxclients below the three still open: they stay, a newcomer is refused.
    assert_eq!(admin.call(&["CONFIG", "SET", "maxclients", "2"]).unwrap(), Value::Simple(b"OK".to_vec()));
    let mut late = std::net::TcpStream::connect(srv.resp).unwrap();
    late.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    late.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"-ERR max number of clients reached\r\n");
    assert_eq!(admin.call(&["PING"]).unwrap(), Value::Simple(b"PONG".to_vec()));
    assert_eq!(blocked.call(&["PING"]).unwrap(), Value::Simple(b"PONG".to_vec()));
    let info = text(admin.call(&["INFO", "clients"]).unwrap());
    assert!(info.contains("maxclients:2\r\n"), "{info}");
    drop((admin, blocked, subscriber));
    srv.stop();
}
