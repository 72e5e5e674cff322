//! The copy engine: asynchronous copies into the region on helper threads,
//! standing in for an on-die DMA engine (IOAT/DSA; seed 000 §5.3–5.5).
//!
//! The event loop submits a copy (`submit`) and goes on; a helper thread
//! streams the bytes into the mapping with non-temporal stores and drains
//! (`sfence`), then posts a completion, raises an atomic count and, unless
//! it is already signalled, bumps an eventfd. The loop collects completions
//! with `poll_completions` (which looks at the count: no system call while
//! nothing finished) and, before it blocks, `arm`s the eventfd and blocks
//! on it with its other sources; only after the completion does the server
//! reply. A submit wakes a helper only if one sleeps.
//!
//! The hand-off has a price that the copy does not: a helper asleep on its
//! condition variable must be woken (a futex wake, and on a virtual machine
//! an idle vCPU to be woken or a busy one to be shared), and the loop must
//! see the completion. Measured on a 2-vCPU KVM guest (docs/bench.md, "Copy
//! engine latency (issue 13)") that is tens of µs, against well under 1 µs
//! for the copy itself at ≤ 4 KiB. So [`CopyBackend::copy_inline`] copies on
//! the caller's thread with the same non-temporal copy and drain, and the
//! server uses it for writes of at most [`INLINE_MAX_BYTES`] while the
//! engine is idle.
//!
//! # The safety invariant
//! Helper threads write through a raw pointer into a mapping that the
//! event loop also reaches through `&mut Region`. That is sound because:
//! 1. **Bounds on submit.** `submit` refuses a range outside
//!    `[0, target.len())` (checked, overflow-safe) and a length beyond the
//!    source; the helper writes only `[offset, offset + len)`.
//! 2. **Disjointness.** While a copy is *outstanding* (submitted and not yet
//!    returned by `poll_completions`), its range is written by exactly one
//!    helper and by no one else: `submit` refuses a range overlapping an
//!    outstanding one, and the server asks [`CopyBackend::overlapping`]
//!    and waits a conflict out before it reads or writes a range itself.
//! 3. **Lifetime.** The mapping outlives the helpers: [`CopyTarget::new`]
//!    is `unsafe` with that contract, and [`CopyEngine`]'s `Drop` stops the
//!    helpers (after they finish every queued copy) and joins them. The
//!    server declares and drops its engine before its region.
//! 4. **Source lifetime.** The source buffer moves into the job and comes
//!    back in the completion, so it lives until the copy is done.
//! 5. **Happens-before.** The helper publishes a completion under the
//!    state mutex after its `sfence`; the loop takes it under the same
//!    mutex, so every byte of the copy is visible (and durable) to the loop
//!    once it sees the completion.
//! 6. **Inline copies.** `copy_inline` writes on the caller's thread only a
//!    range inside the target (checked as in 1) that overlaps no
//!    outstanding copy (checked as in 2; refused otherwise), and it is done
//!    and drained before it returns: it is never outstanding, so no helper
//!    writes its bytes while it runs, and program order between inline and
//!    offloaded writes to the same bytes is kept (a later submit of an
//!    overlapping range comes after the inline copy returned).
//!
//! Bounded: at most `depth` copies are outstanding (1 or 8 in the paper's
//! experiments); the queue and the completion list never grow past it.
//! Helpers block on a condition variable when idle; nothing spins.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pmem::flush::{DrainFn, FlushFn};
use pmem::{NtCopier, Region, RegionKind};
use thiserror::Error;

/// Identifies one submitted copy; increases by one per submission.
pub type Ticket = u64;

/// Largest RpcOffload write the server copies inline, on the event loop,
/// when the engine is idle (`ServerConfig::copy_inline_max_bytes`'s
/// default). Measured on a 2-vCPU AMD EPYC KVM guest with
/// `pmwire bench remote-offload --quick` (docs/bench.md, "Copy engine
/// latency (issue 13)"): with one write outstanding the hand-off to a
/// sleeping helper costs more than the copy at every size up to 64 KiB,
/// and with 8 in flight inline moved 1.2–4.6× the bytes of the hand-off
/// at every size from 4 to 128 KiB in three runs out of three. So the
/// crossover lies above 128 KiB here; larger writes (up to the payload
/// limit) still go to the helper, which on a machine with idle cores may
/// pay sooner: measure there with the same bench.
pub const INLINE_MAX_BYTES: usize = 128 << 10;

/// Deepest queue an engine accepts.
pub const MAX_DEPTH: usize = 64;

