//! Pub/sub against redis-server: one scenario of several connections
//! (RESP2 and RESP3 subscribers, patterns, shard channels, the RESP2
//! context's refusals, MULTI, scripts, RESET, a subscriber that leaves) run
//! on both servers, every reply and message compared; and a subscriber
//! that stops reading is closed at Redis's output limit, the server going on.

use std::io::Read;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pmwire_kv_server::client::RespClient;
use pmwire_resp::client::Value;

use crate::common::{start, Pool, RedisServer, MODES};

/// One step of the scenario.
#[derive(Clone, Copy)]
enum Step {
    /// Client `c` sends `args` and reads `n` replies (a subscribe answers one per name).
    Call(usize, &'static [&'static str], usize),
    /// Client `c` reads one message published to it.
    Read(usize),
    /// Client `c` closes its connection.
    Close(usize),
    /// Client `c` sends `args` and reads one reply, not compared (HELLO: names and ids differ).
    Quiet(usize, &'static [&'static str]),
    /// Like `Call`, the reply's array sorted (PUBSUB CHANNELS: Redis answers in its dict's order).
    Sorted(usize, &'static [&'static str]),
}
use Step::*;

const SCENARIO: &[Step] = &[
    Call(0, &["SUBSCRIBE", "a", "b", "a"], 3),
    // The RESP2 pub/sub context: only the subscribe commands, PING, QUIT, RESET.
    Call(0, &["GET", "x"], 1),
    Call(0, &["CLIENT", "ID"], 1),
    Call(0, &["PING"], 1),
    Call(0, &["PING", "hi"], 1),
    Call(1, &["PSUBSCRIBE", "h?llo", "news.*"], 2),
    Call(2, &["PUBLISH", "a", "m1"], 1),
    Read(0),
    Call(2, &["PUBLISH", "news.sport", "goal"], 1),
    Read(1),
    Call(2, &["PUBLISH", "hello", "world"], 1),
    Read(1),
    Call(2, &["PUBLISH", "nobody", "x"], 1),
    // A RESP3 subscriber: pushes, and any command allowed.
    Quiet(3, &["HELLO", "3"]),
    Call(3, &["SUBSCRIBE", "a"], 1),
    Call(3, &["SET", "k", "v"], 1),
    Call(3, &["GET", "k"], 1),
    Call(3, &["PING"], 1),
    Call(2, &["PUBLISH", "a", "m2"], 1),
    Read(0),
    Read(3),
    Sorted(2, &["PUBSUB", "CHANNELS"]),
    Sorted(2, &["PUBSUB", "CHANNELS", "?"]),
    Call(2, &["PUBSUB", "NUMSUB", "a", "b", "zz"], 1),
    Call(2, &["PUBSUB", "NUMSUB"], 1),
    Call(2, &["PUBSUB", "NUMPAT"], 1),
    Call(2, &["PUBSUB", "CHANNELS", "a", "b"], 1),
    Call(2, &["PUBSUB", "NOSUCH"], 1),
    // Shard channels: counted apart, no patterns.
    Call(4, &["SSUBSCRIBE", "s1", "s2"], 2),
    Call(4, &["SUBSCRIBE", "c"], 1),
    Call(2, &["SPUBLISH", "s1", "hi"], 1),
    Read(4),
    Call(2, &["PUBLISH", "s1", "not-shard"], 1),
    Sorted(2, &["PUBSUB", "SHARDCHANNELS"]),
    Call(2, &["PUBSUB", "SHARDNUMSUB", "s1", "s3"], 1),
    Call(4, &["SUNSUBSCRIBE", "s2"], 1),
    Call(4, &["SUNSUBSCRIBE"], 1),
    Call(4, &["SUNSUBSCRIBE"], 1),
    Call(4, &["UNSUBSCRIBE"], 1),
    Call(4, &["GET", "k"], 1),
    // Unsubscribing: by name, then the rest, then nothing left.
    Call(0, &["UNSUBSCRIBE", "a", "zz"], 2),
    Call(2, &["PUBLISH", "a", "m3"], 1),
    Read(3),
    Call(0, &["UNSUBSCRIBE"], 1),
    Call(0, &["UNSUBSCRIBE"], 1),
    Call(0, &["PUNSUBSCRIBE"], 1),
    Call(0, &["GET", "k"], 1),
    Call(1, &["PUNSUBSCRIBE", "news.*"], 1),
    Call(2, &["PUBLISH", "news.x", "gone"], 1),
    Call(2, &["PUBLISH", "hallo", "still"], 1),
    Read(1),
    // Inside MULTI: queued, answered in EXEC's array, then in the context.
    Call(5, &["MULTI"], 1),
    Call(5, &["SUBSCRIBE", "z"], 1),
    Call(5, &["PING"], 1),
    Call(5, &["EXEC"], 1),
    Call(2, &["PUBLISH", "z", "after-exec"], 1),
    Read(5),
    Call(5, &["GET", "k"], 1),
    Call(5, &["RESET"], 1),
    Call(5, &["GET", "k"], 1),
    Call(2, &["PUBLISH", "z", "after-reset"], 1),
    // Scripts may publish, not subscribe.
    Call(6, &["SUBSCRIBE", "lua"], 1),
    Call(2, &["EVAL", "return redis.call('publish', 'lua', ARGV[1])", "0", "from-a-script"], 1),
    Read(6),
    Call(2, &["EVAL", "return redis.pcall('subscribe', 'x')", "0"], 1),
    // HELLO 3 while subscribed: the next message is a push.
    Quiet(6, &["HELLO", "3"]),
    Call(2, &["PUBLISH", "lua", "now-a-push"], 1),
    Read(6),
    // A subscriber that leaves no longer counts.
    Close(3),
    Call(2, &["PUBLISH", "a", "m4"], 1),
    Call(2, &["PUBSUB", "NUMSUB", "a"], 1),
    // Arity.
    Call(2, &["SUBSCRIBE"], 1),
    Call(2, &["PUBLISH", "a"], 1),
];

