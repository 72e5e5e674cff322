//! Members applying the same entries: equal replies, equal state (snapshots
//! byte for byte), snapshot and restore, refused entries, reads that never
//! write, and replies equal to the single-node executor's.

use crate::gen::{Gen, Step};
use pmwire_kv_cluster::snapshot;
use pmwire_kv_cluster::{prf, Applied, Proposer, RedisMachine, Watched};
use pmwire_keyspace::chunked::ChunkConfig;
use pmwire_keyspace::exec::{Flow, Server, ServerConfig};
use pmwire_keyspace::store::{Clock, Keyspace, MemKeyspace};
use pmwire_resp::reply::Protocol;
use pmwire_resp::request::{Limits, Parsed};
use pmwire_smr::state::StateMachine;

fn config() -> ServerConfig {
    ServerConfig { collections: ChunkConfig::tiny(), ..ServerConfig::default() }
}

fn machine() -> RedisMachine<MemKeyspace> {
    RedisMachine::in_memory(config())
}

/// What a stream exercised, summed over seeds (so a test can show it ran
/// what it claims to).
#[derive(Debug, Default)]
struct Seen {
    refused: u64,
    aborted: u64,
    blocked: u64,
    swept: u64,
    ready: u64,
    chunked: u64,
    restored: u64,
}

const NULL_ARRAYS: [&[u8]; 2] = [b"*-1\r\n", b"_\r\n"];

/// Runs `steps` steps of seed `seed` through `n` members, and through one
/// more restored from member 0's snapshot at step `steps / 3`; every reply
/// and every 50 steps' snapshots compared.
fn agree(seed: u64, n: usize, steps: usize, seen: &mut Seen) {
    let mut gen = Gen::new(seed);
    let mut members: Vec<RedisMachine<MemKeyspace>> = (0..n).map(|_| machine()).collect();
    let mut restored: Option<RedisMachine<MemKeyspace>> = None;
    let mut watched: Vec<Watched> = Vec::new();
    let mut index = 0u64;
    for step in 0..steps {
        match gen.next(&mut watched) {
            Step::Watch(key) => {
                let w = members[0].watch(&key, gen.now_ms);
                for m in &mut members[1..] {
                    assert_eq!(m.watch(&key, gen.now_ms), w, "seed {seed} step {step}: WATCH alike");
                }
                watched.push(w);
            }
            Step::Entry(entry) => {
                index += 1;
                let first = members[0].apply(index, &entry);
                for (i, m) in members.iter_mut().enumerate().skip(1) {
                    assert_eq!(m.apply(index, &entry), first, "seed {seed} step {step}: member {i}'s reply");
                }
                if let Some(r) = restored.as_mut() {
                    assert_eq!(r.apply(index, &entry), first, "seed {seed} step {step}: the restored member's reply");
                }
                count(&first, seen);
                seen.chunked += u64::from(members[0].keyspace().internal_len() > 1);
            }
        }
        if step == steps / 3 {
            let mut r = machine();
            r.restore(members[0].applied(), &members[0].snapshot()).expect("a snapshot restores");
            assert_eq!(r.snapshot(), members[0].snapshot(), "seed {seed}: restored state");
            restored = Some(r);
            seen.restored += 1;
        }
        if step % 50 == 49 || step + 1 == steps {
            let want = members[0].snapshot();
            for (i, m) in members.iter().enumerate().skip(1) {
                assert!(m.snapshot() == want, "seed {seed} step {step}: member {i}'s snapshot differs");
            }
            assert!(stepped(&members[0], 64 + step % 700) == want, "seed {seed} step {step}: the snapshot taken in steps differs");
            if let Some(r) = &restored {
                assert!(r.snapshot() == want, "seed {seed} step {step}: the restored member's snapshot differs");
            }
        }
    }
}

/// A snapshot taken in steps of about `budget` bytes, each step's bytes
/// taken away once the machine has said its length (as a replica writing
/// them into its store does): the same bytes as the whole one.
fn stepped(m: &RedisMachine<MemKeyspace>, budget: usize) -> Vec<u8> {
    let (mut cursor, mut out, mut taken, mut len) = (None, Vec::new(), Vec::new(), None);
    loop {
        let whole = m.snapshot_step(&mut cursor, &mut out, budget);
        len = len.or(m.snapshot_len(&cursor));
        if len.is_some() {
            taken.append(&mut out);
        }
        if whole {
            break;
        }
    }
    assert_eq!(Some(taken.len() as u64), len, "the length the machine said");
    taken
}

