//! A stream in RDB encoding (`rdbSaveObject`'s and `rdbLoadObject`'s
//! `OBJ_STREAM` parts), its nodes as `t_stream.c`'s listpacks:
//!
//! ```text
//! master entry: count deleted master-fields field... 0
//! each entry:   flags ms-diff seq-diff [fields-count field] value... lp-count
//!               (flags: 1 deleted, 2 same fields as the master entry, whose
//!               fields are then left out; diffs from the node's master ID,
//!               which is the node's first entry's, as wrapping u64)
//! ```
//! Then the stream's metadata, and its groups: name, last-delivered ID,
//! entries-read (v2), the group PEL (raw 128-bit big-endian IDs, delivery
//! time as `int64` LE, delivery count), the consumers (name, seen time,
//! their PEL's IDs). Groups and consumers are in name order (Redis's rax).

use super::listpack::{Builder, Item};
use super::{put_len, put_string, PayloadError, Reader, Result};
use crate::stream::{Entry, StreamId};
use std::collections::{BTreeMap, HashSet};

use PayloadError::BadFormat;

/// A stream's content: its nodes and metadata, and its consumer groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamValue {
    /// Nodes in ID order, each its entries in ID order, deleted ones
    /// included; none empty (of live entries, when read).
    pub nodes: Vec<Vec<Entry>>,
    /// Live entries.
    pub length: u64,
    /// The last ID generated.
    pub last_id: StreamId,
    /// The first live entry's ID (0-0 when empty).
    pub first_id: StreamId,
    /// The largest ID deleted.
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer groups, by name.
    pub groups: Vec<GroupValue>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    /// Its name.
    pub name: Vec<u8>,
    /// The last ID delivered.
    pub last_id: StreamId,
    /// Entries read, or -1 if unknown.
    pub entries_read: i64,
    /// The PEL, by ID.
    pub pel: Vec<PendingValue>,
    /// The consumers, by name.
    pub consumers: Vec<ConsumerValue>,
}

/// A pending entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingValue {
    /// The entry's ID.
    pub id: StreamId,
    /// Last delivery, ms since the epoch.
    pub delivery_ms: u64,
    /// Deliveries.
    pub deliveries: u64,
    /// Its owner: an index into the group's consumers.
    pub consumer: usize,
}

/// A consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerValue {
    /// Its name.
    pub name: Vec<u8>,
    /// Last seen, ms since the epoch.
    pub seen_ms: u64,
}

const DELETED: i64 = 1;
const SAMEFIELDS: i64 = 2;

fn raw_id(id: StreamId) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&id.ms.to_be_bytes());
    b[8..].copy_from_slice(&id.seq.to_be_bytes());
    b
}

fn id_of_raw(b: &[u8]) -> StreamId {
    StreamId { ms: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")), seq: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")) }
}

/// A node's listpack, as `streamAppendItem` and the deletions built it.
fn node_listpack(entries: &[Entry]) -> Vec<u8> {
    let master = entries[0].id;
    let master_fields: Vec<&[u8]> = entries[0].fields.iter().map(|(f, _)| f.as_slice()).collect();
    let deleted = entries.iter().filter(|e| e.deleted).count();
    let mut lp = Builder::new();
    lp.push_int((entries.len() - deleted) as i64);
    lp.push_int(deleted as i64);
    lp.push_int(master_fields.len() as i64);
    for f in &master_fields {
        lp.push(f);
    }
    lp.push_int(0);
    for e in entries {
        let same = e.fields.len() == master_fields.len() && e.fields.iter().zip(&master_fields).all(|((f, _), m)| f == m);
        let flags = if e.deleted { DELETED } else { 0 } | if same { SAMEFIELDS } else { 0 };
        lp.push_int(flags);
        lp.push_int(e.id.ms.wrapping_sub(master.ms) as i64);
        lp.push_int(e.id.seq.wrapping_sub(master.seq) as i64);
        if !same {
            lp.push_int(e.fields.len() as i64);
        }
        for (f, v) in &e.fields {
            if !same {
                lp.push(f);
            }
            lp.push(v);
        }
        let n = e.fields.len() as i64;
        lp.push_int(if same { n + 3 } else { 2 * n + 4 });
    }
    lp.finish()
}

