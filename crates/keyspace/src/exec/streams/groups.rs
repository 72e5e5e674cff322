//! Consumer groups: `XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM
//! XINFO XSETID`, as Redis 7.0's `t_stream.c` serves them, over the records
//! of [`crate::stream_group`]: a command reads and writes the group record,
//! the consumer records it touches and one PEL entry (two keys) per ID it
//! delivers, acknowledges or claims, never a whole PEL.
//!
//! Times (delivery, seen) are the keyspace's clock ([`Ctx::now_ms`]), so a
//! replicated machine's members, which run an entry at its leader's time,
//! agree on them.
//!
//! Invariants: those of [`crate::stream_group`]; a [`Tx`] holds the group
//! and the consumers a command changed, and writes each once at its end.

use std::collections::HashMap;

use super::{load, parse_id, range, reply_entries, write_header, C};
use crate::chunked::next_generation;
use crate::exec::notify::ev;
use crate::exec::{Ctx, Fail, Res};
use crate::rdb::{ConsumerValue, GroupValue, PendingValue};
use crate::store::{Keyspace, Kind};
use crate::stream::{Entry, Header, StreamId};
use crate::stream_group::{
    consumer_key, consumers_prefix, group_key, groups_prefix, id_of_key, number_of_key, owned_group_prefix, owned_key, owned_prefix, pel_key,
    pel_prefix, Consumer, Group, GroupError, Nack, ENTRIES_READ_UNKNOWN,
};
use pmwire_resp::reply::ReplySink;

fn corrupt(e: GroupError) -> Fail {
    Fail::Text(format!("ERR stored value is corrupt: {e}"))
}

/// A name as Redis's `addReplyErrorFormat` shows it: cut at a NUL (C's
/// `%s`), CR and LF turned into spaces.
pub(super) fn shown(name: &[u8]) -> String {
    String::from_utf8_lossy(crate::script::c_str(name)).replace(['\r', '\n'], " ")
}

fn no_group_error(key: &[u8], group: &[u8]) -> Fail {
    Fail::Text(format!("NOGROUP No such key '{}' or consumer group '{}'", shown(key), shown(group)))
}

fn no_such_group(key: &[u8], group: &[u8]) -> Fail {
    Fail::Text(format!("NOGROUP No such consumer group '{}' for key name '{}'", shown(group), shown(key)))
}

/// Redis's `addReplySubcommandSyntaxError`.
fn subcommand_syntax<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> Fail {
    let sub = c.arg(1);
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]).into_owned();
    let cmd = String::from_utf8_lossy(c.arg(0)).to_ascii_uppercase();
    Fail::err(&format!("unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP."))
}

/// Visits the internal keys that begin with `prefix`, from `from` on, in
/// order, while `visit` answers true.
fn scan_prefix<K: Keyspace + ?Sized>(ks: &mut K, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&mut K, &[u8]) -> bool) {
    const PAGE: usize = 64;
    let mut at = from.to_vec();
    loop {
        let mut page: Vec<Vec<u8>> = Vec::with_capacity(PAGE);
        let n = ks.internal_scan(&at, PAGE, &mut |k| page.push(k.to_vec()));
        for k in &page {
            if !k.starts_with(prefix) || !visit(ks, k) {
                return;
            }
        }
        if n < PAGE {
            return;
        }
        at = page.pop().expect("a full page");
        at.push(0);
    }
}

fn read_bytes<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    ks.internal_read(key, &mut out).then_some(out)
}

/// Every record under `prefix`, decoded, with the number its key ends in,
/// sorted by `name` (Redis's rax order).
fn named_records<K: Keyspace + ?Sized, T>(
    ks: &mut K,
    prefix: &[u8],
    decode: fn(&[u8]) -> Result<T, GroupError>,
    name: fn(&T) -> &[u8],
) -> Result<Vec<(u64, T)>, Fail> {
    let mut found = Vec::new();
    let mut bad = None;
    scan_prefix(ks, prefix, prefix, &mut |ks, k| {
        let bytes = read_bytes(ks, k).expect("a scanned entry");
        match decode(&bytes) {
            Ok(r) => found.push((number_of_key(k), r)),
            Err(e) => bad = Some(e),
        }
        bad.is_none()
    });
    if let Some(e) = bad {
        return Err(corrupt(e));
    }
    found.sort_by(|a, b| name(&a.1).cmp(name(&b.1)));
    Ok(found)
}

/// Every group of the stream, by name (Redis's rax order).
pub(super) fn groups<K: Keyspace + ?Sized>(ks: &mut K, gen: u64) -> Result<Vec<(u64, Group)>, Fail> {
    named_records(ks, &groups_prefix(gen), Group::decode, |g| &g.name)
}

/// The group named `name`.
pub(super) fn find_group<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, name: &[u8]) -> Result<Option<(u64, Group)>, Fail> {
    Ok(groups(ks, gen)?.into_iter().find(|(_, g)| g.name == name))
}

/// Every consumer of group `group`, by name.
fn consumers<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, group: u64) -> Result<Vec<(u64, Consumer)>, Fail> {
    named_records(ks, &consumers_prefix(gen, group), Consumer::decode, |c| &c.name)
}

/// Up to `limit` (0: all) IDs with their NACKs of group `group`'s PEL in `start..=end`.
fn pel_range<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, group: u64, start: StreamId, end: StreamId, limit: usize) -> Result<Vec<(StreamId, Nack)>, Fail> {
    let prefix = pel_prefix(gen, group);
    let mut out = Vec::new();
    let mut bad = None;
    scan_prefix(ks, &prefix, &pel_key(gen, group, start), &mut |ks, k| {
        let id = id_of_key(k);
        if id > end {
            return false;
        }
        match Nack::decode(&read_bytes(ks, k).expect("a scanned entry")) {
            Ok(n) => out.push((id, n)),
            Err(e) => bad = Some(e),
        }
        bad.is_none() && (limit == 0 || out.len() < limit)
    });
    match bad {
        Some(e) => Err(corrupt(e)),
        None => Ok(out),
    }
}

/// Up to `limit` (0: all) IDs of consumer `consumer`'s PEL from `start` on.
fn owned_range<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, group: u64, consumer: u64, start: StreamId, limit: usize) -> Vec<StreamId> {
    let prefix = owned_prefix(gen, group, consumer);
    let mut out = Vec::new();
    scan_prefix(ks, &prefix, &owned_key(gen, group, consumer, start), &mut |_, k| {
        out.push(id_of_key(k));
        limit == 0 || out.len() < limit
    });
    out
}

