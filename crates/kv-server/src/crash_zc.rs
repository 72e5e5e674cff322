//! Crash-state check of a zero-copy member's log extents (issue 26 item 4;
//! `docs/FORMAT.md`, "Extent-form Redis entries"): the keyspace pool and
//! the Raft store on one traced medium, driven as a follower drives them.
//!
//! Each step absorbs a value (`cluster::absorb_value`: fresh buffers,
//! copied, flushed in place, drained), logs an extent-form entry naming it through
//! `pmwire_smr::logrefs::append` (the log's references taken once the
//! append is durable, a truncated suffix's given back once the truncation
//! is), drops the temporary hold, and applies the entries two behind the
//! log's end by their extents (`Engine::set_extents` + commit). Every
//! fourth step a new leader's entry replaces the last two (a truncation
//! of uncommitted entries whose buffers nothing else holds); every
//! sixteenth the applied prefix is compacted. An image passes only if the
//! Raft store and the engine open, the engine counting one reference per
//! extent of every entry the durable log holds (`member_zc::log_refs`),
//! every value the log names still has its checksum
//! (`member_zc::verify_in`), and every key holds a value once written to
//! it, byte for byte. Every third entry is a follower's forwarded write
//! (a forward context instead of the machine kind), which the log seam
//! counts as it counts the leader's own.
//!
//! A follower that receives into its pool (`crate::rx_arena`) is checked
//! the same way with [`Receive::InPlace`]: each message (a frame's bytes,
//! then the value) is stored into a lent run of buffers as the kernel
//! would, unflushed; the value is named where it landed
//! (`cluster::place_value`: flushed in place, a reference per extent),
//! drained, logged; a run is given back once the next message does not
//! fit, its buffers staying live where values are.
//!
//! Planted bugs: a truncated entry's buffers are given back when the new
//! leader's entries arrive, before the truncation is durable, so the
//! replacement's values can land in them while the old entry is still in
//! the durable log: a crash then finds an entry whose value was
//! overwritten; and a value received in place logged without its flush
//! (`Receive::InPlaceUnflushed`). The checker must catch both.

use std::cell::RefCell;
use std::rc::Rc;

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia};
use pmwire_crashcheck::{explore, Check, Config, Report};
use pmwire_kv::{Engine, Faults, KvConfig};
use pmwire_kv_cluster::extent::{Arg, ExtEntry};
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_resp::reply::Protocol;
use pmwire_smr::logrefs::{self, LogRefs};
use pmwire_smr::forward::ForwardContext;
use pmwire_smr::node::ENTRY_MACHINE;
use pmwire_smr::pmem_store::PmemDurable;
use pmwire_smr::store::Durable;
use raft::eraftpb::{Entry, SnapshotMetadata};

use crate::cluster::{absorb_value, entry_refs, place_value};

/// How a follower's value reaches its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receive {
    /// Copied into fresh buffers (`cluster::absorb_value`).
    Absorb,
    /// Received into a lent run of buffers and named in place.
    InPlace,
    /// Planted: named in place without its flush.
    InPlaceUnflushed,
}

/// Buffers in one lent run (of `kv_config`'s 512 B buffers).
const AREA_BUFFERS: u32 = 6;

/// Framing bytes received before each value (a frame's prefix and the
/// entry's protobuf and headers, as the kernel stores them).
const FRAMING: usize = 37;

const KV_BYTES: u64 = 1 << 20;
const LOG_BYTES: u64 = 64 << 10;
const SNAP_BYTES: u64 = 4096;
const STEPS: u64 = 60;

