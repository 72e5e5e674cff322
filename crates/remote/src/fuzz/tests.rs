//! The core target's bounded CI share, the harness's planted faults (it
//! must fail), and the model's order of checks on hand-made requests.

use std::time::{Duration, Instant};

use super::gen::Generator;
use super::model::{op, Geometry, LogSpecBody, Model, Serving, FLAG_OFFLOAD};
use super::*;
use crate::proto::{Status, RIGHT_READ, RIGHT_WRITE};

fn config(seed: u64, requests: u64) -> FuzzConfig {
    FuzzConfig { checkpoint_every: 10_000, ..FuzzConfig::new(seed, requests, Duration::from_secs(10)) }
}

/// CI's share: 300,000 requests into each core (copy engine 8 deep, and
/// none with payload checksums required), every reply and every
/// checkpoint checked; about two seconds in release (bounded at 20 s each).
#[test]
fn the_core_passes_the_fuzzer_with_and_without_a_copy_engine() {
    let seed = 0x5eed_0017;
    for server in [CoreServer { copy_depth: 8, require_payload_crc: false }, CoreServer { copy_depth: 0, require_payload_crc: true }] {
        let started = Instant::now();
        let config = FuzzConfig { max_time: Duration::from_secs(20), ..config(seed, 300_000) };
        let report = run_core(&config, server, &mut |_| {}).unwrap_or_else(|failure| panic!("{failure}"));
        assert!(report.requests == 300_000 || started.elapsed() >= config.max_time, "{} stopped early", report.target);
        assert!(report.checkpoints >= report.requests / 10_000, "{report:?}");
        assert!(report.restarts > 0, "no restart on the pool: {report:?}");
        assert!(report.replies_checked + 64 >= report.requests, "replies went unchecked: {report:?}");
        let ok = report.statuses[Status::Ok as usize];
        assert!(ok > report.requests / 5, "too few requests succeed to test much: {report:?}");
        for code in [op::PERSIST_WRITE, op::READ, op::ATOMIC_WRITE8, op::LOG_CREATE, op::LOG_APPEND, op::LOG_READ, op::LOG_TRUNCATE] {
            assert!(report.ok_by_opcode[code as usize] > 0, "no {} succeeded: {report:?}", model::op::name(code));
        }
        eprintln!("{}: {} requests, {:.0}/s", report.target, report.requests, report.rate());
    }
}

/// The harness must be able to fail: a reply altered on its way to the
/// check, a model that forgets ATOMIC_WRITE8, a canary byte changed behind
/// the server's back.
#[test]
fn planted_faults_fail_the_run() {
    let server = CoreServer { copy_depth: 8, require_payload_crc: false };
    for (planted, kind) in [
        (Planted::AlterReply { index: 30_000 }, FailureKind::Reply),
        (Planted::WrongModel, FailureKind::Reply),
        (Planted::CorruptCanary, FailureKind::Canary),
    ] {
        // A checkpoint after every request for the canary: it is checked before any READ could see it.
        let every = if planted == Planted::CorruptCanary { 1 } else { 10_000 };
        let config = FuzzConfig { planted, checkpoint_every: every, ..config(11, 100_000) };
        let failure = run_core(&config, server, &mut |_| {}).expect_err("a planted fault must fail the run");
        assert_eq!(failure.kind, kind, "{planted:?}: {failure}");
        assert_eq!(failure.seed, 11);
        if let Planted::AlterReply { index } = planted {
            assert!(failure.request > index, "{failure}");
        }
    }
}

fn model(copy_engine: bool) -> Model {
    let geometry = Geometry {
        region_id: 9,
        key: 0xfeed,
        region_bytes: 1 << 20,
        log_base: 4096,
        log_bytes: 64 << 10,
        data_base: 4096 + (64 << 10),
        data_bytes: (1 << 20) - 4096 - (64 << 10),
        dir_slots: 4,
    };
    Model::new(geometry, Serving { max_payload: 4096, require_payload_crc: false, copy_engine, pin: None })
}

