use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn header(opcode: Opcode) -> RequestHeader {
    RequestHeader {
        opcode,
        flags: FLAG_PAYLOAD_CRC,
        request_id: 0x1122_3344_5566_7788,
        region_id: 7,
        key: 0xdead_beef_cafe_f00d,
        offset: 4096,
        length: 0,
        value: 99,
    }
}

/// Re-seals a request header after a test edited it, so the edit reaches
/// the check behind the CRC.
fn reseal(msg: &mut [u8]) {
    let crc = crc32c::crc32c(&msg[..60]);
    msg[60..64].copy_from_slice(&crc.to_le_bytes());
}

fn encoded(h: &RequestHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(h, payload, &mut out);
    out
}

#[test]
fn every_opcode_round_trips() {
    let mut spec = Vec::new();
    LogSpec { capacity: 4096, tail: 2, blocks: 0, stride: 0, align: 64, name: b"orders" }.encode(&mut spec);
    let cases: Vec<(Opcode, Vec<u8>, u64)> = vec![
        (Opcode::Hello, vec![], 0),
        (Opcode::PersistWrite, vec![5; 300], 300),
        (Opcode::Flush, vec![], 4096),
        (Opcode::Read, vec![], 512),
        (Opcode::AtomicWrite8, vec![], 0),
        (Opcode::LogCreate, spec, 0),
        (Opcode::LogOpen, b"orders".to_vec(), 0),
        (Opcode::LogAppend, vec![1, 2, 3], 0),
        (Opcode::LogRead, vec![], 17),
        (Opcode::LogTruncate, vec![], 17),
        (Opcode::Echo, vec![9; 64], 0),
        (Opcode::Discard, vec![9; 64], 0),
    ];
    for (opcode, payload, length) in cases {
        let mut h = header(opcode);
        h.length = length;
        if opcode == Opcode::PersistWrite {
            h.flags |= FLAG_OFFLOAD;
        }
        let msg = encoded(&h, &payload);
        let req = decode_request(&msg, DEFAULT_MAX_PAYLOAD_BYTES).unwrap_or_else(|e| panic!("{opcode:?}: {e}"));
        assert_eq!(req.header, h);
        assert_eq!(req.payload, &payload[..]);
        assert_eq!(peek_request_id(&msg), h.request_id);
    }
}

#[test]
fn responses_round_trip() {
    let h = ResponseHeader { opcode: 4, status: Status::Ok, request_id: 42, value: 3, detail: 0 };
    let mut out = Vec::new();
    encode_response(&h, b"abc", &mut out);
    let r = decode_response(&out, DEFAULT_MAX_PAYLOAD_BYTES).unwrap();
    assert_eq!(r.header, h);
    assert_eq!(r.payload, b"abc");
    let fixed = encode_response_header(&ResponseHeader { status: Status::OutOfBounds, ..h }, &[]);
    assert_eq!(decode_response(&fixed, 0).unwrap().header.status, Status::OutOfBounds);
}

