//! The command table: every command and subcommand the executor serves,
//! each named once, with its arity, key positions, [`Flags`] and handler.
//! Admission (the command exists, its arity, authentication, queued or run
//! inside MULTI), dispatch and COMMAND / COMMAND INFO all read this table,
//! and so does a driver that needs to know what a command may do
//! ([`lookup`], [`of_request`]): the replicated server proposes through its
//! log what may write and draws time and randomness for what needs them.
//!
//! Rows: a container command (CLIENT, CONFIG, COMMAND, OBJECT, ACL) has a
//! row of its own, with Redis's container arity and no flags, and one row
//! per subcommand named `container|sub`; a command runs under its
//! subcommand's row. Rows are sorted by name (looked up by binary search;
//! a container's subcommands follow it), which is COMMAND's order.
//!
//! The flags that have a Redis 7.0 counterpart agree with it (checked
//! against redis-server's COMMAND INFO by `tests/redis_diff.rs`
//! `command_flags_match_redis`): [`Flags::WRITE`], [`Flags::READONLY`],
//! [`Flags::ADMIN`], [`Flags::BLOCKING`], [`Flags::NO_AUTH`],
//! [`Flags::DENYOOM`] are Redis's
//! flags of those names; [`Flags::CONNECTION`] and [`Flags::MULTI`] are its
//! ACL categories `@connection` and `@transaction`; [`Flags::RANDOM`] is
//! part of its `nondeterministic_output` tip. [`Flags::TIME`] and
//! [`Flags::IMMEDIATE`] are ours. A command with none of WRITE, READONLY
//! and MULTI touches no key (a MULTI command handles a transaction: WATCH
//! reads its keys' deadlines, EXEC runs what was queued).
//!
//! RANDOM and TIME are also held to what a command does: after every
//! command the executor asserts that only a RANDOM command drew from the
//! server's generator and only a TIME command read the clock
//! ([`super::Server::random_draws`], [`super::Server::clock_reads`]), so the
//! unit, differential and server tests check them on every command they run.

use super::{acls, admin, bits, blocking, dump, functions, geo, hashes, keys, large, list_ops, lists, monitor, multi, pubsub, scripting, sets, sort, streams, strings, zsets};
use super::{lower, Ctx, Res};
use crate::store::{Keyspace, Kind};
use pmwire_resp::reply::ReplySink;
use pmwire_resp::request::Request;

/// What a command may do, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flags(u16);

impl Flags {
    /// No flag.
    pub const NONE: Flags = Flags(0);
    /// May change the keyspace (Redis: `write`).
    pub const WRITE: Flags = Flags(1 << 0);
    /// Reads the keyspace and changes nothing in it (Redis: `readonly`).
    pub const READONLY: Flags = Flags(1 << 1);
    /// Its reply or effect depends on a draw from the server's generator
    /// (SPOP SRANDMEMBER HRANDFIELD ZRANDMEMBER RANDOMKEY; Redis marks them
    /// `nondeterministic_output`).
    pub const RANDOM: Flags = Flags(1 << 2);
    /// Reads the clock beyond lazy expiry: converts a relative time to a
    /// deadline or back (SET EX, EXPIRE, TTL...), or compares a time it is
    /// given with now (EXPIREAT in the past deletes; EXEC checks watched
    /// keys that expired). Every command that reads a key also depends on
    /// the clock through lazy expiry; that is the keyspace's, not this flag's.
    pub const TIME: Flags = Flags(1 << 3);
    /// May wait for a key instead of answering (Redis: `blocking`).
    pub const BLOCKING: Flags = Flags(1 << 4);
    /// Administers the server (Redis: `admin`): CONFIG GET/SET, CLIENT UNBLOCK.
    pub const ADMIN: Flags = Flags(1 << 5);
    /// Concerns the connection only (Redis's `@connection` category): AUTH,
    /// HELLO, CLIENT..., SELECT, PING, ECHO, QUIT, COMMAND.
    pub const CONNECTION: Flags = Flags(1 << 6);
    /// A transaction command (Redis's `@transaction` category): MULTI EXEC
    /// DISCARD WATCH UNWATCH.
    pub const MULTI: Flags = Flags(1 << 7);
    /// Served before authentication (Redis: `no_auth`): AUTH, HELLO, QUIT.
    pub const NO_AUTH: Flags = Flags(1 << 8);
    /// Runs at once inside MULTI instead of being queued (Redis's
    /// `processCommand` list: EXEC DISCARD MULTI WATCH QUIT).
    pub const IMMEDIATE: Flags = Flags(1 << 9);
    /// Refused while used memory is above `maxmemory` (Redis: `denyoom`):
    /// the writes that may grow the keyspace.
    pub const DENYOOM: Flags = Flags(1 << 10);

