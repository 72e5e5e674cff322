//! A stream's consumer groups' stored form: small records, internal
//! entries under the stream's generation beside its nodes
//! ([`crate::stream`]), so a write touches a few bounded records whatever
//! the number of pending entries, and a stream deleted, expired or
//! overwritten takes its groups with its nodes (the generation's
//! tombstone collects every internal key that begins `00 gen`). RENAME
//! keeps the header, so the groups follow it; COPY writes them again under
//! the copy's generation.
//!
//! Keys (after `00 gen:u64be`, the node keys' prefix; a node's suffix is
//! its number, below 2^63, so it never begins FF):
//! ```text
//! FF 'G' group:u64be                                  group record
//! FF 'C' group:u64be consumer:u64be                   consumer record
//! FF 'P' group:u64be ms:u64be seq:u64be               group PEL entry (NACK)
//! FF 'Q' group:u64be consumer:u64be ms:u64be seq:u64be  the consumer's PEL (empty value)
//! ```
//! Groups are numbered from the header's `groups_made`, consumers from
//! their group's `consumers_made`; numbers are never reused, so a record
//! left by nothing can be mistaken for a live one. Names live in the
//! records' values (they may be longer than a key can be): a group is
//! found by name by reading its stream's group records, a consumer by
//! reading its group's consumer records.
//!
//! Records (little-endian):
//! ```text
//! group:    last-delivered ms:u64 seq:u64, entries-read:i64 (-1: unknown),
//!           pending:u64, consumers:u64, consumers-made:u64, name-len:u32, name
//! consumer: seen-time-ms:u64, pending:u64, name-len:u32, name
//! NACK:     consumer:u64, delivery-time-ms:u64, delivery-count:u64
//! ```
//! Invariants: a group's `pending` is the number of its `P` entries and
//! `consumers` of its `C` records; a consumer's `pending` is the number of
//! its `Q` entries; each `P` entry names a consumer record of its group and
//! has exactly one `Q` entry, under that consumer. Each record is written
//! whole within the keyspace's batch (no checksum of its own: the engine's
//! commit covers it).

use crate::stream::StreamId;

/// The byte after a generation that begins every group-state key.
pub const STATE_TAG: u8 = 0xFF;
const GROUP: u8 = b'G';
const CONSUMER: u8 = b'C';
const PEL: u8 = b'P';
const OWNED: u8 = b'Q';

/// Why a record does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// A group record's length or fields.
    #[error("consumer group record malformed")]
    Group,
    /// A consumer record's length or fields.
    #[error("consumer record malformed")]
    Consumer,
    /// A pending entry's length or fields.
    #[error("pending entry malformed")]
    Nack,
}

fn key(gen: u64, tag: u8, words: &[u64]) -> Vec<u8> {
    let mut k = Vec::with_capacity(11 + 8 * words.len());
    k.push(0); // crate::chunked's chunk tag: collected with the nodes
    k.extend_from_slice(&gen.to_be_bytes());
    k.push(STATE_TAG);
    k.push(tag);
    for w in words {
        k.extend_from_slice(&w.to_be_bytes());
    }
    k
}

/// Every group-state key of generation `gen` begins with this.
pub fn state_prefix(gen: u64) -> Vec<u8> {
    let mut k = key(gen, 0, &[]);
    k.pop();
    k
}

/// The prefix of generation `gen`'s group records.
pub fn groups_prefix(gen: u64) -> Vec<u8> {
    key(gen, GROUP, &[])
}

/// Group `group`'s record.
pub fn group_key(gen: u64, group: u64) -> Vec<u8> {
    key(gen, GROUP, &[group])
}

/// The prefix of group `group`'s consumer records.
pub fn consumers_prefix(gen: u64, group: u64) -> Vec<u8> {
    key(gen, CONSUMER, &[group])
}

/// Consumer `consumer`'s record in group `group`.
pub fn consumer_key(gen: u64, group: u64, consumer: u64) -> Vec<u8> {
    key(gen, CONSUMER, &[group, consumer])
}

/// The prefix of group `group`'s PEL.
pub fn pel_prefix(gen: u64, group: u64) -> Vec<u8> {
    key(gen, PEL, &[group])
}

/// Group `group`'s PEL entry for `id`.
pub fn pel_key(gen: u64, group: u64, id: StreamId) -> Vec<u8> {
    key(gen, PEL, &[group, id.ms, id.seq])
}

/// The prefix of consumer `consumer`'s PEL.
pub fn owned_prefix(gen: u64, group: u64, consumer: u64) -> Vec<u8> {
    key(gen, OWNED, &[group, consumer])
}

/// The prefix of every consumer PEL of group `group`.
pub fn owned_group_prefix(gen: u64, group: u64) -> Vec<u8> {
    key(gen, OWNED, &[group])
}

/// Consumer `consumer`'s PEL entry for `id`.
pub fn owned_key(gen: u64, group: u64, consumer: u64, id: StreamId) -> Vec<u8> {
    key(gen, OWNED, &[group, consumer, id.ms, id.seq])
}

/// The ID at the end of a PEL or consumer-PEL key.
pub fn id_of_key(k: &[u8]) -> StreamId {
    assert!(k.len() >= 16 + 11);
    let w = |at: usize| u64::from_be_bytes(k[at..at + 8].try_into().expect("8 bytes"));
    StreamId { ms: w(k.len() - 16), seq: w(k.len() - 8) }
}

/// The number at the end of a group or consumer record's key.
pub fn number_of_key(k: &[u8]) -> u64 {
    assert!(k.len() >= 8 + 11);
    u64::from_be_bytes(k[k.len() - 8..].try_into().expect("8 bytes"))
}