fn get_nack<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, group: u64, id: StreamId) -> Result<Option<Nack>, Fail> {
    match read_bytes(ks, &pel_key(gen, group, id)) {
        Some(b) => Nack::decode(&b).map(Some).map_err(corrupt),
        None => Ok(None),
    }
}

/// The live entry `id` of the stream, if any (Redis's `streamEntryExists`).
fn entry_at<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, id: StreamId) -> Result<Option<Entry>, Fail> {
    Ok(range(ks, h, id, id, 1, false)?.pop())
}

/// One command's changes to one group: the group record and the consumers
/// it read or changed, written once by [`Tx::commit`].
pub(super) struct Tx {
    gen: u64,
    /// The group's number.
    pub num: u64,
    pub group: Group,
    consumers: HashMap<u64, Consumer>,
    dirty: Vec<u64>,
    group_dirty: bool,
}

impl Tx {
    pub fn new(gen: u64, num: u64, group: Group) -> Tx {
        Tx { gen, num, group, consumers: HashMap::new(), dirty: Vec::new(), group_dirty: false }
    }

    /// Opens the group named `name` of the stream of header `h`.
    pub fn open<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, name: &[u8]) -> Result<Option<Tx>, Fail> {
        Ok(find_group(ks, h.gen, name)?.map(|(num, g)| Tx::new(h.gen, num, g)))
    }

    fn touch_group(&mut self) {
        self.group_dirty = true;
    }

    fn consumer<K: Keyspace + ?Sized>(&mut self, ks: &mut K, num: u64) -> Result<&mut Consumer, Fail> {
        if !self.consumers.contains_key(&num) {
            let bytes = read_bytes(ks, &consumer_key(self.gen, self.num, num)).ok_or(corrupt(GroupError::Nack))?;
            self.consumers.insert(num, Consumer::decode(&bytes).map_err(corrupt)?);
        }
        if !self.dirty.contains(&num) {
            self.dirty.push(num);
        }
        Ok(self.consumers.get_mut(&num).expect("cached"))
    }

    /// The consumer named `name` (Redis's `streamLookupConsumer`): its
    /// seen time set to `refresh` if given.
    pub fn lookup<K: Keyspace + ?Sized>(&mut self, ks: &mut K, name: &[u8], refresh: Option<u64>) -> Result<Option<u64>, Fail> {
        let cached = self.consumers.iter().find(|(_, c)| c.name == name).map(|(&n, _)| n);
        let num = match cached {
            Some(n) => Some(n),
            None => consumers(ks, self.gen, self.num)?.into_iter().find(|(_, c)| c.name == name).map(|(n, _)| n),
        };
        if let (Some(n), Some(now)) = (num, refresh) {
            self.consumer(ks, n)?.seen_ms = now;
        }
        Ok(num)
    }

    /// Creates the consumer `name`, seen at `now` (Redis's `streamCreateConsumer`).
    pub fn create(&mut self, name: &[u8], now: u64) -> u64 {
        self.group.consumers_made += 1;
        self.group.consumers += 1;
        self.touch_group();
        let num = self.group.consumers_made;
        self.consumers.insert(num, Consumer { seen_ms: now, pending: 0, name: name.to_vec() });
        self.dirty.push(num);
        num
    }

    /// The consumer `name`, seen now, created if need be (reported as
    /// Redis's `streamCreateConsumer` reports it, on the stream `key`).
    pub fn lookup_or_create<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(&mut self, c: C<'_, '_, '_, K, S>, key: &[u8], name: &[u8], now: u64) -> Result<u64, Fail> {
        match self.lookup(c.ks, name, Some(now))? {
            Some(n) => Ok(n),
            None => {
                c.notify(ev::XGROUP_CREATECONSUMER, key);
                Ok(self.create(name, now))
            }
        }
    }

    /// The consumer's name.
    fn name_of<K: Keyspace + ?Sized>(&mut self, ks: &mut K, num: u64) -> Result<Vec<u8>, Fail> {
        if let Some(c) = self.consumers.get(&num) {
            return Ok(c.name.clone());
        }
        let bytes = read_bytes(ks, &consumer_key(self.gen, self.num, num)).ok_or(corrupt(GroupError::Nack))?;
        let c = Consumer::decode(&bytes).map_err(corrupt)?;
        let name = c.name.clone();
        self.consumers.insert(num, c);
        Ok(name)
    }

    /// Stores `nack` for `id`, owned by `nack.consumer`; `old` is the entry it replaces.
    fn put_nack<K: Keyspace + ?Sized>(&mut self, ks: &mut K, id: StreamId, old: Option<Nack>, nack: Nack) -> Res {
        match old {
            None => {
                self.group.pending += 1;
                self.touch_group();
            }
            Some(o) if o.consumer != nack.consumer => {
                ks.internal_delete(&owned_key(self.gen, self.num, o.consumer, id))?;
                let before = self.consumer(ks, o.consumer)?;
                assert!(before.pending > 0, "a consumer owning a NACK has it counted");
                before.pending -= 1;
            }
            Some(_) => {}
        }
        if old.is_none_or(|o| o.consumer != nack.consumer) {
            ks.internal_put(&owned_key(self.gen, self.num, nack.consumer, id), &[])?;
            self.consumer(ks, nack.consumer)?.pending += 1;
        }
        ks.internal_put(&pel_key(self.gen, self.num, id), &nack.encode())?;
        Ok(())
    }

    /// Deletes the PEL entry `id` (`nack`) from the group and its consumer.
    fn remove_nack<K: Keyspace + ?Sized>(&mut self, ks: &mut K, id: StreamId, nack: Nack) -> Res {
        ks.internal_delete(&pel_key(self.gen, self.num, id))?;
        ks.internal_delete(&owned_key(self.gen, self.num, nack.consumer, id))?;
        let owner = self.consumer(ks, nack.consumer)?;
        assert!(owner.pending > 0, "a consumer owning a NACK has it counted");
        owner.pending -= 1;
        assert!(self.group.pending > 0, "a group with a NACK has it counted");
        self.group.pending -= 1;
        self.touch_group();
        Ok(())
    }

    /// Writes the group record and every consumer changed.
    pub fn commit<K: Keyspace + ?Sized>(self, ks: &mut K) -> Res {
        if self.group_dirty {
            ks.internal_put(&group_key(self.gen, self.num), &self.group.encode())?;
        }
        for n in &self.dirty {
            ks.internal_put(&consumer_key(self.gen, self.num, *n), &self.consumers[n].encode())?;
        }
        Ok(())
    }
}