    /// Every flag with its name, in bit order.
    pub const ALL: [(Flags, &'static str); 11] = [
        (Flags::WRITE, "write"),
        (Flags::READONLY, "readonly"),
        (Flags::RANDOM, "random"),
        (Flags::TIME, "time"),
        (Flags::BLOCKING, "blocking"),
        (Flags::ADMIN, "admin"),
        (Flags::CONNECTION, "connection"),
        (Flags::MULTI, "multi"),
        (Flags::NO_AUTH, "no_auth"),
        (Flags::IMMEDIATE, "immediate"),
        (Flags::DENYOOM, "denyoom"),
    ];

    /// Both sets' flags.
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the flags set, in bit order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Flags::ALL.into_iter().filter(move |(f, _)| self.contains(*f)).map(|(_, n)| n)
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandInfo {
    /// Lower-case name; `container|sub` for a subcommand.
    pub name: &'static str,
    /// Redis arity, the name included: positive, exactly that many
    /// arguments; negative, at least minus that many.
    pub arity: i32,
    /// Position of the first key (0: none), as COMMAND reports it.
    pub first_key: i32,
    /// Position of the last key (negative: from the end).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// What the command may do.
    pub flags: Flags,
}

impl CommandInfo {
    /// Whether `argc` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity > 0 { argc == arity } else { argc >= -arity }
    }

    /// Whether this row is a subcommand (`container|sub`).
    pub fn is_subcommand(&self) -> bool {
        self.name.contains('|')
    }

    /// The subcommands of a container command (none for another): the rows
    /// right after its own.
    pub fn subcommands(&self) -> impl Iterator<Item = &'static CommandInfo> + '_ {
        let after = row_position(self).map_or(TABLE.len(), |i| i + 1);
        TABLE[after..].iter().take_while(move |s| s.name.strip_prefix(self.name).is_some_and(|rest| rest.starts_with('|')))
    }

    /// Whether this command is a container (has subcommands).
    pub fn is_container(&self) -> bool {
        self.subcommands().next().is_some()
    }
}

/// The row of a command or subcommand (`client|id`), by name in any case.
pub fn lookup(name: &[u8]) -> Option<&'static CommandInfo> {
    let mut buf = [0u8; 32];
    position(lower(name, &mut buf)).map(|i| &TABLE[i])
}

/// Where the row named `lower_name` (lower-case) is. The table is sorted
/// by name, so a container's subcommands follow it (`|` sorts after every
/// letter; `the_table_is_sorted` checks both); a name is found by its
/// FNV-1a hash in an open-addressed index built once ([`NAME_INDEX`]), one
/// name compared, where a binary search compared nine (three lookups per
/// EVALSHA of a two-command script made them 7% of its CPU).
fn position(lower_name: &[u8]) -> Option<usize> {
    let slots = NAME_INDEX.get_or_init(name_index);
    let mask = slots.len() - 1;
    let mut at = fnv1a(lower_name) & mask;
    loop {
        let row = *slots.get(at)?;
        if row == NO_ROW {
            return None;
        }
        if TABLE[usize::from(row)].name.as_bytes() == lower_name {
            return Some(usize::from(row));
        }
        at = (at + 1) & mask;
    }
}

/// An empty slot of [`NAME_INDEX`].
const NO_ROW: u16 = u16::MAX;

/// The rows by name: a power-of-two slot count at least four times the
/// rows (probes stay short), each slot a row's position or [`NO_ROW`].
static NAME_INDEX: std::sync::OnceLock<Box<[u16]>> = std::sync::OnceLock::new();

fn name_index() -> Box<[u16]> {
    assert!(TABLE.len() < usize::from(NO_ROW), "row positions are 16-bit");
    let len = (TABLE.len() * 4).next_power_of_two();
    let mut slots = vec![NO_ROW; len].into_boxed_slice();
    for (row, info) in TABLE.iter().enumerate() {
        let mut at = fnv1a(info.name.as_bytes()) & (len - 1);
        while slots[at] != NO_ROW {
            at = (at + 1) & (len - 1);
        }
        slots[at] = row as u16;
    }
    slots
}

/// 64-bit FNV-1a of `bytes`, as an index.
fn fnv1a(bytes: &[u8]) -> usize {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    hash as usize
}

/// `info`'s position: by its address if it is a row of the table (as every
/// `&'static CommandInfo` handed out is), else by its name.
fn row_position(info: &CommandInfo) -> Option<usize> {
    let offset = (info as *const CommandInfo as usize).wrapping_sub(TABLE.as_ptr() as usize);
    let i = offset / std::mem::size_of::<CommandInfo>();
    if i < TABLE.len() && std::ptr::eq(&TABLE[i], info) {
        return Some(i);
    }
    position(info.name.as_bytes())
}

/// Every row, in the table's order (a row's position is its [`index`]).
pub fn table() -> &'static [CommandInfo] {
    TABLE
}

/// How many rows the table has.
pub fn table_len() -> usize {
    TABLE.len()
}

/// The position of `info`, a row of the table, in it: the index of its
/// counters ([`super::stats`]), found without comparing names.
pub fn index(info: &CommandInfo) -> usize {
    let offset = (info as *const CommandInfo as usize).wrapping_sub(TABLE.as_ptr() as usize);
    let i = offset / std::mem::size_of::<CommandInfo>();
    assert!(i < TABLE.len(), "{} is not a row of the table", info.name);
    assert!(offset % std::mem::size_of::<CommandInfo>() == 0);
    i
}

/// The commands (containers included, their subcommands not), in COMMAND's order.
pub fn commands() -> impl Iterator<Item = &'static CommandInfo> {
    TABLE.iter().filter(|s| !s.is_subcommand())
}

/// The row a request runs under: its command's, or for a container its
/// subcommand's; `None` if either is unknown (the request is refused).
pub fn of_request(req: &Request<'_>) -> Option<&'static CommandInfo> {
    let command = lookup(req.arg(0)).filter(|c| !c.is_subcommand())?;
    if !command.is_container() || req.len() < 2 {
        return Some(command);
    }
    subcommand(command, req.arg(1))
}

/// The subcommand `sub` (any case) of `container`.
pub(crate) fn subcommand(container: &CommandInfo, sub: &[u8]) -> Option<&'static CommandInfo> {
    let mut buf = [0u8; 32];
    let sub = lower(sub, &mut buf);
    container.subcommands().find(|s| s.name.as_bytes()[container.name.len() + 1..] == *sub)
}

