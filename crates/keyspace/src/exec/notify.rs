//! Keyspace notifications, as Redis 7.0's `notify.c` makes them: with
//! `notify-keyspace-events` set (CONFIG SET, [`parse_flags`]), a write
//! publishes `__keyspace@0__:<key>` with the event's name and
//! `__keyevent@0__:<event>` with the key, through pub/sub
//! ([`super::pubsub`]), to whoever is subscribed then. Nothing of it is
//! durable, as in Redis. Off (the default), nothing is recorded or looked
//! up: a command runs as it would without this module.
//!
//! Where the events come from:
//! - The events of a command whose event is fixed are in one table,
//!   [`FIXED`], by command name. Such a command runs under a
//!   [`crate::recording::Recording`] keyspace, and after it the executor
//!   publishes its event for each key it wrote, as [`Style`] says (a
//!   collection it emptied also gets `del`, as Redis's `lpop` then `del`).
//! - A command whose event depends on what it did (SET with a deadline
//!   adds `expire`, EXPIRE in the past is a `del`, ZADD INCR is `zincr`,
//!   a move names two keys...) reports it from its own code
//!   ([`super::Ctx::notify`]), with the names of [`ev`].
//! - `new` for a key that did not exist before the command stored it
//!   (recorded by the keyspace wrapper), published just before the key's
//!   first event, as Redis's `dbAdd` precedes the command's event.
//! - `expired` for a key found expired when read (the keyspace's lazy
//!   expiry, [`crate::store::Keyspace::take_expired`]), before the
//!   command's events, and for each key the active sweep deletes
//!   ([`super::Server::notify_expired`]).
//!
//! Not emitted: `evicted` (pmwire never evicts: its capacity is the pool),
//! module events (no modules), `keymiss` (the `m` class is accepted and
//! shown, as Redis shows it, but reads report no misses here).

use super::pubsub::PubSub;

/// `K`: `__keyspace@<db>__:<key>` messages.
pub const KEYSPACE: u16 = 1 << 0;
/// `E`: `__keyevent@<db>__:<event>` messages.
pub const KEYEVENT: u16 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME...).
pub const GENERIC: u16 = 1 << 2;
/// `$`: string commands.
pub const STRING: u16 = 1 << 3;
/// `l`: list commands.
pub const LIST: u16 = 1 << 4;
/// `s`: set commands.
pub const SET: u16 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u16 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u16 = 1 << 7;
/// `x`: expired keys.
pub const EXPIRED: u16 = 1 << 8;
/// `e`: evicted keys (never, here).
pub const EVICTED: u16 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u16 = 1 << 10;
/// `m`: key misses (not part of `A`).
pub const KEY_MISS: u16 = 1 << 11;
/// `d`: module events.
pub const MODULE: u16 = 1 << 13;
/// `n`: a new key.
pub const NEW: u16 = 1 << 14;
/// `A`: `g$lshzxetd`.
pub const ALL: u16 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Redis's refusal of a bad `notify-keyspace-events` string.
pub const BAD_CLASS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// The flags a `notify-keyspace-events` string names (Redis's
/// `keyspaceEventsStringToFlags`, which reads up to the first NUL);
/// `None` for a character that names no class.
pub fn parse_flags(classes: &[u8]) -> Option<u16> {
    let mut flags = 0;
    for &c in classes.iter().take_while(|&&c| c != 0) {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The string CONFIG GET shows for `flags` (Redis's
/// `keyspaceEventsFlagsToString`: `A` for all of `ALL`, then `K`, `E`, `m`).
pub fn flags_string(flags: u16) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        let letters = [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ];
        letters.iter().filter(|(f, _)| flags & f != 0).for_each(|&(_, c)| s.push(c));
    }
    for (f, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & f != 0 {
            s.push(c);
        }
    }
    s
}

/// An event: its class and its name.
pub(crate) type Event = (u16, &'static str);

/// The events commands report from their own code (their names are
/// Redis's, each written once here).
pub(crate) mod ev {
    use super::*;
    pub const DEL: Event = (GENERIC, "del");
    pub const EXPIRE: Event = (GENERIC, "expire");
    pub const PERSIST: Event = (GENERIC, "persist");
    pub const RENAME_FROM: Event = (GENERIC, "rename_from");
    pub const RENAME_TO: Event = (GENERIC, "rename_to");
    pub const COPY_TO: Event = (GENERIC, "copy_to");
    pub const RESTORE: Event = (GENERIC, "restore");
    pub const EXPIRED: Event = (super::EXPIRED, "expired");
    pub const NEW: Event = (super::NEW, "new");
    pub const SET: Event = (STRING, "set");
    pub const LPUSH: Event = (LIST, "lpush");
    pub const RPUSH: Event = (LIST, "rpush");
    pub const LTRIM: Event = (LIST, "ltrim");
    pub const LPOP: Event = (LIST, "lpop");
    pub const RPOP: Event = (LIST, "rpop");
    pub const SADD: Event = (super::SET, "sadd");
    pub const SREM: Event = (super::SET, "srem");
    pub const ZADD: Event = (ZSET, "zadd");
    pub const ZINCR: Event = (ZSET, "zincr");
    pub const ZPOPMIN: Event = (ZSET, "zpopmin");
    pub const ZPOPMAX: Event = (ZSET, "zpopmax");
    pub const XADD: Event = (STREAM, "xadd");
    pub const XTRIM: Event = (STREAM, "xtrim");
    pub const XGROUP_CREATE: Event = (STREAM, "xgroup-create");
    pub const XGROUP_CREATECONSUMER: Event = (STREAM, "xgroup-createconsumer");
    pub const XGROUP_DELCONSUMER: Event = (STREAM, "xgroup-delconsumer");
    pub const XGROUP_DESTROY: Event = (STREAM, "xgroup-destroy");
    pub const XGROUP_SETID: Event = (STREAM, "xgroup-setid");
}

/// How a fixed event is published for the keys a command wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// The event for each key written; a key the command deleted (a
    /// collection it emptied) gets `del` after it.
    Each,
    /// A command that stores its result (SINTERSTORE...): the event for a
    /// key stored, only `del` for a key it deleted (an empty result).
    Store,
}

/// One row of [`FIXED`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed {
    pub command: &'static str,
    pub event: Event,
    pub style: Style,
}

