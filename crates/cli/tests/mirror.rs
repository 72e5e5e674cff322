//! The mirror between real processes: a primary heap in this test,
//! mirrored over UCX tcp on loopback to a `pmwire mirror-backup` process,
//! under SM-RC, SM-OB and SM-DD in turn; the backup is killed with
//! SIGKILL, and its pool, opened as a promoted backup would open it, holds
//! exactly the primary's committed transactions. A restarted backup takes
//! a new stream where the last ended. Wrong pools are refused with the
//! reason. Waits are bounded (a generous wall clock, as a failure bound).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pmem::{Media, Region};
use pmwire_mirror::{Heap, Mirror, Strategy};
use link::{LinkConfig, LinkTransport, Secret};
use transport::{UcxConfig, UcxTransport};

const EXE: &str = env!("CARGO_BIN_EXE_pmwire");
const LOG: u64 = 64 << 10;
const DATA: u64 = 1 << 20;

/// A backup process, killed when dropped.
struct BackupProcess {
    child: Child,
    addr: SocketAddr,
    /// Its secret (`--secret-file`), which a primary must prove.
    secret: Secret,
}

impl BackupProcess {
    /// A primary's transport to it, proving its secret.
    fn transport(&self) -> LinkTransport<UcxTransport> {
        LinkTransport::real(transport(), self.secret.clone(), LinkConfig::mirror_primary())
    }
}

impl Drop for BackupProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_backup(dir: &Path, pool: &Path, sizes: bool) -> BackupProcess {
    start_backup_over(dir, pool, sizes, "tcp")
}

fn start_backup_over(dir: &Path, pool: &Path, sizes: bool, tls: &str) -> BackupProcess {
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let mut cmd = Command::new(EXE);
    cmd.args(["mirror-backup", "--listen", "127.0.0.1:0", "--tls", tls, "--poll-us", "0"]);
    cmd.arg("--pool").arg(pool).arg("--ready-file").arg(&ready);
    let secret_file = dir.join("secret");
    let (secret, _) = Secret::open(&secret_file, true).expect("a secret file");
    cmd.arg("--secret-file").arg(&secret_file);
    if sizes {
        cmd.args(["--log-size", "64K", "--data-size", "1M"]);
    }
    let child = cmd.stdout(Stdio::null()).spawn().expect("spawn pmwire mirror-backup");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            let addr = text.split('"').nth(3).expect("{\"addr\":\"...\"}").parse().expect("an address");
            return BackupProcess { child, addr, secret };
        }
        assert!(Instant::now() < deadline, "the backup did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `pmwire mirror-backup` expecting it to fail; its stderr.
fn backup_fails(pool: &Path, extra: &[&str]) -> String {
    let out = Command::new(EXE)
        .args(["mirror-backup", "--listen", "127.0.0.1:0"])
        .arg("--pool")
        .arg(pool)
        .arg("--secret-file")
        .arg(pool.with_file_name("secret"))
        .arg("--create-secret")
        .args(extra)
        .output()
        .expect("run pmwire mirror-backup");
    assert!(!out.status.success(), "it should have refused the pool");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn transport() -> UcxTransport {
    UcxTransport::new(&UcxConfig::tls("tcp").with_var("NET_DEVICES", "lo")).expect("UCX")
}

fn data(heap: &Heap, media: &impl Media) -> Vec<u8> {
    let mut buf = vec![0u8; DATA as usize];
    heap.read(media, 0, &mut buf).unwrap();
    buf
}

/// Transactions of 1-20 epochs of 1-8 writes of 64 B at random 64 B-aligned
/// places (seed 002 §7.1's Transact, smaller), some aborted, some with a dfence.
fn transact(heap: &mut Heap, region: &mut Region, mirror: &mut Mirror<LinkTransport<UcxTransport>>, txs: u64, seed: u64) {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for i in 0..txs {
        let mut tx = heap.begin_with(region, &mut *mirror);
        for e in 0..1 + next(20) {
            for _ in 0..1 + next(8) {
                tx.write(next(DATA / 64) * 64, &[(seed + i * 3 + e) as u8; 64]).unwrap();
            }
            if e == 2 { tx.dfence() } else { tx.ofence() }.unwrap();
        }
        if i % 7 == 6 {
            tx.abort();
        } else {
            tx.commit().unwrap();
        }
    }
}

#[test]
fn a_primary_mirrors_to_a_backup_process_that_survives_kill_9() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("backup.pool");
    let mut region = Region::create(dir.path().join("primary.pool"), Heap::required_size(LOG, DATA)).unwrap();
    let mut heap = Heap::create(&mut region, 0, LOG, DATA).unwrap();
    let backup = start_backup(dir.path(), &pool, true);
    for (n, strategy) in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd].into_iter().enumerate() {
        let mut mirror = Mirror::open(&heap, &region, backup.transport(), &backup.addr, strategy).expect("mirror");
        transact(&mut heap, &mut region, &mut mirror, 40, n as u64 + 1);
        assert!(mirror.round_trips > 30, "{strategy}: every commit waits for the backup");
    }
    drop(backup); // SIGKILL
    let mut backup_region = Region::open(&pool, Default::default()).unwrap();
    let (promoted, _) = Heap::open(&mut backup_region, 0).unwrap();
    assert_eq!(promoted.last_committed(), heap.last_committed());
    assert_eq!(data(&promoted, &backup_region), data(&heap, &region), "the backup holds every committed transaction");
    drop(backup_region);

    // Restarted on its pool, the backup takes the next stream.
    let backup = start_backup(dir.path(), &pool, false);
    let mut mirror = Mirror::open(&heap, &region, backup.transport(), &backup.addr, Strategy::SmDd).expect("mirror again");
    transact(&mut heap, &mut region, &mut mirror, 10, 9);
    drop(mirror);
    drop(backup);
    let mut backup_region = Region::open(&pool, Default::default()).unwrap();
    let (promoted, _) = Heap::open(&mut backup_region, 0).unwrap();
    assert_eq!(data(&promoted, &backup_region), data(&heap, &region));
}