/// Builds the table and the dispatch from one list of rows:
/// `"name", arity, (first, last, step), [FLAGS], [chunked Kind => |c, h| fast,] |c| handler;`.
/// A `chunked` fast path runs first when the key holds a chunked
/// collection of that kind ([`large::fast`]); `None` from it falls back to
/// the handler.
macro_rules! command_table {
    ($(
        $name:literal, $arity:literal, ($first:literal, $last:literal, $step:literal), [$($flag:ident)*],
        $(chunked $kind:ident => |$fc:ident, $fh:ident| $fast:expr,)?
        |$c:ident| $run:expr;
    )*) => {
        /// Every row, sorted by name (COMMAND's order).
        static TABLE: &[CommandInfo] = &[$(CommandInfo {
            name: $name,
            arity: $arity,
            first_key: $first,
            last_key: $last,
            step: $step,
            flags: Flags::NONE $(.union(Flags::$flag))*,
        }),*];

        /// Runs an admitted command under its row (a subcommand's for a container).
        pub(super) fn run<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(info: &CommandInfo, c: &mut Ctx<'_, '_, K, S>) -> Res {
            match info.name {
                $($name => {
                    $(if let Some(result) = large::fast(c, Kind::$kind, |$fc, $fh| $fast) {
                        return result;
                    })?
                    let $c = c;
                    $run
                })*
                other => unreachable!("no row named {other}"),
            }
        }
    };
}

