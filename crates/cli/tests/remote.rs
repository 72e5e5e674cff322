//! `pmwire serve` end to end: a kill -9 crash campaign (small) against the
//! real binary on a /dev/shm pool; every acknowledged write and append must
//! survive each restart (`pmwire bench crash` is the large version).

use std::time::Duration;

use pmwire_bench::remote::crash::{run, CrashOptions};

#[test]
fn kill_dash_nine_loses_no_acknowledged_write() {
    let options = CrashOptions {
        runs: 4,
        max_load: Duration::from_millis(40),
        seed: 0x3c,
        exe: env!("CARGO_BIN_EXE_pmwire").into(),
    };
    let report = run(&options).unwrap();
    assert_eq!(report.runs, 4);
    assert_eq!(report.runs_per_phase, [1; 4], "one run in each benchmark's write phase");
    assert_eq!(report.lost, 0);
    assert!(report.acknowledged > 0, "the load ran before the kill");
    assert!(report.writes_checked > 0);
    assert!(report.appends_checked > 0);
}

#[test]
fn serve_refuses_a_pool_it_did_not_format() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    std::fs::write(&pool, vec![7u8; 1 << 20]).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pmwire"))
        .args(["serve", "--pool", pool.to_str().unwrap(), "--size", "1M", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not open"));
    assert_eq!(std::fs::read(&pool).unwrap(), vec![7u8; 1 << 20], "left unchanged");
}

/// `pmwire remote status` against a `pmwire serve` child: it calibrates,
/// runs Auto writes, prints each size class's choice and evidence, keeps
/// the data area's bytes, reuses its cache on the same target and drops
/// the cached table when the server's stated domain differs.
#[test]
fn remote_status_shows_autos_choice_and_keeps_the_data() {
    use pmwire_bench::remote::server::{ucx_config, ServeChild};
    use pmwire_remote::client::Client;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (pool, key_file, cache) = (dir.path().join("pool"), dir.path().join("keys.json"), dir.path().join("cache.json"));
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_pmwire"));
    let server = ServeChild::start(exe, &pool, "4M", "tcp", 8, false, &key_file).unwrap();
    let addr = server.keys.socket().unwrap();
    let pattern: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    let connect = || Client::connect(transport::UcxTransport::new(&ucx_config("tcp", true, false).unwrap()).unwrap(), &addr, server.keys.region_id, server.keys.key).unwrap();
    let mut client = connect();
    client.write_persistent(4096, &pattern, pmwire_remote::proto::Method::Rpc).unwrap();
    client.close();
    let status = |extra: &[&str]| {
        let mut args = vec!["remote", "status", "--key-file", key_file.to_str().unwrap(), "--sizes", "64,256", "--rounds", "20"];
        args.extend_from_slice(&["--writes", "100", "--offset", "4096", "--cache", cache.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let out = std::process::Command::new(exe).args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&status(&["--json"])).unwrap();
    let classes = json["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 2);
    for class in classes {
        assert_eq!(class["writes"], 100);
        assert!(class["probes"].as_u64().unwrap() >= 1, "the alternative was probed");
        let methods: Vec<&str> = class["methods"].as_array().unwrap().iter().map(|m| m["method"].as_str().unwrap()).collect();
        assert_eq!(methods, ["Rpc", "RpcOffload"], "one-sided access is off: the RPC methods only");
    }
    let text = status(&[]);
    assert!(text.contains("calibration: reused from the cache"), "{text}");
    assert!(text.contains("64 B  chosen"), "{text}");
    // The server "now states" another persistence domain: the cached table is dropped.
    let mut stale: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    let domain = stale["tables"][0]["target"]["domain"].as_u64().unwrap();
    stale["tables"][0]["target"]["domain"] = (domain ^ 1).into();
    std::fs::write(&cache, stale.to_string()).unwrap();
    let text = status(&[]);
    assert!(text.contains(&format!("cached calibration invalidated: domain {} -> {domain}", domain ^ 1)), "{text}");
    assert!(text.contains("calibration: measured now"), "{text}");
    let mut client = connect();
    let mut back = vec![0u8; 256];
    client.read(4096, &mut back).unwrap();
    assert_eq!(back, pattern, "status wrote back the bytes it found");
    client.close();
    drop(server);
}

/// `pmwire remote write|read|log|hello` against a `pmwire serve` child
/// (issue 29): bytes from a file and from stdin written durably and read
/// back (a write past the server's message limit goes in pieces), a log
/// created, appended to, read by LSN and tailed; HELLO's facts; a range
/// past the data area, a
/// one-sided method the server does not offer and a wrong key each get
/// the reason and a nonzero exit.
#[test]
fn remote_write_read_and_log_from_the_command_line() {
    use pmwire_bench::remote::server::ServeChild;
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (pool, key_file) = (dir.path().join("pool"), dir.path().join("keys.json"));
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_pmwire"));
    let _server = ServeChild::start(exe, &pool, "4M", "tcp", 8, false, &key_file).unwrap();
    let keys = key_file.to_str().unwrap();
    let run = |args: &[&str], stdin: &[u8]| {
        let mut child = Command::new(exe).arg("remote").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    };
    let ok = |args: &[&str], stdin: &[u8]| {
        let out = run(args, stdin);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let blob: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let file = dir.path().join("blob");
    std::fs::write(&file, &blob).unwrap();
    ok(&["write", "--key-file", keys, "4096", file.to_str().unwrap()], b"");
    assert!(ok(&["read", "--key-file", keys, "4096", "300000"], b"") == blob, "read back as written");
    ok(&["write", "--key-file", keys, "--method", "rpc-offload", "10", "-"], b"from stdin");
    assert_eq!(ok(&["read", "--key-file", keys, "8", "14"], b""), b"\0\0from stdin\0\0");
    ok(&["log", "--key-file", keys, "create", "events", "64K"], b"");
    assert_eq!(ok(&["log", "--key-file", keys, "append", "events", "-"], b"first"), b"0\n");
    assert_eq!(ok(&["log", "--key-file", keys, "append", "events", "-"], b"second"), b"1\n");
    assert_eq!(ok(&["log", "--key-file", keys, "read", "events", "1"], b""), b"second");
    assert_eq!(ok(&["log", "--key-file", keys, "tail", "events"], b""), b"first\nsecond\n");
    assert_eq!(ok(&["log", "--key-file", keys, "tail", "events", "--from", "1"], b""), b"second\n");
    let hello = String::from_utf8(ok(&["hello", "--key-file", keys], b"")).unwrap();
    for line in ["backed by:        emulated", "domain:           process_only", "rights:           read, write", "one-sided access: Off", "Rpc                      Persistence"] {
        assert!(hello.contains(line), "{line:?} in {hello}");
    }
    let refused = |args: &[&str], why: &str| {
        let out = run(args, b"x");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{args:?}: {err}");
    };
    refused(&["read", "--key-file", keys, "4190000", "100000"], "range out of bounds");
    refused(&["write", "--key-file", keys, "--method", "put-flush", "0", "-"], "OneSidedFlush gives only");
    refused(&["log", "--key-file", keys, "read", "nolog", "0"], "open log nolog");
    let text = std::fs::read_to_string(&key_file).unwrap();
    let mut wrong: serde_json::Value = serde_json::from_str(&text).unwrap();
    wrong["key"] = serde_json::json!(wrong["key"].as_u64().unwrap() ^ 1);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, wrong.to_string()).unwrap();
    refused(&["read", "--key-file", bad.to_str().unwrap(), "0", "8"], "wrong access key");
}