#[test]
fn a_backup_process_mirrors_over_shared_memory() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("backup.pool");
    let mut region = Region::create(dir.path().join("primary.pool"), Heap::required_size(LOG, DATA)).unwrap();
    let mut heap = Heap::create(&mut region, 0, LOG, DATA).unwrap();
    let backup = start_backup_over(dir.path(), &pool, true, "sm");
    for (n, strategy) in [Strategy::SmDd, Strategy::SmOb, Strategy::SmRc].into_iter().enumerate() {
        let t = UcxTransport::new(&UcxConfig::shared_memory().with_var("NET_DEVICES", "lo")).expect("UCX");
        let t = LinkTransport::real(t, backup.secret.clone(), LinkConfig::mirror_primary());
        let mut mirror = Mirror::open(&heap, &region, t, &backup.addr, strategy).expect("mirror over sm");
        transact(&mut heap, &mut region, &mut mirror, 20, n as u64 + 11);
    }
    drop(backup); // SIGKILL
    let mut backup_region = Region::open(&pool, Default::default()).unwrap();
    let (promoted, _) = Heap::open(&mut backup_region, 0).unwrap();
    assert_eq!(promoted.last_committed(), heap.last_durable(&region));
    assert_eq!(data(&promoted, &backup_region), data(&heap, &region));
}