/// Redis's `streamRangeHasTombstones(s, start, NULL)`.
fn has_tombstones_from(h: &Header, start: StreamId) -> bool {
    if h.length == 0 || h.max_deleted == StreamId::MIN || h.first_id > h.max_deleted {
        return false;
    }
    start <= h.max_deleted
}

/// Redis's `streamEstimateDistanceFromFirstEverEntry`: `id`'s logical read
/// counter, or [`ENTRIES_READ_UNKNOWN`].
fn estimate_distance(h: &Header, id: StreamId) -> i64 {
    if h.entries_added == 0 {
        return 0;
    }
    if h.length == 0 && id <= h.last_id {
        return h.entries_added as i64;
    }
    if id == h.last_id {
        return h.entries_added as i64;
    } else if id > h.last_id {
        return ENTRIES_READ_UNKNOWN;
    }
    if h.max_deleted == StreamId::MIN || h.max_deleted < h.first_id {
        if id < h.first_id {
            return (h.entries_added - h.length) as i64;
        } else if id == h.first_id {
            return (h.entries_added - h.length + 1) as i64;
        }
    }
    ENTRIES_READ_UNKNOWN
}

/// Redis's `streamReplyWithCGLag`: the group's lag, if known.
fn lag(h: &Header, g: &Group) -> Option<i64> {
    if h.entries_added == 0 {
        return Some(0);
    }
    if g.entries_read != ENTRIES_READ_UNKNOWN && !has_tombstones_from(h, g.last_id) {
        return Some(h.entries_added as i64 - g.entries_read);
    }
    let read = estimate_distance(h, g.last_id);
    (read != ENTRIES_READ_UNKNOWN).then(|| h.entries_added as i64 - read)
}

/// The group's last ID moves to `id`, delivered (the read counter with it).
fn advance(h: &Header, g: &mut Group, id: StreamId) {
    if id <= g.last_id {
        return;
    }
    if g.entries_read != ENTRIES_READ_UNKNOWN && !has_tombstones_from(h, id) {
        g.entries_read += 1;
    } else if h.entries_added > 0 {
        g.entries_read = estimate_distance(h, id);
    }
    g.last_id = id;
}

fn now<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> u64 {
    c.now_ms().max(0) as u64
}

// ---------------------------------------------------------------- XGROUP

/// XGROUP CREATE | SETID | DESTROY | CREATECONSUMER | DELCONSUMER | HELP
/// (Redis's `xgroupCommand`: options, then the key, then the group).
pub(in crate::exec) fn xgroup<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let opt = c.arg(1).to_ascii_lowercase();
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_UNKNOWN);
    let mut h = None;
    if c.argc() >= 4 {
        let (create, setid) = (opt == b"create", opt == b"setid");
        let mut i = 5;
        while i < c.argc() {
            let a = c.arg(i);
            if create && a.eq_ignore_ascii_case(b"mkstream") {
                mkstream = true;
                i += 1;
            } else if (create || setid) && a.eq_ignore_ascii_case(b"entriesread") && i + 1 < c.argc() {
                entries_read = c.int_arg(i + 1)?;
                if entries_read < 0 && entries_read != ENTRIES_READ_UNKNOWN {
                    return Err(Fail::err("value for ENTRIESREAD must be positive or -1"));
                }
                i += 2;
            } else {
                return Err(subcommand_syntax(c));
            }
        }
        h = load(c, c.arg(2))?;
    }
    let mut found = None;
    if c.argc() >= 4 && !mkstream {
        let Some(h) = h.as_ref() else {
            return Err(Fail::err(
                "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            ));
        };
        found = find_group(c.ks, h.gen, c.arg(3))?;
        if found.is_none() && matches!(&opt[..], b"setid" | b"createconsumer" | b"delconsumer") {
            return Err(no_such_group(c.arg(2), c.arg(3)));
        }
    }
    match (&opt[..], c.argc()) {
        (b"help", 2) => {
            help(c, XGROUP_HELP);
            Ok(())
        }
        (b"create", 5..=8) => xgroup_create(c, h, entries_read),
        (b"setid", 5 | 7) => {
            let h = h.expect("checked above");
            let id = match c.arg(4) {
                b"$" => h.last_id,
                arg => parse_id(arg, 0, false, None)?,
            };
            let (num, mut g) = found.expect("checked above");
            g.last_id = id;
            g.entries_read = entries_read;
            c.ks.internal_put(&group_key(h.gen, num), &g.encode())?;
            c.notify(ev::XGROUP_SETID, c.arg(2));
            c.out.simple(b"OK");
            Ok(())
        }
        (b"destroy", 4) => {
            let Some((num, _)) = found else {
                c.out.integer(0);
                return Ok(());
            };
            destroy_group(c.ks, h.expect("checked above").gen, num)?;
            c.notify(ev::XGROUP_DESTROY, c.arg(2));
            // A blocked XREADGROUP on the group is answered NOGROUP.
            c.ks.signal_ready(c.arg(2));
            c.out.integer(1);
            Ok(())
        }
        (b"createconsumer", 5) => {
            let (num, g) = found.expect("checked above");
            let mut tx = Tx::new(h.expect("checked above").gen, num, g);
            let created = match tx.lookup(c.ks, c.arg(4), None)? {
                Some(_) => false,
                None => {
                    let t = now(c);
                    tx.create(c.arg(4), t);
                    true
                }
            };
            tx.commit(c.ks)?;
            if created {
                c.notify(ev::XGROUP_CREATECONSUMER, c.arg(2));
            }
            c.out.integer(i64::from(created));
            Ok(())
        }
        (b"delconsumer", 5) => {
            let (num, g) = found.expect("checked above");
            let gen = h.expect("checked above").gen;
            let mut tx = Tx::new(gen, num, g);
            let pending = match tx.lookup(c.ks, c.arg(4), None)? {
                Some(cn) => {
                    let pending = delete_consumer(c.ks, &mut tx, cn)?;
                    c.notify(ev::XGROUP_DELCONSUMER, c.arg(2));
                    pending
                }
                None => 0,
            };
            tx.commit(c.ks)?;
            c.out.integer(pending as i64);
            Ok(())
        }
        _ => Err(subcommand_syntax(c)),
    }
}

fn xgroup_create<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, h: Option<Header>, entries_read: i64) -> Res {
    let id = match c.arg(4) {
        b"$" => h.map_or(StreamId::MIN, |h| h.last_id),
        arg => parse_id(arg, 0, true, None)?,
    };
    let mut h = match h {
        Some(h) => h,
        None => Header::new(next_generation(c.ks)?),
    };
    if find_group(c.ks, h.gen, c.arg(3))?.is_some() {
        return Err(Fail::Text("BUSYGROUP Consumer Group name already exists".into()));
    }
    h.groups_made += 1;
    let g = Group { last_id: id, entries_read, pending: 0, consumers: 0, consumers_made: 0, name: c.arg(3).to_vec() };
    c.ks.internal_put(&group_key(h.gen, h.groups_made), &g.encode())?;
    write_header(c.ks, c.arg(2), &h)?;
    c.notify(ev::XGROUP_CREATE, c.arg(2));
    c.out.simple(b"OK");
    Ok(())
}

