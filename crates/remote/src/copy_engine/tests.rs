use super::*;
use pmem::Media;
use std::time::Instant;

/// Generous bound on any wait: a stuck engine fails the test, a slow
/// machine does not (no timing is asserted).
const PATIENCE: Duration = Duration::from_secs(30);

fn region(size: u64) -> (tempfile::TempDir, Region) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let region = Region::create(dir.path().join("pool"), size).unwrap();
    (dir, region)
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8).collect()
}

/// Polls until `n` completions have arrived, blocking on the eventfd.
fn collect<S: AsRef<[u8]> + Send>(engine: &mut CopyEngine<S>, n: usize, out: &mut Vec<Completion<S>>) {
    let deadline = Instant::now() + PATIENCE;
    while out.len() < n {
        assert!(Instant::now() < deadline, "copy engine stalled with {} of {n} completions", out.len());
        if engine.poll_completions(out) == 0 {
            engine.wait(Duration::from_millis(500));
        }
    }
}

fn copies_land(depth: usize, threads: usize) {
    let (_dir, mut region) = region(4 << 20);
    // SAFETY: the engine is dropped at the end of this function, before `region`.
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, depth, threads).unwrap();
    let sizes = [1usize, 63, 64, 100, 4096, 5000, 65536, 131072];
    let mut expected = Vec::new();
    let mut done = Vec::new();
    let mut offset = 3u64;
    for round in 0..40u32 {
        let len = sizes[round as usize % sizes.len()];
        let data = pattern(round, len);
        if engine.outstanding() == depth {
            let before = done.len();
            collect(&mut engine, before + 1, &mut done);
        }
        let ticket = engine.submit(offset, data.clone(), len).expect("room and disjoint");
        assert_eq!(ticket, round as u64);
        expected.push((offset, data));
        offset = (offset + len as u64 + 13) % (3 << 20);
    }
    collect(&mut engine, 40, &mut done);
    assert_eq!(engine.outstanding(), 0);
    let mut tickets: Vec<_> = done.iter().map(|c| c.ticket).collect();
    tickets.sort_unstable();
    assert_eq!(tickets, (0..40).collect::<Vec<_>>());
    drop(engine);
    // Later copies may overwrite earlier ones where the offsets wrapped; check the last writer per byte.
    let mut model = vec![0u8; 4 << 20];
    for (off, data) in &expected {
        model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
    }
    let mut back = vec![0u8; 4 << 20];
    region.read(0, &mut back);
    assert!(back == model, "region differs from the copies");
    region.persist(0, 64);
}

#[test]
fn one_in_flight() {
    copies_land(1, 1);
}

#[test]
fn eight_in_flight_two_helpers() {
    copies_land(8, 2);
}

#[test]
fn refusals_write_nothing() {
    let (_dir, region) = region(1 << 20);
    // SAFETY: the engine is dropped before `region` (declared after it).
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, 2, 1).unwrap();
    let e = engine.submit((1 << 20) - 4, vec![1; 8], 8).unwrap_err();
    assert_eq!(e.error, SubmitError::OutOfBounds { offset: (1 << 20) - 4, len: 8, target: 1 << 20 });
    assert_eq!(e.buffer, vec![1; 8]);
    assert!(matches!(engine.submit(u64::MAX - 2, vec![1; 8], 8).unwrap_err().error, SubmitError::OutOfBounds { .. }));
    assert_eq!(engine.submit(0, vec![1; 8], 9).unwrap_err().error, SubmitError::ShortSource { have: 8, len: 9 });
    let first = engine.submit(100, vec![2; 100], 100).unwrap();
    assert_eq!(engine.submit(150, vec![3; 10], 10).unwrap_err().error, SubmitError::Overlap(first));
    assert_eq!(engine.overlapping(199, 1), Some(first));
    assert_eq!(engine.overlapping(200, 50), None);
    engine.submit(200, vec![4; 10], 10).unwrap();
    assert_eq!(engine.submit(400, vec![5; 10], 10).unwrap_err().error, SubmitError::Full { depth: 2 });
    let mut done = Vec::new();
    collect(&mut engine, 2, &mut done);
    let mut back = [0u8; 8];
    region.read((1 << 20) - 8, &mut back);
    assert_eq!(back, [0; 8], "a refused copy wrote");
    let mut back = [0u8; 1];
    region.read(150, &mut back);
    assert_eq!(back, [2], "the overlapping copy wrote");
}

