//! Consumer groups' stored form under the executor: every group, consumer
//! and PEL entry lives in the keyspace (a new server over it answers the
//! same), a deleted stream's group records are collected with its nodes,
//! an XACK or a one-entry XREADGROUP writes a few small records however long
//! the PEL, times come from the keyspace's clock, and a blocked XREADGROUP is
//! served by XADD or answered NOGROUP when its group goes.
//! (Replies are held to redis-server by `tests/redis_diff.rs`.)

use super::*;
use crate::chunked::collect_garbage;
use crate::store::{Clock, Keyspace};

const T0: u64 = 1_000_000;

use super::fixture::run_line as run;

use super::fixture::Fixture as Side;

fn side() -> Side {
    Side::at(crate::chunked::ChunkConfig::default(), T0)
}

impl Side {
    /// Internal entries written or deleted between `before` and now, and
    /// the bytes of those written.
    fn changed_since(&mut self, before: &[(Vec<u8>, Vec<u8>)]) -> (usize, usize) {
        let after = self.internal();
        let old: std::collections::HashMap<_, _> = before.iter().cloned().collect();
        let new: std::collections::HashMap<_, _> = after.iter().cloned().collect();
        let written: Vec<_> = after.iter().filter(|(k, v)| old.get(k) != Some(v)).collect();
        let deleted = before.iter().filter(|(k, _)| !new.contains_key(k)).count();
        (written.len() + deleted, written.iter().map(|(k, v)| k.len() + v.len()).sum())
    }

    fn group_state_entries(&mut self, gen: u64) -> usize {
        let prefix = crate::stream_group::state_prefix(gen);
        self.internal().iter().filter(|(k, _)| k.starts_with(&prefix)).count()
    }

    fn gen_of(&mut self, key: &str) -> u64 {
        self.stream_header(key).gen
    }
}

fn filled(entries: u64) -> Side {
    let mut s = side();
    for i in 1..=entries {
        s.cmd(&format!("XADD st {i}-0 f v{i}"));
    }
    assert_eq!(s.cmd("XGROUP CREATE st g 0"), "+OK\r\n");
    s
}

#[test]
fn groups_consumers_and_pels_live_in_the_keyspace() {
    let mut s = filled(5);
    s.cmd("XREADGROUP GROUP g alice COUNT 3 STREAMS st >");
    s.cmd("XREADGROUP GROUP g bob STREAMS st >");
    s.cmd("XACK st g 2-0");
    s.cmd("XGROUP CREATECONSUMER st g carol");
    let queries = ["XPENDING st g", "XPENDING st g - + 10", "XINFO GROUPS st", "XINFO CONSUMERS st g", "XINFO STREAM st FULL"];
    let want: Vec<String> = queries.iter().map(|q| s.cmd(q)).collect();
    assert!(want[0].starts_with("*4\r\n:4\r\n$3\r\n1-0\r\n$3\r\n5-0\r\n"), "{}", want[0]);
    // A new server over the same keyspace (all a restart keeps) answers alike.
    let mut server = Server::new(ServerConfig::default());
    let mut session = server.open_session();
    for (q, w) in queries.iter().zip(&want) {
        assert_eq!(&run(&mut server, &mut session, &mut s.ks, q).0, w, "{q}");
    }
}

