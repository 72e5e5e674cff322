//! Receive grants: how a request larger than the loop's receive bound ([`MAX_RX_BYTES`]) is
//! let in, or refused before anything of it is consumed.
//!
//! A request's size is known (a lower bound of it, from the RESP parser or exactly, from an
//! HTTP head) before its payload arrives. Up to [`MAX_RX_BYTES`] a connection may always hold
//! (the pool's sizing counts on it). Beyond, the service *grants* the connection that many
//! bytes ([`pmwire_netio::Reply::wanted`]) only if the buffers they will take fit what the
//! pool has free, less the receive ring's reserve and the buffers already promised to other
//! connections' grants; after a checkpoint has released what the WAL's records pinned, if
//! need be. A request that does not fit is refused at once with the true reason (its size
//! against the free pool) and its bytes are read and discarded as they arrive (RESP) or the
//! connection is closed after the reply (HTTP), so receiving never exhausts the pool: the ring
//! keeps its refills and every granted request can complete.
//!
//! Writes honour the promises: a write must leave the ring's reserve *and* every outstanding
//! grant's buffers free ([`Grants::reserve`]), so other connections' SETs cannot eat the room
//! a granted request is being received into. A connection's grant is dropped when the service
//! next sees it (what it received is then in its buffers) and made again if its request is
//! still incomplete.
//!
//! Invariant: `reserved` holds exactly the connections with a grant outstanding (a request
//! they are receiving beyond the bound), each with the buffers its remaining bytes may take.

use std::collections::HashMap;

use pmwire_netio::ConnId;

use crate::store::{Mode, Store, MAX_RX_BYTES};

/// What to do with an incomplete request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Wait for this many unconsumed bytes (within the receive bound, or granted).
    Wait(usize),
    /// Refuse it: the reason, without the leading `-` / status.
    Refuse(String),
}

/// The buffers promised to connections receiving large requests.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    reserved: HashMap<ConnId, u64>,
}

impl Grants {
    /// Decides on an incomplete request of at least `need` bytes of which `held` are received.
    pub(crate) fn decide(&mut self, conn: ConnId, need: u64, held: usize, store: &mut Store) -> Grant {
        if need <= MAX_RX_BYTES as u64 {
            self.reserved.remove(&conn);
            return Grant::Wait(need as usize);
        }
        let buf = u64::from(store.engine.pool().buf_size());
        let future = need.saturating_sub(held as u64).div_ceil(buf);
        // Slack for receives that fill a buffer partly, the extent chain (one buffer per 252
        // extents) and the key's copy.
        let want = future + future / 8 + 4;
        let others: u64 = self.reserved.iter().filter(|(c, _)| **c != conn).map(|(_, b)| *b).sum();
        let mut free = free_buffers(store).saturating_sub(others);
        if want > free {
            // The WAL's records pin overwritten values' buffers until a checkpoint.
            let _ = store.engine.checkpoint(&mut store.region);
            free = free_buffers(store).saturating_sub(others);
        }
        if want > free {
            self.reserved.remove(&conn);
            return Grant::Refuse(format!(
                "OOM command not allowed: the request needs at least {need} bytes, the persistent pool has {} free",
                free * buf
            ));
        }
        self.reserved.insert(conn, want);
        usize::try_from(need).map_or_else(|_| Grant::Refuse("ERR request too large".into()), Grant::Wait)
    }

    /// Free buffers a write must leave: the receive ring's refills and every grant's promise.
    pub(crate) fn reserve(&self, store: &Store) -> u32 {
        let promised: u64 = self.reserved.values().sum();
        u32::try_from(u64::from(store.sizing.ring_entries) + promised).unwrap_or(u32::MAX)
    }

    /// The connection's request completed, was refused, or the connection closed.
    pub(crate) fn release(&mut self, conn: ConnId) {
        self.reserved.remove(&conn);
    }
}

/// Buffers a request may still take: the pool's free ones less the ring's reserve (and, when
/// the ring is DRAM, no more than the DRAM buffers free).
fn free_buffers(store: &Store) -> u64 {
    let ring = u64::from(store.sizing.ring_entries);
    let pool = u64::from(store.engine.pool().free_count()).saturating_sub(ring);
    match (&store.heap, store.mode) {
        (Some(heap), Mode::Copy | Mode::NoPersist) => {
            pool.min(u64::from(heap.count() - heap.in_use()).saturating_sub(ring))
        }
        _ => pool,
    }
}