/// A finished copy: its ticket and the source buffer, handed back.
#[derive(Debug)]
pub struct Completion<S> {
    /// The copy's ticket.
    pub ticket: Ticket,
    /// The source, free to reuse or release.
    pub buffer: S,
}

/// Why a copy was not submitted. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SubmitError {
    /// `depth` copies are outstanding; poll completions first.
    #[error("copy engine full: {depth} copies outstanding")]
    Full {
        /// The engine's depth.
        depth: usize,
    },
    /// The range lies outside the target.
    #[error("copy of {len} B at {offset} outside the target of {target} B")]
    OutOfBounds {
        /// Target offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Target size.
        target: u64,
    },
    /// The source holds fewer bytes than asked for.
    #[error("source of {have} B, copy of {len} B asked")]
    ShortSource {
        /// Bytes in the source.
        have: usize,
        /// Length asked.
        len: usize,
    },
    /// The range overlaps an outstanding copy.
    #[error("range overlaps outstanding copy {0}")]
    Overlap(Ticket),
}

/// A refused submission: the error and the source, handed back.
#[derive(Debug)]
pub struct Rejected<S> {
    /// Why.
    pub error: SubmitError,
    /// The source buffer.
    pub buffer: S,
}

/// The seam between the server and whatever copies into the region: the
/// helper-thread [`CopyEngine`] here, an IOAT/DSA backend later.
pub trait CopyBackend {
    /// The source buffers it takes.
    type Source: AsRef<[u8]> + Send + 'static;

    /// Copies that may be outstanding at once.
    fn depth(&self) -> usize;

    /// Copies outstanding now (submitted, not yet polled).
    fn outstanding(&self) -> usize;

    /// Starts copying `buffer[..len]` to target `offset`; returns at once.
    fn submit(&mut self, offset: u64, buffer: Self::Source, len: usize) -> Result<Ticket, Rejected<Self::Source>>;

    /// Copies `src` to target `offset` on the calling thread and makes it
    /// durable before returning (the inline path: no hand-off). Refused,
    /// with nothing written, if the range is out of bounds or overlaps an
    /// outstanding copy, so an inline copy never overtakes nor is overtaken
    /// by an offloaded one to the same bytes.
    fn copy_inline(&mut self, offset: u64, src: &[u8]) -> Result<(), SubmitError>;

    /// Moves finished copies to `out`; returns how many. Never blocks.
    fn poll_completions(&mut self, out: &mut Vec<Completion<Self::Source>>) -> usize;

    /// Blocks until a completion is ready or `timeout` passes; true if ready.
    fn wait(&mut self, timeout: Duration) -> bool;

    /// A file descriptor that polls readable when completions are ready,
    /// once [`arm`](CopyBackend::arm)ed.
    fn event_fd(&self) -> RawFd;

    /// Readies [`event_fd`](CopyBackend::event_fd) for a blocking wait:
    /// clears a stale signal and returns true if completions are already
    /// waiting (then poll them instead of blocking). Call it before every
    /// wait on the fd; polling needs no system call.
    fn arm(&mut self) -> bool;

    /// The outstanding copy whose range overlaps `[offset, offset + len)`.
    fn overlapping(&self, offset: u64, len: u64) -> Option<Ticket>;
}

/// Where copies go: a raw view of a mapped region, with the flush and
/// drain the region chose at map time.
#[derive(Clone, Copy, Debug)]
pub struct CopyTarget {
    base: *mut u8,
    len: u64,
    copier: NtCopier,
    flush: FlushFn,
    drain: DrainFn,
    /// File regions persist with `msync`; streamed lines need it too.
    flush_whole_range: bool,
}

// SAFETY: the pointer is only dereferenced by helpers within bounds checked
// on submit, on ranges no one else touches while outstanding (module
// invariant 2), while the mapping is alive (invariant 3).
unsafe impl Send for CopyTarget {}
// SAFETY: as above; the view itself is immutable.
unsafe impl Sync for CopyTarget {}

impl CopyTarget {
    /// A view of `region`.
    ///
    /// # Safety
    /// The region must stay mapped until every engine using this target
    /// has been dropped.
    pub unsafe fn new(region: &Region) -> CopyTarget {
        let persister = region.persister();
        CopyTarget {
            base: region.as_ptr(),
            len: pmem::Media::len(region),
            copier: region.copier(),
            flush: persister.flush,
            drain: persister.drain,
            flush_whole_range: region.kind() == RegionKind::File,
        }
    }