command_table! {
    "acl", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "acl|cat", -2, (0, 0, 0), [], |c| acls::cat(c);
    "acl|deluser", -3, (0, 0, 0), [ADMIN], |c| acls::deluser(c);
    "acl|dryrun", -4, (0, 0, 0), [ADMIN], |c| acls::dryrun(c);
    "acl|genpass", -2, (0, 0, 0), [], |c| acls::genpass(c);
    "acl|getuser", 3, (0, 0, 0), [ADMIN], |c| acls::getuser(c);
    "acl|help", 2, (0, 0, 0), [], |c| acls::help(c);
    "acl|list", 2, (0, 0, 0), [ADMIN], |c| acls::list(c);
    "acl|load", 2, (0, 0, 0), [ADMIN], |c| acls::load_save(c);
    "acl|log", -2, (0, 0, 0), [ADMIN], |c| acls::log(c);
    "acl|save", 2, (0, 0, 0), [ADMIN], |c| acls::load_save(c);
    "acl|setuser", -3, (0, 0, 0), [ADMIN], |c| acls::setuser(c);
    "acl|users", 2, (0, 0, 0), [ADMIN], |c| acls::users(c);
    "acl|whoami", 2, (0, 0, 0), [], |c| acls::whoami(c);
    "append", 3, (1, 1, 1), [WRITE DENYOOM], |c| strings::append(c);
    "auth", -2, (0, 0, 0), [NO_AUTH CONNECTION], |c| admin::auth(c);
    "bgsave", -1, (0, 0, 0), [ADMIN], |c| admin::bgsave(c);
    "bitcount", -2, (1, 1, 1), [READONLY], |c| bits::bitcount(c);
    "bitop", -4, (2, -1, 1), [WRITE DENYOOM], |c| bits::bitop(c);
    "bitpos", -3, (1, 1, 1), [READONLY], |c| bits::bitpos(c);
    "blmove", 6, (1, 2, 1), [WRITE DENYOOM BLOCKING], |c| blocking::blmove(c);
    "blmpop", -5, (0, 0, 0), [WRITE BLOCKING], |c| blocking::blmpop(c);
    "blpop", -3, (1, -2, 1), [WRITE BLOCKING], |c| blocking::bpop(c, list_ops::End::Head);
    "brpop", -3, (1, -2, 1), [WRITE BLOCKING], |c| blocking::bpop(c, list_ops::End::Tail);
    "brpoplpush", 4, (1, 2, 1), [WRITE DENYOOM BLOCKING], |c| blocking::brpoplpush(c);
    "bzmpop", -5, (0, 0, 0), [WRITE BLOCKING], |c| blocking::bzmpop(c);
    "bzpopmax", -3, (1, -2, 1), [WRITE BLOCKING], |c| blocking::bzpop(c, true);
    "bzpopmin", -3, (1, -2, 1), [WRITE BLOCKING], |c| blocking::bzpop(c, false);
    "client", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "client|getname", 2, (0, 0, 0), [CONNECTION], |c| admin::client_getname(c);
    "client|id", 2, (0, 0, 0), [CONNECTION], |c| admin::client_id(c);
    "client|info", 2, (0, 0, 0), [CONNECTION], |c| admin::client_info(c);
    "client|kill", -3, (0, 0, 0), [ADMIN CONNECTION], |c| admin::client_kill(c);
    "client|list", -2, (0, 0, 0), [ADMIN CONNECTION], |c| admin::client_list(c);
    "client|reply", 3, (0, 0, 0), [CONNECTION], |c| admin::client_reply(c);
    "client|setname", 3, (0, 0, 0), [CONNECTION], |c| admin::client_setname(c);
    "client|unblock", -3, (0, 0, 0), [ADMIN CONNECTION], |c| blocking::client_unblock(c);
    "cluster", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "cluster|addslots", -3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|addslotsrange", -4, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|bumpepoch", 2, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|count-failure-reports", 3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|countkeysinslot", 3, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|delslots", -3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|delslotsrange", -4, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|failover", -2, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|flushslots", 2, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|forget", 3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|getkeysinslot", 4, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|help", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|info", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|keyslot", 3, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|links", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|meet", -4, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|myid", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|nodes", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|replicas", 3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|replicate", 3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|reset", -2, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|saveconfig", 2, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|set-config-epoch", 3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|setslot", -4, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|shards", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "cluster|slaves", 3, (0, 0, 0), [ADMIN], |c| admin::cluster(c);
    "cluster|slots", 2, (0, 0, 0), [], |c| admin::cluster(c);
    "command", -1, (0, 0, 0), [CONNECTION], |c| command(c);
    "command|count", 2, (0, 0, 0), [CONNECTION], |c| command_count(c);
    "command|docs", -2, (0, 0, 0), [CONNECTION], |c| command_docs(c);
    "command|info", -2, (0, 0, 0), [CONNECTION], |c| command_info(c);
    "config", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "config|get", -3, (0, 0, 0), [ADMIN], |c| admin::config_get(c);
    "config|resetstat", 2, (0, 0, 0), [ADMIN], |c| admin::config_resetstat(c);
    "config|set", -4, (0, 0, 0), [ADMIN], |c| admin::config_set(c);
    "copy", -3, (1, 2, 1), [WRITE DENYOOM], |c| keys::copy(c);
    "dbsize", 1, (0, 0, 0), [READONLY], |c| admin::dbsize(c);
    "decr", 2, (1, 1, 1), [WRITE DENYOOM], |c| strings::incr_by(c, -1);
    "decrby", 3, (1, 1, 1), [WRITE DENYOOM], |c| strings::decrby(c);
    "del", -2, (1, -1, 1), [WRITE], |c| strings::del(c);
    "discard", 1, (0, 0, 0), [MULTI IMMEDIATE], |c| multi::discard(c);
    "dump", 2, (1, 1, 1), [READONLY], |c| dump::dump(c);
    "echo", 2, (0, 0, 0), [CONNECTION], |c| admin::echo(c);
    "eval", -3, (0, 0, 0), [], |_c| unreachable!("EVAL is run by Server::execute itself");
    "eval_ro", -3, (0, 0, 0), [READONLY], |_c| unreachable!("EVAL_RO is run by Server::execute itself");
    "evalsha", -3, (0, 0, 0), [], |_c| unreachable!("EVALSHA is run by Server::execute itself");
    "evalsha_ro", -3, (0, 0, 0), [READONLY], |_c| unreachable!("EVALSHA_RO is run by Server::execute itself");
    "exec", 1, (0, 0, 0), [MULTI TIME IMMEDIATE], |_c| unreachable!("EXEC is run by Server::execute itself");
    "exists", -2, (1, -1, 1), [READONLY], |c| strings::exists(c);
    "expire", -3, (1, 1, 1), [WRITE TIME], |c| keys::expire(c, keys::ExpireCmd { seconds: true, relative: true });
    "expireat", -3, (1, 1, 1), [WRITE TIME], |c| keys::expire(c, keys::ExpireCmd { seconds: true, relative: false });
    "expiretime", 2, (1, 1, 1), [READONLY], |c| keys::ttl(c, false, true);
    "fcall", -3, (0, 0, 0), [], |_c| unreachable!("FCALL is run by Server::execute itself");
    "fcall_ro", -3, (0, 0, 0), [READONLY], |_c| unreachable!("FCALL_RO is run by Server::execute itself");
    "flushall", -1, (0, 0, 0), [WRITE], |c| admin::flush(c);
    "flushdb", -1, (0, 0, 0), [WRITE], |c| admin::flush(c);
    "function", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "function|delete", 3, (0, 0, 0), [WRITE], |c| functions::function_delete(c);
    "function|dump", 2, (0, 0, 0), [], |c| functions::function_dump(c);
    "function|flush", -2, (0, 0, 0), [WRITE], |c| functions::function_flush(c);
    "function|help", 2, (0, 0, 0), [], |c| functions::function_help(c);
    "function|kill", 2, (0, 0, 0), [], |c| functions::function_kill(c);
    "function|list", -2, (0, 0, 0), [], |c| functions::function_list(c);
    "function|load", -3, (0, 0, 0), [WRITE DENYOOM], |c| functions::function_load(c);
    "function|restore", -3, (0, 0, 0), [WRITE DENYOOM], |c| functions::function_restore(c);
    "function|stats", 2, (0, 0, 0), [], |c| functions::function_stats(c);
    "geoadd", -5, (1, 1, 1), [WRITE DENYOOM], |c| geo::geoadd(c);
    "geodist", -4, (1, 1, 1), [READONLY], |c| geo::geodist(c);
    "geohash", -2, (1, 1, 1), [READONLY], |c| geo::geohash(c);
    "geopos", -2, (1, 1, 1), [READONLY], |c| geo::geopos(c);
    "georadius", -6, (1, 1, 1), [WRITE DENYOOM], |c| geo::search(c, geo::RADIUS_COORDS);
    "georadius_ro", -6, (1, 1, 1), [READONLY], |c| geo::search(c, geo::RADIUS_COORDS | geo::RADIUS_NOSTORE);
    "georadiusbymember", -5, (1, 1, 1), [WRITE DENYOOM], |c| geo::search(c, geo::RADIUS_MEMBER);
    "georadiusbymember_ro", -5, (1, 1, 1), [READONLY], |c| geo::search(c, geo::RADIUS_MEMBER | geo::RADIUS_NOSTORE);
    "geosearch", -7, (1, 1, 1), [READONLY], |c| geo::search(c, geo::GEOSEARCH);
    "geosearchstore", -8, (1, 2, 1), [WRITE DENYOOM], |c| geo::search(c, geo::GEOSEARCH | geo::GEOSEARCHSTORE);
    "get", 2, (1, 1, 1), [READONLY], |c| strings::get(c);
    "getbit", 3, (1, 1, 1), [READONLY], |c| bits::getbit(c);
    "getdel", 2, (1, 1, 1), [WRITE], |c| strings::getdel(c);
    "getex", -2, (1, 1, 1), [WRITE TIME], |c| strings::getex(c);
    "getrange", 4, (1, 1, 1), [READONLY], |c| strings::getrange(c);
    "getset", 3, (1, 1, 1), [WRITE DENYOOM], |c| strings::getset(c);
    "hdel", -3, (1, 1, 1), [WRITE], chunked Hash => |c, h| large::hdel(c, h), |c| hashes::hdel(c);
    "hello", -1, (0, 0, 0), [NO_AUTH CONNECTION], |c| admin::hello(c);
    "hexists", 3, (1, 1, 1), [READONLY], chunked Hash => |c, h| large::hexists(c, h), |c| hashes::hexists(c);
    "hget", 3, (1, 1, 1), [READONLY], chunked Hash => |c, h| large::hget(c, h), |c| hashes::hget(c);
    "hgetall", 2, (1, 1, 1), [READONLY], |c| hashes::hgetall(c);
    "hincrby", 4, (1, 1, 1), [WRITE DENYOOM], |c| hashes::hincrby(c);
    "hincrbyfloat", 4, (1, 1, 1), [WRITE DENYOOM], |c| hashes::hincrbyfloat(c);
    "hkeys", 2, (1, 1, 1), [READONLY], |c| hashes::hkeys_or_vals(c, true);
    "hlen", 2, (1, 1, 1), [READONLY], chunked Hash => |c, h| large::count(c, h), |c| hashes::hlen(c);
    "hmget", -3, (1, 1, 1), [READONLY], chunked Hash => |c, h| large::hmget(c, h), |c| hashes::hmget(c);
    "hmset", -4, (1, 1, 1), [WRITE DENYOOM], chunked Hash => |c, h| large::hset(c, h, true), |c| hashes::hset(c, true);
    "hrandfield", -2, (1, 1, 1), [READONLY RANDOM], |c| hashes::hrandfield(c);
    "hscan", -3, (1, 1, 1), [READONLY], |c| hashes::hscan(c);
    "hset", -4, (1, 1, 1), [WRITE DENYOOM], chunked Hash => |c, h| large::hset(c, h, false), |c| hashes::hset(c, false);
    "hsetnx", 4, (1, 1, 1), [WRITE DENYOOM], |c| hashes::hsetnx(c);
    "hstrlen", 3, (1, 1, 1), [READONLY], |c| hashes::hstrlen(c);
    "hvals", 2, (1, 1, 1), [READONLY], |c| hashes::hkeys_or_vals(c, false);
    "incr", 2, (1, 1, 1), [WRITE DENYOOM], |c| strings::incr_by(c, 1);
    "incrby", 3, (1, 1, 1), [WRITE DENYOOM], |c| strings::incrby(c);
    "incrbyfloat", 3, (1, 1, 1), [WRITE DENYOOM], |c| strings::incrbyfloat(c);
    "info", -1, (0, 0, 0), [], |c| admin::info(c);
    "keys", 2, (0, 0, 0), [READONLY], |c| admin::keys(c);
    "lastsave", 1, (0, 0, 0), [TIME], |c| admin::lastsave(c);
    "lcs", -3, (1, 2, 1), [READONLY], |c| strings::lcs(c);
    "lindex", 3, (1, 1, 1), [READONLY], chunked List => |c, h| large::lindex(c, h), |c| lists::lindex(c);
    "linsert", 5, (1, 1, 1), [WRITE DENYOOM], |c| lists::linsert(c);
    "llen", 2, (1, 1, 1), [READONLY], chunked List => |c, h| large::count(c, h), |c| lists::llen(c);
    "lmove", 5, (1, 2, 1), [WRITE DENYOOM], |c| lists::lmove(c);
    "lmpop", -4, (0, 0, 0), [WRITE], |c| blocking::lmpop(c);
    "lpop", -2, (1, 1, 1), [WRITE], chunked List => |c, h| large::pop(c, h, true), |c| lists::pop(c, list_ops::End::Head);
    "lpos", -3, (1, 1, 1), [READONLY], |c| lists::lpos(c);
    "lpush", -3, (1, 1, 1), [WRITE DENYOOM], chunked List => |c, h| large::push(c, h, true), |c| lists::push(c, list_ops::End::Head, false);
    "lpushx", -3, (1, 1, 1), [WRITE DENYOOM], chunked List => |c, h| large::push(c, h, true), |c| lists::push(c, list_ops::End::Head, true);
    "lrange", 4, (1, 1, 1), [READONLY], chunked List => |c, h| large::lrange(c, h), |c| lists::lrange(c);
    "lrem", 4, (1, 1, 1), [WRITE], |c| lists::lrem(c);
    "lset", 4, (1, 1, 1), [WRITE DENYOOM], |c| lists::lset(c);
    "ltrim", 4, (1, 1, 1), [WRITE], |c| lists::ltrim(c);
    "memory", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "memory|usage", -3, (2, 2, 1), [READONLY], |c| admin::memory_usage(c);
    "mget", -2, (1, -1, 1), [READONLY], |c| strings::mget(c);
    "monitor", 1, (0, 0, 0), [ADMIN], |c| monitor::monitor(c);
    "mset", -3, (1, -1, 2), [WRITE DENYOOM], |c| strings::mset(c);
    "msetnx", -3, (1, -1, 2), [WRITE DENYOOM], |c| strings::msetnx(c);
    "multi", 1, (0, 0, 0), [MULTI IMMEDIATE], |c| multi::multi(c);
    "object", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "object|encoding", 3, (2, 2, 1), [READONLY], |c| admin::object(c);
    "object|refcount", 3, (2, 2, 1), [READONLY], |c| admin::object_refcount(c);
    "persist", 2, (1, 1, 1), [WRITE], |c| keys::persist(c);
    "pexpire", -3, (1, 1, 1), [WRITE TIME], |c| keys::expire(c, keys::ExpireCmd { seconds: false, relative: true });
    "pexpireat", -3, (1, 1, 1), [WRITE TIME], |c| keys::expire(c, keys::ExpireCmd { seconds: false, relative: false });
    "pexpiretime", 2, (1, 1, 1), [READONLY], |c| keys::ttl(c, true, true);
    "ping", -1, (0, 0, 0), [CONNECTION], |c| admin::ping(c);
    "psetex", 4, (1, 1, 1), [WRITE DENYOOM TIME], |c| strings::setex(c, false);
    "psubscribe", -2, (0, 0, 0), [], |c| pubsub::subscribe(c, pubsub::Kind::Pattern);
    "pttl", 2, (1, 1, 1), [READONLY TIME], |c| keys::ttl(c, true, false);
    "publish", 3, (0, 0, 0), [], |c| pubsub::publish(c, false);
    "pubsub", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "pubsub|channels", -2, (0, 0, 0), [], |c| pubsub::channels(c, false);
    "pubsub|numpat", 2, (0, 0, 0), [], |c| pubsub::numpat(c);
    "pubsub|numsub", -2, (0, 0, 0), [], |c| pubsub::numsub(c, false);
    "pubsub|shardchannels", -2, (0, 0, 0), [], |c| pubsub::channels(c, true);
    "pubsub|shardnumsub", -2, (0, 0, 0), [], |c| pubsub::numsub(c, true);
    "punsubscribe", -1, (0, 0, 0), [], |c| pubsub::unsubscribe(c, pubsub::Kind::Pattern);
    "quit", -1, (0, 0, 0), [NO_AUTH CONNECTION IMMEDIATE], |c| admin::quit(c);
    "randomkey", 1, (0, 0, 0), [READONLY RANDOM], |c| keys::randomkey(c);
    "rename", 3, (1, 2, 1), [WRITE], |c| keys::rename(c, false);
    "renamenx", 3, (1, 2, 1), [WRITE], |c| keys::rename(c, true);
    "reset", 1, (0, 0, 0), [NO_AUTH CONNECTION IMMEDIATE], |c| admin::reset(c);
    "restore", -4, (1, 1, 1), [WRITE DENYOOM TIME], |c| dump::restore(c);
    "rpop", -2, (1, 1, 1), [WRITE], chunked List => |c, h| large::pop(c, h, false), |c| lists::pop(c, list_ops::End::Tail);
    "rpoplpush", 3, (1, 2, 1), [WRITE DENYOOM], |c| lists::rpoplpush(c);
    "rpush", -3, (1, 1, 1), [WRITE DENYOOM], chunked List => |c, h| large::push(c, h, false), |c| lists::push(c, list_ops::End::Tail, false);
    "rpushx", -3, (1, 1, 1), [WRITE DENYOOM], chunked List => |c, h| large::push(c, h, false), |c| lists::push(c, list_ops::End::Tail, true);
    "sadd", -3, (1, 1, 1), [WRITE DENYOOM], chunked Set => |c, h| large::sadd_or_srem(c, h, true), |c| sets::sadd(c);
    "save", 1, (0, 0, 0), [ADMIN], |c| admin::save(c);
    "scan", -2, (0, 0, 0), [READONLY], |c| admin::scan(c);
    "scard", 2, (1, 1, 1), [READONLY], chunked Set => |c, h| large::count(c, h), |c| sets::scard(c);
    "script", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "script|exists", -3, (0, 0, 0), [], |c| scripting::script_exists(c);
    "script|flush", -2, (0, 0, 0), [], |c| scripting::script_flush(c);
    "script|kill", 2, (0, 0, 0), [], |c| scripting::script_kill(c);
    "script|load", 3, (0, 0, 0), [], |c| scripting::script_load(c);
    "sdiff", -2, (1, -1, 1), [READONLY], |c| sets::combine(c, sets::SetOp::Diff);
    "sdiffstore", -3, (1, -1, 1), [WRITE DENYOOM], |c| sets::combine_store(c, sets::SetOp::Diff);
    "select", 2, (0, 0, 0), [CONNECTION], |c| admin::select(c);
    "set", -3, (1, 1, 1), [WRITE DENYOOM TIME], |c| strings::set(c);
    "setbit", 4, (1, 1, 1), [WRITE DENYOOM], |c| bits::setbit(c);
    "setex", 4, (1, 1, 1), [WRITE DENYOOM TIME], |c| strings::setex(c, true);
    "setnx", 3, (1, 1, 1), [WRITE DENYOOM], |c| strings::setnx(c);
    "setrange", 4, (1, 1, 1), [WRITE DENYOOM], |c| strings::setrange(c);
    "shutdown", -1, (0, 0, 0), [ADMIN], |c| admin::shutdown(c);
    "sinter", -2, (1, -1, 1), [READONLY], |c| sets::combine(c, sets::SetOp::Inter);
    "sintercard", -3, (0, 0, 0), [READONLY], |c| sets::sintercard(c);
    "sinterstore", -3, (1, -1, 1), [WRITE DENYOOM], |c| sets::combine_store(c, sets::SetOp::Inter);
    "sismember", 3, (1, 1, 1), [READONLY], chunked Set => |c, h| large::sismember(c, h), |c| sets::sismember(c);
    "smembers", 2, (1, 1, 1), [READONLY], |c| sets::smembers(c);
    "smismember", -3, (1, 1, 1), [READONLY], chunked Set => |c, h| large::smismember(c, h), |c| sets::smismember(c);
    "smove", 4, (1, 2, 1), [WRITE], |c| sets::smove(c);
    "sort", -2, (1, 1, 1), [WRITE DENYOOM], |c| sort::sort(c, false);
    "sort_ro", -2, (1, 1, 1), [READONLY], |c| sort::sort(c, true);
    "spop", -2, (1, 1, 1), [WRITE RANDOM], |c| sets::spop(c);
    "spublish", 3, (1, 1, 1), [], |c| pubsub::publish(c, true);
    "srandmember", -2, (1, 1, 1), [READONLY RANDOM], |c| sets::srandmember(c);
    "srem", -3, (1, 1, 1), [WRITE], chunked Set => |c, h| large::sadd_or_srem(c, h, false), |c| sets::srem(c);
    "sscan", -3, (1, 1, 1), [READONLY], |c| sets::sscan(c);
    "ssubscribe", -2, (1, -1, 1), [], |c| pubsub::subscribe(c, pubsub::Kind::Shard);
    "strlen", 2, (1, 1, 1), [READONLY], |c| strings::strlen(c);
    "subscribe", -2, (0, 0, 0), [], |c| pubsub::subscribe(c, pubsub::Kind::Channel);
    "substr", 4, (1, 1, 1), [READONLY], |c| strings::getrange(c);
    "sunion", -2, (1, -1, 1), [READONLY], |c| sets::combine(c, sets::SetOp::Union);
    "sunionstore", -3, (1, -1, 1), [WRITE DENYOOM], |c| sets::combine_store(c, sets::SetOp::Union);
    "sunsubscribe", -1, (1, -1, 1), [], |c| pubsub::unsubscribe(c, pubsub::Kind::Shard);
    "time", 1, (0, 0, 0), [TIME], |c| admin::time(c);
    "touch", -2, (1, -1, 1), [READONLY], |c| keys::touch(c);
    "ttl", 2, (1, 1, 1), [READONLY TIME], |c| keys::ttl(c, false, false);
    "type", 2, (1, 1, 1), [READONLY], |c| admin::type_(c);
    "unlink", -2, (1, -1, 1), [WRITE], |c| strings::del(c);
    "unsubscribe", -1, (0, 0, 0), [], |c| pubsub::unsubscribe(c, pubsub::Kind::Channel);
    "unwatch", 1, (0, 0, 0), [MULTI], |c| multi::unwatch(c);
    "watch", -2, (1, -1, 1), [MULTI IMMEDIATE], |c| multi::watch(c);
    "xack", -4, (1, 1, 1), [WRITE], |c| streams::groups::xack(c);
    "xadd", -5, (1, 1, 1), [WRITE DENYOOM TIME], |c| streams::xadd(c);
    "xautoclaim", -6, (1, 1, 1), [WRITE TIME], |c| streams::groups::xautoclaim(c);
    "xclaim", -6, (1, 1, 1), [WRITE TIME], |c| streams::groups::xclaim(c);
    "xdel", -3, (1, 1, 1), [WRITE], |c| streams::xdel(c);
    "xgroup", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "xgroup|create", -5, (2, 2, 1), [WRITE DENYOOM], |c| streams::groups::xgroup(c);
    "xgroup|createconsumer", 5, (2, 2, 1), [WRITE DENYOOM TIME], |c| streams::groups::xgroup(c);
    "xgroup|delconsumer", 5, (2, 2, 1), [WRITE], |c| streams::groups::xgroup(c);
    "xgroup|destroy", 4, (2, 2, 1), [WRITE], |c| streams::groups::xgroup(c);
    "xgroup|help", 2, (0, 0, 0), [], |c| streams::groups::xgroup(c);
    "xgroup|setid", -5, (2, 2, 1), [WRITE], |c| streams::groups::xgroup(c);
    "xinfo", -2, (0, 0, 0), [], |_c| unreachable!("a container runs under a subcommand");
    "xinfo|consumers", 4, (2, 2, 1), [READONLY TIME], |c| streams::groups::xinfo_consumers(c);
    "xinfo|groups", 3, (2, 2, 1), [READONLY], |c| streams::groups::xinfo_groups(c);
    "xinfo|help", 2, (0, 0, 0), [], |c| streams::groups::xinfo_help(c);
    "xinfo|stream", -3, (2, 2, 1), [READONLY], |c| streams::groups::xinfo_stream(c);
    "xlen", 2, (1, 1, 1), [READONLY], |c| streams::xlen(c);
    "xpending", -3, (1, 1, 1), [READONLY TIME], |c| streams::groups::xpending(c);
    "xrange", -4, (1, 1, 1), [READONLY], |c| streams::xrange(c, false);
    "xread", -4, (0, 0, 0), [READONLY BLOCKING], |c| streams::xread(c);
    "xreadgroup", -7, (0, 0, 0), [WRITE BLOCKING TIME], |c| streams::xread(c);
    "xrevrange", -4, (1, 1, 1), [READONLY], |c| streams::xrange(c, true);
    "xsetid", -3, (1, 1, 1), [WRITE DENYOOM], |c| streams::groups::xsetid(c);
    "xtrim", -4, (1, 1, 1), [WRITE], |c| streams::xtrim(c);
    "zadd", -4, (1, 1, 1), [WRITE DENYOOM], chunked ZSet => |c, h| large::zadd(c, h), |c| zsets::zadd(c);
    "zcard", 2, (1, 1, 1), [READONLY], chunked ZSet => |c, h| large::count(c, h), |c| zsets::zcard(c);
    "zcount", 4, (1, 1, 1), [READONLY], |c| zsets::zcount(c, false);
    "zdiff", -3, (0, 0, 0), [READONLY], |c| zsets::zsetop(c, zsets::ZOp::Diff, false);
    "zdiffstore", -4, (1, 1, 1), [WRITE DENYOOM], |c| zsets::zsetop(c, zsets::ZOp::Diff, true);
    "zincrby", 4, (1, 1, 1), [WRITE DENYOOM], |c| zsets::zincrby(c);
    "zinter", -3, (0, 0, 0), [READONLY], |c| zsets::zsetop(c, zsets::ZOp::Inter, false);
    "zintercard", -3, (0, 0, 0), [READONLY], |c| zsets::zsetop(c, zsets::ZOp::InterCard, false);
    "zinterstore", -4, (1, 1, 1), [WRITE DENYOOM], |c| zsets::zsetop(c, zsets::ZOp::Inter, true);
    "zlexcount", 4, (1, 1, 1), [READONLY], |c| zsets::zcount(c, true);
    "zmpop", -4, (0, 0, 0), [WRITE], |c| zsets::zmpop(c);
    "zmscore", -3, (1, 1, 1), [READONLY], |c| zsets::zmscore(c);
    "zpopmax", -2, (1, 1, 1), [WRITE], |c| zsets::zpop(c, true);
    "zpopmin", -2, (1, 1, 1), [WRITE], |c| zsets::zpop(c, false);
    "zrandmember", -2, (1, 1, 1), [READONLY RANDOM], |c| zsets::zrandmember(c);
    "zrange", -4, (1, 1, 1), [READONLY], |c| zsets::zrange(c, zsets::ZRANGE);
    "zrangebylex", -4, (1, 1, 1), [READONLY], |c| zsets::zrange(c, zsets::ZRANGEBYLEX);
    "zrangebyscore", -4, (1, 1, 1), [READONLY], |c| zsets::zrange(c, zsets::ZRANGEBYSCORE);
    "zrangestore", -5, (1, 2, 1), [WRITE DENYOOM], |c| zsets::zrange(c, zsets::ZRANGESTORE);
    "zrank", 3, (1, 1, 1), [READONLY], |c| zsets::zrank(c, false);
    "zrem", -3, (1, 1, 1), [WRITE], chunked ZSet => |c, h| large::zrem(c, h), |c| zsets::zrem(c);
    "zremrangebylex", 4, (1, 1, 1), [WRITE], |c| zsets::zremrange(c, zsets::RangeType::Lex);
    "zremrangebyrank", 4, (1, 1, 1), [WRITE], |c| zsets::zremrange(c, zsets::RangeType::Rank);
    "zremrangebyscore", 4, (1, 1, 1), [WRITE], |c| zsets::zremrange(c, zsets::RangeType::Score);
    "zrevrange", -4, (1, 1, 1), [READONLY], |c| zsets::zrange(c, zsets::ZREVRANGE);
    "zrevrangebylex", -4, (1, 1, 1), [READONLY], |c| zsets::zrange(c, zsets::ZREVRANGEBYLEX);
    "zrevrangebyscore", -4, (1, 1, 1), [READONLY], |c| zsets::zrange(c, zsets::ZREVRANGEBYSCORE);
    "zrevrank", 3, (1, 1, 1), [READONLY], |c| zsets::zrank(c, true);
    "zscan", -3, (1, 1, 1), [READONLY], |c| zsets::zscan(c);
    "zscore", 3, (1, 1, 1), [READONLY], chunked ZSet => |c, h| large::zscore(c, h), |c| zsets::zscore(c);
    "zunion", -3, (0, 0, 0), [READONLY], |c| zsets::zsetop(c, zsets::ZOp::Union, false);
    "zunionstore", -4, (1, 1, 1), [WRITE DENYOOM], |c| zsets::zsetop(c, zsets::ZOp::Union, true);
}

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