fn request(m: &Model, gen: &mut Generator, opcode: u8, offset: u64, length: u64, payload: Vec<u8>) -> super::gen::Request {
    gen.build(opcode, m.geometry.region_id, m.geometry.key, offset, length, payload)
}

fn status(m: &Model, rights: u8, header: &[u8], payload: &[u8]) -> (Status, u64) {
    let e = m.predict(rights, header, payload);
    (e.status, e.detail)
}

#[test]
fn the_model_checks_in_the_documented_order() {
    let rw = RIGHT_READ | RIGHT_WRITE;
    let m = model(false);
    let mut gen = Generator::new(1, gen::Aim { canary_offset: 0, canary_len: 1 });
    let data = m.geometry.data_bytes;
    let write = request(&m, &mut gen, op::PERSIST_WRITE, data - 4, 8, vec![1; 8]);
    assert_eq!(status(&m, rw, &write.header, &write.payload), (Status::OutOfBounds, data));
    assert_eq!(status(&m, RIGHT_READ, &write.header, &write.payload), (Status::Forbidden, RIGHT_READ as u64), "rights before range");
    let mut garbled = write.header.clone();
    garbled[4] = 2;
    assert_eq!(status(&m, rw, &garbled, &write.payload).0, Status::BadChecksum, "header CRC before version");
    garbled[0] ^= 1;
    assert_eq!(status(&m, rw, &garbled, &write.payload).0, Status::Malformed, "magic before header CRC");
    assert_eq!(status(&m, rw, &write.header, &write.payload[..7]).0, Status::Malformed, "payload shorter than declared");
    let wrap = request(&m, &mut gen, op::READ, u64::MAX - 3, 8, Vec::new());
    assert_eq!(status(&m, rw, &wrap.header, &[]), (Status::OutOfBounds, data), "overflow-safe range");
    let too_long = request(&m, &mut gen, op::READ, 0, 4097, Vec::new());
    assert_eq!(status(&m, rw, &too_long.header, &[]), (Status::TooLarge, 4096));
    let mut offload = request(&m, &mut gen, op::PERSIST_WRITE, 0, 8, vec![1; 8]);
    offload.header[6] |= FLAG_OFFLOAD as u8;
    super::gen::seal(&mut offload.header);
    assert_eq!(status(&m, rw, &offload.header, &offload.payload).0, Status::Unsupported);
    assert!(model(true).predict(rw, &offload.header, &offload.payload).deferred);
}

#[test]
fn a_log_create_beyond_the_log_bounds_is_a_bad_config_and_one_too_large_for_the_area_no_space() {
    let rw = RIGHT_READ | RIGHT_WRITE;
    let m = model(true);
    let mut gen = Generator::new(1, gen::Aim { canary_offset: 0, canary_len: 1 });
    let spec = LogSpecBody { capacity: 0xffff_ffff_ffff_ff00, tail: 2, blocks: 0, stride: 0, align: 256, name: b"huge" };
    let huge = request(&m, &mut gen, op::LOG_CREATE, 0, 0, spec.encode());
    let e = m.predict(rw, &huge.header, &huge.payload);
    assert_eq!(e.status, Status::BadLogConfig, "above LogConfig's 2^56 B bound");
    let spec = LogSpecBody { capacity: 1 << 40, ..spec };
    let large = request(&m, &mut gen, op::LOG_CREATE, 0, 0, spec.encode());
    let e = m.predict(rw, &large.header, &large.payload);
    assert_eq!(e.status, Status::NoSpace, "a valid log larger than the log area");
    let spec = LogSpecBody { capacity: 4096, ..spec };
    let fits = request(&m, &mut gen, op::LOG_CREATE, 0, 0, spec.encode());
    let e = m.predict(rw, &fits.header, &fits.payload);
    assert_eq!((e.status, e.value), (Status::Ok, 0));
}
