//! [`PmemKeyspace`]: the persistent engine on a traced medium, as the
//! keyspace of the simulation's Redis machine (`pmwire_kv_cluster::sim`,
//! `pmwire check smr --machine redis --store pmem`; feature `sim`,
//! test-only).
//!
//! The engine runs exactly as under a member ([`crate::cluster`]'s
//! `ClusterKeyspace`, copy mode): every keyspace call goes to an
//! [`EngineKeyspace`] over the medium, the machine commits once per batch
//! of applied entries, its applied index with the writes. The medium is a
//! [`TracedMedia`] whose stores, flushes and fences are folded into a
//! [`CrashState`] after every commit. A crash ([`SimKeyspace::crash`])
//! draws one image the hardware could leave: if the crash came inside a
//! commit (armed by [`SimKeyspace::arm_crash`]: the commit runs, then the
//! replica crashes), the crash point is drawn first among the fences of
//! everything written since the last commit (the entries' staged writes
//! and the commit) or its end; then every pending 8 B word is at its
//! durable value or any value stored since. The engine reopens on that
//! image (recovery replays or discards its WAL), and the machine on the
//! engine.
//!
//! Planted bug ([`PmemFaults::commit_each_write`]): every write is
//! committed on its own, so a crash inside an entry leaves part of its
//! writes durable without the applied index that covers them; the member
//! then applies the entry again on top of them (an INCR counted twice, an
//! EXEC half-applied). A seed must catch it.

use pmem::trace::{Op, TracedMedia};
use pmem::MemMedia;
use pmwire_crashcheck::CrashState;
use pmwire_kv::{Engine, KvConfig, Savepoint};
use pmwire_kv_cluster::sim::SimKeyspace;
use pmwire_kv_cluster::MachineKeyspace;
use pmwire_keyspace::store::StoreError;
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::forward::{EngineHost, Forward};
use crate::keyspace::{BatchState, EngineKeyspace};

/// Pool buffers of a simulated member's engine (2 KiB each).
const SIM_BUFFERS: u32 = 512;
/// Tree operations per commit of a simulated member's checkpoint in slices (small, so
/// most checkpoints span several commits).
const SIM_CHECKPOINT_SLICE: usize = 4;

/// Planted bugs of [`PmemKeyspace`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmemFaults {
    /// Commit every write on its own, apart from the applied index.
    pub commit_each_write: bool,
}

/// The engine on a traced medium (module docs): the executor's keyspace
/// through the one forwarding to the engine ([`crate::forward`]).
pub type PmemKeyspace<const PLANTED: bool = false> = Forward<PmemEngine<PLANTED>>;

/// What [`PmemKeyspace`] holds: the engine, its traced medium, the crash
/// state.
pub struct PmemEngine<const PLANTED: bool = false> {
    engine: Engine,
    media: TracedMedia,
    state: BatchState,
    now_ms: u64,
    entry_start: Option<Savepoint>,
    fault: Option<String>,
    /// The durable floor and pending stores of everything folded.
    crash_state: CrashState,
    /// Commits until the armed crash (0: the next one).
    countdown: Option<u32>,
    /// The replica crashed inside a commit: its operations are unfolded.
    torn: bool,
}

impl<const P: bool> std::fmt::Debug for PmemEngine<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PmemKeyspace({} keys, now {} ms)", self.engine.len(), self.now_ms)
    }
}

impl<const P: bool> PmemKeyspace<P> {
    /// The planted bugs this type runs with.
    pub const FAULTS: PmemFaults = PmemFaults { commit_each_write: P };

    /// A freshly formatted engine (formatted on plain memory: the format is
    /// taken as durable and is not part of the trace).
    pub fn format() -> PmemKeyspace<P> {
        let config = KvConfig::new(SIM_BUFFERS);
        let size = config.required_size().expect("a valid simulated engine size");
        let mut media = MemMedia::new(size as usize);
        Engine::create(&mut media, 0, &config).expect("a sized, valid format");
        PmemKeyspace::open(media.bytes().to_vec()).expect("an engine just formatted opens")
    }

    /// The engine on `image` (a crash image or a new format).
    pub fn open(image: Vec<u8>) -> Result<PmemKeyspace<P>, String> {
        let crash_state = CrashState::new(&image);
        let mut media = TracedMedia::from_image(image);
        let mut engine = Engine::open(&mut media, 0).map_err(|e| format!("the machine's crash image does not open: {e}"))?;
        // As a member's: checkpoints in slices, so crash images also fall between slices.
        engine.set_checkpoint_slice(SIM_CHECKPOINT_SLICE);
        let mut ks = PmemEngine { engine, media, state: BatchState::default(), now_ms: 0, entry_start: None, fault: None, crash_state, countdown: None, torn: false };
        ks.crash_state.fold(&mut ks.media);
        Ok(Forward(ks))
    }
}