#[test]
fn drop_finishes_queued_copies() {
    let (_dir, region) = region(1 << 20);
    // SAFETY: the engine is dropped explicitly before `region`.
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, 8, 1).unwrap();
    for i in 0..8u64 {
        engine.submit(i * 65536, vec![i as u8 + 1; 65536], 65536).unwrap();
    }
    drop(engine);
    for i in 0..8u64 {
        let mut back = vec![0u8; 65536];
        region.read(i * 65536, &mut back);
        assert!(back.iter().all(|&b| b == i as u8 + 1));
    }
}

/// Measures what staging the payload costs next to the copy it feeds:
/// `cargo test -p pmwire-remote staging_cost -- --ignored --nocapture`.
/// Prints numbers, asserts nothing about them.
#[test]
#[ignore]
fn staging_cost() {
    let (_dir, mut region) = region(64 << 20);
    let mut staging = Vec::with_capacity(128 << 10);
    for size in [4096usize, 16384, 65536, 131072] {
        let src = pattern(1, size);
        let rounds = (256 << 20) / size;
        let start = Instant::now();
        for _ in 0..rounds {
            staging.clear();
            staging.extend_from_slice(&src);
            std::hint::black_box(&staging);
        }
        let stage_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        let start = Instant::now();
        for r in 0..rounds {
            let at = ((r * size) % (60 << 20)) as u64;
            region.write_nt(at, &src);
            region.drain();
        }
        let nt_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        eprintln!(
            "{size:>7} B: stage {stage_ns:>8.0} ns ({:.1} GB/s), nt copy + drain {nt_ns:>8.0} ns ({:.1} GB/s), staging adds {:.0}%",
            size as f64 / stage_ns,
            size as f64 / nt_ns,
            100.0 * stage_ns / nt_ns
        );
    }
}

fn readable(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; a zero timeout does not block.
    unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
}

#[test]
fn arming_clears_a_stale_signal_and_reports_waiting_completions() {
    let (_dir, region) = region(1 << 20);
    // SAFETY: the engine is dropped at the end of this function, before `region`.
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, 4, 1).unwrap();
    let mut done = Vec::new();
    for round in 0..3u64 {
        for i in 0..3u64 {
            engine.submit((round * 3 + i) * 8192, vec![i as u8; 4096], 4096).unwrap();
        }
        // Wait for all three without polling them: the fd must say so, and
        // arming must not hide finished copies.
        let deadline = Instant::now() + PATIENCE;
        while engine.shared.finished.load(Ordering::Acquire) < 3 {
            assert!(Instant::now() < deadline, "copies did not finish");
            engine.wait(Duration::from_millis(100));
        }
        assert!(engine.arm(), "finished copies are reported");
        assert_eq!(engine.poll_completions(&mut done), 3);
        assert_eq!(engine.poll_completions(&mut done), 0, "nothing twice");
        // A helper signals after it raised `finished`, so its signal may
        // land after the arm above (one spurious wake-up), even after that
        // arm found the flag set and nothing to read. Once the helper sleeps
        // again it has signalled; then arming clears it.
        let deadline = Instant::now() + PATIENCE;
        while engine.shared.state.lock().unwrap().sleeping < 1 {
            assert!(Instant::now() < deadline, "the helper did not go back to sleep");
            std::thread::sleep(Duration::from_millis(1));
        }
        // All polled: after arming, the fd does not wake a waiter.
        assert!(!engine.arm());
        assert!(!readable(engine.event_fd()), "stale signal left after arm (round {round})");
    }
    assert_eq!(done.len(), 9);
    assert_eq!(engine.outstanding(), 0);
}

