use super::*;
use crate::proto::{decode_response, encode_request, RequestHeader, Response, FLAG_OFFLOAD, FLAG_PAYLOAD_CRC};
use std::time::Instant;

const SIZE: u64 = 8 << 20;
const ME: ClientId = 1;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    server: Server,
    region_id: u32,
    key: u64,
    msg: Vec<u8>,
    reply: Vec<u8>,
    next_id: u64,
}

fn fixture(config: ServerConfig) -> Fixture {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("pool");
    let region = Region::create(&path, SIZE).unwrap();
    let pool = PoolConfig { region_id: 5, dir_slots: 8, log_area_bytes: 1 << 20 };
    let mut server = Server::format(region, pool, config).unwrap();
    server.connect(ME);
    let (region_id, key) = server.credentials();
    Fixture { _dir: dir, path, server, region_id, key, msg: Vec::new(), reply: Vec::new(), next_id: 1 }
}

impl Fixture {
    fn header(&mut self, opcode: Opcode) -> RequestHeader {
        self.next_id += 1;
        let mut h = RequestHeader::new(opcode, self.next_id);
        h.region_id = self.region_id;
        h.key = self.key;
        h.flags = FLAG_PAYLOAD_CRC;
        h
    }

    fn send(&mut self, h: RequestHeader, payload: &[u8]) -> Action {
        encode_request(&h, payload, &mut self.msg);
        self.server.handle(ME, &self.msg, &mut self.reply)
    }

    /// Sends and expects an immediate reply.
    fn call(&mut self, h: RequestHeader, payload: &[u8]) -> Response<'_> {
        assert_eq!(self.send(h, payload), Action::Reply);
        let r = decode_response(&self.reply, MAX_PAYLOAD_BYTES).expect("server replies are well formed");
        assert_eq!(r.header.request_id, h.request_id);
        r
    }

    fn status(&mut self, h: RequestHeader, payload: &[u8]) -> Status {
        self.call(h, payload).header.status
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Status {
        let mut h = self.header(Opcode::PersistWrite);
        h.offset = offset;
        h.length = data.len() as u64;
        self.status(h, data)
    }

    fn read(&mut self, offset: u64, len: u64) -> Vec<u8> {
        let mut h = self.header(Opcode::Read);
        h.offset = offset;
        h.length = len;
        let r = self.call(h, &[]);
        assert_eq!(r.header.status, Status::Ok);
        r.payload.to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut all = vec![0u8; SIZE as usize];
        self.server.region().read(0, &mut all);
        all
    }

    /// Blocks on the completion eventfd until `n` replies are ready.
    fn completions(&mut self, n: usize) -> Vec<Completed> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while out.len() < n {
            assert!(Instant::now() < deadline, "no completion within 30 s");
            if self.server.poll_completions(&mut out) == 0 && !self.server.arm_completions() {
                let fd = self.server.completion_fd().expect("engine");
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 500) };
            }
        }
        out
    }
}

#[test]
fn hello_states_the_guarantees() {
    let mut f = fixture(ServerConfig::default());
    let h = f.header(Opcode::Hello);
    let r = f.call(h, &[]);
    assert_eq!(r.header.status, Status::Ok);
    let hello = Hello::decode(r.payload).unwrap();
    assert_eq!(hello.data_bytes, f.server.data_area().1);
    assert_eq!((hello.kind, hello.domain), (3, 3), "emulated, process-only");
    assert_eq!(hello.rights, RIGHT_READ | RIGHT_WRITE);
    assert_eq!(hello.guarantee(proto::Method::Rpc), Guarantee::Persistence);
    assert_eq!(hello.guarantee(proto::Method::RpcOffload), Guarantee::Persistence);
    assert_eq!(hello.guarantee(proto::Method::OneSidedFlush), Guarantee::None, "no rkey registered");
    f.server.set_one_sided(Some(OneSided { rkey: vec![7; 40], remote_addr: 0x1000, writes_bypass_cache: false, reach: crate::proto::OneSidedReach::Process }));
    let h = f.header(Opcode::Hello);
    let hello = Hello::decode(f.call(h, &[]).payload).unwrap();
    assert_eq!(hello.guarantee(proto::Method::OneSidedFlush), Guarantee::Persistence);
    assert_eq!(hello.guarantee(proto::Method::OneSidedReadAfterWrite), Guarantee::Visibility);
    assert_eq!(hello.rkey, vec![7; 40]);
    assert_eq!(hello.remote_addr, 0x1000);
}