fn count(a: &Applied, seen: &mut Seen) {
    seen.refused += u64::from(a.refused.is_some());
    seen.aborted += u64::from(NULL_ARRAYS.contains(&&a.reply[..]));
    seen.blocked += u64::from(a.blocked);
    seen.swept += a.swept.map_or(0, |s| s.expired as u64);
    seen.ready += u64::from(!a.ready.is_empty());
}

#[test]
fn two_and_three_members_agree_on_random_streams() {
    let mut seen = Seen::default();
    for seed in 0..64 {
        agree(seed, 2 + (seed as usize % 2), 600, &mut seen);
    }
    // The streams did what they are meant to test (summed over seeds).
    assert!(seen.refused > 0, "{seen:?}");
    assert!(seen.aborted > 0, "{seen:?}");
    assert!(seen.blocked > 0, "{seen:?}");
    assert!(seen.swept > 0, "{seen:?}");
    assert!(seen.ready > 0, "{seen:?}");
    assert!(seen.chunked > 0, "{seen:?}");
    assert_eq!(seen.restored, 64);
}

/// Parses one command of `args`.
fn with_request<R>(args: &[&[u8]], f: impl FnOnce(&pmwire_resp::request::Request<'_>) -> R) -> R {
    let mut bytes = Vec::new();
    pmwire_resp::client::encode_request(args, &mut bytes);
    let mut parsed = Parsed::new(Limits::default());
    let segments: [&[u8]; 1] = [&bytes];
    assert_eq!(parsed.parse(&segments).commands, 1);
    f(&parsed.request(&segments, 0))
}

/// A decoded snapshot's contents, owned.
type Owned = (snapshot::State, Vec<(Vec<u8>, pmwire_keyspace::store::Kind, Option<u64>, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>, Vec<(Vec<u8>, u64)>);

/// The fields of a snapshot a refused entry must leave alone (all but the
/// applied index).
fn state_of(m: &RedisMachine<MemKeyspace>) -> Owned {
    let bytes = m.snapshot();
    let mut d = snapshot::decode(&bytes).unwrap();
    d.state.applied = 0;
    let keys = d.keys.iter().map(|k| (k.key.to_vec(), k.kind, k.deadline_ms, k.value.to_vec())).collect();
    let internal = d.internal.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    (d.state, keys, internal, d.tracked)
}

#[test]
fn a_corrupted_entry_is_refused_alike_and_changes_nothing() {
    let mut p = Proposer::with_key(3);
    let (mut a, mut b) = (machine(), machine());
    let setup = [
        p.command(1_000, Protocol::Resp2, &["SADD", "s", "a", "b", "c", "d"]),
        p.command(1_000, Protocol::Resp2, &["SET", "k", "v", "PX", "100"]),
    ];
    for (i, e) in setup.iter().enumerate() {
        assert_eq!(a.apply(i as u64 + 1, e), b.apply(i as u64 + 1, e));
    }
    let good = p.command(5_000, Protocol::Resp2, &["SPOP", "s"]);
    let mut index = 2;
    for bit in (0..good.len() * 8).step_by(7) {
        let mut bad = good.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let before = state_of(&a);
        index += 1;
        let (ra, rb) = (a.apply(index, &bad), b.apply(index, &bad));
        assert_eq!(ra, rb, "bit {bit}");
        assert!(ra.refused.is_some(), "bit {bit}: refused");
        assert!(ra.reply.starts_with(b"-ERR pmwire: replicated entry refused"), "bit {bit}");
        assert_eq!(state_of(&a), before, "bit {bit}: nothing changed, the time neither");
        assert_eq!(a.snapshot(), b.snapshot());
    }
    // A well-formed entry that carries a session command is refused too.
    index += 1;
    let auth = p.command(5_000, Protocol::Resp2, &["CONFIG", "SET", "requirepass", "x"]);
    let before = state_of(&a);
    let r = a.apply(index, &auth);
    assert_eq!(r.refused, Some(pmwire_kv_cluster::EntryError::NotReplicated));
    assert_eq!(state_of(&a), before);
    // And the good one still applies, alike.
    index += 1;
    assert_eq!(a.apply(index, &good), b.apply(index, &good));
    assert_eq!(a.snapshot(), b.snapshot());
}

#[test]
fn reads_never_write_and_writes_are_refused() {
    let mut p = Proposer::with_key(4);
    let mut m = machine();
    let entries = [
        p.command(1_000, Protocol::Resp2, &["SET", "gone", "x", "PX", "10"]),
        p.command(1_000, Protocol::Resp2, &["SET", "kept", "y"]),
        p.command(1_000, Protocol::Resp2, &["RPUSH", "l", "1", "2", "3", "4"]),
    ];
    for (i, e) in entries.iter().enumerate() {
        m.apply(i as u64 + 1, e);
    }
    let before = m.snapshot();
    let mut server = Server::new(config());
    let mut session = server.open_session();
    let now = 2_000; // "gone" expired at 1_010
    let mut read = |m: &mut RedisMachine<MemKeyspace>, args: &[&[u8]]| {
        let mut out: Vec<u8> = Vec::new();
        let r = with_request(args, |req| m.read(&mut server, &mut session, now, req, &mut out));
        r.map(|flow| (flow, String::from_utf8_lossy(&out).into_owned()))
    };
    assert_eq!(read(&mut m, &[b"GET", b"gone"]).unwrap(), (Flow::Continue, "$-1\r\n".into()));
    assert_eq!(read(&mut m, &[b"GET", b"kept"]).unwrap().1, "$1\r\ny\r\n");
    assert_eq!(read(&mut m, &[b"EXISTS", b"gone", b"kept"]).unwrap().1, ":1\r\n");
    assert_eq!(read(&mut m, &[b"DBSIZE"]).unwrap().1, ":3\r\n", "an expired key is counted until deleted");
    assert_eq!(
        read(&mut m, &[b"LRANGE", b"l", b"0", b"-1"]).unwrap().1,
        "*4\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n"
    );
    let scan = read(&mut m, &[b"SCAN", b"0", b"COUNT", b"10"]).unwrap().1;
    assert!(!scan.contains("gone") && scan.contains("kept"), "{scan}");
    for write in
        [&[&b"SET"[..], b"k", b"v"][..], &[b"LPOP", b"l"], &[b"FLUSHALL"], &[b"MULTI"], &[b"BLPOP", b"l", b"0"]]
    {
        assert!(matches!(read(&mut m, write), Err(pmwire_kv_cluster::ReadError::NotARead(_))), "{write:?}");
    }
    assert_eq!(m.snapshot(), before, "nothing written, the expired key still there");
    assert_eq!(m.keyspace().now_ms(), 1_000, "the machine's time is back");
    // The wrapper itself refuses a write that got past the classification.
    let mut ro = pmwire_kv_cluster::readonly::ReadOnly::new(m.keyspace(), now, 1_000);
    assert!(ro.delete(b"kept").is_err());
    assert!(ro.internal_put(b"\x00x", b"y").is_err());
    assert_eq!(ro.attempts(), 2);
    drop(ro);
    assert_eq!(m.snapshot(), before);
}

/// Today's single-node executor: one server for the whole run, the
/// keyspace's clock moved to each entry's time, the sweep run as the
/// service runs it.
struct SingleNode {
    server: Server,
    session: pmwire_keyspace::exec::Session,
    ks: MemKeyspace,
}

impl SingleNode {
    fn new() -> SingleNode {
        let ks = MemKeyspace::new();
        let mut server = Server::new(config());
        let session = server.open_session();
        SingleNode { server, session, ks }
    }

    fn run(&mut self, entry: &[u8]) -> Vec<u8> {
        let e = pmwire_kv_cluster::entry::Entry::decode(entry).unwrap();
        // As the machine: the first entry that runs commands installs the secret.
        if e.kind != pmwire_kv_cluster::entry::Kind::Sweep {
            pmwire_keyspace::chunked::install_generation_secret(&mut self.ks, prf::derive(e.seed, prf::SECRET)).unwrap();
        }
        self.ks.set_clock(Clock::Fixed(e.time_ms));
        self.session.protocol = e.protocol;
        if e.kind == pmwire_kv_cluster::entry::Kind::Sweep {
            pmwire_keyspace::exec::active_expire(&mut self.ks, e.expire_budget as usize).unwrap();
            if e.garbage_budget > 0 {
                pmwire_keyspace::chunked::collect_garbage(&mut self.ks, e.garbage_budget as usize).unwrap();
            }
            return Vec::new();
        }
        let mut parsed = Parsed::new(Limits::default());
        let segments: [&[u8]; 1] = [e.commands];
        assert_eq!(parsed.parse(&segments).commands, 1);
        let mut out = Vec::new();
        let flow = self.server.execute(&mut self.session, &mut self.ks, &parsed.request(&segments, 0), &mut out);
        if flow == Flow::Block {
            self.server.unblock(&mut self.session);
        }
        out
    }
}

#[test]
fn replies_equal_the_single_node_executors() {
    for seed in 0..12 {
        let mut gen = Gen::new(100 + seed);
        gen.random_commands = false; // a long-lived server draws from one generator, and numbers SCAN cursors
        gen.transactions = false;
        gen.corrupt = false;
        // A single node's FLUSHALL drops the generation secret and draws a new one from the
        // OS (a chunked hash's order then differs, which Redis leaves unspecified); the
        // machine keeps it (track::Recording).
        gen.flush = false;
        let mut m = machine();
        let mut node = SingleNode::new();
        let mut none = Vec::new();
        for step in 0..400u64 {
            let Step::Entry(entry) = gen.next(&mut none) else { unreachable!("no watches drawn") };
            let want = node.run(&entry);
            let got = m.apply(step + 1, &entry);
            assert_eq!(String::from_utf8_lossy(&got.reply), String::from_utf8_lossy(&want), "seed {seed} step {step}");
        }
        let keys = |ks: &MemKeyspace| {
            let mut ks = ks.clone();
            ks.set_clock(Clock::Fixed(0));
            let mut keys = Vec::new();
            ks.scan(None, usize::MAX, &mut |key, kind| keys.push((key.to_vec(), kind)));
            (keys, ks.internal_len())
        };
        assert_eq!(keys(&node.ks), keys(m.keyspace()), "seed {seed}: the same keys and chunks");
    }
}

/// Each random command, run through the machine and through a single-node
/// server seeded as the machine seeds its executor for that entry: the
/// same choices.
#[test]
fn random_commands_draw_from_the_entry_seed() {
    let mut p = Proposer::with_key(9);
    let mut m = machine();
    let members: &[&str] = &["SADD", "s", "a", "b", "c", "d", "e", "f", "g"];
    let sadd = p.command(1_000, Protocol::Resp2, members);
    m.apply(1, &sadd);
    let first_seed = pmwire_kv_cluster::entry::Entry::decode(&sadd).unwrap().seed;
    let mut ks = MemKeyspace::new();
    pmwire_keyspace::chunked::install_generation_secret(&mut ks, prf::derive(first_seed, prf::SECRET)).unwrap();
    ks.set_clock(Clock::Fixed(1_000));
    let run = |ks: &mut MemKeyspace, seed: u64, args: &[&str]| {
        let mut server = Server::new(ServerConfig { random_seed: seed, ..config() });
        let mut session = server.open_session();
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        with_request(&args, |r| server.execute(&mut session, ks, r, &mut out));
        out
    };
    run(&mut ks, 0, members);
    let mut replies = std::collections::BTreeSet::new();
    let commands = [&["SRANDMEMBER", "s", "-5"][..], &["SPOP", "s", "2"], &["RANDOMKEY"], &["SPOP", "s"]];
    for (i, args) in commands.iter().cycle().take(12).enumerate() {
        let entry = p.command(1_000, Protocol::Resp2, args);
        let seed = pmwire_kv_cluster::entry::Entry::decode(&entry).unwrap().seed;
        let want = run(&mut ks, prf::derive(seed, prf::RNG), args);
        let got = m.apply(i as u64 + 2, &entry);
        assert_eq!(got.reply, want, "{args:?}");
        replies.insert(got.reply);
    }
    assert!(replies.len() > 3, "the draws vary with the seed");
}

/// The canary: a member that draws from its own randomness (the bug this
/// crate exists to prevent) is caught by the agreement check.
#[test]
fn the_agreement_check_catches_a_member_drawing_its_own_randomness() {
    let caught = std::panic::catch_unwind(|| {
        let mut gen = Gen::new(1);
        let (mut a, mut b) = (machine(), machine());
        b.plant_local_random();
        let mut watched = Vec::new();
        for index in 1..=600 {
            if let Step::Entry(e) = gen.next(&mut watched) {
                assert_eq!(a.apply(index, &e), b.apply(index, &e), "step {index}");
            }
        }
        assert!(a.snapshot() == b.snapshot(), "the snapshots differ");
    });
    assert!(caught.is_err(), "the planted bug went unnoticed");
}

/// The executor through the machine, one client at a time, against
/// lincheck's Redis string model: every sequential history it produces is
/// one the model accepts (so the model is Redis's, for the simulation that
/// checks concurrent histories with it), and a reply altered is caught.
#[test]
fn the_lincheck_string_model_accepts_what_the_machine_answers() {
    use lincheck::redis::{linearizable, Input, Output, RedisOp};
    use rand::{Rng, SeedableRng};
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(26);
    let mut p = Proposer::with_key(26);
    let mut m = machine();
    let mut history = Vec::new();
    for i in 0..3_000u64 {
        let key = format!("k{}", rng.gen_range(0..4));
        let value = ["1", "-1", "9223372036854775806", "x", "", "01", "7"][rng.gen_range(0..7)];
        let (args, input): (Vec<&str>, Input) = match rng.gen_range(0..5) {
            0 => (vec!["SET", &key, value], Input::Set(value.as_bytes().to_vec())),
            1 => (vec!["GET", &key], Input::Get),
            2 => (vec!["INCR", &key], Input::Incr),
            3 => (vec!["DEL", &key], Input::Del),
            _ => (vec!["APPEND", &key, value], Input::Append(value.as_bytes().to_vec())),
        };
        let reply = m.apply(i + 1, &p.command(1_000, Protocol::Resp2, &args)).reply;
        let output = Output::from_reply(&reply).unwrap_or_else(|| panic!("{args:?}: {reply:?}"));
        history.push(RedisOp { key: key.into_bytes(), call: 2 * i, ret: Some((2 * i + 1, output)), input });
    }
    assert!(linearizable(&history));
    let incr = history.iter().position(|op| matches!(op.ret, Some((_, Output::Int(_)))) && op.input == Input::Incr);
    let incr = incr.expect("an INCR that counted");
    if let Some((_, Output::Int(n))) = &mut history[incr].ret {
        *n += 1;
    }
    assert!(!linearizable(&history), "an INCR answered one too many is caught");
}

/// Function libraries through the log: FUNCTION LOAD, FCALL and FUNCTION
/// DELETE answer alike on every member, a member restored from a snapshot
/// holds the libraries (they are internal entries) and FCALLs them, and
/// FCALL_RO is served by the read path without writing; FLUSHALL keeps them.
#[test]
fn function_libraries_are_replicated_and_in_snapshots() {
    let mut p = Proposer::with_key(9);
    let (mut a, mut b) = (machine(), machine());
    let lib = "#!lua name=lib\nredis.register_function('bump', function(keys) return redis.call('incr', keys[1]) end)\n\
               redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}";
    let spin = "#!lua name=spin\nwhile true do end";
    let entries = [
        p.command(1_000, Protocol::Resp2, &["FUNCTION", "LOAD", lib]),
        p.command(1_000, Protocol::Resp2, &["FCALL", "bump", "1", "n"]),
        p.command(1_000, Protocol::Resp2, &["FUNCTION", "LOAD", spin]),
        p.command(1_000, Protocol::Resp2, &["FLUSHALL"]),
        p.command(1_000, Protocol::Resp2, &["FCALL", "bump", "1", "n"]),
    ];
    let mut replies = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let r = a.apply(i as u64 + 1, e);
        assert_eq!(b.apply(i as u64 + 1, e), r, "entry {i}");
        replies.push(String::from_utf8_lossy(&r.reply).into_owned());
    }
    assert_eq!(replies[0], "$3\r\nlib\r\n");
    assert_eq!(replies[1], ":1\r\n");
    assert_eq!(replies[2], "-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n", "stopped by the budget on every member");
    assert_eq!(replies[4], ":1\r\n", "FLUSHALL kept the library");
    let mut r = machine();
    r.restore(a.applied(), &a.snapshot()).expect("a snapshot restores");
    let next = p.command(1_000, Protocol::Resp2, &["FCALL", "bump", "1", "n"]);
    let index = a.applied() + 1;
    let (ra, rr) = (a.apply(index, &next), r.apply(index, &next));
    assert_eq!((String::from_utf8_lossy(&rr.reply).into_owned(), rr), (":2\r\n".to_string(), ra));
    let mut server = Server::new(config());
    let mut session = server.open_session();
    let before = r.snapshot();
    let mut out: Vec<u8> = Vec::new();
    with_request(&[b"FCALL_RO", b"peek", b"1", b"n"], |req| r.read(&mut server, &mut session, 1_000, req, &mut out)).unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "$1\r\n2\r\n");
    assert_eq!(r.snapshot(), before, "a read wrote nothing");
    let delete = p.command(1_000, Protocol::Resp2, &["FUNCTION", "DELETE", "lib"]);
    let index = a.applied() + 1;
    assert_eq!(a.apply(index, &delete), r.apply(index, &delete));
    assert_eq!(a.snapshot(), r.snapshot());
    let call = p.command(1_000, Protocol::Resp2, &["FCALL", "bump", "1", "n"]);
    assert_eq!(a.apply(index + 1, &call).reply, b"-ERR Function not found\r\n");
}