/// Deletes group `num`: its record, consumers and PEL.
fn destroy_group<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, num: u64) -> Res {
    for prefix in [pel_prefix(gen, num), consumers_prefix(gen, num), owned_group_prefix(gen, num)] {
        let mut doomed = Vec::new();
        scan_prefix(ks, &prefix, &prefix, &mut |_, k| {
            doomed.push(k.to_vec());
            true
        });
        for k in doomed {
            ks.internal_delete(&k)?;
        }
    }
    ks.internal_delete(&group_key(gen, num))?;
    Ok(())
}

/// Deletes consumer `cn` and its PEL entries from the group; how many it had.
fn delete_consumer<K: Keyspace + ?Sized>(ks: &mut K, tx: &mut Tx, cn: u64) -> Result<u64, Fail> {
    let ids = owned_range(ks, tx.gen, tx.num, cn, StreamId::MIN, 0);
    for &id in &ids {
        ks.internal_delete(&pel_key(tx.gen, tx.num, id))?;
        ks.internal_delete(&owned_key(tx.gen, tx.num, cn, id))?;
    }
    let pending = ids.len() as u64;
    assert!(tx.group.pending >= pending);
    tx.group.pending -= pending;
    tx.group.consumers -= 1;
    tx.touch_group();
    tx.consumers.remove(&cn);
    tx.dirty.retain(|&n| n != cn);
    ks.internal_delete(&consumer_key(tx.gen, tx.num, cn))?;
    Ok(pending)
}

const XGROUP_HELP: &[&str] = &[
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
];

const XINFO_HELP: &[&str] = &[
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
];

/// Redis's `addReplyHelp`.
fn help<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, lines: &[&str]) {
    let cmd = String::from_utf8_lossy(c.arg(0)).to_ascii_uppercase();
    c.out.array(lines.len() + 3);
    c.out.simple(format!("{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:").as_bytes());
    for l in lines {
        c.out.simple(l.as_bytes());
    }
    c.out.simple(b"HELP");
    c.out.simple(b"    Prints this help.");
}

// ---------------------------------------------------------------- XSETID

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
pub(in crate::exec) fn xsetid<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let id = parse_id(c.arg(2), 0, true, None)?;
    let (mut entries_added, mut max_deleted) = (-1i64, StreamId::MIN);
    let mut i = 3;
    while i < c.argc() {
        let more = c.argc() - 1 - i;
        let opt = c.arg(i);
        if opt.eq_ignore_ascii_case(b"entriesadded") && more > 0 {
            entries_added = c.int_arg(i + 1)?;
            if entries_added < 0 {
                return Err(Fail::err("entries_added must be positive"));
            }
        } else if opt.eq_ignore_ascii_case(b"maxdeletedid") && more > 0 {
            max_deleted = parse_id(c.arg(i + 1), 0, true, None)?;
            if id < max_deleted {
                return Err(Fail::err("The ID specified in XSETID is smaller than the provided max_deleted_entry_id"));
            }
        } else {
            return Err(Fail::Syntax);
        }
        i += 2;
    }
    let key = c.arg(1);
    let Some(mut h) = load(c, key)? else {
        return Err(Fail::err("no such key"));
    };
    if h.length > 0 {
        let top = super::last_live_of(c.ks, &h)?;
        if id < top {
            return Err(Fail::err("The ID specified in XSETID is smaller than the target stream top item"));
        }
        if entries_added != -1 && h.length > entries_added as u64 {
            return Err(Fail::err("The entries_added specified in XSETID is smaller than the target stream length"));
        }
    }
    h.last_id = id;
    if entries_added != -1 {
        h.entries_added = entries_added as u64;
    }
    if max_deleted != StreamId::MIN {
        h.max_deleted = max_deleted;
    }
    write_header(c.ks, key, &h)?;
    c.out.simple(b"OK");
    Ok(())
}

// ---------------------------------------------------------------- XACK

/// XACK key group id [id ...]: how many were pending.
pub(in crate::exec) fn xack<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let Some(h) = load(c, c.arg(1))? else {
        c.out.integer(0);
        return Ok(());
    };
    let Some(mut tx) = Tx::open(c.ks, &h, c.arg(2))? else {
        c.out.integer(0);
        return Ok(());
    };
    let ids = (3..c.argc()).map(|j| parse_id(c.arg(j), 0, true, None)).collect::<Result<Vec<_>, _>>()?;
    let mut acked = 0;
    for id in ids {
        if let Some(nack) = get_nack(c.ks, h.gen, tx.num, id)? {
            tx.remove_nack(c.ks, id, nack)?;
            acked += 1;
        }
    }
    tx.commit(c.ks)?;
    c.out.integer(acked);
    Ok(())
}

// ---------------------------------------------------------------- XPENDING