macro_rules! fixed {
    ($($command:literal => $class:ident $event:literal $style:ident,)*) => {
        /// The commands whose event is fixed, by name (sorted), each with
        /// its event as Redis's code for it names it.
        pub(crate) static FIXED: &[Fixed] = &[$(Fixed { command: $command, event: ($class, $event), style: Style::$style }),*];
    };
}

fixed! {
    "append" => STRING "append" Each,
    "bitop" => STRING "set" Store,
    "decr" => STRING "incrby" Each,
    "decrby" => STRING "incrby" Each,
    "del" => GENERIC "del" Each,
    "georadius" => ZSET "georadiusstore" Store,
    "georadiusbymember" => ZSET "georadiusstore" Store,
    "geosearchstore" => ZSET "geosearchstore" Store,
    "getdel" => GENERIC "del" Each,
    "getset" => STRING "set" Each,
    "hdel" => HASH "hdel" Each,
    "hincrby" => HASH "hincrby" Each,
    "hincrbyfloat" => HASH "hincrbyfloat" Each,
    "hmset" => HASH "hset" Each,
    "hset" => HASH "hset" Each,
    "hsetnx" => HASH "hset" Each,
    "incr" => STRING "incrby" Each,
    "incrby" => STRING "incrby" Each,
    "incrbyfloat" => STRING "incrbyfloat" Each,
    "linsert" => LIST "linsert" Each,
    "lpop" => LIST "lpop" Each,
    "lpush" => LIST "lpush" Each,
    "lpushx" => LIST "lpush" Each,
    "lrem" => LIST "lrem" Each,
    "lset" => LIST "lset" Each,
    "mset" => STRING "set" Each,
    "msetnx" => STRING "set" Each,
    "rpop" => LIST "rpop" Each,
    "rpush" => LIST "rpush" Each,
    "rpushx" => LIST "rpush" Each,
    "sadd" => SET "sadd" Each,
    "sdiffstore" => SET "sdiffstore" Store,
    "setbit" => STRING "setbit" Each,
    "setnx" => STRING "set" Each,
    "setrange" => STRING "setrange" Each,
    "sinterstore" => SET "sinterstore" Store,
    "spop" => SET "spop" Each,
    "srem" => SET "srem" Each,
    "sunionstore" => SET "sunionstore" Store,
    "unlink" => GENERIC "del" Each,
    "xdel" => STREAM "xdel" Each,
    "xsetid" => STREAM "xsetid" Each,
    "xtrim" => STREAM "xtrim" Each,
    "zdiffstore" => ZSET "zdiffstore" Store,
    "zinterstore" => ZSET "zinterstore" Store,
    "zpopmax" => ZSET "zpopmax" Each,
    "zpopmin" => ZSET "zpopmin" Each,
    "zrangestore" => ZSET "zrangestore" Store,
    "zrem" => ZSET "zrem" Each,
    "zremrangebylex" => ZSET "zremrangebylex" Each,
    "zremrangebyrank" => ZSET "zremrangebyrank" Each,
    "zremrangebyscore" => ZSET "zremrangebyscore" Each,
    "zunionstore" => ZSET "zunionstore" Store,
}

