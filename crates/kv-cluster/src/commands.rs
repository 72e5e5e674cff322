//! Which commands go through the log, and which are served by a member
//! alone ([`class`]).
//!
//! A *write* changes the keyspace and is replicated: an entry of its own,
//! or a transaction's. A *read* changes nothing: a member serves it from
//! its applied state through [`crate::RedisMachine::read`] (after a
//! ReadIndex, or stale on `READONLY`), and it may also sit in a transaction,
//! whose entry runs it with the writes. A *blocking* command is a write
//! that may wait ([`crate::Applied::blocked`]). A *session* command is
//! about the connection or the member (AUTH, HELLO, CLIENT, CONFIG, INFO,
//! MULTI/EXEC/WATCH themselves...): the serving member answers it, and an
//! entry that carries one is refused, identically everywhere
//! ([`crate::EntryError::NotReplicated`]). A name this build does not know is
//! left to the executor, which answers Redis's unknown-command error the
//! same on every member.

/// What a command is to replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Reads only: served by a member alone, or run inside a transaction.
    Read,
    /// Writes: replicated.
    Write,
    /// Writes, and may wait for a list or a sorted set (BLPOP, BZPOPMIN...).
    Blocking,
    /// The connection's or the member's own business: never in an entry.
    Session,
    /// Not a command this build knows (the executor answers the error).
    Unknown,
}

/// Commands that only read.
#[rustfmt::skip]
pub const READS: &[&str] = &[
    "bitcount", "bitpos", "dbsize", "dump", "echo", "eval_ro", "evalsha_ro", "exists", "expiretime", "fcall_ro", "geodist", "geohash", "geopos", "georadius_ro",
    "georadiusbymember_ro", "geosearch", "get", "getbit",
    "getrange", "hexists", "hget", "hgetall", "hkeys", "hlen", "hmget", "hrandfield", "hscan", "hstrlen", "hvals",
    "keys", "lcs", "lindex", "llen", "lpos", "lrange", "memory", "mget", "object", "pexpiretime", "ping", "pttl", "randomkey", "scan",
    "scard", "sdiff", "select", "sinter", "sintercard", "sismember", "smembers", "smismember", "sort_ro", "srandmember", "sscan",
    "strlen", "substr", "sunion", "time", "touch", "ttl", "type", "xinfo", "xlen", "xpending", "xrange", "xread", "xrevrange", "zcard", "zcount",
    "zdiff", "zinter", "zintercard", "zlexcount", "zmscore", "zrandmember", "zrange", "zrangebylex", "zrangebyscore",
    "zrank", "zrevrange", "zrevrangebylex", "zrevrangebyscore", "zrevrank", "zscan", "zscore", "zunion",
];

/// Commands that write.
#[rustfmt::skip]
pub const WRITES: &[&str] = &[
    "append", "bitop", "copy", "decr", "decrby", "del", "eval", "evalsha", "expire", "expireat", "fcall", "flushall",
    "flushdb", "function", "geoadd", "georadius", "georadiusbymember", "geosearchstore", "getdel", "getex", "getset", "hdel", "hincrby", "hincrbyfloat", "hmset", "hset", "hsetnx", "incr",
    "incrby", "incrbyfloat", "linsert", "lmove", "lmpop", "lpop", "lpush", "lpushx", "lrem", "lset", "ltrim", "mset",
    "msetnx", "persist", "pexpire", "pexpireat", "psetex", "publish", "rename", "renamenx", "restore", "rpop", "rpoplpush", "rpush",
    "rpushx", "sadd", "script", "sdiffstore", "set", "setbit", "setex", "setnx", "setrange", "sinterstore", "smove",
    "sort", "spop", "spublish", "srem", "sunionstore", "unlink", "xack", "xadd", "xautoclaim", "xclaim", "xdel", "xgroup", "xreadgroup", "xsetid",
    "xtrim", "zadd", "zdiffstore", "zincrby", "zinterstore", "zmpop",
    "zpopmax", "zpopmin", "zrangestore", "zrem", "zremrangebylex", "zremrangebyrank", "zremrangebyscore",
    "zunionstore",
];

/// Commands that write and may wait.
#[rustfmt::skip]
pub const BLOCKING: &[&str] = &["blmove", "blmpop", "blpop", "brpop", "brpoplpush", "bzmpop", "bzpopmax", "bzpopmin"];

