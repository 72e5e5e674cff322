//! Blocking sorted-set pops (BZPOPMIN BZPOPMAX BZMPOP) under the executor:
//! a set with members answers at once, an empty wait blocks and is served
//! by the write that stores a sorted set there (ZADD, ZUNIONSTORE, RENAME),
//! waiters in the order they blocked, each as Redis's
//! `serveClientsBlockedOnSortedSetKey` answers it; inside MULTI and scripts
//! they never block. And a flush answers a blocked XREADGROUP `-UNBLOCKED`
//! as Redis 7.0's `scanDatabaseForDeletedStreams` has it, while a blocked
//! list pop or XREAD waits on. (Replies are held to redis-server by
//! `tests/redis_diff.rs` and the kv-server scenario.)

use super::*;
use crate::chunked::ChunkConfig;
use crate::store::{Clock, MemKeyspace};

use super::fixture::run_line as run;

/// A server, its keyspace, a writer session and three more clients.
struct Fixture {
    server: Server,
    ks: MemKeyspace,
    writer: Session,
    clients: Vec<Session>,
}

impl Fixture {
    fn new(collections: ChunkConfig) -> Fixture {
        let mut server = Server::new(ServerConfig { collections, ..ServerConfig::default() });
        let writer = server.open_session();
        let clients = (0..3).map(|_| server.open_session()).collect();
        let mut ks = MemKeyspace::new();
        ks.set_clock(Clock::Fixed(1_000_000));
        Fixture { server, ks, writer, clients }
    }

    /// A command from the writer; its reply (the writer never blocks here).
    fn cmd(&mut self, line: &str) -> String {
        let (reply, flow) = run(&mut self.server, &mut self.writer, &mut self.ks, line);
        assert_eq!(flow, Flow::Continue, "{line}");
        reply
    }

    /// A command from client `c`: its reply and flow.
    fn from(&mut self, c: usize, line: &str) -> (String, Flow) {
        run(&mut self.server, &mut self.clients[c], &mut self.ks, line)
    }

    /// Client `c` sends `line` and blocks.
    fn block(&mut self, c: usize, line: &str) {
        assert_eq!(self.from(c, line), (String::new(), Flow::Block), "{line}");
    }

    /// Serves the ready keys as a driver does: (client index, answer) in
    /// the order served.
    fn serve(&mut self) -> Vec<(usize, String)> {
        let mut served = Vec::new();
        while let Some((key, id)) = self.server.next_ready(&mut self.ks) {
            let c = self.clients.iter().position(|s| s.id() == id).expect("a fixture client");
            let mut answer: Vec<u8> = Vec::new();
            self.server.serve_blocked(&mut self.clients[c], &mut self.ks, &key, &mut answer);
            self.server.unblock(&mut self.clients[c]);
            served.push((c, String::from_utf8_lossy(&answer).into_owned()));
        }
        served
    }
}

fn fixture() -> Fixture {
    Fixture::new(ChunkConfig::default())
}