#[test]
fn hello_and_log_spec_round_trip() {
    let hello = Hello {
        data_bytes: 1 << 30,
        remote_addr: 0x7f00_0000_0000,
        kind: 3,
        domain: 3,
        rights: RIGHT_READ | RIGHT_WRITE,
        payload_crc_required: true,
        max_payload: DEFAULT_MAX_PAYLOAD_BYTES,
        guarantees: [Guarantee::Persistence, Guarantee::Persistence, Guarantee::Persistence, Guarantee::Visibility, Guarantee::Visibility],
        one_sided: OneSidedReach::Process,
        rkey: vec![1, 2, 3, 4, 5],
    };
    let mut body = Vec::new();
    hello.encode(&mut body);
    assert_eq!(Hello::decode(&body).unwrap(), hello);
    assert_eq!(body[29], 2, "byte 29 states the reach");
    let mut unknown = body.clone();
    unknown[29] = 3;
    assert!(Hello::decode(&unknown).is_err(), "unknown reach code");
    let mut off_with_key = body.clone();
    off_with_key[29] = 0;
    assert!(Hello::decode(&off_with_key).is_err(), "off, yet an rkey");
    let off = Hello { one_sided: OneSidedReach::Off, rkey: Vec::new(), remote_addr: 0, ..hello.clone() };
    let mut off_body = Vec::new();
    off.encode(&mut off_body);
    assert_eq!(Hello::decode(&off_body).unwrap(), off);
    assert_eq!(hello.guarantee(Method::OneSidedReadAfterWrite), Guarantee::Visibility);
    assert_eq!(hello.guarantee(Method::Auto), Guarantee::None);
    assert!(Hello::decode(&body[..body.len() - 1]).is_err());
    body[24] = 9;
    assert!(Hello::decode(&body).is_err());
    let top = Hello { remote_addr: u64::MAX - (1 << 30), ..hello.clone() };
    let mut body = Vec::new();
    top.encode(&mut body);
    assert_eq!(Hello::decode(&body).unwrap(), top, "a data area ending at 2^64 - 1 fits");
    let wraps = Hello { remote_addr: u64::MAX - 100, ..hello.clone() };
    let mut body = Vec::new();
    wraps.encode(&mut body);
    assert!(Hello::decode(&body).is_err(), "a data area past 2^64");
    let spec = LogSpec { capacity: 1 << 20, tail: 1, blocks: 10, stride: 256, align: 256, name: b"x" };
    let mut body = Vec::new();
    spec.encode(&mut body);
    assert_eq!(LogSpec::decode(&body).unwrap(), spec);
    body.push(0);
    assert!(LogSpec::decode(&body).is_err());
}

#[test]
fn every_bad_request_is_a_typed_error() {
    let h = { let mut h = header(Opcode::PersistWrite); h.length = 8; h };
    let good = encoded(&h, &[7; 8]);
    let max = DEFAULT_MAX_PAYLOAD_BYTES;
    assert!(matches!(decode_request(&good[..10], max), Err(DecodeError::Short { len: 10, need: 64 })));
    let mut m = good.clone();
    m[0] ^= 1;
    assert!(matches!(decode_request(&m, max), Err(DecodeError::BadMagic { .. })));
    let mut m = good.clone();
    m[33] ^= 1; // offset garbled in flight
    assert!(matches!(decode_request(&m, max), Err(DecodeError::HeaderChecksum { .. })));
    let mut m = good.clone();
    m[4] = 2;
    reseal(&mut m);
    assert!(matches!(decode_request(&m, max), Err(DecodeError::Version { found: 2 })));
    let mut m = good.clone();
    m[5] = 200;
    reseal(&mut m);
    assert!(matches!(decode_request(&m, max), Err(DecodeError::Opcode(200))));
    let mut m = good.clone();
    m[6] = 0x80;
    reseal(&mut m);
    assert!(matches!(decode_request(&m, max), Err(DecodeError::Flags { .. })));
    let mut m = good.clone();
    m.push(0); // one byte more than declared
    assert!(matches!(decode_request(&m, max), Err(DecodeError::Length { declared: 8, actual: 9 })));
    let mut m = good.clone();
    m[70] ^= 0xff; // payload garbled
    assert!(matches!(decode_request(&m, max), Err(DecodeError::PayloadChecksum { .. })));
    assert!(matches!(decode_request(&good, 4), Err(DecodeError::TooLarge { len: 8, max: 4 })));
    let mut short = h;
    short.length = 9;
    assert!(matches!(decode_request(&encoded(&short, &[7; 8]), max), Err(DecodeError::Malformed { .. })));
    let mut flush = header(Opcode::Flush);
    flush.flags |= FLAG_OFFLOAD;
    assert!(matches!(decode_request(&encoded(&flush, &[]), max), Err(DecodeError::Flags { .. })));
    flush.flags = 0;
    assert!(matches!(decode_request(&encoded(&flush, &[1]), max), Err(DecodeError::Malformed { .. })));
    let mut read = header(Opcode::Read);
    read.length = max as u64 + 1;
    assert!(matches!(decode_request(&encoded(&read, &[]), max), Err(DecodeError::TooLarge { .. })));
    let open = header(Opcode::LogOpen);
    assert!(matches!(decode_request(&encoded(&open, &[]), max), Err(DecodeError::Malformed { .. })));
    assert!(matches!(decode_request(&encoded(&open, &[b'a'; 65]), max), Err(DecodeError::Malformed { .. })));
    let create = header(Opcode::LogCreate);
    assert!(matches!(decode_request(&encoded(&create, &[0; 40]), max), Err(DecodeError::Malformed { .. })));
    for e in [DecodeError::Short { len: 0, need: 64 }, DecodeError::HeaderChecksum { stored: 0, computed: 1 }] {
        assert_ne!(e.status(), Status::Ok);
    }
}