/// Redis's `SCG_INVALID_ENTRIES_READ`: the group's read counter is unknown.
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The last ID delivered to the group.
    pub last_id: StreamId,
    /// Entries the group read (its logical position), or
    /// [`ENTRIES_READ_UNKNOWN`].
    pub entries_read: i64,
    /// PEL entries.
    pub pending: u64,
    /// Consumer records.
    pub consumers: u64,
    /// Consumer numbers taken: the next consumer is `consumers_made + 1`.
    pub consumers_made: u64,
    /// The group's name.
    pub name: Vec<u8>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn name_at(b: &[u8], at: usize) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize;
    (b.len() == at + 4 + len).then(|| b[at + 4..].to_vec())
}

impl Group {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(52 + self.name.len());
        for w in [self.last_id.ms, self.last_id.seq, self.entries_read as u64, self.pending, self.consumers, self.consumers_made] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.name);
        out
    }

    /// Decodes a record, checking its lengths.
    pub fn decode(b: &[u8]) -> Result<Group, GroupError> {
        if b.len() < 52 {
            return Err(GroupError::Group);
        }
        let g = Group {
            last_id: StreamId { ms: u64_at(b, 0), seq: u64_at(b, 8) },
            entries_read: u64_at(b, 16) as i64,
            pending: u64_at(b, 24),
            consumers: u64_at(b, 32),
            consumers_made: u64_at(b, 40),
            name: name_at(b, 48).ok_or(GroupError::Group)?,
        };
        if g.entries_read < ENTRIES_READ_UNKNOWN || g.consumers > g.consumers_made {
            return Err(GroupError::Group);
        }
        Ok(g)
    }
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// When it was last seen (created, read, claimed), ms since the epoch.
    pub seen_ms: u64,
    /// Its PEL entries.
    pub pending: u64,
    /// Its name.
    pub name: Vec<u8>,
}

impl Consumer {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.name.len());
        out.extend_from_slice(&self.seen_ms.to_le_bytes());
        out.extend_from_slice(&self.pending.to_le_bytes());
        out.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.name);
        out
    }

    /// Decodes a record, checking its lengths.
    pub fn decode(b: &[u8]) -> Result<Consumer, GroupError> {
        if b.len() < 20 {
            return Err(GroupError::Consumer);
        }
        let name = name_at(b, 16).ok_or(GroupError::Consumer)?;
        Ok(Consumer { seen_ms: u64_at(b, 0), pending: u64_at(b, 8), name })
    }
}

/// A pending entry: delivered to a consumer and not acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nack {
    /// The consumer that owns it (its number in the group).
    pub consumer: u64,
    /// When it was last delivered, ms since the epoch.
    pub delivery_ms: u64,
    /// Times it was delivered.
    pub deliveries: u64,
}

/// A [`Nack`]'s length.
pub const NACK_BYTES: usize = 24;

impl Nack {
    /// The entry's bytes.
    pub fn encode(&self) -> [u8; NACK_BYTES] {
        let mut out = [0u8; NACK_BYTES];
        out[..8].copy_from_slice(&self.consumer.to_le_bytes());
        out[8..16].copy_from_slice(&self.delivery_ms.to_le_bytes());
        out[16..].copy_from_slice(&self.deliveries.to_le_bytes());
        out
    }

    /// Decodes an entry.
    pub fn decode(b: &[u8]) -> Result<Nack, GroupError> {
        if b.len() != NACK_BYTES {
            return Err(GroupError::Nack);
        }
        Ok(Nack { consumer: u64_at(b, 0), delivery_ms: u64_at(b, 8), deliveries: u64_at(b, 16) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_damage() {
        let g = Group { last_id: StreamId { ms: 5, seq: 1 }, entries_read: -1, pending: 3, consumers: 2, consumers_made: 4, name: b"grp".to_vec() };
        let bytes = g.encode();
        assert_eq!(Group::decode(&bytes), Ok(g.clone()));
        for cut in 0..bytes.len() {
            assert!(Group::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let bad = Group { consumers: 5, ..g }.encode();
        assert_eq!(Group::decode(&bad), Err(GroupError::Group));
        let c = Consumer { seen_ms: 9, pending: 1, name: b"alice".to_vec() };
        assert_eq!(Consumer::decode(&c.encode()), Ok(c.clone()));
        assert!(Consumer::decode(&c.encode()[..22]).is_err());
        let n = Nack { consumer: 2, delivery_ms: 77, deliveries: 3 };
        assert_eq!(Nack::decode(&n.encode()), Ok(n));
        assert!(Nack::decode(&n.encode()[..23]).is_err());
    }

    #[test]
    fn keys_sort_after_nodes_and_by_id() {
        let node = crate::chunked::chunk_key(7, (1 << 63) - 1);
        assert!(group_key(7, 1).as_slice() > &node[..]);
        assert!(group_key(7, 1).starts_with(&state_prefix(7)));
        assert!(state_prefix(7).starts_with(&node[..9]), "collected with the nodes");
        let a = pel_key(7, 1, StreamId { ms: 1, seq: 9 });
        let b = pel_key(7, 1, StreamId { ms: 2, seq: 0 });
        assert!(a < b && a.starts_with(&pel_prefix(7, 1)));
        assert_eq!(id_of_key(&b), StreamId { ms: 2, seq: 0 });
        assert_eq!(id_of_key(&owned_key(7, 1, 3, StreamId { ms: 4, seq: 5 })), StreamId { ms: 4, seq: 5 });
        assert_eq!(number_of_key(&consumer_key(7, 1, 3)), 3);
        assert!(owned_key(7, 1, 3, StreamId::MAX).len() < 255);
    }
}