/// Every crash check of the zero-copy log.
pub fn checks() -> Vec<Check> {
    vec![
        Check { name: "zero-copy member: log entries naming pool extents, truncations, apply, compaction (naive-tail Raft log)", planted: false, run: |c| check(false, true, TailStrategy::Naive, c) },
        Check { name: "zero-copy member: log entries naming pool extents, apply, compaction (self-validating Raft log)", planted: false, run: |c| check(false, false, TailStrategy::SelfValidating, c) },
        Check { name: "zero-copy member: log entries naming pool extents, truncations, apply, compaction (self-validating Raft log)", planted: false, run: |c| check(false, true, TailStrategy::SelfValidating, c) },
        Check { name: "planted: zero-copy truncated entry's buffers freed before the truncation is durable", planted: true, run: |c| check(true, true, TailStrategy::Naive, c) },
        Check { name: "zero-copy follower: values received into lent pool buffers, named in place, truncations (self-validating Raft log)", planted: false, run: |c| check_receive(false, true, TailStrategy::SelfValidating, Receive::InPlace, c) },
        Check { name: "planted: zero-copy follower's value named in place without its flush", planted: true, run: |c| check_receive(false, false, TailStrategy::SelfValidating, Receive::InPlaceUnflushed, c) },
    ]
}

/// A window of a shared traced medium.
#[derive(Clone)]
struct Window {
    media: Rc<RefCell<TracedMedia>>,
    base: u64,
    len: u64,
}

impl Media for Window {
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, offset: u64, dst: &mut [u8]) {
        self.media.borrow().read(self.base + offset, dst)
    }
    fn read_u64(&self, offset: u64) -> u64 {
        self.media.borrow().read_u64(self.base + offset)
    }
    fn write(&mut self, offset: u64, src: &[u8]) {
        self.media.borrow_mut().write(self.base + offset, src)
    }
    fn write_u64(&mut self, offset: u64, value: u64) {
        self.media.borrow_mut().write_u64(self.base + offset, value)
    }
    fn write_nt(&mut self, offset: u64, src: &[u8]) {
        self.media.borrow_mut().write_nt(self.base + offset, src)
    }
    fn flush(&mut self, offset: u64, len: u64) {
        self.media.borrow_mut().flush(self.base + offset, len)
    }
    fn drain(&mut self) {
        self.media.borrow_mut().drain()
    }
}

fn kv_config() -> KvConfig {
    KvConfig { buf_size: 512, buffers: 256, wal_slots: 256, log_slots: 64, tree_nodes: 32 }
}

fn value(i: u64) -> Vec<u8> {
    (0..40 + (i * 37) % 900).map(|k| (i as u8).wrapping_mul(31) ^ k as u8).collect()
}

fn key(i: u64) -> Vec<u8> {
    format!("k{}", i % 8).into_bytes()
}

/// The engine's pool as the log's reference counter.
struct PoolRefs<'a>(&'a mut Engine, bool);

impl LogRefs for PoolRefs<'_> {
    fn held(&mut self, data: &[u8]) {
        entry_refs(self.0.pool_mut(), data, true);
    }
    fn dropped(&mut self, data: &[u8]) {
        if !self.1 {
            entry_refs(self.0.pool_mut(), data, false);
        }
    }
}

/// Step `i`'s entry: every third one a follower's forwarded write (its
/// values named here all the same: forwarded entries are machine entries
/// for the log seam), the others the leader's own.
fn entry(i: u64, index: u64, term: u64, arg: Arg<'static>) -> Entry {
    let args = vec![Arg::Inline(b"SET".to_vec().into()), Arg::Inline(key(i).into()), arg];
    let data = ExtEntry { kind: pmwire_kv_cluster::extent::ExtKind::Command, protocol: Protocol::Resp2, time_ms: i, seed: i, args }.encode();
    let context = if i % 3 == 0 { ForwardContext { origin: 2, nonce: 7, seq: i, term, principal: b"default".to_vec() }.encode() } else { vec![ENTRY_MACHINE] };
    Entry { index, term, data: data.into(), context: context.into(), ..Default::default() }
}

fn check(planted: bool, truncations: bool, tail: TailStrategy, config: &Config) -> Report {
    check_receive(planted, truncations, tail, Receive::Absorb, config)
}

/// A lent run of buffers being received into: first buffer, bytes used.
struct Area {
    first: u32,
    used: usize,
}