/// Writes the stream object (after its type byte).
pub(super) fn write(out: &mut Vec<u8>, s: &StreamValue) {
    put_len(out, s.nodes.len() as u64);
    for node in &s.nodes {
        put_string(out, &raw_id(node[0].id));
        put_string(out, &node_listpack(node));
    }
    put_len(out, s.length);
    for id in [s.last_id, s.first_id, s.max_deleted] {
        put_len(out, id.ms);
        put_len(out, id.seq);
    }
    put_len(out, s.entries_added);
    put_len(out, s.groups.len() as u64);
    for g in &s.groups {
        put_string(out, &g.name);
        put_len(out, g.last_id.ms);
        put_len(out, g.last_id.seq);
        put_len(out, g.entries_read as u64);
        put_len(out, g.pel.len() as u64);
        for p in &g.pel {
            out.extend_from_slice(&raw_id(p.id));
            out.extend_from_slice(&(p.delivery_ms as i64).to_le_bytes());
            put_len(out, p.deliveries);
        }
        put_len(out, g.consumers.len() as u64);
        for (i, c) in g.consumers.iter().enumerate() {
            put_string(out, &c.name);
            out.extend_from_slice(&(c.seen_ms as i64).to_le_bytes());
            let owned: Vec<&PendingValue> = g.pel.iter().filter(|p| p.consumer == i).collect();
            put_len(out, owned.len() as u64);
            for p in owned {
                out.extend_from_slice(&raw_id(p.id));
            }
        }
    }
}

/// A cursor over a node's listpack items.
struct Items<'a> {
    items: Vec<Item<'a>>,
    at: usize,
}

impl<'a> Items<'a> {
    fn next(&mut self) -> Result<Item<'a>> {
        let i = *self.items.get(self.at).ok_or(BadFormat)?;
        self.at += 1;
        Ok(i)
    }

    fn int(&mut self) -> Result<i64> {
        self.next()?.as_int().ok_or(BadFormat)
    }

    fn count(&mut self) -> Result<usize> {
        let n = usize::try_from(self.int()?).map_err(|_| BadFormat)?;
        if n > self.items.len() {
            return Err(BadFormat);
        }
        Ok(n)
    }
}

/// Decodes a node's listpack (`streamValidateListpackIntegrity`, deep).
fn read_node(master: StreamId, lp: &[u8]) -> Result<Vec<Entry>> {
    let mut it = Items { items: super::listpack::decode(lp).ok_or(BadFormat)?, at: 0 };
    let live = it.count()?;
    let deleted = it.count()?;
    let n_master = it.count()?;
    let mut master_fields = Vec::with_capacity(n_master);
    for _ in 0..n_master {
        master_fields.push(it.next()?.to_bytes());
    }
    if it.int()? != 0 {
        return Err(BadFormat);
    }
    let mut entries: Vec<Entry> = Vec::new();
    while it.at < it.items.len() {
        let start = it.at;
        let flags = it.int()?;
        if flags & !(DELETED | SAMEFIELDS) != 0 {
            return Err(BadFormat);
        }
        let ms = master.ms.wrapping_add(it.int()? as u64);
        let seq = master.seq.wrapping_add(it.int()? as u64);
        let mut fields = Vec::new();
        if flags & SAMEFIELDS != 0 {
            for f in &master_fields {
                fields.push((f.clone(), it.next()?.to_bytes()));
            }
        } else {
            let n = it.count()?;
            for _ in 0..n {
                let f = it.next()?.to_bytes();
                fields.push((f, it.next()?.to_bytes()));
            }
        }
        let taken = (it.at - start) as i64;
        if it.int()? != taken {
            return Err(BadFormat);
        }
        entries.push(Entry { id: StreamId { ms, seq }, deleted: flags & DELETED != 0, fields });
    }
    let dead = entries.iter().filter(|e| e.deleted).count();
    if entries.len() != live + deleted || dead != deleted || entries.is_empty() {
        return Err(BadFormat);
    }
    Ok(entries)
}

fn read_id(r: &mut Reader<'_>) -> Result<StreamId> {
    Ok(StreamId { ms: r.len()?, seq: r.len()? })
}

