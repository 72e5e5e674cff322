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
use transport::{UcxConfig, UcxTransport};

const EXE: &str = env!("CARGO_BIN_EXE_pmwire");
const LOG: u64 = 64 << 10;
const DATA: u64 = 1 << 20;

/// A backup process, killed when dropped.
struct BackupProcess {
    child: Child,
    addr: SocketAddr,
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
    if sizes {
        cmd.args(["--log-size", "64K", "--data-size", "1M"]);
    }
    let child = cmd.stdout(Stdio::null()).spawn().expect("spawn pmwire mirror-backup");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            let addr = text.split('"').nth(3).expect("{\"addr\":\"...\"}").parse().expect("an address");
            return BackupProcess { child, addr };
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
fn transact(heap: &mut Heap, region: &mut Region, mirror: &mut Mirror<UcxTransport>, txs: u64, seed: u64) {
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
        let mut mirror = Mirror::open(&heap, &region, transport(), &backup.addr, strategy).expect("mirror");
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
    let mut mirror = Mirror::open(&heap, &region, transport(), &backup.addr, Strategy::SmDd).expect("mirror again");
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
    let err = Mirror::open(&heap, &region, transport(), &backup.addr, Strategy::SmOb).err().expect("refused");
    assert!(err.to_string().contains("data area"), "{err}");
    let mut heap = Heap::create(&mut region, 0, LOG, DATA).unwrap();
    let mut tx = heap.begin(&mut region);
    tx.write(0, b"unmirrored").unwrap();
    tx.commit().unwrap();
    let err = Mirror::open(&heap, &region, transport(), &backup.addr, Strategy::SmOb).err().expect("refused");
    assert!(err.to_string().contains("behind"), "{err}");
    drop(backup);
    let err = backup_fails(&pool, &["--data-size", "2M"]);
    assert!(err.contains("not the"), "{err}");
}