/// Stores a message carrying `v` into the lent run as the kernel would
/// (no flush), taking a new run once it does not fit (the old one's
/// references go back); returns where the value starts.
fn receive_into(engine: &mut Engine, kv: &mut Window, area: &mut Option<Area>, v: &[u8]) -> (u32, usize) {
    let size = engine.pool().buf_size() as usize;
    let need = FRAMING + v.len();
    if area.as_ref().is_none_or(|a| a.used + need > AREA_BUFFERS as usize * size) {
        if let Some(old) = area.take() {
            (old.first..old.first + AREA_BUFFERS).for_each(|b| _ = engine.pool_mut().release(b));
        }
        let first = engine.pool_mut().alloc_run(AREA_BUFFERS).expect("a free run");
        *area = Some(Area { first, used: 0 });
    }
    let a = area.as_mut().expect("an area");
    let at = engine.pool().buffer_offset(a.first) + a.used as u64;
    kv.write(at, &[0xa5; FRAMING]);
    kv.write(at + FRAMING as u64, v);
    let start = a.used + FRAMING;
    a.used += need;
    (a.first + (start / size) as u32, start % size)
}

fn check_receive(planted: bool, truncations: bool, tail: TailStrategy, receive: Receive, config: &Config) -> Report {
    let log = LogConfig::new(LOG_BYTES, tail);
    let raft_len = PmemDurable::<MemMedia>::required_size(&log, SNAP_BYTES);
    let shared = Rc::new(RefCell::new(TracedMedia::new((KV_BYTES + raft_len) as usize)));
    let mut kv = Window { media: shared.clone(), base: 0, len: KV_BYTES };
    let raft_w = Window { media: shared.clone(), base: KV_BYTES, len: raft_len };
    let mut engine = Engine::create(&mut kv, 0, &kv_config()).expect("create");
    let mut durable = PmemDurable::format(raft_w, 1, 1, &[1], log).expect("format");
    shared.borrow_mut().checkpoint();
    let (mut applied, mut term) = (0u64, 1u64);
    let mut area: Option<Area> = None;
    for i in 1..=STEPS {
        let truncate = truncations && i % 4 == 0 && durable.last_index() >= applied + 2;
        let index = if truncate { durable.last_index() - 1 } else { durable.last_index() + 1 };
        if truncate {
            term += 1;
            if planted {
                for j in index..=durable.last_index() {
                    entry_refs(engine.pool_mut(), &durable.entry(j).expect("held").data, false);
                }
            }
        }
        let v = value(i);
        let arg = match receive {
            Receive::Absorb => absorb_value(engine.pool_mut(), &mut kv, &v).expect("the pool has room"),
            Receive::InPlace => {
                let (first, offset) = receive_into(&mut engine, &mut kv, &mut area, &v);
                place_value(engine.pool_mut(), &mut kv, first, offset, &v).expect("few extents")
            }
            Receive::InPlaceUnflushed => {
                let (first, offset) = receive_into(&mut engine, &mut kv, &mut area, &v);
                place_value(engine.pool_mut(), &mut pmem::media::NoFlush(&mut kv), first, offset, &v).expect("few extents")
            }
        };
        // The value is durable before the entry naming it can be (the
        // log's tail validates itself: its lines may land before its fence).
        kv.drain();
        let Arg::Pool { extents, .. } = &arg else { unreachable!() };
        let temp: Vec<u32> = extents.iter().map(|e| e.buf_idx).collect();
        let e = entry(i, index, term, arg);
        logrefs::append(&mut durable, &[e], &mut PoolRefs(&mut engine, planted && truncate)).expect("append");
        temp.into_iter().for_each(|b| _ = engine.pool_mut().release(b));
        while applied + 2 < durable.last_index() {
            applied += 1;
            apply(&mut engine, &mut kv, &durable.entry(applied).expect("held").data);
        }
        if i % 16 == 0 && applied >= durable.first_index() {
            let meta = SnapshotMetadata { index: applied, term: durable.term(applied).expect("held"), ..Default::default() };
            logrefs::compact(&mut durable, &meta, b"snap", &mut PoolRefs(&mut engine, false)).expect("compact");
        }
        shared.borrow_mut().mark(i);
    }
    drop(durable);
    drop(kv);
    let media = Rc::try_unwrap(shared).ok().expect("the windows are gone").into_inner();
    explore(&media, config, |image| judge(&image.media, raft_len))
}