/// XPENDING key group [[IDLE min-idle] start end count [consumer]]
pub(in crate::exec) fn xpending<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let argc = c.argc();
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(Fail::Syntax);
    }
    let mut ext = None;
    if argc >= 6 {
        let mut at = 3;
        let mut min_idle = 0i64;
        if c.arg(3).eq_ignore_ascii_case(b"idle") {
            min_idle = c.int_arg(4)?;
            if argc < 8 {
                return Err(Fail::Syntax);
            }
            at += 2;
        }
        let count = c.int_arg(at + 2)?.max(0) as u64;
        let start = super::interval_start(c.arg(at))?;
        let end = super::interval_end(c.arg(at + 1))?;
        let consumer = (at + 3 < argc).then(|| c.arg(at + 3));
        ext = Some((min_idle, start, end, count, consumer));
    }
    let h = load(c, c.arg(1))?;
    let tx = match h.as_ref() {
        Some(h) => Tx::open(c.ks, h, c.arg(2))?,
        None => None,
    };
    let Some(mut tx) = tx else {
        return Err(Fail::Text(format!(
            "NOGROUP No such key '{}' or consumer group '{}'",
            shown(c.arg(1)),
            shown(c.arg(2))
        )));
    };
    let gen = tx.gen;
    let Some((min_idle, start, end, count, consumer)) = ext else {
        return pending_summary(c, &mut tx);
    };
    let owner = match consumer {
        Some(name) => match tx.lookup(c.ks, name, None)? {
            Some(n) => Some(n),
            None => {
                c.out.array(0);
                return Ok(());
            }
        },
        None => None,
    };
    let t = now(c) as i64;
    let mut rows = Vec::new();
    let mut remaining = count;
    // Without IDLE, the first `count` are the answer.
    let limit = if min_idle == 0 { usize::try_from(count).unwrap_or(usize::MAX) } else { 0 };
    if remaining > 0 {
        let candidates: Vec<(StreamId, Nack)> = match owner {
            Some(cn) => {
                let mut out = Vec::new();
                let prefix = owned_prefix(gen, tx.num, cn);
                let mut ids = Vec::new();
                scan_prefix(c.ks, &prefix, &owned_key(gen, tx.num, cn, start), &mut |_, k| {
                    let id = id_of_key(k);
                    if id > end {
                        return false;
                    }
                    ids.push(id);
                    limit == 0 || ids.len() < limit
                });
                for id in ids {
                    out.push((id, get_nack(c.ks, gen, tx.num, id)?.ok_or(corrupt(GroupError::Nack))?));
                }
                out
            }
            None => pel_range(c.ks, gen, tx.num, start, end, limit)?,
        };
        for (id, nack) in candidates {
            if remaining == 0 {
                break;
            }
            if min_idle != 0 && t - (nack.delivery_ms as i64) < min_idle {
                continue;
            }
            remaining -= 1;
            rows.push((id, tx.name_of(c.ks, nack.consumer)?, (t - nack.delivery_ms as i64).max(0), nack.deliveries));
        }
    }
    c.out.array(rows.len());
    for (id, name, idle, deliveries) in rows {
        c.out.array(4);
        c.out.bulk(id.text().as_bytes());
        c.out.bulk(&name);
        c.out.integer(idle);
        c.out.integer(deliveries as i64);
    }
    Ok(())
}

fn pending_summary<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, tx: &mut Tx) -> Res {
    c.out.array(4);
    c.out.integer(tx.group.pending as i64);
    if tx.group.pending == 0 {
        c.out.null();
        c.out.null();
        c.out.null_array();
        return Ok(());
    }
    let first = pel_range(c.ks, tx.gen, tx.num, StreamId::MIN, StreamId::MAX, 1)?;
    let last = last_pel_id(c.ks, tx)?;
    c.out.bulk(first[0].0.text().as_bytes());
    c.out.bulk(last.text().as_bytes());
    let owners: Vec<(u64, Consumer)> = consumers(c.ks, tx.gen, tx.num)?.into_iter().filter(|(_, c)| c.pending > 0).collect();
    c.out.array(owners.len());
    for (_, o) in owners {
        c.out.array(2);
        c.out.bulk(&o.name);
        c.out.bulk(o.pending.to_string().as_bytes());
    }
    Ok(())
}

/// The group's largest pending ID (its PEL is not empty), by a search
/// over the ID space: the scan has no reverse, and a PEL may be long.
/// Each step looks for the first entry at or past the middle of what is
/// left, so it takes at most 128 one-key scans.
fn last_pel_id<K: Keyspace + ?Sized>(ks: &mut K, tx: &Tx) -> Result<StreamId, Fail> {
    let wide = |id: StreamId| (u128::from(id.ms) << 64) | u128::from(id.seq);
    let narrow = |v: u128| StreamId { ms: (v >> 64) as u64, seq: v as u64 };
    let first = |ks: &mut K, from: u128| pel_range(ks, tx.gen, tx.num, narrow(from), StreamId::MAX, 1).map(|p| p.first().map(|e| wide(e.0)));
    let (mut lo, mut hi) = (first(ks, 0)?.ok_or(corrupt(GroupError::Group))?, u128::MAX);
    // Invariant: `lo` is pending, and nothing past `hi` is.
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        match first(ks, mid)? {
            Some(found) => lo = found,
            None => hi = mid - 1,
        }
    }
    Ok(narrow(lo))
}

// ---------------------------------------------------------------- XCLAIM

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME
/// ms-unix-time] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID id]
pub(in crate::exec) fn xclaim<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let h = load(c, c.arg(1))?;
    let tx = match h.as_ref() {
        Some(h) => Tx::open(c.ks, h, c.arg(2))?,
        None => None,
    };
    let (Some(h), Some(mut tx)) = (h, tx) else {
        return Err(no_group_error(c.arg(1), c.arg(2)));
    };
    let long = |i: usize, msg: &str| pmwire_resp::numbers::parse_i64(c.arg(i)).ok_or_else(|| Fail::err(msg));
    let min_idle = long(4, "Invalid min-idle-time argument for XCLAIM")?.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < c.argc() {
        match parse_id(c.arg(j), 0, true, None) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let t = now(c) as i64;
    let (mut force, mut justid, mut retry, mut delivery, mut last_id) = (false, false, -1i64, -1i64, StreamId::MIN);
    while j < c.argc() {
        let more = c.argc() - 1 - j;
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"force") {
            force = true;
        } else if opt.eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else if opt.eq_ignore_ascii_case(b"idle") && more > 0 {
            j += 1;
            delivery = t.wrapping_sub(long(j, "Invalid IDLE option argument for XCLAIM")?);
        } else if opt.eq_ignore_ascii_case(b"time") && more > 0 {
            j += 1;
            delivery = long(j, "Invalid TIME option argument for XCLAIM")?;
        } else if opt.eq_ignore_ascii_case(b"retrycount") && more > 0 {
            j += 1;
            retry = long(j, "Invalid RETRYCOUNT option argument for XCLAIM")?;
        } else if opt.eq_ignore_ascii_case(b"lastid") && more > 0 {
            j += 1;
            last_id = parse_id(c.arg(j), 0, true, None)?;
        } else {
            return Err(Fail::err(&format!("Unrecognized XCLAIM option '{}'", shown(opt))));
        }
        j += 1;
    }
    if last_id > tx.group.last_id {
        tx.group.last_id = last_id;
        tx.touch_group();
    }
    if delivery < 0 || delivery > t {
        delivery = t;
    }
    let mut claimed: Vec<Result<Entry, StreamId>> = Vec::new();
    let mut me = None;
    for id in ids {
        let mut nack = get_nack(c.ks, h.gen, tx.num, id)?;
        let Some(entry) = entry_at(c.ks, &h, id)? else {
            if let Some(n) = nack {
                tx.remove_nack(c.ks, id, n)?;
            }
            continue;
        };
        let old = nack;
        if force && nack.is_none() {
            nack = Some(Nack { consumer: 0, delivery_ms: 0, deliveries: 1 });
        }
        let Some(mut n) = nack else { continue };
        if old.is_some() && min_idle > 0 && t - (n.delivery_ms as i64) < min_idle {
            continue;
        }
        let cn = match me {
            Some(cn) => cn,
            None => *me.insert(tx.lookup_or_create(c, c.arg(1), c.arg(3), t as u64)?),
        };
        n.consumer = cn;
        n.delivery_ms = delivery as u64;
        if retry >= 0 {
            n.deliveries = retry as u64;
        } else if !justid {
            n.deliveries += 1;
        }
        tx.put_nack(c.ks, id, old, n)?;
        claimed.push(if justid { Err(id) } else { Ok(entry) });
    }
    tx.commit(c.ks)?;
    c.out.array(claimed.len());
    for e in claimed {
        reply_claimed(c, e);
    }
    Ok(())
}