#[test]
fn writes_reads_flushes_and_atomics() {
    let mut f = fixture(ServerConfig::default());
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    assert_eq!(f.write(100, &data), Status::Ok);
    assert_eq!(f.read(100, 5000), data);
    let mut h = f.header(Opcode::AtomicWrite8);
    h.offset = 8;
    h.value = 0xfeed;
    assert_eq!(f.status(h, &[]), Status::Ok);
    assert_eq!(f.read(8, 8), 0xfeed_u64.to_le_bytes());
    let mut h = f.header(Opcode::Flush);
    h.offset = 0;
    h.length = 4096;
    assert_eq!(f.status(h, &[]), Status::Ok);
    let h = f.header(Opcode::Echo);
    assert_eq!(f.call(h, b"ping").payload, b"ping");
    let h = f.header(Opcode::Discard);
    assert!(f.call(h, b"ping").payload.is_empty());
}

/// Every refusal replies with an error and leaves the whole region as it was.
#[test]
fn bad_requests_write_nothing() {
    let mut f = fixture(ServerConfig { max_payload: 4096, ..ServerConfig::default() });
    let data_bytes = f.server.data_area().1;
    let before = f.snapshot();
    let write = |f: &mut Fixture, offset: u64, len: usize| {
        let mut h = f.header(Opcode::PersistWrite);
        h.offset = offset;
        h.length = len as u64;
        h
    };
    let mut h = write(&mut f, 0, 8);
    h.region_id = 6;
    assert_eq!(f.status(h, &[1; 8]), Status::UnknownRegion);
    let mut h = write(&mut f, 0, 8);
    h.key ^= 1;
    assert_eq!(f.status(h, &[1; 8]), Status::BadKey);
    let h = write(&mut f, data_bytes - 4, 8);
    assert_eq!(f.status(h, &[1; 8]), Status::OutOfBounds);
    let h = write(&mut f, u64::MAX - 3, 8);
    assert_eq!(f.status(h, &[1; 8]), Status::OutOfBounds);
    let h = write(&mut f, 0, 4097);
    let r = f.call(h, &[1; 4097]);
    assert_eq!((r.header.status, r.header.detail), (Status::TooLarge, 4096));
    let mut h = f.header(Opcode::AtomicWrite8);
    h.offset = 4;
    assert_eq!(f.status(h, &[]), Status::Misaligned);
    let mut h = f.header(Opcode::Flush);
    h.length = data_bytes + 1;
    assert_eq!(f.status(h, &[]), Status::OutOfBounds);
    // Garbled in flight: header and payload checksums.
    let h = write(&mut f, 0, 8);
    encode_request(&h, &[1; 8], &mut f.msg);
    f.msg[33] ^= 4;
    assert_eq!(f.server.handle(ME, &f.msg, &mut f.reply), Action::Reply);
    assert_eq!(decode_response(&f.reply, 0).unwrap().header.status, Status::BadChecksum);
    encode_request(&h, &[1; 8], &mut f.msg);
    f.msg[70] ^= 4;
    f.server.handle(ME, &f.msg, &mut f.reply);
    assert_eq!(decode_response(&f.reply, 0).unwrap().header.status, Status::BadChecksum);
    for junk in [&b""[..], &[0xff; 10][..], &[0; 200][..]] {
        f.server.handle(ME, junk, &mut f.reply);
        assert_eq!(decode_response(&f.reply, 0).unwrap().header.status, Status::Malformed);
    }
    // Rights: read-only and write-only clients, and a stranger.
    f.server.grant(ME, RIGHT_READ);
    let h = write(&mut f, 0, 8);
    assert_eq!(f.status(h, &[1; 8]), Status::Forbidden);
    let mut h = f.header(Opcode::LogCreate);
    let mut spec = Vec::new();
    LogSpec { capacity: 4096, tail: 2, blocks: 0, stride: 0, align: 8, name: b"l" }.encode(&mut spec);
    h.length = 0;
    assert_eq!(f.status(h, &spec), Status::Forbidden);
    f.server.grant(ME, RIGHT_WRITE);
    let mut h = f.header(Opcode::Read);
    h.length = 8;
    assert_eq!(f.status(h, &[]), Status::Forbidden);
    f.server.disconnect(ME);
    let h = write(&mut f, 0, 8);
    assert_eq!(f.status(h, &[1; 8]), Status::Forbidden);
    assert!(f.snapshot() == before, "a refused request changed the region");
}