/// Applies an extent-form SET by its extents, committed.
fn apply<M: Media>(engine: &mut Engine, media: &mut M, data: &[u8]) {
    let e = ExtEntry::decode(data).expect("logged");
    let (Arg::Inline(k), Arg::Pool { extents, .. }) = (&e.args[1], &e.args[2]) else { unreachable!() };
    let extents: Vec<pmwire_log::Extent> = extents.iter().map(|x| pmwire_log::Extent { buf_idx: x.buf_idx, offset: x.offset, len: x.len }).collect();
    engine.set_extents(media, k, 0, &extents).expect("stage");
    engine.commit(media).expect("commit");
}

fn judge(image: &MemMedia, raft_len: u64) -> Result<(), String> {
    let mut bytes = vec![0u8; image.len() as usize];
    image.read(0, &mut bytes);
    let mut kv = MemMedia::new(KV_BYTES as usize);
    kv.write(0, &bytes[..KV_BYTES as usize]);
    let mut raft_m = MemMedia::new(raft_len as usize);
    raft_m.write(0, &bytes[KV_BYTES as usize..]);
    let durable = PmemDurable::open(raft_m, 1, 1).map_err(|e| format!("raft store: {e}"))?;
    let refs = crate::member_zc::log_refs(&durable)?;
    let engine = Engine::open_with_refs(&mut kv, 0, Faults::default(), &refs).map_err(|e| format!("engine: {e}"))?;
    crate::member_zc::verify_in(engine.pool(), &kv, &durable).map_err(|e| {
        let idx: Vec<(u64, u64, u64)> = (durable.first_index()..=durable.last_index())
            .filter_map(|i| durable.entry(i))
            .map(|en| (en.index, en.term, ExtEntry::decode(&en.data).map(|x| x.time_ms).unwrap_or(0)))
            .collect();
        format!("{e}; log (index, term, step): {idx:?}; refs {refs:?}")
    })?;
    for k in 0..8u64 {
        let mut got = Vec::new();
        if engine.get_bytes(&kv, &key(k), &mut got).is_some() && !(0..=STEPS).any(|i| i % 8 == k && value(i) == got) {
            return Err(format!("key {k} holds {} bytes never written to it", got.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zero_copy_log_survives_every_crash() {
        check(false, true, TailStrategy::Naive, &Config::default()).assert_passes_at_least(1000);
        check(false, false, TailStrategy::SelfValidating, &Config::default()).assert_passes_at_least(1000);
    }

    /// Was an open finding (fixed in `pmwire_log` format version 3): a
    /// truncation and a re-append of the same LSN at the same place, torn,
    /// left the new header and term with the dropped entry's extent-form
    /// data, whose own trailing CRC-32C made the log's plain CRC-32C blind
    /// to the mix (`docs/FORMAT.md`, "Entry checksum").
    #[test]
    fn the_zero_copy_log_survives_every_crash_with_truncations_on_a_self_validating_log() {
        check(false, true, TailStrategy::SelfValidating, &Config::default()).assert_passes_at_least(1000);
    }

    #[test]
    fn values_received_in_place_survive_every_crash() {
        check_receive(false, true, TailStrategy::SelfValidating, Receive::InPlace, &Config::default()).assert_passes_at_least(1000);
        check_receive(false, true, TailStrategy::Naive, Receive::InPlace, &Config::default()).assert_passes_at_least(1000);
    }

    #[test]
    fn planted_value_in_place_without_its_flush_is_caught() {
        check_receive(false, false, TailStrategy::SelfValidating, Receive::InPlaceUnflushed, &Config::default()).assert_caught();
    }

    #[test]
    fn planted_early_free_at_truncation_is_caught() {
        check(true, true, TailStrategy::Naive, &Config::default()).assert_caught();
        check(true, true, TailStrategy::SelfValidating, &Config::default()).assert_caught();
    }
}
