//! Restart of a zero-copy member (issue 26 item 4; `docs/FORMAT.md`,
//! "Extent-form Redis entries", crash analysis): which pool buffers the
//! durable Raft log holds, and whether they still hold what it says.
//!
//! Buffer ownership is volatile (`pmwire_pool`): after a crash the engine
//! counts the references of its own durable structures, and every other
//! buffer is free. A member's Raft log (in `P.raft`) is another durable
//! structure naming buffers of the keyspace pool `P`, so before the engine
//! frees anything, [`log_refs`] lists one reference per extent of every
//! extent-form entry the log holds (what `log_held` took for it before the
//! crash), and `Store::open_with_refs` counts them with the engine's.
//! A buffer that an entry named, but that no entry in the durable log names
//! any more (a suffix a new leader truncated, a compacted prefix) and that
//! the keyspace does not hold, is free after the restart: freed once, by
//! recovery, whatever the crash interrupted. [`verify`] then checks each
//! such value's crc32c against the pool bytes: a mismatch means a buffer
//! was reused while the log named it, and the member refuses to start
//! rather than apply other bytes.

use pmwire_kv_cluster::extent::{is_extent_form, Arg, ExtEntry};
use pmwire_smr::logrefs::is_machine_entry;
use pmwire_smr::store::Durable;

use crate::store::Store;

/// Each extent-form entry the durable log holds, decoded (`Err`: an entry
/// that does not decode).
fn each_entry<D: Durable>(durable: &D, mut f: impl FnMut(u64, &ExtEntry<'_>)) -> Result<(), String> {
    for index in durable.first_index()..=durable.last_index() {
        let Some(e) = durable.entry(index) else { continue };
        if !is_machine_entry(&e) || !is_extent_form(&e.data) {
            continue;
        }
        let x = ExtEntry::decode(&e.data).map_err(|err| format!("log entry {index}: {err}"))?;
        f(index, &x);
    }
    Ok(())
}

/// The pool buffers the durable log names, one per extent of each entry.
pub fn log_refs<D: Durable>(durable: &D) -> Result<Vec<u32>, String> {
    let mut refs = Vec::new();
    each_entry(durable, |_, x| {
        for a in &x.args {
            if let Arg::Pool { extents, .. } = a {
                refs.extend(extents.iter().map(|e| e.buf_idx));
            }
        }
    })?;
    Ok(refs)
}

/// Checks every value the durable log names against its crc32c.
pub fn verify<D: Durable>(store: &Store, durable: &D) -> Result<(), String> {
    verify_in(store.engine().pool(), store.region(), durable)
}

/// [`verify`] over any medium (the crash checker's images).
pub fn verify_in<D: Durable, M: pmem::Media>(pool: &pmwire_pool::Pool, media: &M, durable: &D) -> Result<(), String> {
    let mut bad = None;
    each_entry(durable, |index, x| {
        for (i, a) in x.args.iter().enumerate() {
            let Arg::Pool { crc, extents, .. } = a else { continue };
            let mut sum = 0;
            for e in extents {
                let e = pmwire_log::Extent { buf_idx: e.buf_idx, offset: e.offset, len: e.len };
                if pool.check_live_extent(e).is_err() {
                    bad.get_or_insert(format!("log entry {index} argument {i} names {e:?}, not a live extent of the pool"));
                    return;
                }
                let mut bytes = Vec::with_capacity(e.len as usize);
                pool.gather(media, &[e], &mut bytes);
                sum = crc32c::crc32c_append(sum, &bytes);
            }
            if sum != *crc {
                bad.get_or_insert(format!("log entry {index} argument {i}: the pool bytes fail the value's checksum (a buffer reused while the log named it)"));
            }
        }
    })?;
    bad.map_or(Ok(()), Err)
}
