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
        // land after the arm above (a harmless spurious wake-up). Once the
        // helper sleeps again it has signalled; then arming clears it.
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