/// Commands a member answers alone, never replicated.
#[rustfmt::skip]
pub const SESSION: &[&str] = &[
    "acl", "auth", "bgsave", "client", "cluster", "command", "config", "discard", "exec", "hello", "info", "lastsave", "monitor",
    "multi", "psubscribe", "pubsub", "punsubscribe", "quit", "reset", "save", "shutdown", "ssubscribe", "subscribe",
    "sunsubscribe", "unsubscribe", "unwatch", "watch",
];

/// The class of the command named `name` (any case).
pub fn class(name: &[u8]) -> Class {
    if name.len() > 32 {
        return Class::Unknown;
    }
    // Lowered on the stack: this runs for every command a member serves or applies.
    let mut buf = [0u8; 32];
    let lower = &mut buf[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let lower = &*lower;
    let is = |table: &[&str]| table.binary_search_by(|n| n.as_bytes().cmp(lower)).is_ok();
    if is(READS) {
        Class::Read
    } else if is(WRITES) {
        Class::Write
    } else if is(BLOCKING) {
        Class::Blocking
    } else if is(SESSION) {
        Class::Session
    } else {
        Class::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_and_disjoint() {
        for t in [READS, WRITES, BLOCKING, SESSION] {
            assert!(t.windows(2).all(|w| w[0] < w[1]), "sorted: {t:?}");
        }
        let mut all: Vec<&str> = [READS, WRITES, BLOCKING, SESSION].concat();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a command in two tables");
    }

    #[test]
    fn classes() {
        assert_eq!(class(b"GET"), Class::Read);
        assert_eq!(class(b"sEt"), Class::Write);
        assert_eq!(class(b"BLPOP"), Class::Blocking);
        assert_eq!(class(b"watch"), Class::Session);
        assert_eq!(class(b"nosuch"), Class::Unknown);
        // XREADGROUP changes the group's PEL: replicated (with BLOCK, parked as a blocking pop is).
        assert_eq!(class(b"XREADGROUP"), Class::Write);
        assert_eq!(class(b"xpending"), Class::Read);
        // DUMP reads a key; RESTORE writes one (with a relative TTL, at the
        // time the log's entry carries, as every TIME command).
        assert_eq!((class(b"DUMP"), class(b"restore")), (Class::Read, Class::Write));
        assert_eq!((class(b"LCS"), class(b"memory"), class(b"ZMPOP")), (Class::Read, Class::Read, Class::Write));
        // The sorted sets' blocking pops park as the lists' do.
        assert_eq!((class(b"BZPOPMIN"), class(b"bzpopmax"), class(b"BzMpop")), (Class::Blocking, Class::Blocking, Class::Blocking));
        // FUNCTION LOAD/DELETE/FLUSH/RESTORE change the libraries every member
        // holds: the container goes through the log, as SCRIPT does; FCALL as
        // EVALSHA, FCALL_RO as EVAL_RO.
        assert_eq!((class(b"FUNCTION"), class(b"fcall"), class(b"FCALL_RO")), (Class::Write, Class::Write, Class::Read));
        // CONFIG, RESETSTAT included, is the serving member's: its statistics and settings
        // are its own executor's, as Redis's are per server.
        assert_eq!(class(b"config"), Class::Session);
        // ACL users, CLUSTER (answered as a Redis without cluster support)
        // and SHUTDOWN are the serving member's own.
        assert_eq!((class(b"ACL"), class(b"cluster"), class(b"SHUTDOWN")), (Class::Session, Class::Session, Class::Session));
        // GEORADIUS[BYMEMBER] may STORE: writes, as SORT is; their _RO forms
        // and GEOSEARCH read, GEOSEARCHSTORE and GEOADD write.
        assert_eq!((class(b"GEORADIUS"), class(b"georadiusbymember"), class(b"geosearchstore"), class(b"GEOADD")), (Class::Write, Class::Write, Class::Write, Class::Write));
        assert_eq!((class(b"georadius_ro"), class(b"GEORADIUSBYMEMBER_RO"), class(b"geosearch")), (Class::Read, Class::Read, Class::Read));
        assert_eq!((class(b"geopos"), class(b"GEODIST"), class(b"geohash")), (Class::Read, Class::Read, Class::Read));
        assert_eq!(class(&[b'a'; 100]), Class::Unknown);
    }
}
