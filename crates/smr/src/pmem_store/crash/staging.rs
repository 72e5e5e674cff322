//! Crash-state check of the staging area ([`Durable::stage`],
//! [`Durable::verify_staged`], [`Durable::install_staged`]).
//!
//! The script stages a body in chunks, starts another body over before
//! the first is whole (the area is dropped), stages it whole and installs
//! it. Every crash image is opened, and accepted only if:
//! - the snapshot and what the area claims to hold (body, bytes) are the
//!   acknowledged ones or those after the step in flight (a start over
//!   may also leave the new body with no bytes);
//! - the bytes the area claims are the body's: staging the rest from
//!   there makes a body whose checksum holds;
//! - a whole area with one byte flipped is neither verified nor installed
//!   (a torn staging area is never installed);
//! - an installed snapshot holds the body's bytes.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia};
use pmwire_crashcheck::{explore, Config, CrashImage, Report};
use pmwire_log::{LogConfig, TailStrategy};
use raft::eraftpb::{ConfState, SnapshotMetadata};

use super::super::{format, PmemDurable, StoreFaults};
use super::{CLUSTER, LOG_BYTES, REPLICA, SNAP_BYTES};
use crate::snapshot::stream::BodyId;
use crate::store::Durable;

/// Bytes staged per step.
const CHUNK: usize = 60;

/// What an image may show: the snapshot's index and the staging area.
type Shown = (u64, Option<(BodyId, u64)>);

fn body_bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (8 * (i % 8))) as u8 ^ (i / 8) as u8).collect()
}

fn meta_of(body: &BodyId) -> SnapshotMetadata {
    let mut meta = SnapshotMetadata { index: body.index, term: body.term, ..Default::default() };
    meta.set_conf_state(ConfState { voters: vec![1, 2, 3], ..Default::default() });
    meta
}

fn shown<D: Durable>(d: &D) -> Shown {
    (d.snapshot_meta().index, d.staged())
}

/// The bodies, the states after each step, and per step the extra states
/// allowed while it is in flight.
struct Script {
    bodies: Vec<(BodyId, Vec<u8>)>,
    states: Vec<Shown>,
    extra: Vec<Vec<Shown>>,
}

/// Crash-checks the staging area with planted `faults`.
pub fn check_staging(faults: StoreFaults, config: &Config) -> Report {
    let log = LogConfig::new(LOG_BYTES, TailStrategy::SelfValidating);
    let media = TracedMedia::new(PmemDurable::<TracedMedia>::required_size(&log, SNAP_BYTES) as usize);
    let mut media = PmemDurable::format(media, CLUSTER, REPLICA, &[1, 2, 3], log).expect("format").into_media();
    media.checkpoint();
    let mut store = PmemDurable::open_with_faults(media, CLUSTER, REPLICA, faults).expect("open");
    let script = run_script(&mut store);
    explore(store.media(), config, |image: &mut CrashImage| judge(&script, image.acked.len(), image.media.clone(), faults))
}

fn run_script(store: &mut PmemDurable<TracedMedia>) -> Script {
    let a = body_bytes(1, SNAP_BYTES as usize - 10);
    let b = body_bytes(2, SNAP_BYTES as usize - 50);
    let bodies = vec![(BodyId::of(7, 2, &a), a), (BodyId::of(9, 3, &b), b)];
    let mut s = Script { states: vec![shown(store)], extra: Vec::new(), bodies: Vec::new() };
    let mark = |store: &mut PmemDurable<TracedMedia>, s: &mut Script, extra: Vec<Shown>| {
        s.states.push(shown(store));
        s.extra.push(extra);
        let step = s.extra.len() as u64 - 1;
        store.media_mut().mark(step);
    };
    for (k, (body, bytes)) in bodies.iter().enumerate() {
        // The first body is left unfinished: the second starts over.
        let upto = if k == 0 { bytes.len() / 2 } else { bytes.len() };
        for at in (0..upto).step_by(CHUNK) {
            let end = (at + CHUNK).min(upto);
            let held = store.stage(body, at as u64, &bytes[at..end]).expect("stage");
            assert_eq!(held, end as u64, "the area holds what was staged");
            let extra = if at == 0 { vec![(store.snapshot_meta().index, Some((*body, 0)))] } else { Vec::new() };
            mark(store, &mut s, extra);
        }
    }
    let (body, bytes) = &bodies[1];
    assert!(store.verify_staged(body), "a whole area verifies");
    store.install_staged(&meta_of(body), body).expect("install");
    assert_eq!(&store.snapshot().1, bytes, "installed in place");
    mark(store, &mut s, Vec::new());
    s.bodies = bodies;
    s
}

fn judge(s: &Script, acked: usize, media: MemMedia, faults: StoreFaults) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| judge_image(s, acked, media, faults)));
    outcome.map_err(|_| "recovery panicked".to_string())?
}

fn judge_image(s: &Script, acked: usize, media: MemMedia, faults: StoreFaults) -> Result<(), String> {
    let open = |m: MemMedia| PmemDurable::open_with_faults(m, CLUSTER, REPLICA, faults).map_err(|e| format!("open: {e}"));
    let mut store = open(media.clone())?;
    let found = shown(&store);
    let allowed = std::iter::once(&s.states[acked]).chain(s.states.get(acked + 1)).chain(s.extra.get(acked).into_iter().flatten());
    if !allowed.clone().any(|a| *a == found) {
        return Err(format!("after {acked} steps the image shows snapshot {} and staging {:?}", found.0, found.1));
    }
    if let Some((_, bytes)) = s.bodies.iter().find(|(b, _)| b.index == found.0) {
        if &store.snapshot().1 != bytes {
            return Err(format!("the snapshot installed at {} does not hold its body", found.0));
        }
    }
    let Some((body, held)) = found.1 else { return Ok(()) };
    let (_, bytes) = s.bodies.iter().find(|(b, _)| *b == body).ok_or("a body the script never staged")?;
    if held < body.len {
        store.stage(&body, held, &bytes[held as usize..]).map_err(|e| format!("staging the rest: {e}"))?;
    }
    if !store.verify_staged(&body) {
        return Err(format!("the area claims {held} B of the body at {} but they are not its bytes", body.index));
    }
    // One flipped byte in a whole area: never verified, never installed.
    let mut torn = open(store.into_media())?;
    let at = torn.slot_at(1 - torn.snap.slot) + format::SNAP_HEADER_BYTES + body.len / 2;
    let mut byte = [0u8];
    torn.media().read(at, &mut byte);
    torn.media_mut().write(at, &[byte[0] ^ 0x10]);
    if torn.verify_staged(&body) || torn.install_staged(&meta_of(&body), &body).is_ok() {
        return Err(format!("a staging area with a flipped byte at {at} was taken as the body at {}", body.index));
    }
    Ok(())
}