#[test]
fn wrong_pools_and_wrong_primaries_are_refused_with_the_reason() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let absent = dir.path().join("absent.pool");
    let err = backup_fails(&absent, &[]);
    assert!(err.contains("--log-size and --data-size"), "{err}");
    let junk = dir.path().join("junk.pool");
    std::fs::write(&junk, vec![7u8; 1 << 20]).unwrap();
    let err = backup_fails(&junk, &[]);
    assert!(err.contains("holds no mirror heap"), "{err}");
    assert_eq!(std::fs::read(&junk).unwrap(), vec![7u8; 1 << 20], "a refused pool is left as it was");

    let pool: PathBuf = dir.path().join("backup.pool");
    let backup = start_backup(dir.path(), &pool, true);
    let err = backup_fails(&pool, &[]);
    assert!(err.contains("in use by another process"), "{err}");
    // A primary of another shape, then one of other data, are refused.
    let mut region = Region::create(dir.path().join("primary.pool"), Heap::required_size(LOG, 2 * DATA)).unwrap();
    let heap = Heap::create(&mut region, 0, LOG, 2 * DATA).unwrap();
    let err = Mirror::open(&heap, &region, backup.transport(), &backup.addr, Strategy::SmOb).err().expect("refused");
    assert!(err.to_string().contains("data area"), "{err}");
    let mut heap = Heap::create(&mut region, 0, LOG, DATA).unwrap();
    let mut tx = heap.begin(&mut region);
    tx.write(0, b"unmirrored").unwrap();
    tx.commit().unwrap();
    // A primary the (blank) backup is behind resynchronises it: by the
    // blocks written since its creation, which it tracks.
    let mirror = Mirror::open(&heap, &region, backup.transport(), &backup.addr, Strategy::SmOb).expect("resynchronised");
    assert_eq!(mirror.rejoin, pmwire_mirror::Plan::Incremental { from: 0 });
    assert_eq!(mirror.resync_bytes, 1024, "one 1 KiB block is copied");
    drop(mirror);
    drop(backup);
    // The backup's pool, opened as a promotion would, is the primary's.
    let mut copy_region = Region::open(&pool, Default::default()).unwrap();
    let (copy, _) = Heap::open(&mut copy_region, 0).unwrap();
    assert_eq!(copy.last_committed(), heap.last_committed());
    let (mut ours, mut theirs) = (vec![0u8; DATA as usize], vec![1u8; DATA as usize]);
    heap.read(&region, 0, &mut ours).unwrap();
    copy.read(&copy_region, 0, &mut theirs).unwrap();
    assert!(ours == theirs, "the resynchronised pool differs from the primary's data area");
    drop(copy_region);
    let err = backup_fails(&pool, &["--data-size", "2M"]);
    assert!(err.contains("not the"), "{err}");
}

/// The backup process killed with SIGKILL at a random instant under load,
/// nine times (each strategy thrice): its pool, opened as a promotion
/// would open it, holds the primary's data after every acknowledged
/// transaction, or after those and the one in flight (whose commit the
/// primary saw fail), never a torn or partial one. (A kill -9 leaves
/// every store in the page cache, so this checks the order of the
/// protocol's acts between processes; the crash-state checker checks the
/// flushes.)
#[test]
fn a_backup_killed_under_load_holds_every_acknowledged_transaction() {
    let strategies = [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd];
    for run in 0..9u64 {
        let strategy = strategies[run as usize % 3];
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let pool = dir.path().join("backup.pool");
        let mut region = Region::create(dir.path().join("primary.pool"), Heap::required_size(LOG, DATA)).unwrap();
        let mut heap = Heap::create(&mut region, 0, LOG, DATA).unwrap();
        let backup = start_backup(dir.path(), &pool, true);
        let pid = backup.child.id() as libc::pid_t;
        let delay = Duration::from_millis(30 + run * 37 % 150);
        let mut mirror = Mirror::open(&heap, &region, backup.transport(), &backup.addr, strategy).expect("mirror");
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            // SAFETY: a signal to the child this test started and still holds.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let mut state = run * 7919 + 1;
        let mut next = move |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut acknowledged = 0u64;
        let in_flight = loop {
            let mut writes = Vec::new();
            for e in 0..1 + next(8) {
                for _ in 0..1 + next(4) {
                    writes.push((next(DATA / 64) * 64, e as u8 ^ next(256) as u8));
                }
                writes.push((u64::MAX, 0)); // an epoch boundary
            }
            let mut tx = heap.begin_with(&mut region, &mut mirror);
            let mut failed = false;
            for &(at, byte) in &writes {
                let step = if at == u64::MAX { tx.ofence() } else { tx.write(at, &[byte; 64]) };
                if step.is_err() {
                    failed = true;
                    break;
                }
            }
            if failed || tx.commit().is_err() {
                break writes;
            }
            acknowledged += 1;
            assert!(acknowledged < 1_000_000, "the backup was never killed");
        };
        killer.join().unwrap();
        drop(backup);
        assert!(mirror.broken().is_some(), "run {run}: the mirror noticed");
        let acked_data = data(&heap, &region);
        let mut in_flight_data = acked_data.clone();
        for &(at, byte) in in_flight.iter().filter(|(at, _)| *at != u64::MAX) {
            in_flight_data[at as usize..at as usize + 64].fill(byte);
        }
        let mut backup_region = Region::open(&pool, Default::default()).unwrap();
        let (promoted, _) = Heap::open(&mut backup_region, 0).unwrap();
        let got = data(&promoted, &backup_region);
        let last = heap.last_durable(&region);
        println!(
            "run {run} ({strategy}): killed after {delay:?}, {acknowledged} acknowledged, backup holds {}",
            if got == acked_data { "exactly those" } else { "those and the one in flight" }
        );
        if got == acked_data {
            assert_eq!(promoted.last_committed(), last, "run {run} ({strategy})");
        } else {
            assert!(got == in_flight_data, "run {run} ({strategy}): the backup lost or tore a transaction");
            assert!(promoted.last_committed() > last, "run {run} ({strategy})");
        }
    }
}

