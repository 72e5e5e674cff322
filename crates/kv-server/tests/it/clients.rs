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