#[test]
fn a_deleted_stream_takes_its_groups_and_a_copy_owns_its_own() {
    let mut s = filled(300);
    s.cmd("XREADGROUP GROUP g alice STREAMS st >");
    s.cmd("XGROUP CREATE st g2 $");
    let gen = s.gen_of("st");
    assert_eq!(s.group_state_entries(gen), 2 + 1 + 2 * 300, "two groups, a consumer, 300 PEL entries twice");
    assert_eq!(s.cmd("COPY st st2"), ":1\r\n");
    let gen2 = s.gen_of("st2");
    assert_eq!(s.group_state_entries(gen2), 603);
    assert_eq!(s.cmd("RENAME st st3"), "+OK\r\n");
    assert_eq!(s.cmd("XPENDING st3 g - + 1"), "*1\r\n*4\r\n$3\r\n1-0\r\n$5\r\nalice\r\n:0\r\n:1\r\n");
    assert_eq!(s.cmd("DEL st3"), ":1\r\n");
    while collect_garbage(&mut s.ks, 7).expect("collect") > 0 {}
    assert_eq!(s.group_state_entries(gen), 0, "the deleted stream's group records were collected");
    let left = s.internal().iter().filter(|(k, _)| k[0] == 0 && k[1..9] == gen.to_be_bytes()).count();
    assert_eq!(left, 0, "nothing of the deleted stream is left");
    assert_eq!(s.cmd("XACK st2 g 1-0 2-0"), ":2\r\n");
    assert_eq!(s.group_state_entries(gen2), 599);
    // A group destroyed and a consumer deleted leave none of their records.
    assert_eq!(s.cmd("XGROUP DELCONSUMER st2 g alice"), ":298\r\n");
    assert_eq!(s.group_state_entries(gen2), 2);
    assert_eq!(s.cmd("XGROUP DESTROY st2 g"), ":1\r\n");
    assert_eq!(s.cmd("XGROUP DESTROY st2 g2"), ":1\r\n");
    assert_eq!(s.group_state_entries(gen2), 0);
    // An expired stream's groups go with it too.
    s.cmd("XGROUP CREATE st2 g3 0");
    s.cmd("XREADGROUP GROUP g3 c COUNT 10 STREAMS st2 >");
    s.cmd("PEXPIRE st2 10");
    s.ks.set_clock(Clock::Fixed(T0 + 20));
    assert_eq!(s.cmd("EXISTS st2"), ":0\r\n");
    while collect_garbage(&mut s.ks, 7).expect("collect") > 0 {}
    assert_eq!(s.group_state_entries(gen2), 0);
}

#[test]
fn an_ack_or_a_delivery_of_one_entry_writes_a_few_small_records_however_long_the_pel() {
    let mut s = filled(10_000);
    assert_eq!(s.cmd("XREADGROUP GROUP g alice COUNT 9999 STREAMS st >").len() > 100_000, true);
    assert_eq!(s.cmd("XPENDING st g").split("\r\n").nth(1), Some(":9999"));
    let before = s.internal();
    assert_eq!(s.cmd("XACK st g 5000-0"), ":1\r\n");
    let (entries, bytes) = s.changed_since(&before);
    // The PEL entry and its consumer-PEL twin deleted, the group and consumer records rewritten.
    assert_eq!(entries, 4, "XACK of one entry");
    assert!(bytes < 200, "XACK wrote {bytes} bytes");
    let before = s.internal();
    s.cmd("XREADGROUP GROUP g bob COUNT 1 STREAMS st >");
    let (entries, bytes) = s.changed_since(&before);
    // A PEL entry and its twin, the group, and bob's new record.
    assert_eq!(entries, 4, "XREADGROUP of one entry");
    assert!(bytes < 250, "XREADGROUP wrote {bytes} bytes");
    let before = s.internal();
    assert_eq!(s.cmd("XCLAIM st g bob 0 7000-0 JUSTID"), "*1\r\n$6\r\n7000-0\r\n");
    let (entries, _) = s.changed_since(&before);
    assert_eq!(entries, 5, "the NACK, one twin out and one in, both consumers");
    // The summary's last ID is found without reading the whole PEL: right.
    assert!(s.cmd("XPENDING st g").contains("$7\r\n10000-0\r\n"));
}

#[test]
fn times_are_the_keyspace_clock() {
    let mut s = filled(3);
    s.cmd("XREADGROUP GROUP g alice COUNT 2 STREAMS st >");
    s.ks.set_clock(Clock::Fixed(T0 + 250));
    assert_eq!(
        s.cmd("XPENDING st g - + 10"),
        "*2\r\n*4\r\n$3\r\n1-0\r\n$5\r\nalice\r\n:250\r\n:1\r\n*4\r\n$3\r\n2-0\r\n$5\r\nalice\r\n:250\r\n:1\r\n"
    );
    assert_eq!(s.cmd("XPENDING st g IDLE 251 - + 10"), "*0\r\n");
    assert_eq!(s.cmd("XINFO CONSUMERS st g"), "*1\r\n*6\r\n$4\r\nname\r\n$5\r\nalice\r\n$7\r\npending\r\n:2\r\n$4\r\nidle\r\n:250\r\n");
    // Not idle long enough, then claimed with a chosen idle time and count.
    assert_eq!(s.cmd("XCLAIM st g bob 300 1-0"), "*0\r\n");
    assert_eq!(s.cmd("XCLAIM st g bob 200 1-0 IDLE 100 RETRYCOUNT 5 JUSTID"), "*1\r\n$3\r\n1-0\r\n");
    assert_eq!(s.cmd("XPENDING st g - + 1"), "*1\r\n*4\r\n$3\r\n1-0\r\n$3\r\nbob\r\n:100\r\n:5\r\n");
    assert!(s.cmd("XINFO STREAM st FULL").contains(&format!("$3\r\n1-0\r\n$3\r\nbob\r\n:{}\r\n:5\r\n", T0 + 150)));
    // XAUTOCLAIM takes what has been idle for 200 ms or more: 2-0.
    assert_eq!(s.cmd("XAUTOCLAIM st g carol 200 0 JUSTID"), "*3\r\n$3\r\n0-0\r\n*1\r\n$3\r\n2-0\r\n*0\r\n");
    // History read again (XAUTOCLAIM JUSTID counted no delivery): delivered again now.
    s.ks.set_clock(Clock::Fixed(T0 + 400));
    s.cmd("XREADGROUP GROUP g carol STREAMS st 0");
    assert_eq!(s.cmd("XPENDING st g 2-0 2-0 1"), "*1\r\n*4\r\n$3\r\n2-0\r\n$5\r\ncarol\r\n:0\r\n:2\r\n");
}