#[test]
fn a_sorted_set_with_members_answers_at_once_in_resp2_and_resp3() {
    let mut f = fixture();
    f.cmd("ZADD z 1 a 2 b 3 c");
    f.cmd("SET str x");
    assert_eq!(f.from(0, "BZPOPMIN none z 0").0, "*3\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_eq!(f.from(0, "BZPOPMAX z 0").0, "*3\r\n$1\r\nz\r\n$1\r\nc\r\n$1\r\n3\r\n");
    f.from(0, "HELLO 3");
    assert_eq!(f.from(0, "BZPOPMAX z 0").0, "*3\r\n$1\r\nz\r\n$1\r\nb\r\n,2\r\n");
    assert_eq!(f.cmd("EXISTS z"), ":0\r\n", "the emptied set is deleted");
    f.cmd("ZADD z 1 a 2 b 3 c");
    assert_eq!(f.from(0, "BZMPOP 0 2 none z MAX COUNT 2").0, "*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$1\r\nc\r\n,3\r\n*2\r\n$1\r\nb\r\n,2\r\n");
    f.from(0, "HELLO 2");
    assert_eq!(f.from(0, "BZMPOP 0 1 z MIN COUNT 10").0, "*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n");
    // A wrong type before a set answers WRONGTYPE and pops nothing.
    f.cmd("ZADD z 5 e");
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    assert_eq!(f.from(0, "BZPOPMIN str z 0").0, wrongtype);
    assert_eq!(f.from(0, "BZMPOP 0 2 str z MIN").0, wrongtype);
    assert_eq!(f.cmd("ZCARD z"), ":1\r\n");
}

#[test]
fn arguments_are_checked_in_redis_order() {
    let mut f = fixture();
    let err = |f: &mut Fixture, line: &str| f.from(0, line).0;
    assert_eq!(err(&mut f, "BZPOPMIN z x"), "-ERR timeout is not a float or out of range\r\n");
    assert_eq!(err(&mut f, "BZPOPMIN z -1"), "-ERR timeout is negative\r\n");
    assert_eq!(err(&mut f, "BZPOPMAX z"), "-ERR wrong number of arguments for 'bzpopmax' command\r\n");
    assert_eq!(err(&mut f, "BZMPOP 0 0 z MIN"), "-ERR numkeys should be greater than 0\r\n");
    assert_eq!(err(&mut f, "BZMPOP 0 3 z MIN"), "-ERR syntax error\r\n");
    assert_eq!(err(&mut f, "BZMPOP 0 1 z LEFT"), "-ERR syntax error\r\n");
    assert_eq!(err(&mut f, "BZMPOP 0 1 z MIN COUNT 0"), "-ERR count should be greater than 0\r\n");
    assert_eq!(err(&mut f, "BZMPOP 0 1 z MIN COUNT 1 COUNT 1"), "-ERR syntax error\r\n");
    // The other arguments before the timeout, as BLMPOP.
    assert_eq!(err(&mut f, "BZMPOP x 0 z MIN"), "-ERR numkeys should be greater than 0\r\n");
    assert_eq!(err(&mut f, "BZMPOP x 1 z MIN"), "-ERR timeout is not a float or out of range\r\n");
    assert_eq!(err(&mut f, "BZMPOP"), "-ERR wrong number of arguments for 'bzmpop' command\r\n");
    assert_eq!(f.server.blocked_clients(), 0, "no refused command blocks");
}

#[test]
fn waiters_are_served_in_blocking_order_by_what_stores_a_sorted_set() {
    let mut f = fixture();
    f.block(0, "BZPOPMIN z 0");
    f.block(1, "BZMPOP 0 2 y z MAX COUNT 2");
    f.block(2, "BZPOPMAX z 0");
    assert_eq!(f.server.blocked_clients(), 3);
    // A list at the key serves no sorted-set waiter.
    f.cmd("RPUSH z l");
    assert!(f.serve().is_empty());
    f.cmd("DEL z");
    // Four members: the first waiter takes the lowest, the second two of the
    // highest, the third the last.
    f.cmd("ZADD z 1 a 2 b 3 c 4 d");
    let served = f.serve();
    assert_eq!(
        served,
        vec![
            (0, "*3\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\n1\r\n".to_string()),
            (1, "*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$1\r\nd\r\n$1\r\n4\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n".to_string()),
            (2, "*3\r\n$1\r\nz\r\n$1\r\nb\r\n$1\r\n2\r\n".to_string()),
        ]
    );
    assert_eq!(f.cmd("EXISTS z"), ":0\r\n");
    assert_eq!(f.server.blocked_clients(), 0);
    // One member for two waiters: the first takes it, the second waits on.
    f.block(0, "BZPOPMAX w 0");
    f.block(1, "BZPOPMIN w 0");
    f.cmd("ZADD w 7 only");
    assert_eq!(f.serve(), vec![(0, "*3\r\n$1\r\nw\r\n$4\r\nonly\r\n$1\r\n7\r\n".to_string())]);
    assert_eq!(f.server.blocked_clients(), 1);
    // ZUNIONSTORE onto the key serves it; so does RENAME of a sorted set onto it.
    f.cmd("ZADD src 5 s");
    f.cmd("ZUNIONSTORE w 1 src");
    assert_eq!(f.serve(), vec![(1, "*3\r\n$1\r\nw\r\n$1\r\ns\r\n$1\r\n5\r\n".to_string())]);
    f.block(2, "BZPOPMIN r 0");
    f.cmd("RENAME src r");
    assert_eq!(f.serve(), vec![(2, "*3\r\n$1\r\nr\r\n$1\r\ns\r\n$1\r\n5\r\n".to_string())]);
    // A served pop is a write: WATCH sees it.
    f.block(0, "BZPOPMIN k 0");
    f.cmd("WATCH k");
    f.cmd("ZADD k 1 m");
    f.serve();
    f.cmd("MULTI");
    f.cmd("PING");
    assert_eq!(f.cmd("EXEC"), "*-1\r\n");
}

#[test]
fn a_multi_key_waiter_is_served_from_the_key_made_ready() {
    let mut f = fixture();
    f.block(0, "BZPOPMIN a b a 0");
    f.block(1, "BZMPOP 0 2 a b MIN");
    f.cmd("ZADD b 1 x 2 y");
    assert_eq!(
        f.serve(),
        vec![
            (0, "*3\r\n$1\r\nb\r\n$1\r\nx\r\n$1\r\n1\r\n".to_string()),
            (1, "*2\r\n$1\r\nb\r\n*1\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n".to_string()),
        ]
    );
    assert_eq!(f.server.blocked_clients(), 0, "each left every key it waited on");
    f.cmd("ZADD a 1 x");
    assert!(f.serve().is_empty());
}

#[test]
fn a_chunked_sorted_set_serves_waiters_too() {
    let mut f = Fixture::new(ChunkConfig::tiny());
    f.block(0, "BZPOPMAX big 0");
    f.cmd("ZADD big 1 a 2 b 3 c 4 d 5 e 6 f");
    assert_eq!(f.serve(), vec![(0, "*3\r\n$3\r\nbig\r\n$1\r\nf\r\n$1\r\n6\r\n".to_string())]);
    assert_eq!(f.from(1, "BZMPOP 1 1 big MIN COUNT 2").0, "*2\r\n$3\r\nbig\r\n*2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n");
    assert_eq!(f.cmd("ZCARD big"), ":3\r\n");
}

#[test]
fn inside_multi_and_scripts_they_answer_as_timed_out() {
    let mut f = fixture();
    f.from(0, "MULTI");
    f.from(0, "BZPOPMIN none 0");
    f.from(0, "BZMPOP 0 1 none MAX");
    f.from(0, "ZADD z 1 a");
    f.from(0, "BZPOPMAX z 0");
    assert_eq!(f.from(0, "EXEC"), ("*4\r\n*-1\r\n*-1\r\n:1\r\n*3\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\n1\r\n".to_string(), Flow::Continue));
    assert_eq!(f.from(0, "EVAL return(redis.pcall('bzmpop','0','1','none','min')==false) 0").0, ":1\r\n");
    let refused = f.from(0, "EVAL return(redis.pcall('bzpopmin','none','0')['err']) 0").0;
    assert_eq!(refused, "$49\r\nERR This Redis command is not allowed from script\r\n");
    assert_eq!(f.server.blocked_clients(), 0);
}

#[test]
fn a_flush_unblocks_xreadgroup_waiters_and_leaves_the_others_waiting() {
    let mut f = fixture();
    f.cmd("XGROUP CREATE st g $ MKSTREAM");
    f.cmd("XGROUP CREATE st2 g $ MKSTREAM");
    f.block(0, "XREADGROUP GROUP g alice BLOCK 0 STREAMS st >");
    f.block(1, "BLPOP list 0");
    f.block(2, "XREAD BLOCK 0 STREAMS st2 $");
    f.cmd("FLUSHALL");
    assert_eq!(f.serve(), vec![(0, "-UNBLOCKED the stream key no longer exists\r\n".to_string())]);
    assert_eq!(f.server.blocked_clients(), 2, "BLPOP and XREAD wait on");
    // Inside MULTI as well; FLUSHDB as FLUSHALL.
    f.cmd("XGROUP CREATE st g $ MKSTREAM");
    f.block(0, "XREADGROUP GROUP g alice BLOCK 0 STREAMS st >");
    f.cmd("MULTI");
    f.cmd("FLUSHDB");
    f.cmd("XGROUP CREATE st g $ MKSTREAM");
    f.cmd("EXEC");
    assert!(f.serve().is_empty(), "the stream and its group are back when the waiter is served");
    // A write to the empty stream (another group) brings nothing to deliver.
    f.cmd("XGROUP CREATE st other $");
    assert!(f.serve().is_empty());
    f.cmd("XADD st 1-0 f v");
    assert_eq!(f.serve().len(), 1);
    f.cmd("XGROUP CREATE st h $");
    f.block(0, "XREADGROUP GROUP h alice BLOCK 0 STREAMS st >");
    f.cmd("FLUSHDB");
    assert_eq!(f.serve(), vec![(0, "-UNBLOCKED the stream key no longer exists\r\n".to_string())]);
}

#[test]
fn a_driver_that_attempts_again_learns_what_a_gone_stream_or_group_answers() {
    let mut f = fixture();
    let gone = |f: &mut Fixture, line: &'static str| {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        Server::xreadgroup_gone(&mut f.ks, &args).map(|r| String::from_utf8(r).unwrap())
    };
    let line = "XREADGROUP GROUP g c BLOCK 0 STREAMS a b > >";
    let unblocked = Some("-UNBLOCKED the stream key no longer exists\r\n".to_string());
    assert_eq!(gone(&mut f, line), unblocked);
    f.cmd("XGROUP CREATE a g $ MKSTREAM");
    f.cmd("XGROUP CREATE b g $ MKSTREAM");
    assert_eq!(gone(&mut f, line), None, "both hold the group");
    f.cmd("XGROUP DESTROY b g");
    assert_eq!(gone(&mut f, line), Some("-NOGROUP the consumer group this client was blocked on no longer exists\r\n".to_string()));
    f.cmd("SET a x");
    assert_eq!(gone(&mut f, line), unblocked, "a, first in order, holds no stream");
    assert_eq!(gone(&mut f, "XREAD BLOCK 0 STREAMS a $"), None);
}