fn reply_claimed<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, e: Result<Entry, StreamId>) {
    match e {
        Err(id) => c.out.bulk(id.text().as_bytes()),
        Ok(entry) => reply_entries_one(c, &entry),
    }
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]:
/// `[next start, claimed, deleted IDs]`.
pub(in crate::exec) fn xautoclaim<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let min_idle = pmwire_resp::numbers::parse_i64(c.arg(4))
        .ok_or_else(|| Fail::err("Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0);
    let start = super::interval_start(c.arg(5))?;
    let (mut count, mut justid) = (100i64, false);
    let mut j = 6;
    while j < c.argc() {
        let more = c.argc() - 1 - j;
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"count") && more > 0 {
            let max = i64::MAX / 16;
            count = pmwire_resp::numbers::parse_i64(c.arg(j + 1))
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| Fail::err("COUNT must be > 0"))?;
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    let h = load(c, c.arg(1))?;
    let tx = match h.as_ref() {
        Some(h) => Tx::open(c.ks, h, c.arg(2))?,
        None => None,
    };
    let (Some(h), Some(mut tx)) = (h, tx) else {
        return Err(no_group_error(c.arg(1), c.arg(2)));
    };
    let t = now(c);
    let mut attempts = count.saturating_mul(10);
    let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
    let mut me = None;
    let mut from = start;
    let mut last_seen = None;
    'pages: while attempts > 0 && count > 0 {
        let page = pel_range(c.ks, h.gen, tx.num, from, StreamId::MAX, 64)?;
        if page.is_empty() {
            break;
        }
        for (id, nack) in page {
            if attempts == 0 || count == 0 {
                break 'pages;
            }
            attempts -= 1;
            last_seen = Some(id);
            let Some(entry) = entry_at(c.ks, &h, id)? else {
                tx.remove_nack(c.ks, id, nack)?;
                deleted.push(id);
                count -= 1;
                continue;
            };
            if min_idle > 0 && (t as i64) - (nack.delivery_ms as i64) < min_idle {
                continue;
            }
            let cn = match me {
                Some(cn) => cn,
                None => *me.insert(tx.lookup_or_create(c, c.arg(1), c.arg(3), t)?),
            };
            let n = Nack { consumer: cn, delivery_ms: t, deliveries: nack.deliveries + u64::from(!justid) };
            tx.put_nack(c.ks, id, Some(nack), n)?;
            claimed.push(if justid { Err(id) } else { Ok(entry) });
            count -= 1;
        }
        match last_seen.and_then(StreamId::next) {
            Some(next) => from = next,
            None => break,
        }
    }
    // The cursor: the first pending ID after the last one examined.
    let next = match last_seen.and_then(StreamId::next) {
        Some(n) => pel_range(c.ks, h.gen, tx.num, n, StreamId::MAX, 1)?.first().map(|p| p.0),
        None => None,
    };
    tx.commit(c.ks)?;
    c.out.array(3);
    c.out.bulk(next.unwrap_or(StreamId::MIN).text().as_bytes());
    c.out.array(claimed.len());
    for e in claimed {
        reply_claimed(c, e);
    }
    c.out.array(deleted.len());
    for id in deleted {
        c.out.bulk(id.text().as_bytes());
    }
    Ok(())
}

// ---------------------------------------------------------------- XREADGROUP

/// What an XREADGROUP reads in one stream: new entries (`>`) or its
/// consumer's history from an ID.
pub(super) struct GroupRead<'a> {
    pub key: &'a [u8],
    pub group: &'a [u8],
    pub consumer: &'a [u8],
    pub noack: bool,
}

/// Serves XREADGROUP on one stream synchronously if it can: the entries
/// (or history) it delivers, with the PEL updated; `None` if `>` finds
/// nothing new (the command may block).
pub(super) fn read_group<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: C<'_, '_, '_, K, S>,
    h: &Header,
    gt: StreamId,
    count: u64,
    r: &GroupRead<'_>,
) -> Result<Option<Vec<(StreamId, Option<Entry>)>>, Fail> {
    let mut tx = Tx::open(c.ks, h, r.group)?.expect("the group was checked");
    let history = gt != StreamId::MAX;
    if !history {
        if h.length == 0 || super::last_live_of(c.ks, h)? <= tx.group.last_id {
            return Ok(None);
        }
    }
    let t = now(c);
    let cn = tx.lookup_or_create(c, r.key, r.consumer, t)?;
    let mut out = Vec::new();
    if history {
        let Some(start) = gt.next() else {
            tx.commit(c.ks)?;
            return Ok(Some(out));
        };
        for id in owned_range(c.ks, h.gen, tx.num, cn, start, count as usize) {
            let entry = entry_at(c.ks, h, id)?;
            if entry.is_some() {
                let mut n = get_nack(c.ks, h.gen, tx.num, id)?.ok_or(corrupt(GroupError::Nack))?;
                n.delivery_ms = t;
                n.deliveries += 1;
                c.ks.internal_put(&pel_key(h.gen, tx.num, id), &n.encode())?;
            }
            out.push((id, entry));
        }
    } else {
        let start = tx.group.last_id.next().expect("below the stream's last entry");
        for e in range(c.ks, h, start, StreamId::MAX, count as usize, false)? {
            advance(h, &mut tx.group, e.id);
            tx.touch_group();
            if !r.noack {
                let old = get_nack(c.ks, h.gen, tx.num, e.id)?;
                tx.put_nack(c.ks, e.id, old, Nack { consumer: cn, delivery_ms: t, deliveries: 1 })?;
            }
            out.push((e.id, Some(e)));
        }
    }
    tx.commit(c.ks)?;
    Ok(Some(out))
}