#[test]
fn a_blocked_xreadgroup_is_served_by_xadd_and_answered_nogroup_when_its_group_goes() {
    let mut s = filled(1);
    s.cmd("XREADGROUP GROUP g alice STREAMS st >");
    let mut other = s.server.open_session();
    let (reply, flow) = run(&mut s.server, &mut other, &mut s.ks, "XREADGROUP GROUP g bob BLOCK 0 STREAMS st >");
    assert_eq!((reply.as_str(), flow), ("", Flow::Block));
    // A write that brings nothing new past the group's last ID leaves it waiting.
    s.cmd("XGROUP CREATE st h 0");
    assert!(s.server.next_ready(&mut s.ks).is_none());
    s.cmd("XADD st 2-0 f v2");
    let (key, client) = s.server.next_ready(&mut s.ks).expect("served by XADD");
    assert_eq!((key.as_slice(), client), (&b"st"[..], other.id()));
    let mut answer: Vec<u8> = Vec::new();
    s.server.serve_blocked(&mut other, &mut s.ks, &key, &mut answer);
    s.server.unblock(&mut other);
    assert_eq!(String::from_utf8_lossy(&answer), "*1\r\n*2\r\n$2\r\nst\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv2\r\n");
    assert_eq!(s.cmd("XPENDING st g - + 10 bob"), "*1\r\n*4\r\n$3\r\n2-0\r\n$3\r\nbob\r\n:0\r\n:1\r\n");
    // Blocked again; the group destroyed: NOGROUP.
    let (_, flow) = run(&mut s.server, &mut other, &mut s.ks, "XREADGROUP GROUP g bob BLOCK 0 STREAMS st >");
    assert_eq!(flow, Flow::Block);
    s.cmd("XGROUP DESTROY st g");
    let (key, _) = s.server.next_ready(&mut s.ks).expect("woken by XGROUP DESTROY");
    let mut answer: Vec<u8> = Vec::new();
    s.server.serve_blocked(&mut other, &mut s.ks, &key, &mut answer);
    s.server.unblock(&mut other);
    assert_eq!(answer, b"-NOGROUP the consumer group this client was blocked on no longer exists\r\n");
    // Blocked in h; the key deleted: UNBLOCKED.
    let (_, flow) = run(&mut s.server, &mut other, &mut s.ks, "XREADGROUP GROUP h bob COUNT 1 BLOCK 0 STREAMS st >");
    assert_eq!(flow, Flow::Continue, "h has entries to deliver");
    s.cmd("XREADGROUP GROUP h bob STREAMS st >");
    let (_, flow) = run(&mut s.server, &mut other, &mut s.ks, "XREADGROUP GROUP h bob BLOCK 0 STREAMS st >");
    assert_eq!(flow, Flow::Block);
    s.cmd("DEL st");
    let (key, _) = s.server.next_ready(&mut s.ks).expect("woken by DEL");
    let mut answer: Vec<u8> = Vec::new();
    s.server.serve_blocked(&mut other, &mut s.ks, &key, &mut answer);
    s.server.unblock(&mut other);
    assert_eq!(answer, b"-UNBLOCKED the stream key no longer exists\r\n");
}

#[test]
fn a_damaged_group_record_answers_an_error() {
    let mut s = filled(2);
    let gen = s.gen_of("st");
    s.ks.internal_put(&crate::stream_group::group_key(gen, 1), b"short").expect("put");
    let reply = s.cmd("XREADGROUP GROUP g c STREAMS st >");
    assert!(reply.starts_with("-ERR stored value is corrupt"), "{reply}");
}