/// The fixed event of command `name` (its table row's name), if it has one.
pub(crate) fn fixed(name: &str) -> Option<&'static Fixed> {
    FIXED.binary_search_by(|f| f.command.cmp(name)).ok().map(|i| &FIXED[i])
}

/// Publishes `event` on `key` as Redis's `notifyKeyspaceEvent` does, if
/// `flags` ask for its class.
pub(crate) fn publish(pubsub: &mut PubSub, flags: u16, (class, name): Event, key: &[u8]) {
    if flags & class == 0 {
        return;
    }
    if flags & KEYSPACE != 0 {
        let mut channel = b"__keyspace@0__:".to_vec();
        channel.extend_from_slice(key);
        pubsub.publish_message(&channel, name.as_bytes());
    }
    if flags & KEYEVENT != 0 {
        let channel = format!("__keyevent@0__:{name}");
        pubsub.publish_message(channel.as_bytes(), key);
    }
}

/// The events of a command with a fixed event that wrote `written` (keys
/// in the order first written, each once), given whether each is live
/// after it.
pub(crate) fn fixed_events(fixed: &Fixed, written: &[(Vec<u8>, bool)], out: &mut Vec<(Event, Vec<u8>)>) {
    for (key, live) in written {
        let del = fixed.event == ev::DEL;
        match (fixed.style, live) {
            (_, true) => out.push((fixed.event, key.clone())),
            (Style::Each, false) if !del => {
                out.push((fixed.event, key.clone()));
                out.push((ev::DEL, key.clone()));
            }
            (_, false) => out.push((ev::DEL, key.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_show_as_redis_does() {
        assert_eq!(parse_flags(b""), Some(0));
        assert_eq!(parse_flags(b"KEA").map(flags_string).as_deref(), Some("AKE"));
        assert_eq!(parse_flags(b"gKE").map(flags_string).as_deref(), Some("gKE"));
        assert_eq!(parse_flags(b"$lshzxeKE").map(flags_string).as_deref(), Some("$lshzxeKE"));
        assert_eq!(parse_flags(b"EA").map(flags_string).as_deref(), Some("AE"));
        assert_eq!(parse_flags(b"Kmn").map(flags_string).as_deref(), Some("nKm"));
        assert_eq!(parse_flags(b"KE\0q").map(flags_string).as_deref(), Some("KE"), "read to the NUL");
        assert_eq!(parse_flags(b"Kq"), None);
        assert_eq!(parse_flags(b"a"), None);
        assert!(ALL & KEY_MISS == 0 && ALL & NEW == 0);
    }

    #[test]
    fn the_fixed_table_is_sorted_and_names_commands() {
        assert!(FIXED.windows(2).all(|w| w[0].command < w[1].command));
        for f in FIXED {
            let info = super::super::commands::lookup(f.command.as_bytes()).unwrap_or_else(|| panic!("{} is a command", f.command));
            assert!(info.flags.contains(super::super::commands::Flags::WRITE), "{} writes", f.command);
        }
        assert_eq!(fixed("lpop").map(|f| f.event), Some((LIST, "lpop")));
        assert!(fixed("set").is_none(), "SET reports its own events");
    }

    #[test]
    fn an_emptied_collection_gets_del_after_its_event() {
        let mut out = Vec::new();
        fixed_events(fixed("lpop").unwrap(), &[(b"l".to_vec(), false)], &mut out);
        assert_eq!(out, vec![((LIST, "lpop"), b"l".to_vec()), (ev::DEL, b"l".to_vec())]);
        out.clear();
        fixed_events(fixed("sinterstore").unwrap(), &[(b"d".to_vec(), false)], &mut out);
        assert_eq!(out, vec![(ev::DEL, b"d".to_vec())]);
        out.clear();
        fixed_events(fixed("del").unwrap(), &[(b"a".to_vec(), false), (b"b".to_vec(), false)], &mut out);
        assert_eq!(out, vec![(ev::DEL, b"a".to_vec()), (ev::DEL, b"b".to_vec())]);
    }
}