/// Writes XREADGROUP's entries: history entries no longer in the stream
/// as `[id, nil]`.
pub(super) fn reply_read<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, entries: &[(StreamId, Option<Entry>)]) {
    c.out.array(entries.len());
    for (id, e) in entries {
        match e {
            Some(e) => reply_entries_one(c, e),
            None => {
                c.out.array(2);
                c.out.bulk(id.text().as_bytes());
                c.out.null_array();
            }
        }
    }
}

use super::reply_entry as reply_entries_one;

/// A blocked XREADGROUP's key, looked at now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupWait {
    /// No stream there any more: answered `-UNBLOCKED`.
    Gone,
    /// The group was destroyed: answered `-NOGROUP`.
    NoGroup,
    /// An entry past the group's last ID: served.
    Ready,
    /// Nothing new: it keeps waiting.
    Waiting,
}

/// What a client blocked in XREADGROUP on `key` for `group` sees now.
pub(crate) fn group_wait<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8], group: &[u8]) -> GroupWait {
    let Some(s) = ks.get(key).filter(|s| s.kind == Kind::Stream) else { return GroupWait::Gone };
    let mut bytes = Vec::new();
    ks.read(&s.value, &mut bytes);
    let Ok(h) = Header::decode(&bytes) else { return GroupWait::Gone };
    let Ok(Some((_, g))) = find_group(ks, h.gen, group) else { return GroupWait::NoGroup };
    if h.length == 0 {
        // Empty (MKSTREAM, or every entry deleted): nothing to deliver.
        return GroupWait::Waiting;
    }
    match super::last_live_of(ks, &h) {
        Ok(last) if last > g.last_id => GroupWait::Ready,
        _ => GroupWait::Waiting,
    }
}

// ---------------------------------------------------------------- XINFO

/// XINFO HELP.
pub(in crate::exec) fn xinfo_help<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    help(c, XINFO_HELP);
    Ok(())
}

fn info_stream_header<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Result<Header, Fail> {
    load(c, c.arg(2))?.ok_or_else(|| Fail::err("no such key"))
}

fn bulk_or_null<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, v: Option<i64>) {
    match v {
        Some(n) => c.out.integer(n),
        None => c.out.null(),
    }
}

/// XINFO GROUPS key
pub(in crate::exec) fn xinfo_groups<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let h = info_stream_header(c)?;
    let all = groups(c.ks, h.gen)?;
    c.out.array(all.len());
    for (_, g) in all {
        c.out.map(6);
        c.out.bulk(b"name");
        c.out.bulk(&g.name);
        c.out.bulk(b"consumers");
        c.out.integer(g.consumers as i64);
        c.out.bulk(b"pending");
        c.out.integer(g.pending as i64);
        c.out.bulk(b"last-delivered-id");
        c.out.bulk(g.last_id.text().as_bytes());
        c.out.bulk(b"entries-read");
        bulk_or_null(c, (g.entries_read != ENTRIES_READ_UNKNOWN).then_some(g.entries_read));
        c.out.bulk(b"lag");
        bulk_or_null(c, lag(&h, &g));
    }
    Ok(())
}

/// XINFO CONSUMERS key group
pub(in crate::exec) fn xinfo_consumers<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let h = info_stream_header(c)?;
    let Some((num, _)) = find_group(c.ks, h.gen, c.arg(3))? else {
        return Err(no_such_group(c.arg(2), c.arg(3)));
    };
    let all = consumers(c.ks, h.gen, num)?;
    let t = now(c) as i64;
    c.out.array(all.len());
    for (_, cons) in all {
        c.out.map(3);
        c.out.bulk(b"name");
        c.out.bulk(&cons.name);
        c.out.bulk(b"pending");
        c.out.integer(cons.pending as i64);
        c.out.bulk(b"idle");
        c.out.integer((t - cons.seen_ms as i64).max(0));
    }
    Ok(())
}

/// XINFO STREAM key [FULL [COUNT count]]
pub(in crate::exec) fn xinfo_stream<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let h = info_stream_header(c)?;
    let optc = c.argc() - 3;
    let (mut full, mut count) = (false, 10i64);
    if optc > 0 {
        if (optc != 1 && optc != 3) || !c.arg(3).eq_ignore_ascii_case(b"full") {
            return Err(subcommand_syntax(c));
        }
        full = true;
        if optc == 3 {
            if !c.arg(4).eq_ignore_ascii_case(b"count") {
                return Err(subcommand_syntax(c));
            }
            count = c.int_arg(5)?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let masters = super::node_masters(c.ks, &h)?;
    c.out.map(if full { 9 } else { 10 });
    c.out.bulk(b"length");
    c.out.integer(h.length as i64);
    c.out.bulk(b"radix-tree-keys");
    c.out.integer(masters.len() as i64);
    c.out.bulk(b"radix-tree-nodes");
    c.out.integer(rax_nodes(&masters) as i64);
    c.out.bulk(b"last-generated-id");
    c.out.bulk(h.last_id.text().as_bytes());
    c.out.bulk(b"max-deleted-entry-id");
    c.out.bulk(h.max_deleted.text().as_bytes());
    c.out.bulk(b"entries-added");
    c.out.integer(h.entries_added as i64);
    c.out.bulk(b"recorded-first-entry-id");
    c.out.bulk(h.first_id.text().as_bytes());
    let all = groups(c.ks, h.gen)?;
    if !full {
        c.out.bulk(b"groups");
        c.out.integer(all.len() as i64);
        for rev in [false, true] {
            c.out.bulk(if rev { b"last-entry" } else { b"first-entry" });
            match range(c.ks, &h, StreamId::MIN, StreamId::MAX, 1, rev)?.first() {
                Some(e) => reply_entries_one(c, e),
                None => c.out.null(),
            }
        }
        return Ok(());
    }
    let limit = count as usize;
    c.out.bulk(b"entries");
    let entries = range(c.ks, &h, StreamId::MIN, StreamId::MAX, limit, false)?;
    reply_entries(c, &entries);
    c.out.bulk(b"groups");
    c.out.array(all.len());
    for (num, g) in all {
        info_full_group(c, &h, num, &g, limit)?;
    }
    Ok(())
}

fn info_full_group<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, h: &Header, num: u64, g: &Group, limit: usize) -> Res {
    let mut tx = Tx::new(h.gen, num, g.clone());
    c.out.map(7);
    c.out.bulk(b"name");
    c.out.bulk(&g.name);
    c.out.bulk(b"last-delivered-id");
    c.out.bulk(g.last_id.text().as_bytes());
    c.out.bulk(b"entries-read");
    bulk_or_null(c, (g.entries_read != ENTRIES_READ_UNKNOWN).then_some(g.entries_read));
    c.out.bulk(b"lag");
    bulk_or_null(c, lag(h, g));
    c.out.bulk(b"pel-count");
    c.out.integer(g.pending as i64);
    c.out.bulk(b"pending");
    let pel = pel_range(c.ks, h.gen, num, StreamId::MIN, StreamId::MAX, limit)?;
    c.out.array(pel.len());
    for (id, n) in pel {
        c.out.array(4);
        c.out.bulk(id.text().as_bytes());
        let name = tx.name_of(c.ks, n.consumer)?;
        c.out.bulk(&name);
        c.out.integer(n.delivery_ms as i64);
        c.out.integer(n.deliveries as i64);
    }
    c.out.bulk(b"consumers");
    let all = consumers(c.ks, h.gen, num)?;
    c.out.array(all.len());
    for (cn, cons) in all {
        c.out.map(4);
        c.out.bulk(b"name");
        c.out.bulk(&cons.name);
        c.out.bulk(b"seen-time");
        c.out.integer(cons.seen_ms as i64);
        c.out.bulk(b"pel-count");
        c.out.integer(cons.pending as i64);
        c.out.bulk(b"pending");
        let ids = owned_range(c.ks, h.gen, num, cn, StreamId::MIN, limit);
        c.out.array(ids.len());
        for id in ids {
            let n = get_nack(c.ks, h.gen, num, id)?.ok_or(corrupt(GroupError::Nack))?;
            c.out.array(3);
            c.out.bulk(id.text().as_bytes());
            c.out.integer(n.delivery_ms as i64);
            c.out.integer(n.deliveries as i64);
        }
    }
    Ok(())
}