#[test]
fn payload_checksum_can_be_required() {
    let mut f = fixture(ServerConfig { require_payload_crc: true, ..ServerConfig::default() });
    let mut h = f.header(Opcode::PersistWrite);
    h.flags = 0;
    h.length = 4;
    assert_eq!(f.status(h, b"abcd"), Status::BadChecksum);
    assert_eq!(f.write(0, b"abcd"), Status::Ok);
}

fn offload_round(depth: usize) {
    let mut f = fixture(ServerConfig { copy_depth: depth, copy_inline_max_bytes: 0, ..ServerConfig::default() });
    let writes = 3 * depth + 2;
    let mut expected = Vec::new();
    let mut tickets = Vec::new();
    for i in 0..writes {
        let data = vec![i as u8 + 1; 10_000 + i * 64];
        let mut h = f.header(Opcode::PersistWrite);
        h.flags |= FLAG_OFFLOAD;
        h.offset = (i as u64) * 65536;
        h.length = data.len() as u64;
        match f.send(h, &data) {
            Action::Offloaded(ticket) => tickets.push((ticket, h.request_id)),
            Action::Reply => panic!("offload replied at once: {:?}", decode_response(&f.reply, 0)),
        }
        expected.push((h.offset, data));
    }
    let done = f.completions(writes);
    let mut seen: Vec<(Ticket, u64)> = done
        .iter()
        .map(|c| {
            let r = decode_response(&c.reply, 0).unwrap();
            assert_eq!(r.header.status, Status::Ok);
            assert_eq!(c.client, ME);
            (c.ticket, r.header.request_id)
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, tickets);
    for (offset, data) in expected {
        assert_eq!(f.read(offset, data.len() as u64), data);
    }
    assert_eq!(f.server.pending(), 0);
}

#[test]
fn offload_one_in_flight() {
    offload_round(1);
}

#[test]
fn offload_eight_in_flight() {
    offload_round(8);
}

#[test]
fn requests_after_an_offload_to_the_same_range_see_it() {
    let mut f = fixture(ServerConfig { copy_inline_max_bytes: 0, ..ServerConfig::default() });
    let mut h = f.header(Opcode::PersistWrite);
    h.flags |= FLAG_OFFLOAD;
    h.length = 100_000;
    assert!(matches!(f.send(h, &vec![1; 100_000]), Action::Offloaded(_)));
    assert_eq!(f.write(50, &[2; 10]), Status::Ok, "waits out the copy, then writes");
    assert_eq!(f.read(45, 20), [vec![1u8; 5], vec![2; 10], vec![1; 5]].concat());
    assert_eq!(f.completions(1).len(), 1);
}

#[test]
fn offload_of_a_disconnected_client_completes_silently() {
    let mut f = fixture(ServerConfig { copy_inline_max_bytes: 0, ..ServerConfig::default() });
    let mut h = f.header(Opcode::PersistWrite);
    h.flags |= FLAG_OFFLOAD;
    h.length = 70_000;
    assert!(matches!(f.send(h, &vec![9; 70_000]), Action::Offloaded(_)));
    f.server.disconnect(ME);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while f.server.pending() > 0 {
        assert!(Instant::now() < deadline);
        f.server.poll_completions(&mut out);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(out.is_empty());
    f.server.connect(ME);
    assert_eq!(f.read(0, 70_000), vec![9; 70_000]);
}

#[test]
fn no_engine_means_offload_unsupported() {
    let mut f = fixture(ServerConfig { copy_depth: 0, ..ServerConfig::default() });
    let mut h = f.header(Opcode::PersistWrite);
    h.flags |= FLAG_OFFLOAD;
    h.length = 4;
    assert_eq!(f.status(h, b"abcd"), Status::Unsupported);
    assert!(f.server.completion_fd().is_none());
}

fn create_log(f: &mut Fixture, name: &[u8], capacity: u64, tail: u32) -> Response<'static> {
    let mut spec = Vec::new();
    let (blocks, stride) = if tail == 1 { (10, 256) } else { (0, 0) };
    LogSpec { capacity, tail, blocks, stride, align: 64, name }.encode(&mut spec);
    let h = f.header(Opcode::LogCreate);
    let r = f.call(h, &spec);
    // Detach from the reply buffer for the caller's convenience.
    Response { header: r.header, payload: &[] }
}

#[test]
fn log_server_survives_restart() {
    let mut f = fixture(ServerConfig::default());
    for (name, tail) in [(&b"naive"[..], 0), (b"rotating", 1), (b"selfval", 2)] {
        let r = create_log(&mut f, name, 8192, tail);
        assert_eq!(r.header.status, Status::Ok);
        for i in 0..20u64 {
            let mut h = f.header(Opcode::LogAppend);
            h.offset = r.header.value;
            let entry = format!("{}-{i}", String::from_utf8_lossy(name));
            let r = f.call(h, entry.as_bytes());
            assert_eq!((r.header.status, r.header.value), (Status::Ok, i));
        }
    }
    assert_eq!(create_log(&mut f, b"naive", 8192, 0).header.status, Status::LogExists);
    assert_eq!(create_log(&mut f, b"bad", 100, 0).header.status, Status::BadLogConfig);
    assert_eq!(create_log(&mut f, b"big", 1 << 30, 0).header.status, Status::NoSpace);
    let mut h = f.header(Opcode::LogAppend);
    h.offset = 0;
    assert_eq!(f.status(h, &[0; 9000]), Status::EntryTooLarge);
    let mut h = f.header(Opcode::LogAppend);
    h.offset = 7;
    assert_eq!(f.status(h, b"x"), Status::UnknownLog);
    let mut h = f.header(Opcode::LogTruncate);
    h.offset = 1;
    h.length = 5;
    assert_eq!(f.status(h, &[]), Status::Ok);
    // Restart on the same pool.
    let path = f.path.clone();
    let Fixture { _dir, server, .. } = f;
    drop(server);
    let server = Server::open(Region::open(&path, Default::default()).unwrap(), ServerConfig::default()).unwrap();
    let (region_id, key) = server.credentials();
    let mut f = Fixture { _dir, path, server, region_id, key, msg: Vec::new(), reply: Vec::new(), next_id: 100 };
    f.server.connect(ME);
    let h = f.header(Opcode::LogOpen);
    let r = f.call(h, b"rotating");
    assert_eq!((r.header.status, r.header.value), (Status::Ok, 1));
    let mut h = f.header(Opcode::LogRead);
    h.offset = 1;
    h.length = 19;
    assert_eq!(f.call(h, &[]).payload, b"rotating-19");
    let mut h = f.header(Opcode::LogRead);
    h.offset = 1;
    h.length = 2;
    assert_eq!(f.status(h, &[]), Status::NoEntry, "truncated");
    let mut h = f.header(Opcode::LogAppend);
    h.offset = 2;
    assert_eq!(f.call(h, b"after restart").header.value, 20);
    let h = f.header(Opcode::LogOpen);
    assert_eq!(f.status(h, b"nope"), Status::UnknownLog);
}

/// Issue 17 item 1: one LOG_CREATE whose capacity makes the log's size
/// overflow used to panic the server. Each gets an error reply, nothing is
/// written, and the server goes on serving.
#[test]
fn log_create_with_overflowing_capacity_is_refused_and_the_server_survives() {
    let mut f = fixture(ServerConfig::default());
    let before = f.snapshot();
    let specs = [
        LogSpec { capacity: 0xffff_ffff_ffff_ff00, tail: 2, blocks: 0, stride: 0, align: 256, name: b"huge-sv" },
        LogSpec { capacity: 0xffff_ffff_ffff_ffc0, tail: 1, blocks: 4, stride: 64, align: 64, name: b"huge-rot" },
    ];
    for spec in specs {
        let mut body = Vec::new();
        spec.encode(&mut body);
        let h = f.header(Opcode::LogCreate);
        let status = f.status(h, &body);
        assert!(matches!(status, Status::BadLogConfig | Status::NoSpace), "{spec:?}: {status:?}");
        let h = f.header(Opcode::Echo);
        let r = f.call(h, b"still here");
        assert_eq!((r.header.status, r.payload), (Status::Ok, &b"still here"[..]));
    }
    assert!(f.snapshot() == before, "a refused LOG_CREATE changed the region");
    assert_eq!(create_log(&mut f, b"after", 8192, 2).header.status, Status::Ok);
}

#[test]
fn full_log_is_refused_without_writing() {
    let mut f = fixture(ServerConfig::default());
    let id = create_log(&mut f, b"small", 1024, 2).header.value;
    let mut last = Status::Ok;
    for _ in 0..20 {
        let mut h = f.header(Opcode::LogAppend);
        h.offset = id;
        last = f.status(h, &[3; 100]);
        if last != Status::Ok {
            break;
        }
    }
    assert_eq!(last, Status::LogFull);
}

#[test]
fn owned_payloads_are_copied_from_in_place_and_handed_back() {
    let mut f = fixture(ServerConfig { copy_depth: 2, copy_inline_max_bytes: 0, ..ServerConfig::default() });
    let mut submitted = Vec::new();
    for i in 0..4u64 {
        let data = vec![i as u8 + 10; 70_000];
        let mut h = f.header(Opcode::PersistWrite);
        h.flags |= FLAG_OFFLOAD;
        h.offset = i * 100_000;
        h.length = data.len() as u64;
        encode_request(&h, &data, &mut f.msg);
        let (head, payload) = f.msg.split_at(proto::REQUEST_HEADER_BYTES);
        let payload = payload.to_vec();
        submitted.push(payload.as_ptr() as usize);
        let (action, back) = f.server.handle_owned(ME, head, payload, &mut f.reply);
        assert!(matches!(action, Action::Offloaded(_)), "{action:?}");
        assert!(back.is_none(), "the engine has the buffer");
    }
    assert_eq!(f.completions(4).len() + f.server.pending(), 4);
    // The staging set is full from the start, so every lent buffer comes back.
    let mut released = Vec::new();
    while let Some(buffer) = f.server.take_released() {
        released.push(buffer.as_ptr() as usize);
    }
    released.sort_unstable();
    submitted.sort_unstable();
    assert_eq!(released, submitted, "the very buffers lent, no staging copies");
    for i in 0..4u64 {
        assert_eq!(f.read(i * 100_000, 70_000), vec![i as u8 + 10; 70_000]);
    }
    // Not offloaded: the payload comes straight back, the write is done.
    let mut h = f.header(Opcode::PersistWrite);
    h.offset = 7;
    h.length = 5000;
    encode_request(&h, &[3; 5000], &mut f.msg);
    let (head, payload) = f.msg.split_at(proto::REQUEST_HEADER_BYTES);
    let payload = payload.to_vec();
    let at = payload.as_ptr();
    let (action, back) = f.server.handle_owned(ME, head, payload, &mut f.reply);
    assert_eq!(action, Action::Reply);
    assert_eq!(back.map(|b| b.as_ptr()), Some(at));
    assert_eq!(f.read(7, 5000), vec![3; 5000]);
}

/// An RpcOffload write of `len` B at `offset`, filled with `byte`.
fn offload(f: &mut Fixture, offset: u64, len: usize, byte: u8) -> (Action, u64) {
    let mut h = f.header(Opcode::PersistWrite);
    h.flags |= FLAG_OFFLOAD;
    h.offset = offset;
    h.length = len as u64;
    (f.send(h, &vec![byte; len]), h.request_id)
}

#[test]
fn small_offloads_run_inline_while_the_engine_is_idle() {
    let mut f = fixture(ServerConfig { copy_inline_max_bytes: 4096, ..ServerConfig::default() });
    assert_eq!(f.server.inline_max_bytes(), 4096);
    let (action, id) = offload(&mut f, 0, 4096, 1);
    assert_eq!(action, Action::Reply, "at the limit, idle: inline");
    let r = decode_response(&f.reply, 0).unwrap();
    assert_eq!((r.header.status, r.header.request_id, r.header.value), (Status::Ok, id, 4096));
    assert_eq!(f.server.offloads_inlined(), 1);
    assert!(matches!(offload(&mut f, 8192, 4097, 2).0, Action::Offloaded(_)), "past the limit: handed off");
    // Not idle: a small write is queued behind the outstanding copy, in order.
    assert!(matches!(offload(&mut f, 20_000, 64, 3).0, Action::Offloaded(_)), "busy engine: handed off");
    assert_eq!(f.server.offloads_inlined(), 1);
    let done = f.completions(2);
    assert_eq!(done.len(), 2);
    assert_eq!(f.read(0, 4096), vec![1; 4096]);
    assert_eq!(f.read(8192, 4097), vec![2; 4097]);
    assert_eq!(f.read(20_000, 64), vec![3; 64]);
}

#[test]
fn an_inline_write_waits_out_an_overlapping_copy() {
    let mut f = fixture(ServerConfig { copy_inline_max_bytes: 4096, ..ServerConfig::default() });
    assert!(matches!(offload(&mut f, 0, 100_000, 1).0, Action::Offloaded(_)));
    // Overlaps the outstanding copy: the handler waits it out, then the
    // engine is idle and the small write goes inline, landing after it.
    let (action, _) = offload(&mut f, 99_990, 20, 2);
    assert_eq!(action, Action::Reply);
    assert_eq!(f.server.offloads_inlined(), 1);
    assert_eq!(f.server.pending(), 1, "the big copy's reply is ready, not yet taken");
    assert_eq!(f.completions(1).len(), 1);
    assert_eq!(f.read(99_980, 40), [vec![1u8; 10], vec![2; 20], vec![0; 10]].concat());
    // An offloaded copy after the inline write lands after it.
    assert!(matches!(offload(&mut f, 90_000, 10_005, 3).0, Action::Offloaded(_)));
    assert_eq!(f.completions(1).len(), 1);
    assert_eq!(f.read(99_980, 40), [vec![3u8; 25], vec![2; 5], vec![0; 10]].concat());
}

#[test]
fn a_zero_limit_or_no_engine_never_inlines() {
    let mut f = fixture(ServerConfig { copy_inline_max_bytes: 0, ..ServerConfig::default() });
    assert_eq!(f.server.inline_max_bytes(), 0);
    assert!(matches!(offload(&mut f, 0, 1, 1).0, Action::Offloaded(_)));
    assert_eq!(f.completions(1).len(), 1);
    assert_eq!(f.server.offloads_inlined(), 0);
    let f = fixture(ServerConfig { copy_depth: 0, ..ServerConfig::default() });
    assert_eq!(f.server.inline_max_bytes(), 0, "no engine: RpcOffload is refused, not inlined");
}