    /// Bytes in the target.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the target is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` to `offset` and makes it durable on this thread.
    ///
    /// # Safety
    /// `[offset, offset + src.len())` is inside the target and written by
    /// no one else until this returns.
    unsafe fn copy_persist(&self, offset: u64, src: &[u8]) {
        // SAFETY: the caller guarantees the range; src is a separate buffer.
        unsafe {
            let dst = self.base.add(offset as usize);
            self.copier.copy_nodrain(dst, src.as_ptr(), src.len(), self.flush);
            if self.flush_whole_range {
                (self.flush)(dst, src.len());
            }
        }
        (self.drain)();
    }
}

struct Job<S> {
    ticket: Ticket,
    offset: u64,
    len: usize,
    buffer: S,
}

struct State<S> {
    queue: VecDeque<Job<S>>,
    done: Vec<Completion<S>>,
    stop: bool,
    /// Helpers waiting on `work` (a submit wakes one only if some wait).
    sleeping: usize,
}

struct Shared<S> {
    target: CopyTarget,
    state: Mutex<State<S>>,
    work: Condvar,
    event: OwnedFd,
    /// Completions in `done`, readable without the lock: the loop polls
    /// this on every pass, not the eventfd (a read(2) per pass).
    finished: AtomicUsize,
    /// The eventfd may hold a count (written since the last `arm`).
    signalled: AtomicBool,
}

impl<S> Shared<S> {
    /// Wakes a loop blocked on the eventfd, unless a signal since its last
    /// `arm` already will. Called after `finished` was raised.
    fn signal(&self) {
        if self.signalled.swap(true, Ordering::AcqRel) {
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our eventfd.
        let rc = unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
        // The counter cannot overflow (≤ depth increments between reads).
        assert!(rc == 8, "eventfd write failed: {}", std::io::Error::last_os_error());
    }
}

/// The helper-thread copy engine.
pub struct CopyEngine<S: AsRef<[u8]> + Send + 'static> {
    shared: Arc<Shared<S>>,
    helpers: Vec<JoinHandle<()>>,
    depth: usize,
    next_ticket: Ticket,
    /// Outstanding copies: (ticket, offset, len). At most `depth`.
    outstanding: Vec<(Ticket, u64, u64)>,
    /// The last arm found the flag set but nothing to read: a helper had
    /// raised the flag and not yet written the eventfd. Its write lands
    /// later with the flag clear, so the next arm reads regardless.
    write_in_flight: bool,
}

impl<S: AsRef<[u8]> + Send + 'static> CopyEngine<S> {
    /// Starts `threads` helpers copying into `target`, `depth` copies at most outstanding.
    pub fn new(target: CopyTarget, depth: usize, threads: usize) -> std::io::Result<CopyEngine<S>> {
        assert!((1..=MAX_DEPTH).contains(&depth), "depth {depth} outside 1..={MAX_DEPTH}");
        assert!((1..=depth).contains(&threads), "threads {threads} outside 1..=depth");
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        let state = State { queue: VecDeque::with_capacity(depth), done: Vec::with_capacity(depth), stop: false, sleeping: 0 };
        let shared = Arc::new(Shared {
            target,
            state: Mutex::new(state),
            work: Condvar::new(),
            event,
            finished: AtomicUsize::new(0),
            signalled: AtomicBool::new(false),
        });
        let mut helpers = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            let name = format!("pmwire-copy-{i}");
            helpers.push(std::thread::Builder::new().name(name).spawn(move || helper(&shared))?);
        }
        Ok(CopyEngine { shared, helpers, depth, next_ticket: 0, outstanding: Vec::with_capacity(depth), write_in_flight: false })
    }

    fn check(&self, offset: u64, have: usize, len: usize) -> Result<(), SubmitError> {
        if self.outstanding.len() >= self.depth {
            return Err(SubmitError::Full { depth: self.depth });
        }
        self.check_range(offset, have, len)
    }

    /// Bounds and disjointness (invariants 1 and 2), for both paths.
    fn check_range(&self, offset: u64, have: usize, len: usize) -> Result<(), SubmitError> {
        if len > have {
            return Err(SubmitError::ShortSource { have, len });
        }
        let target = self.shared.target.len();
        if offset.checked_add(len as u64).is_none_or(|end| end > target) {
            return Err(SubmitError::OutOfBounds { offset, len: len as u64, target });
        }
        match self.overlapping(offset, len as u64) {
            Some(ticket) => Err(SubmitError::Overlap(ticket)),
            None => Ok(()),
        }
    }
}