/// Runs the scenario against `addr`: every reply and message, each with its step.
fn run(addr: SocketAddr) -> Vec<(usize, Value)> {
    let mut clients: Vec<Option<RespClient>> = (0..7).map(|_| None).collect();
    let mut said = Vec::new();
    for (i, step) in SCENARIO.iter().enumerate() {
        fn client(clients: &mut [Option<RespClient>], addr: SocketAddr, c: usize) -> &mut RespClient {
            let client = clients[c].get_or_insert_with(|| RespClient::connect(addr).expect("connect"));
            client.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
            client
        }
        match *step {
            Call(c, args, n) => {
                let client = client(&mut clients, addr, c);
                let mut bytes = Vec::new();
                RespClient::encode(args, &mut bytes);
                client.write_raw(&bytes).expect("send");
                for _ in 0..n {
                    said.push((i, client.read_reply().unwrap_or_else(|e| panic!("step {i}: {e}"))));
                }
            }
            Sorted(c, args) => match client(&mut clients, addr, c).call(args).expect("reply") {
                Value::Array(mut items) => {
                    items.sort_by_key(|v| format!("{v:?}"));
                    said.push((i, Value::Array(items)));
                }
                other => said.push((i, other)),
            },
            Quiet(c, args) => drop(client(&mut clients, addr, c).call(args).expect("reply")),
            Read(c) => said.push((i, client(&mut clients, addr, c).read_reply().unwrap_or_else(|e| panic!("step {i}: {e}")))),
            Close(c) => {
                clients[c] = None;
                // The server sees the close before the next step's PUBLISH.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    said
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

#[test]
fn pubsub_answers_and_delivers_as_redis_server_does() {
    let redis = RedisServer::start();
    let want = run(([127, 0, 0, 1], redis.1).into());
    drop(redis);
    // The scenario means what it says (against redis-server itself).
    let at = |step: usize| want.iter().filter(|(i, _)| *i == step).map(|(_, v)| v.clone()).collect::<Vec<_>>();
    assert_eq!(at(7), vec![Value::Array(vec![bulk("message"), bulk("a"), bulk("m1")])]);
    assert_eq!(at(20), vec![Value::Push(vec![bulk("message"), bulk("a"), bulk("m2")])]);
    assert!(matches!(&at(1)[0], Value::Error(e) if e.starts_with(b"ERR Can't execute 'get'")), "{:?}", at(1));
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let got = run(server.resp);
        for ((step, want), (_, got)) in want.iter().zip(&got) {
            assert_eq!(got, want, "{mode:?}: step {step} ({:?})", SCENARIO_TEXT(*step));
        }
        assert_eq!(got.len(), want.len());
        server.stop();
    }
}

#[allow(non_snake_case)]
fn SCENARIO_TEXT(step: usize) -> String {
    match SCENARIO[step] {
        Call(c, args, _) | Sorted(c, args) | Quiet(c, args) => format!("client {c}: {}", args.join(" ")),
        Read(c) => format!("client {c} reads"),
        Close(c) => format!("client {c} closes"),
    }
}

/// A subscriber that reads nothing: once more than Redis's 32 MiB limit
/// waits for it, it is closed (its socket reaches end of file after what
/// was sent), while the publisher and the server go on.
#[test]
fn a_subscriber_that_stops_reading_is_closed_at_the_output_limit() {
    let pool = Pool::new();
    let server = start(&pool.path, pmwire_kv_server::Mode::Copy);
    let mut sub = RespClient::connect(server.resp).expect("connect");
    assert_eq!(sub.call(&["SUBSCRIBE", "flood"]).expect("reply"), Value::Array(vec![bulk("subscribe"), bulk("flood"), Value::Integer(1)]));
    let mut publisher = RespClient::connect(server.resp).expect("connect");
    let message = "x".repeat(1 << 20);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut published = 0;
    // Published until no one receives: the subscriber was closed.
    loop {
        assert!(Instant::now() < deadline, "the subscriber was never closed ({published} MiB published)");
        match publisher.call(&["PUBLISH", "flood", &message]).expect("reply") {
            Value::Integer(1) => published += 1,
            Value::Integer(0) => break,
            other => panic!("PUBLISH answered {other:?}"),
        }
        assert!(published < 1024, "1 GiB published to a subscriber that reads nothing, and it is still open");
    }
    assert!(published > 32, "closed after {published} MiB, before the limit");
    // The subscriber's socket ends after what was sent to it.
    sub.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut stream = sub.into_stream();
    let mut sink = vec![0u8; 1 << 20];
    let mut got = 0usize;
    loop {
        match stream.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("reading the closed subscriber after {got} bytes: {e}"),
        }
    }
    assert!(got < published << 20, "everything was sent: nothing was dropped");
    assert_eq!(publisher.call(&["PING"]).expect("reply"), Value::Simple(b"PONG".to_vec()));
    let server = server.stop();
    assert!(server.service().stats().pubsub_closed >= 1);
}