#[test]
fn a_signal_written_after_the_arm_that_cleared_its_flag_is_read_by_the_next_arm() {
    let (_dir, region) = region(1 << 20);
    // SAFETY: the engine is dropped at the end of this function, before `region`.
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, 4, 1).unwrap();
    // A helper has raised the flag and not yet written the eventfd.
    engine.shared.signalled.store(true, Ordering::Release);
    assert!(!engine.arm(), "nothing finished");
    // Its write lands now, with the flag clear.
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local to the engine's eventfd.
    assert_eq!(unsafe { libc::write(engine.event_fd(), (&one as *const u64).cast(), 8) }, 8);
    assert!(readable(engine.event_fd()), "the late signal wakes a waiter once");
    assert!(!engine.arm());
    assert!(!readable(engine.event_fd()), "the next arm cleared it: an idle loop does not spin on it");
    assert!(!engine.arm());
    assert!(!readable(engine.event_fd()));
}

#[test]
fn inline_copies_check_bounds_and_outstanding_ranges() {
    let (_dir, region) = region(1 << 20);
    // SAFETY: the engine is dropped before `region` (declared after it).
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, 2, 1).unwrap();
    let end = 1u64 << 20;
    assert_eq!(engine.copy_inline(end - 4, &[1; 8]), Err(SubmitError::OutOfBounds { offset: end - 4, len: 8, target: end }));
    assert!(matches!(engine.copy_inline(u64::MAX - 2, &[1; 8]), Err(SubmitError::OutOfBounds { .. })));
    engine.copy_inline(end - 8, &[7; 8]).expect("the last bytes are in bounds");
    let first = engine.submit(100, vec![2; 100], 100).unwrap();
    // Touching either end of the outstanding range is refused; beside it is not.
    assert_eq!(engine.copy_inline(50, &[3; 51]), Err(SubmitError::Overlap(first)));
    assert_eq!(engine.copy_inline(199, &[3; 1]), Err(SubmitError::Overlap(first)));
    engine.copy_inline(200, &[4; 10]).expect("disjoint from the outstanding copy");
    engine.copy_inline(0, &[5; 100]).expect("disjoint from the outstanding copy");
    // Still outstanding until polled, however long ago the helper finished.
    assert_eq!(engine.copy_inline(150, &[3; 1]), Err(SubmitError::Overlap(first)));
    let mut done = Vec::new();
    collect(&mut engine, 1, &mut done);
    assert_eq!(engine.outstanding(), 0, "inline copies are never outstanding");
    let mut back = vec![0u8; 220];
    region.read(0, &mut back);
    let expected = [vec![5u8; 100], vec![2; 100], vec![4; 10], vec![0; 10]].concat();
    assert!(back == expected, "a refused inline copy wrote, or an accepted one did not");
    let mut back = [0u8; 12];
    region.read(end - 12, &mut back);
    assert_eq!(back, [0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7], "an out-of-bounds inline copy wrote");
}

