//! A member's keyspace pool lent to its peer transport (`transport::rx`):
//! Raft messages are received into runs of pool buffers, so a follower's
//! values arrive where they stay. `ClusterKeyspace::local_form` then names
//! each value by its place (flushed in place, logged as 8 B extents: seed
//! 001 on a follower) instead of copying it into buffers of its own.
//!
//! Ownership: an area is a run of consecutive buffers (`Pool::alloc_run`),
//! each holding one reference, the arena's, for as long as the transport
//! receives into the area or a received payload still points into it
//! (`RxArea::in_use`). A value named in place takes references of its own
//! (the entry's, then the durable log's, then the keyspace's), so when the
//! arena gives the area back, buffers holding live values stay allocated
//! and the rest become free. Nothing about an area is on media: after a
//! crash, recovery counts only what durable entries and the keyspace name.
//!
//! Room: areas are lent only while at least half the pool is free. A value
//! named in place keeps its whole buffer alive, as on the leader, with the
//! Raft framing around it; below half, values are packed into shared
//! buffers as before (`ClusterKeyspace::absorb`, one copy, counted), so a
//! follower's pool never fills before its leader's room check refuses
//! writes (`docs/FORMAT.md`, "Follower receives into the pool").

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmwire_kv_cluster::copies::CopyCounters;
use pmwire_netio::BufferSource;
use transport::{AreaHold, RxArea, RxArena};

use crate::cluster::SharedStore;

/// Largest area lent, in bytes: a message longer than this is received
/// into the transport's own memory (and its values copied).
pub const MAX_AREA_BYTES: usize = 4 << 20;

/// After the pool had no room or no free run, how long until it is asked again.
const RETRY_AFTER: Duration = Duration::from_millis(50);

/// The arena over a member's pool. See the module docs.
pub struct PoolArena {
    store: SharedStore,
    copies: CopyCounters,
    /// Areas lent: first buffer, buffers, the hold.
    lent: Vec<(u32, u32, Arc<AreaHold>)>,
    retry_at: Option<Instant>,
}

impl PoolArena {
    /// An arena over `store`'s pool; bytes the transport moves between
    /// areas count as received copies in `copies`.
    pub fn new(store: SharedStore, copies: CopyCounters) -> PoolArena {
        PoolArena { store, copies, lent: Vec::new(), retry_at: None }
    }

    /// Gives back every area nothing uses any more: each buffer's
    /// reference from the arena is dropped.
    fn reclaim(&mut self) {
        if self.lent.iter().all(|(_, _, hold)| RxArea::in_use(hold)) {
            return;
        }
        let mut st = self.store.borrow_mut();
        self.lent.retain(|(first, n, hold)| {
            if RxArea::in_use(hold) {
                return true;
            }
            for b in *first..*first + *n {
                st.release(b);
            }
            false
        });
    }
}

impl RxArena for PoolArena {
    fn area(&mut self, min: usize) -> Option<RxArea> {
        self.reclaim();
        if min > MAX_AREA_BYTES || self.retry_at.is_some_and(|at| Instant::now() < at) {
            return None;
        }
        let mut st = self.store.borrow_mut();
        if st.heap.is_some() {
            return None;
        }
        let ring = u32::from(st.sizing.ring_entries);
        let size = st.engine.pool().buf_size() as usize;
        let n = u32::try_from(min.div_ceil(size)).expect("bounded by MAX_AREA_BYTES");
        let pool = st.engine.pool_mut();
        let room = pool.free_count() >= pool.buffers() / 2 + ring + n;
        let Some(first) = room.then(|| pool.alloc_run(n)).flatten() else {
            self.retry_at = Some(Instant::now() + RETRY_AFTER);
            return None;
        };
        self.retry_at = None;
        let ptr = NonNull::new(st.ptr(first)).expect("a mapped pool");
        let hold = Arc::new(AreaHold::default());
        self.lent.push((first, n, hold.clone()));
        // SAFETY: the run's buffers are consecutive in the mapping and each
        // holds the arena's reference until `reclaim` sees the hold unused,
        // so no one else allocates or writes them meanwhile; the mapping
        // lives as long as the store, which this arena keeps.
        Some(unsafe { RxArea::new(ptr, n as usize * size, hold) })
    }

    fn carried(&mut self, bytes: usize) {
        // Counted as value bytes though some are framing: an upper bound.
        self.copies.add(|c| c.received += bytes as u64);
    }
}

impl Drop for PoolArena {
    fn drop(&mut self) {
        // The transport is gone; payloads still alive keep their area.
        self.reclaim();
    }
}