impl<const P: bool> PmemEngine<P> {
    /// Notes a refusal that depends on this member's pool.
    fn watch<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e @ (StoreError::PoolFull | StoreError::NotPersisted(_) | StoreError::Full)) = &result {
            self.fault.get_or_insert(e.to_string());
        }
        result
    }

    /// Commits the staged writes (with the applied index the machine
    /// staged), then the armed crash if due.
    fn commit(&mut self) -> Result<(), String> {
        let result = self.state.commit(&mut self.engine, &mut self.media);
        self.state.release_held(&mut self.engine);
        let result = result.map_err(|()| self.state.failed.clone().unwrap_or_else(|| "commit failed".into()));
        self.after_commit();
        result
    }

    /// After a commit: the armed crash if it is due (the replica crashes
    /// with this commit's operations unfolded), else they are folded.
    fn after_commit(&mut self) {
        match self.countdown {
            Some(0) => {
                self.countdown = None;
                self.torn = true;
                pmwire_smr::sim::crash_now();
            }
            Some(n) => self.countdown = Some(n - 1),
            None => {}
        }
        self.crash_state.fold(&mut self.media);
    }
}

impl<const P: bool> SimKeyspace for PmemKeyspace<P> {
    fn fresh() -> Self {
        PmemKeyspace::format()
    }

    fn crash(mut self, rng: &mut Xoshiro256PlusPlus) -> Result<Self, String> {
        let ops = self.0.media.take_ops();
        let point = if self.0.torn {
            let fences: Vec<usize> = ops.iter().enumerate().filter(|(_, op)| matches!(op, Op::Fence)).map(|(k, _)| k).collect();
            fences.get(rng.gen_range(0..=fences.len())).copied().unwrap_or(ops.len())
        } else {
            ops.len()
        };
        for op in &ops[..point] {
            self.0.crash_state.apply(op);
        }
        let (image, _) = self.0.crash_state.draw(rng);
        PmemKeyspace::open(image.bytes().to_vec())
    }

    fn arm_crash(&mut self, writes: u32) {
        self.0.countdown = Some(writes);
    }

    fn disarm_crash(&mut self) {
        self.0.countdown = None;
    }
}

impl<const P: bool> MachineKeyspace for PmemKeyspace<P> {
    fn set_now_ms(&mut self, now_ms: u64) {
        self.0.now_ms = now_ms;
    }

    fn is_persistent(&self) -> bool {
        true
    }

    fn commit(&mut self) -> Result<(), String> {
        self.0.commit()
    }

    fn begin_entry(&mut self) {
        self.0.entry_start = Some(self.0.engine.savepoint());
    }

    fn batch_full(&self) -> bool {
        self.0.state.batch_full
    }

    fn rollback_entry(&mut self) {
        let start = self.0.entry_start.take().expect("an entry began");
        self.0.engine.rollback_to(start);
        self.0.state.batch_full = false;
    }

    fn allow_oversize(&mut self) {
        self.0.engine.allow_oversize();
    }

    fn take_fault(&mut self) -> Option<String> {
        self.0.fault.take()
    }

    fn end_entry(&mut self) {
        self.0.entry_start = None;
        self.0.state.release_held(&mut self.0.engine);
    }
}

impl<const P: bool> EngineHost for PmemEngine<P> {
    type Media = TracedMedia;

    fn lend<R>(&mut self, f: impl FnOnce(&mut EngineKeyspace<'_, TracedMedia>) -> R) -> R {
        f(&mut EngineKeyspace { engine: &mut self.engine, region: &mut self.media, state: &mut self.state, zero_copy: false, locs: &[], reserve: 0, now_ms: self.now_ms })
    }

    fn peek<R>(&self, f: impl FnOnce(&Engine, &TracedMedia) -> R) -> R {
        f(&self.engine, &self.media)
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Notes a refusal that depends on this member's pool; with the
    /// planted bug, a write done is committed at once.
    fn wrote<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let result = self.watch(result);
        if P && result.is_ok() {
            if let Err(e) = self.commit() {
                self.fault.get_or_insert(e);
            }
        }
        result
    }
}