/// Decodes a stream object (`v2`: `RDB_TYPE_STREAM_LISTPACKS_2`).
pub(super) fn read(r: &mut Reader<'_>, v2: bool) -> Result<StreamValue> {
    let mut s = StreamValue::default();
    let mut previous: Option<StreamId> = None;
    let mut live = 0u64;
    for _ in 0..r.count()? {
        let key = r.string()?;
        if key.len() != 16 {
            return Err(BadFormat);
        }
        let lp = r.string()?;
        let entries = read_node(id_of_raw(&key), &lp)?;
        for e in &entries {
            if previous.is_some_and(|p| p >= e.id) {
                return Err(BadFormat);
            }
            previous = Some(e.id);
        }
        let node_live = entries.iter().filter(|e| !e.deleted).count() as u64;
        live += node_live;
        // A node with no live entry holds nothing a command can see;
        // pmwire keeps none.
        if node_live > 0 {
            s.nodes.push(entries);
        }
    }
    s.length = r.len()?;
    s.last_id = read_id(r)?;
    let first_live = s.nodes.iter().flatten().find(|e| !e.deleted).map(|e| e.id);
    if v2 {
        s.first_id = read_id(r)?;
        s.max_deleted = read_id(r)?;
        s.entries_added = r.len()?;
    } else {
        s.entries_added = s.length;
        s.first_id = first_live.unwrap_or_default();
    }
    if s.length != live || previous.is_some_and(|p| p > s.last_id) || s.entries_added < s.length {
        return Err(BadFormat);
    }
    if s.length > 0 && Some(s.first_id) != first_live {
        return Err(BadFormat);
    }
    let mut names = HashSet::new();
    for _ in 0..r.count()? {
        let g = read_group(r, v2, &s)?;
        if !names.insert(g.name.clone()) {
            return Err(BadFormat);
        }
        s.groups.push(g);
    }
    s.groups.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(s)
}

fn read_group(r: &mut Reader<'_>, v2: bool, s: &StreamValue) -> Result<GroupValue> {
    let name = r.string()?;
    let last_id = read_id(r)?;
    let entries_read = if v2 {
        match r.len()? {
            u64::MAX => -1,
            n => i64::try_from(n).map_err(|_| BadFormat)?,
        }
    } else {
        estimate_entries_read(s, last_id)
    };
    // The PEL: ID -> (delivery time, count, owner once the consumers say).
    let mut pel: BTreeMap<StreamId, (u64, u64, Option<usize>)> = BTreeMap::new();
    for _ in 0..r.count()? {
        let id = id_of_raw(r.take(16)?);
        let delivery_ms = r.ms_time()? as u64;
        let deliveries = r.len()?;
        if pel.insert(id, (delivery_ms, deliveries, None)).is_some() {
            return Err(BadFormat);
        }
    }
    let mut consumers: Vec<(ConsumerValue, Vec<StreamId>)> = Vec::new();
    let mut names = HashSet::new();
    for _ in 0..r.count()? {
        let name = r.string()?;
        if !names.insert(name.clone()) {
            return Err(BadFormat);
        }
        let seen_ms = r.ms_time()? as u64;
        let mut owned = Vec::new();
        for _ in 0..r.count()? {
            owned.push(id_of_raw(r.take(16)?));
        }
        consumers.push((ConsumerValue { name, seen_ms }, owned));
    }
    consumers.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for (i, (_, owned)) in consumers.iter().enumerate() {
        for id in owned {
            match pel.get_mut(id) {
                Some((_, _, owner @ None)) => *owner = Some(i),
                // Not in the group's PEL, or owned twice.
                _ => return Err(BadFormat),
            }
        }
    }
    let mut out = Vec::with_capacity(pel.len());
    for (id, (delivery_ms, deliveries, owner)) in pel {
        let consumer = owner.ok_or(BadFormat)?;
        out.push(PendingValue { id, delivery_ms, deliveries, consumer });
    }
    Ok(GroupValue { name, last_id, entries_read, pel: out, consumers: consumers.into_iter().map(|(c, _)| c).collect() })
}

/// `streamEstimateDistanceFromFirstEverEntry`: a v1 payload's group has no
/// entries-read counter; Redis 7.0 estimates it on load.
fn estimate_entries_read(s: &StreamValue, id: StreamId) -> i64 {
    let added = s.entries_added as i64;
    if s.entries_added == 0 {
        return 0;
    }
    if s.length == 0 && id <= s.last_id {
        return added;
    }
    if id == s.last_id {
        return added;
    }
    if id > s.last_id {
        return -1;
    }
    if s.max_deleted == StreamId::MIN || s.max_deleted < s.first_id {
        if id < s.first_id {
            return added - s.length as i64;
        } else if id == s.first_id {
            return added - s.length as i64 + 1;
        }
    }
    -1
}