/// COMMAND: every command's info.
fn command<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.array(commands().count());
    for info in commands() {
        write_info(c, info);
    }
    Ok(())
}

/// COMMAND COUNT.
fn command_count<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.integer(commands().count() as i64);
    Ok(())
}

/// COMMAND DOCS [name...]: no documentation (an empty map), enough for
/// redis-cli's start-up.
fn command_docs<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.map(0);
    Ok(())
}

/// COMMAND INFO [name...]: each command's info, or the null array.
fn command_info<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.array(c.argc() - 2);
    for j in 2..c.argc() {
        match lookup(c.arg(j)).filter(|info| !info.is_subcommand()) {
            Some(info) => write_info(c, info),
            None => c.out.null_array(),
        }
    }
    Ok(())
}

/// Redis 7.0's 10-element command info: name, arity, flags, key positions,
/// ACL categories, tips, key specs (empty) and subcommands. The flags are
/// the Redis flags of [`Flags`] (write, readonly, admin, blocking, no_auth),
/// the categories Redis's (`super::acl_table`, from its command JSON), and
/// the tip `nondeterministic_output` for [`Flags::RANDOM`].
fn write_info<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, info: &CommandInfo) {
    const REDIS_FLAGS: [(Flags, &str); 6] = [
        (Flags::WRITE, "write"),
        (Flags::DENYOOM, "denyoom"),
        (Flags::READONLY, "readonly"),
        (Flags::ADMIN, "admin"),
        (Flags::BLOCKING, "blocking"),
        (Flags::NO_AUTH, "no_auth"),
    ];
    let flags: Vec<&str> = REDIS_FLAGS.iter().filter(|f| info.flags.contains(f.0)).map(|f| f.1).collect();
    let categories: Vec<String> = super::acl::category_names(info.name).map(|c| format!("@{c}")).collect();
    c.out.array(10);
    c.out.bulk(info.name.as_bytes());
    c.out.integer(i64::from(info.arity));
    c.out.set(flags.len());
    flags.iter().for_each(|f| c.out.simple(f.as_bytes()));
    c.out.integer(i64::from(info.first_key));
    c.out.integer(i64::from(info.last_key));
    c.out.integer(i64::from(info.step));
    c.out.set(categories.len());
    categories.iter().for_each(|f| c.out.simple(f.as_bytes()));
    if info.flags.contains(Flags::RANDOM) {
        c.out.set(1);
        c.out.bulk(b"nondeterministic_output");
    } else {
        c.out.set(0);
    }
    c.out.array(0);
    let subs: Vec<&CommandInfo> = info.subcommands().collect();
    c.out.array(subs.len());
    for sub in subs {
        write_info(c, sub);
    }
}