fn helper<S: AsRef<[u8]>>(shared: &Shared<S>) {
    loop {
        let job = {
            let mut state = shared.state.lock().expect("copy engine lock");
            loop {
                if let Some(job) = state.queue.pop_front() {
                    break job;
                }
                if state.stop {
                    return;
                }
                state.sleeping += 1;
                state = shared.work.wait(state).expect("copy engine lock");
                state.sleeping -= 1;
            }
        };
        let src = &job.buffer.as_ref()[..job.len];
        // SAFETY: bounds were checked on submit and the range is ours alone
        // while outstanding (module invariants 1–3).
        unsafe { shared.target.copy_persist(job.offset, src) };
        let mut state = shared.state.lock().expect("copy engine lock");
        state.done.push(Completion { ticket: job.ticket, buffer: job.buffer });
        shared.finished.fetch_add(1, Ordering::Release);
        drop(state);
        shared.signal();
    }
}

impl<S: AsRef<[u8]> + Send + 'static> CopyBackend for CopyEngine<S> {
    type Source = S;

    fn depth(&self) -> usize {
        self.depth
    }

    fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    fn submit(&mut self, offset: u64, buffer: S, len: usize) -> Result<Ticket, Rejected<S>> {
        if let Err(error) = self.check(offset, buffer.as_ref().len(), len) {
            return Err(Rejected { error, buffer });
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.outstanding.push((ticket, offset, len as u64));
        let mut state = self.shared.state.lock().expect("copy engine lock");
        assert!(state.queue.len() < self.depth, "queue past its depth");
        state.queue.push_back(Job { ticket, offset, len, buffer });
        let wake = state.sleeping > 0;
        drop(state);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(ticket)
    }

    fn copy_inline(&mut self, offset: u64, src: &[u8]) -> Result<(), SubmitError> {
        self.check_range(offset, src.len(), src.len())?;
        // SAFETY: in bounds and overlapping no outstanding copy (checked
        // just above; invariants 1, 2 and 6), on a live mapping (invariant 3).
        unsafe { self.shared.target.copy_persist(offset, src) };
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut Vec<Completion<S>>) -> usize {
        if self.shared.finished.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut state = self.shared.state.lock().expect("copy engine lock");
        let n = state.done.len();
        self.shared.finished.fetch_sub(n, Ordering::AcqRel);
        for completion in state.done.drain(..) {
            let at = self.outstanding.iter().position(|o| o.0 == completion.ticket);
            self.outstanding.swap_remove(at.expect("a completion of an outstanding copy"));
            out.push(completion);
        }
        n
    }

    fn wait(&mut self, timeout: Duration) -> bool {
        if self.arm() {
            return true;
        }
        let mut pfd = [libc::pollfd { fd: self.shared.event.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        transport::ucx::poll_fds(&mut pfd, timeout).is_ok_and(|n| n > 0)
    }

    fn event_fd(&self) -> RawFd {
        self.shared.event.as_raw_fd()
    }

    fn arm(&mut self) -> bool {
        // Clear the flag, then the count, then look at `finished`: a helper
        // that finishes after the look raised `finished` before it found the
        // flag clear and wrote the eventfd, so a wait on it ends.
        let flagged = self.shared.signalled.swap(false, Ordering::AcqRel);
        if flagged || self.write_in_flight {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a local; EAGAIN means the helper
            // that raised the flag has not written yet.
            let rc = unsafe { libc::read(self.shared.event.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
            // Its write will leave the fd readable with the flag clear (one
            // spurious wake-up): read again at the next arm until it lands,
            // so an idle loop never spins on a stale signal.
            self.write_in_flight = rc != 8;
        }
        self.shared.finished.load(Ordering::Acquire) > 0
    }

    fn overlapping(&self, offset: u64, len: u64) -> Option<Ticket> {
        let end = offset.saturating_add(len);
        self.outstanding.iter().find(|(_, o, l)| *o < end && offset < o + l && len > 0 && *l > 0).map(|o| o.0)
    }
}

impl<S: AsRef<[u8]> + Send + 'static> Drop for CopyEngine<S> {
    fn drop(&mut self) {
        self.shared.state.lock().expect("copy engine lock").stop = true;
        self.shared.work.notify_all();
        for helper in self.helpers.drain(..) {
            // A helper that panicked took its copy down with it: crash loudly.
            helper.join().expect("copy helper panicked");
        }
    }
}

#[cfg(test)]
mod tests;