/// `pmwire bench mirror-crash`: six kill -9 runs (the primary in three,
/// the backup in three, each strategy twice) lose no acknowledged
/// transaction and tear none; the JSON says so.
#[test]
fn the_kill_9_campaign_finds_nothing_lost_or_torn() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(EXE)
        .args(["bench", "mirror-crash", "--runs", "6", "--seed", "7", "--out"])
        .arg(dir.path())
        .output()
        .expect("run pmwire bench mirror-crash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches("  run ").count(), 6, "{stdout}");
    let json = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let result = &file["results"][0];
    assert_eq!(result["lost_count"], 0.0);
    assert_eq!(result["torn_count"], 0.0);
}

/// No one in without the key: a primary with no link, and one with
/// another secret, reach the backup process's port and are refused; the
/// backup's pool is unchanged to the byte, and the backup still serves
/// its own primary. (Without links, the same primary would resynchronise
/// the blank backup to its committed transaction: the pool would change.)
#[test]
fn a_primary_without_the_secret_is_refused_and_the_backup_pool_is_unchanged() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("backup.pool");
    let backup = start_backup(dir.path(), &pool, true);
    let mut region = Region::create(dir.path().join("primary.pool"), Heap::required_size(LOG, DATA)).unwrap();
    let mut heap = Heap::create(&mut region, 0, LOG, DATA).unwrap();
    let mut tx = heap.begin(&mut region);
    tx.write(0, b"a stranger's write").unwrap();
    tx.commit().unwrap();
    let before = std::fs::read(&pool).unwrap();
    let wrong = LinkTransport::real(transport(), Secret::from_bytes([0x33; 32]), LinkConfig::mirror_primary());
    for (what, result) in [
        ("no link", Mirror::open(&heap, &region, transport(), &backup.addr, Strategy::SmOb).map(drop)),
        ("another secret", Mirror::open(&heap, &region, wrong, &backup.addr, Strategy::SmOb).map(drop)),
    ] {
        assert!(result.is_err(), "{what}: the backup let a primary in without the secret");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(std::fs::read(&pool).unwrap() == before, "the backup's pool changed");
    // Its own primary (this heap, proving the secret) is served.
    let mirror = Mirror::open(&heap, &region, backup.transport(), &backup.addr, Strategy::SmOb).expect("the secret's holder is served");
    assert_eq!(mirror.rejoin, pmwire_mirror::Plan::Incremental { from: 0 });
    drop(mirror);
    assert!(std::fs::read(&pool).unwrap() != before, "the resynchronisation wrote the pool");
}
