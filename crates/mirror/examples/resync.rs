//! Bytes and time of a backup's resynchronisation, incremental against
//! full (docs/bench.md, "Mirror rejoin: incremental against full copy").
//!
//! A 16 MiB heap mirrored under SM-OB over the in-process transport to a
//! backup served on its own thread; the backup stops after 10 mirrored
//! transactions, the primary goes on alone for `N` transactions of the
//! Transact shape 4-2 (4 epochs of 2 writes of 64 B at random 64 B-aligned
//! places), then the backup restarts and rejoins: incrementally (the
//! primary tracks every block since it was created), and, on a copy of the
//! same backup pool, after the primary restarted (its tracking lost: a
//! full copy). Both end with the backup's data area equal to the primary's.
//!
//! `cargo run --release -p pmwire-mirror --example resync [N ...]`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pmem::{Media, MemMedia};
use pmwire_mirror::{Backup, BackupService, EpochSink, Heap, Mirror, NoMirror, Strategy};
use reactor::{PollBudget, Reactor, RealClock};
use transport::{InProcNetwork, Limits, NodeId};

const LOG: u64 = 64 << 10;
const DATA: u64 = 16 << 20;

struct Served {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<MemMedia>,
    addr: NodeId,
}

fn serve(net: &InProcNetwork, mut media: MemMedia) -> Served {
    let (backup, _) = Backup::open(&mut media, 0).expect("the backup's pool");
    let transport = net.node();
    let addr = transport.id();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        let mut reactor = Reactor::new(transport, BackupService::new(media, backup));
        reactor.run(&RealClock::new(), &flag, PollBudget::BLOCK);
        reactor.service.into_media()
    });
    Served { stop, handle, addr }
}

impl Served {
    fn finish(self) -> MemMedia {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the backup thread")
    }
}

/// One transaction of the Transact shape 4-2.
fn transact<S: EpochSink>(heap: &mut Heap, media: &mut MemMedia, sink: S, next: &mut impl FnMut(u64) -> u64) {
    let mut tx = heap.begin_with(media, sink);
    for e in 0..4u8 {
        for _ in 0..2 {
            tx.write(next(DATA / 64) * 64, &[e + 1; 64]).expect("write");
        }
        tx.ofence().expect("fence");
    }
    tx.commit().expect("commit");
}

fn data(heap: &Heap, media: &impl Media) -> Vec<u8> {
    let mut buf = vec![0u8; DATA as usize];
    heap.read(media, 0, &mut buf).expect("the data area");
    buf
}

/// One rejoin: the plan, bytes and messages of the copy, and its time.
fn rejoin(net: &InProcNetwork, heap: &Heap, media: &MemMedia, backup: MemMedia) -> (String, u64, u64, f64) {
    let served = serve(net, backup);
    let started = Instant::now();
    let mirror = Mirror::open(heap, media, net.node(), &served.addr, Strategy::SmOb).expect("rejoin");
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let row = (mirror.rejoin.name().to_string(), mirror.resync_bytes, mirror.resync_messages, ms);
    drop(mirror);
    let mut backup = served.finish();
    let (opened, _) = Heap::open(&mut backup, 0).expect("the rejoined pool opens");
    assert_eq!(opened.last_committed(), heap.last_committed());
    assert!(data(&opened, &backup) == data(heap, media), "the rejoined pool is the primary's");
    row
}

fn main() {
    let counts: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("a transaction count")).collect();
    let counts = if counts.is_empty() { vec![10, 100, 1_000, 10_000] } else { counts };
    println!("| unmirrored transactions | plan | bytes sent | messages | rejoin time |");
    println!("|---|---|---|---|---|");
    for txs in counts {
        let net = InProcNetwork::new(Limits::default());
        let mut media = MemMedia::new(Heap::required_size(LOG, DATA) as usize);
        let mut heap = Heap::create(&mut media, 0, LOG, DATA).expect("create");
        let mut backup = MemMedia::new(Heap::required_size(LOG, DATA) as usize);
        Backup::create(&mut backup, 0, LOG, DATA).expect("create");
        let served = serve(&net, backup);
        let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, Strategy::SmOb).expect("mirror");
        let mut state = 0x5eed_u64 ^ txs;
        let mut next = move |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        for _ in 0..10 {
            transact(&mut heap, &mut media, &mut mirror, &mut next);
        }
        drop(mirror);
        let backup = served.finish();
        for _ in 0..txs {
            transact(&mut heap, &mut media, NoMirror, &mut next);
        }
        let (plan, bytes, messages, ms) = rejoin(&net, &heap, &media, backup.clone());
        println!("| {txs} | {plan} | {bytes} | {messages} | {ms:.1} ms |");
        // The primary restarts: its record of written blocks is lost.
        let (heap, _) = Heap::open(&mut media, 0).expect("reopen");
        let (plan, bytes, messages, ms) = rejoin(&net, &heap, &media, backup);
        println!("| {txs}, primary restarted | {plan} | {bytes} | {messages} | {ms:.1} ms |");
    }
}