/// Inline and offloaded copies mixed at random over a small span, so
/// ranges overlap often. A refused inline copy waits out the outstanding
/// copies as the server does, then runs; so the bytes must match a model
/// that applies every write in program order (the last writer of a byte
/// wins): an inline write neither overtakes nor is overtaken by an
/// offloaded copy to the same bytes.
fn inline_and_offloaded_keep_program_order(seed: u64, depth: usize, threads: usize) {
    const SPAN: usize = 16 << 10;
    let (_dir, region) = region(1 << 20);
    // SAFETY: the engine is dropped before `region` (declared after it).
    let target = unsafe { CopyTarget::new(&region) };
    let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, depth, threads).unwrap();
    let mut model = vec![0u8; SPAN];
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut done = Vec::new();
    let (mut inlined, mut refused) = (0, 0);
    for i in 0..400u32 {
        let len = 1 + (next() % 3000) as usize;
        let offset = (next() % (SPAN - len) as u64) as usize;
        let data = pattern(i + seed as u32, len);
        if next() % 2 == 0 {
            loop {
                match engine.copy_inline(offset as u64, &data) {
                    Ok(()) => break,
                    Err(SubmitError::Overlap(_)) => {
                        refused += 1;
                        let want = done.len() + 1;
                        collect(&mut engine, want, &mut done);
                    }
                    Err(e) => panic!("seed {seed}: inline copy refused: {e}"),
                }
            }
            inlined += 1;
        } else {
            while engine.overlapping(offset as u64, len as u64).is_some() || engine.outstanding() == depth {
                let want = done.len() + 1;
                collect(&mut engine, want, &mut done);
            }
            engine.submit(offset as u64, data.clone(), len).unwrap_or_else(|r| panic!("seed {seed}: {}", r.error));
        }
        model[offset..offset + len].copy_from_slice(&data);
    }
    let submitted = engine.next_ticket as usize;
    collect(&mut engine, submitted, &mut done);
    drop(engine);
    assert!(inlined > 100 && refused > 0, "seed {seed}: the mix did not exercise both paths ({inlined} inline, {refused} refused)");
    let mut back = vec![0u8; SPAN];
    region.read(0, &mut back);
    let first_diff = back.iter().zip(&model).position(|(a, b)| a != b);
    assert!(first_diff.is_none(), "seed {seed}: byte {first_diff:?} differs from program order");
}

#[test]
fn inline_and_offloaded_copies_keep_program_order() {
    for seed in [1u64, 2, 3, 0x5eed] {
        inline_and_offloaded_keep_program_order(seed, 8, 1);
    }
    inline_and_offloaded_keep_program_order(7, 8, 2);
    inline_and_offloaded_keep_program_order(8, 1, 1);
}