/// The nodes a Redis radix tree holding `keys` (16-byte big-endian master
/// IDs, ascending) has, in its compressed form: a branch has a child per
/// byte, a chain of single children is one compressed node, and a key ends
/// in a leaf. (Redis's tree reaches this form by insertions; after
/// deletions its count may differ.)
fn rax_nodes(keys: &[StreamId]) -> u64 {
    fn bytes(id: &StreamId) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&id.ms.to_be_bytes());
        b[8..].copy_from_slice(&id.seq.to_be_bytes());
        b
    }
    fn count(keys: &[[u8; 16]], depth: usize) -> u64 {
        if depth == 16 || keys.is_empty() {
            return 1;
        }
        let (first, last) = (&keys[0], &keys[keys.len() - 1]);
        let common = (depth..16).take_while(|&i| first[i] == last[i]).count();
        if common > 0 {
            // A compressed node, then what follows the shared bytes.
            return 1 + count(keys, depth + common);
        }
        let mut n = 1;
        let mut at = 0;
        while at < keys.len() {
            let b = keys[at][depth];
            let end = at + keys[at..].iter().take_while(|k| k[depth] == b).count();
            n += count(&keys[at..end], depth + 1);
            at = end;
        }
        n
    }
    let keys: Vec<[u8; 16]> = keys.iter().map(bytes).collect();
    count(&keys, 0)
}

/// COPY's part: every group record of generation `from` written again
/// under `to`.
pub(super) fn copy_groups<K: Keyspace + ?Sized>(ks: &mut K, from: u64, to: u64) -> Res {
    let prefix = crate::stream_group::state_prefix(from);
    let mut keys = Vec::new();
    scan_prefix(ks, &prefix, &prefix, &mut |_, k| {
        keys.push(k.to_vec());
        true
    });
    for k in keys {
        let bytes = read_bytes(ks, &k).expect("a scanned entry");
        let mut target = k.clone();
        target[1..9].copy_from_slice(&to.to_be_bytes());
        ks.internal_put(&target, &bytes)?;
    }
    Ok(())
}

/// DUMP's part: every group of generation `gen`, by name, with its PEL and
/// consumers (each pending entry's owner an index into them).
pub(in crate::exec) fn snapshot_groups<K: Keyspace + ?Sized>(ks: &mut K, gen: u64) -> Result<Vec<GroupValue>, Fail> {
    let mut out = Vec::new();
    for (gnum, g) in groups(ks, gen)? {
        let consumers = consumers(ks, gen, gnum)?;
        let index: HashMap<u64, usize> = consumers.iter().enumerate().map(|(i, (n, _))| (*n, i)).collect();
        let mut pel = Vec::new();
        for (id, nack) in pel_range(ks, gen, gnum, StreamId::MIN, StreamId::MAX, 0)? {
            let consumer = *index.get(&nack.consumer).ok_or_else(|| corrupt(GroupError::Nack))?;
            pel.push(PendingValue { id, delivery_ms: nack.delivery_ms, deliveries: nack.deliveries, consumer });
        }
        let consumers = consumers.into_iter().map(|(_, c)| ConsumerValue { name: c.name, seen_ms: c.seen_ms }).collect();
        out.push(GroupValue { name: g.name, last_id: g.last_id, entries_read: g.entries_read, pel, consumers });
    }
    Ok(out)
}

/// RESTORE's part: `groups` written under generation `gen` (a fresh
/// stream's), numbered 1.. in order, their consumers likewise.
pub(in crate::exec) fn restore_groups<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, groups: &[GroupValue]) -> Res {
    for (gi, g) in groups.iter().enumerate() {
        let gnum = gi as u64 + 1;
        for (ci, c) in g.consumers.iter().enumerate() {
            let pending = g.pel.iter().filter(|p| p.consumer == ci).count() as u64;
            let record = Consumer { seen_ms: c.seen_ms, pending, name: c.name.clone() };
            ks.internal_put(&consumer_key(gen, gnum, ci as u64 + 1), &record.encode())?;
        }
        for p in &g.pel {
            assert!(p.consumer < g.consumers.len(), "a pending entry names a consumer of its group");
            let cnum = p.consumer as u64 + 1;
            let nack = Nack { consumer: cnum, delivery_ms: p.delivery_ms, deliveries: p.deliveries };
            ks.internal_put(&pel_key(gen, gnum, p.id), &nack.encode())?;
            ks.internal_put(&owned_key(gen, gnum, cnum, p.id), &[])?;
        }
        let n = g.consumers.len() as u64;
        let record = Group { last_id: g.last_id, entries_read: g.entries_read, pending: g.pel.len() as u64, consumers: n, consumers_made: n, name: g.name.clone() };
        ks.internal_put(&group_key(gen, gnum), &record.encode())?;
    }
    Ok(())
}
