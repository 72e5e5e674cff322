//! No one in without the key, on real `pmwire replica` processes over tcp
//! on loopback: a process that reaches a replica's port without the
//! cluster's secret (no link at all, sending a Raft heartbeat from a term
//! far ahead and a client's PUT; or `pmwire smr` with another secret file)
//! is refused, and no replica's term, log or commit index moves. Secret
//! files that are missing, exposed or malformed are refused with the
//! reason. Waits are bounded (a generous wall clock, as a failure bound
//! only). The simulation's control (`smr::links`) shows the same
//! heartbeat moves a term where there are no links.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use link::{LinkTransport, Secret};
use pmwire_smr::client::SmrClient;
use pmwire_smr::command::{Op, Request, REQUEST_MAGIC};
use pmwire_smr::links::client_link;
use pmwire_smr::node::RAFT_MAGIC;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use transport::{Transport, UcxConfig, UcxTransport};

mod resp;

const EXE: &str = env!("CARGO_BIN_EXE_pmwire");

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ucx() -> UcxTransport {
    UcxTransport::new(&UcxConfig::tls("tcp").with_var("NET_DEVICES", "lo")).expect("UCX")
}

/// Three replicas with 50 ms ticks (an idle cluster holds its term on a
/// loaded machine), on pools in `dir`, proving the secret in `secret`.
fn cluster(dir: &Path, secret: &Path) -> (Killed, BTreeMap<u64, SocketAddr>) {
    let peers: BTreeMap<u64, SocketAddr> = (1..=3).map(|id| (id, SocketAddr::from(([127, 0, 0, 1], resp::free_port())))).collect();
    let list = peers.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(",");
    let mut children = Killed(Vec::new());
    for id in 1..=3u64 {
        let ready = dir.join(format!("ready{id}"));
        let child = Command::new(EXE)
            .args(["replica", "--id", &id.to_string(), "--peers", &list, "--size", "64M", "--log-size", "16M", "--tick-ms", "50"])
            .arg("--pool")
            .arg(dir.join(format!("pool{id}")))
            .arg("--ready-file")
            .arg(&ready)
            .arg("--secret-file")
            .arg(secret)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn pmwire replica");
        children.0.push(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "replica {id} not listening within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    (children, peers)
}

/// Each replica's (term, last index, commit index), asked with the secret.
fn state(client: &mut SmrClient<LinkTransport<UcxTransport>>) -> Vec<(u64, u64, u64)> {
    (1..=3).map(|id| client.status(id).map(|s| (s.term, s.last_index, s.commit)).expect("status")).collect()
}

/// A process with no link: to each replica a heartbeat from another
/// replica in a term 100 ahead, and a client's PUT.
fn stranger(peers: &BTreeMap<u64, SocketAddr>, term: u64) {
    let mut t = ucx();
    for (&to, addr) in peers {
        let conn = t.connect(addr).expect("connect");
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.to = to;
        m.from = to % 3 + 1;
        m.term = term + 100;
        let _ = t.send(conn, &RAFT_MAGIC, m.write_to_bytes().expect("encodes"));
        let put = Request { op: Op::Put, client: 99, seq: 1, key: b"evil".to_vec(), value: b"x".to_vec(), expect: None };
        let _ = t.call(conn, &REQUEST_MAGIC, put.to_bytes(), 1);
    }
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut events = Vec::new();
    while Instant::now() < deadline {
        t.poll(&mut events, 64);
        events.clear();
        let _ = t.wait(Duration::from_millis(10));
    }
}

#[test]
fn a_process_without_the_secret_is_refused_and_changes_no_replica() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
    let secret_file = dir.path().join("secret");
    let secret = Secret::create(&secret_file).expect("a secret file");
    let (_replicas, peers) = cluster(dir.path(), &secret_file);
    let mut client = SmrClient::new(LinkTransport::real(ucx(), secret, client_link()), peers.clone(), 1);
    client.timeout = Duration::from_secs(20);
    client.put(b"k", b"v").expect("a client with the secret writes");
    // Let the followers apply the commit index the PUT's answer implies.
    std::thread::sleep(Duration::from_millis(500));
    let before = state(&mut client);
    stranger(&peers, before[0].0);
    // `pmwire smr` with another secret: refused, and told why.
    let wrong = dir.path().join("wrong");
    Secret::create(&wrong).expect("another secret");
    let list = peers.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(",");
    let out = Command::new(EXE).args(["smr", "--peers", &list, "--secret-file"]).arg(&wrong).args(["put", "evil", "y"]).env("RUST_BACKTRACE", "0").output().expect("pmwire smr");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a client with another secret was answered");
    assert!(stderr.contains("wrong proof"), "{stderr}");
    assert_eq!(state(&mut client), before, "no replica's term, log or commit moved");
    assert_eq!(client.get(b"evil").expect("get"), None);
    assert_eq!(client.get(b"k").expect("get"), Some(b"v".to_vec()));
}

#[test]
fn secret_files_that_are_missing_exposed_or_malformed_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |secret: &Path, extra: &[&str]| {
        let out = Command::new(EXE)
            .args(["replica", "--id", "1", "--peers", "1=127.0.0.1:9", "--log", "dram", "--pool"])
            .arg(dir.path().join("pool"))
            .arg("--secret-file")
            .arg(secret)
            .args(extra)
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("pmwire replica");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let path = dir.path().join("secret");
    assert!(run(&path, &[]).contains("--create-secret"), "a missing file says how to make one");
    let exposed = dir.path().join("exposed");
    std::fs::write(&exposed, [1u8; 32]).unwrap();
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(run(&exposed, &[]).contains("chmod 600"));
    let short = dir.path().join("short");
    std::fs::write(&short, b"password\n").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(run(&short, &[]).contains("exactly 32"));
    assert!(!path.exists(), "nothing was made without --create-secret");
}