/// Where an offloaded copy's time goes on this machine, stage by stage:
/// `cargo test --release -p pmwire-remote wake_breakdown -- --ignored --nocapture`
/// (docs/bench.md, "Copy engine latency (issue 13)"). Each sample is one
/// 64 B copy after a pause of ~50 µs, as a ping-pong client's next write
/// comes after a round trip, so the helper is asleep again. Run with the
/// other vCPU idle, then with a thread spinning on it (as a polling client
/// does). Prints medians and p99s, asserts nothing about them.
#[test]
#[ignore]
fn wake_breakdown() {
    use std::sync::atomic::AtomicU64;
    const N: usize = 3000;
    let (_dir, region) = region(1 << 20);
    let base = Instant::now();
    let now_ns = move || base.elapsed().as_nanos() as u64;
    let pause = || {
        let until = Instant::now() + Duration::from_micros(50);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_micros(10));
        }
    };
    let show = |name: &str, mut ns: Vec<u64>| {
        ns.sort_unstable();
        eprintln!("  {name:<58} p50 {:>7} ns  p99 {:>7} ns", ns[ns.len() / 2], ns[ns.len() * 99 / 100]);
    };
    for competing in [false, true] {
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = competing.then(|| {
            let stop = Arc::clone(&stop);
            // Spins only while this measurement runs (bounded by it).
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        });
        eprintln!("other vCPU {}:", if competing { "busy (a spinning thread)" } else { "idle" });
        // SAFETY: the engine is dropped at the end of this block, before `region`.
        let target = unsafe { CopyTarget::new(&region) };
        let mut engine: CopyEngine<Vec<u8>> = CopyEngine::new(target, 8, 1).unwrap();
        let src = vec![7u8; 64];
        let mut done = Vec::new();
        let (mut inline, mut spin, mut yielding, mut block) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..N {
            pause();
            let t = Instant::now();
            engine.copy_inline(4096, &src).unwrap();
            inline.push(t.elapsed().as_nanos() as u64);
            pause();
            let t = Instant::now();
            engine.submit(0, src.clone(), 64).unwrap();
            let deadline = t + PATIENCE;
            if i % 3 < 2 {
                // The loop polls until the completion shows: spinning (as
                // the event loop does), or yielding the CPU each pass.
                while engine.poll_completions(&mut done) == 0 {
                    assert!(Instant::now() < deadline, "copy engine stalled");
                    if i % 3 == 0 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                [&mut spin, &mut yielding][i % 3].push(t.elapsed().as_nanos() as u64);
            } else {
                // The loop arms the eventfd and blocks in ppoll.
                collect(&mut engine, done.len() + 1, &mut done);
                block.push(t.elapsed().as_nanos() as u64);
            }
        }
        drop(engine);
        show("inline copy_inline (nt copy + sfence on the loop)", inline);
        show("hand-off, loop polls spinning: submit -> completion seen", spin);
        show("hand-off, loop polls yielding: submit -> completion seen", yielding);
        show("hand-off, loop blocks on the eventfd: submit -> seen", block);
        // The two wake-ups alone, without the engine.
        let pair = Arc::new((Mutex::new(false), Condvar::new(), AtomicU64::new(0)));
        let waiter = {
            let pair = Arc::clone(&pair);
            std::thread::spawn(move || {
                for _ in 0..N {
                    let mut go = pair.0.lock().unwrap();
                    while !*go {
                        go = pair.1.wait(go).unwrap();
                    }
                    *go = false;
                    pair.2.store(now_ns(), Ordering::Release);
                }
            })
        };
        let mut futex = Vec::new();
        for _ in 0..N {
            pause();
            pair.2.store(0, Ordering::Release);
            let t = now_ns();
            *pair.0.lock().unwrap() = true;
            pair.1.notify_one();
            let deadline = Instant::now() + PATIENCE;
            while pair.2.load(Ordering::Acquire) == 0 {
                assert!(Instant::now() < deadline, "the waiter did not wake");
                std::thread::yield_now();
            }
            futex.push(pair.2.load(Ordering::Acquire) - t);
        }
        waiter.join().unwrap();
        show("condvar notify -> sleeping thread runs (futex wake)", futex);
        // SAFETY: plain syscall; checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(efd >= 0);
        let woke = Arc::new(AtomicU64::new(0));
        let poller = {
            let woke = Arc::clone(&woke);
            std::thread::spawn(move || {
                for _ in 0..N {
                    let mut pfd = [libc::pollfd { fd: efd, events: libc::POLLIN, revents: 0 }];
                    transport::ucx::poll_fds(&mut pfd, PATIENCE).unwrap();
                    woke.store(now_ns(), Ordering::Release);
                    let mut count = 0u64;
                    // SAFETY: reads 8 bytes into a local from our eventfd.
                    unsafe { libc::read(efd, (&mut count as *mut u64).cast(), 8) };
                }
            })
        };
        let mut efd_wake = Vec::new();
        for _ in 0..N {
            pause();
            woke.store(0, Ordering::Release);
            let one = 1u64;
            let t = now_ns();
            // SAFETY: writes 8 bytes from a local to our eventfd.
            unsafe { libc::write(efd, (&one as *const u64).cast(), 8) };
            let deadline = Instant::now() + PATIENCE;
            while woke.load(Ordering::Acquire) == 0 {
                assert!(Instant::now() < deadline, "the poller did not wake");
                std::thread::yield_now();
            }
            efd_wake.push(woke.load(Ordering::Acquire) - t);
        }
        poller.join().unwrap();
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(efd) };
        show("eventfd write -> thread in ppoll runs", efd_wake);
        stop.store(true, Ordering::Relaxed);
        if let Some(s) = spinner {
            s.join().unwrap();
        }
    }
}
