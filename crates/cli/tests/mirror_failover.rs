//! Failover between real processes (issue 14): a `pmwire mirror-primary`
//! fed transactions on stdin mirrors to a `pmwire mirror-backup`; the
//! primary is killed with SIGKILL, the backup too; `pmwire mirror-promote`
//! makes the backup's pool a primary's, a new `mirror-primary` serves it
//! with a backup on the OLD primary's pool (resynchronised at the hello),
//! and both pools end up holding every acknowledged transaction of both
//! eras, byte for byte alike. Wrong pools and wrong backups are refused
//! with the reason. Waits are bounded (a generous wall clock, as a
//! failure bound).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use pmem::Region;
use pmwire_mirror::Heap;

const EXE: &str = env!("CARGO_BIN_EXE_pmwire");
const DATA: u64 = 1 << 20;

/// A child process, killed (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The secret file beside `pool` (the test's directory), made on first use.
fn secret_of(pool: &Path) -> std::path::PathBuf {
    let path = pool.with_file_name("secret");
    link::Secret::open(&path, true).expect("a secret file");
    path
}

fn start_backup(dir: &Path, pool: &Path) -> (Proc, SocketAddr) {
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let child = Proc(
        Command::new(EXE)
            .args(["mirror-backup", "--listen", "127.0.0.1:0", "--poll-us", "0"])
            .args(["--log-size", "64K", "--data-size", "1M"])
            .arg("--pool")
            .arg(pool)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--secret-file")
            .arg(secret_of(pool))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn pmwire mirror-backup"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            return (child, text.split('"').nth(3).expect("{\"addr\":\"...\"}").parse().expect("an address"));
        }
        assert!(Instant::now() < deadline, "the backup did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A primary reading its transactions from our pipe.
struct Primary {
    proc: Proc,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Primary {
    fn start(pool: &Path, backup: SocketAddr, strategy: &str) -> Primary {
        let mut child = Command::new(EXE)
            .args(["mirror-primary", "--strategy", strategy, "--log-size", "64K", "--data-size", "1M"])
            .arg("--pool")
            .arg(pool)
            .arg("--secret-file")
            .arg(secret_of(pool))
            .args(["--backup", &backup.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn pmwire mirror-primary");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Primary { proc: Proc(child), stdin, stdout }
    }

    /// The next line the primary prints (the test fails if it ends first).
    fn line(&mut self) -> String {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the primary's output ended");
        line.trim_end().to_string()
    }

    /// Sends one line and returns the primary's answer to it.
    fn ask(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        loop {
            let answer = self.line();
            if answer.starts_with("committed ") || answer.starts_with("read ") || answer.starts_with("refused: ") {
                return answer;
            }
        }
    }
}

/// Transaction `i` of era `era`: two epochs, writing a 64 B line of its own and a shared counter line.
fn tx(era: u8, i: u64) -> String {
    let own = format!("{}", (era as u64 * 100 + i) * 64);
    format!("{own}={} | 65536={:016x}", format!("{:02x}", era * 16 + i as u8).repeat(64), i.to_be())
}

/// What the data area holds after transactions `0..n` of era 1 then `0..m` of era 2.
fn expected(n: u64, m: u64) -> Vec<u8> {
    let mut data = vec![0u8; DATA as usize];
    for (era, count) in [(1u8, n), (2u8, m)] {
        for i in 0..count {
            let own = ((era as u64 * 100 + i) * 64) as usize;
            data[own..own + 64].fill(era * 16 + i as u8);
            data[65536..65544].copy_from_slice(&i.to_be().to_be_bytes());
        }
    }
    data
}

fn pool(path: &Path) -> (u64, Vec<u8>) {
    let mut region = Region::open(path, Default::default()).unwrap();
    let (heap, _) = Heap::open(&mut region, 0).unwrap();
    let mut data = vec![0u8; DATA as usize];
    heap.read(&region, 0, &mut data).unwrap();
    (heap.last_committed(), data)
}

/// Runs a command expected to fail; its stderr.
fn fails<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S], pool: &Path, extra: &[&str]) -> String {
    let mut cmd = Command::new(EXE);
    cmd.args(args).arg("--pool").arg(pool).args(extra);
    if args[0].as_ref() != "mirror-promote" {
        cmd.arg("--secret-file").arg(secret_of(pool));
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{args:?} should have failed: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_killed_primarys_backup_is_promoted_and_serves_with_the_old_primary_as_its_backup() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (pool_a, pool_b) = (dir.path().join("a.pool"), dir.path().join("b.pool"));
    let (backup, addr) = start_backup(dir.path(), &pool_b);
    let mut primary = Primary::start(&pool_a, addr, "SM-DD");
    for i in 0..12 {
        assert_eq!(primary.ask(&tx(1, i)), format!("committed {}", i + 1));
    }
    let read = primary.ask("read 7104 4");
    assert_eq!(read, format!("read 7104 {}", "1b".repeat(4)), "transaction 12's line, read back");
    // A promotion is refused while the backup holds its pool.
    let err = fails(&["mirror-promote"], &pool_b, &[]);
    assert!(err.contains("in use by another process"), "{err}");
    drop(primary); // SIGKILL, stdin still open: the primary was waiting for more
    drop(backup); // SIGKILL
    let out = Command::new(EXE).arg("mirror-promote").arg("--pool").arg(&pool_b).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("last committed transaction 12"), "{said}");

    // The promoted pool serves; the old primary's pool is its backup.
    let (backup, addr) = start_backup(dir.path(), &pool_a);
    let mut primary = Primary::start(&pool_b, addr, "SM-OB");
    let hello = primary.line();
    assert!(hello.contains("last committed transaction 12"), "{hello}");
    for i in 0..7 {
        assert_eq!(primary.ask(&tx(2, i)), format!("committed {}", 13 + i));
    }
    drop(primary.stdin.take()); // end of input: the primary stops cleanly
    let stopped = primary.line();
    assert!(stopped.starts_with("resync: ") || stopped.starts_with("stopped: "), "{stopped}");
    let status = primary.proc.0.wait().unwrap();
    assert!(status.success(), "{status}");
    drop(backup);
    let (last_b, data_b) = pool(&pool_b);
    let (last_a, data_a) = pool(&pool_a);
    assert_eq!(last_b, 19);
    assert!(data_b == expected(12, 7), "the promoted pool lost or tore a transaction");
    assert_eq!(last_a, 19, "the old primary's pool, as the new backup");
    assert!(data_a == data_b, "the new backup differs from the new primary");
}

#[test]
fn a_surviving_primary_resynchronises_its_restarted_backup_and_commits_on() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (pool_a, pool_b) = (dir.path().join("a.pool"), dir.path().join("b.pool"));
    let (backup, addr) = start_backup(dir.path(), &pool_b);
    let mut primary = Primary::start(&pool_a, addr, "SM-RC");
    for i in 0..5 {
        assert_eq!(primary.ask(&tx(1, i)), format!("committed {}", i + 1));
    }
    drop(backup); // SIGKILL
                  // The next commit fails with the reason, and waits for the backup.
    let stdin = primary.stdin.as_mut().unwrap();
    writeln!(stdin, "{}", tx(1, 5)).unwrap();
    stdin.flush().unwrap();
    let failed = loop {
        let line = primary.line();
        if line.starts_with("commit failed: ") {
            break line;
        }
    };
    assert!(failed.contains("mirror"), "{failed}");
    let port = addr.port().to_string();
    let ready = dir.path().join("ready");
    let _ = std::fs::remove_file(&ready);
    let _backup = Proc(
        Command::new(EXE)
            .args(["mirror-backup", "--listen", &format!("127.0.0.1:{port}"), "--poll-us", "0"])
            .arg("--pool")
            .arg(&pool_b)
            .arg("--secret-file")
            .arg(secret_of(&pool_b))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let committed = loop {
        let line = primary.line();
        if line.starts_with("committed ") {
            break line;
        }
    };
    assert_eq!(committed, "committed 6", "the failed transaction, committed once the backup is back");
    assert_eq!(primary.ask(&tx(1, 6)), "committed 7");
    drop(primary.stdin.take());
    assert!(primary.proc.0.wait().unwrap().success());
    drop(_backup);
    let (last_a, data_a) = pool(&pool_a);
    let (last_b, data_b) = pool(&pool_b);
    assert_eq!((last_a, last_b), (7, 7));
    assert!(data_a == expected(7, 0), "the primary's pool");
    assert!(data_b == data_a, "the resynchronised backup");
}

/// `mirror-primary` toward `backup`, its pool to be given.
fn primary_of(backup: SocketAddr) -> Vec<String> {
    ["mirror-primary", "--strategy", "SM-OB", "--backup", &backup.to_string()].map(String::from).to_vec()
}

#[test]
fn wrong_pools_and_wrong_backups_are_refused_with_the_reason() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let junk = dir.path().join("junk.pool");
    std::fs::write(&junk, vec![7u8; 1 << 20]).unwrap();
    let primary = ["mirror-primary", "--backup", "127.0.0.1:9", "--strategy", "SM-DD"];
    let err = fails(&primary, &junk, &[]);
    assert!(err.contains("holds no mirror heap"), "{err}");
    let err = fails(&["mirror-promote"], &junk, &[]);
    assert!(err.contains("holds no mirror heap"), "{err}");
    assert_eq!(std::fs::read(&junk).unwrap(), vec![7u8; 1 << 20], "a refused pool is left as it was");
    let err = fails(&primary, &dir.path().join("absent.pool"), &[]);
    assert!(err.contains("--log-size and --data-size"), "{err}");

    // A pool whose resynchronisation copy was cut short (its resync word set) can neither serve nor be promoted.
    let torn = dir.path().join("torn.pool");
    let mut region = Region::create(&torn, Heap::required_size(64 << 10, DATA)).unwrap();
    Heap::create(&mut region, 0, 64 << 10, DATA).unwrap();
    drop(region);
    let mut bytes = std::fs::read(&torn).unwrap();
    bytes[192..200].copy_from_slice(&5u64.to_le_bytes());
    std::fs::write(&torn, &bytes).unwrap();
    for args in [&["mirror-promote"][..], &primary[..]] {
        let err = fails(args, &torn, &[]);
        assert!(err.contains("unfinished resynchronisation copy"), "{args:?}: {err}");
    }
    assert!(std::fs::read(&torn).unwrap() == bytes, "left as it was");

    // A primary whose pool is another heap's (each new pool has a history of its own), one the backup is ahead of.
    let (backup, addr) = start_backup(dir.path(), &dir.path().join("b.pool"));
    let (pool_a, old_a) = (dir.path().join("a.pool"), dir.path().join("a-old.pool"));
    let mut first = Primary::start(&pool_a, addr, "SM-DD");
    assert_eq!(first.ask(&tx(1, 0)), "committed 1");
    drop(first);
    std::fs::copy(&pool_a, &old_a).unwrap();
    let mut again = Primary::start(&pool_a, addr, "SM-RC");
    assert_eq!(again.ask(&tx(1, 1)), "committed 2");
    drop(again);
    let err = fails(&primary_of(addr), &old_a, &[]);
    assert!(err.contains("refused this primary") && err.contains("ahead"), "{err}");
    let other = dir.path().join("other.pool");
    let err = fails(&primary_of(addr), &other, &["--log-size", "64K", "--data-size", "1M"]);
    assert!(err.contains("refused this primary") && err.contains("another heap"), "{err}");
    // Allowed to, a primary whose backup is not there commits alone, and says so.
    let dead = "127.0.0.1:9".parse().unwrap();
    let mut alone = Command::new(EXE)
        .args(["mirror-primary", "--allow-unmirrored", "--retry-ms", "60000", "--pool"])
        .arg(&other)
        .args(&primary_of(dead)[1..])
        .arg("--secret-file")
        .arg(secret_of(&other))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(alone.stdin.as_mut().unwrap(), "{}", tx(3, 0)).unwrap();
    let out = alone.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("going on unmirrored (allowed) from transaction 1") && said.contains("committed 1"),
        "{said}"
    );
    assert!(said.contains("the backup is behind"), "{said}");
    drop(backup);
}