#[test]
fn bad_responses_are_typed_errors() {
    let h = ResponseHeader { opcode: 4, status: Status::Ok, request_id: 1, value: 0, detail: 0 };
    let mut good = Vec::new();
    encode_response(&h, b"data", &mut good);
    let mut m = good.clone();
    m[6] = 0xee;
    let crc = crc32c::crc32c(&m[..44]);
    m[44..48].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(decode_response(&m, 1024), Err(DecodeError::UnknownStatus(_))));
    let mut m = good.clone();
    m[50] ^= 1;
    assert!(matches!(decode_response(&m, 1024), Err(DecodeError::PayloadChecksum { .. })));
    assert!(matches!(decode_response(&good[..47], 1024), Err(DecodeError::Short { .. })));
    assert!(matches!(decode_response(&good, 2), Err(DecodeError::TooLarge { .. })));
}

/// Random bytes, and valid messages with random damage, never panic; the
/// seed is printed so a failure replays.
#[test]
fn random_and_mutated_bytes_never_panic() {
    let seed: u64 = std::env::var("PMWIRE_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    eprintln!("fuzz seed {seed} (replay with PMWIRE_FUZZ_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut accepted = 0;
    let valid = encoded(&{ let mut h = header(Opcode::PersistWrite); h.length = 100; h }, &[3; 100]);
    let mut buf = Vec::new();
    for round in 0..50_000 {
        buf.clear();
        if round % 2 == 0 {
            let len = rng.gen_range(0..200);
            buf.extend((0..len).map(|_| rng.gen::<u8>()));
            if len >= 4 && rng.gen_bool(0.5) {
                buf[..4].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
            }
        } else {
            buf.extend_from_slice(&valid);
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..buf.len());
                buf[at] = rng.gen();
            }
            if rng.gen_bool(0.3) {
                buf.truncate(rng.gen_range(0..buf.len()));
            }
            if rng.gen_bool(0.3) && buf.len() >= 64 {
                reseal(&mut buf);
            }
        }
        accepted += decode_request(&buf, 128).is_ok() as u32;
        let _ = decode_response(&buf, 128);
        let _ = Hello::decode(&buf);
        let _ = LogSpec::decode(&buf);
    }
    // Random damage is caught (a resealed header may legitimately decode).
    assert!(accepted < 5_000, "{accepted} damaged messages accepted");
}

#[test]
fn header_and_payload_may_arrive_apart() {
    let mut h = header(Opcode::PersistWrite);
    h.length = 5;
    let msg = encoded(&h, b"hello");
    let (head, payload) = msg.split_at(REQUEST_HEADER_BYTES);
    let req = decode_request_parts(head, payload, 1024).unwrap();
    assert_eq!((req.header, req.payload), (h, &b"hello"[..]));
    assert!(matches!(decode_request_parts(&msg[..63], payload, 1024), Err(DecodeError::Short { .. })));
    assert!(matches!(decode_request_parts(&msg, payload, 1024), Err(DecodeError::Short { .. })));
    assert!(matches!(decode_request_parts(head, b"hell", 1024), Err(DecodeError::Length { .. })));
}
