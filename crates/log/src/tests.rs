//! Unit tests of both logs on a volatile medium (crash behaviour is
//! checked in [`crate::crash`]).

use std::collections::VecDeque;

use pmem::{Media, MemMedia, Padding};

use crate::*;

const STRATEGIES: [TailStrategy; 3] =
    [TailStrategy::Naive, TailStrategy::Rotating { blocks: 4, stride: 64 }, TailStrategy::SelfValidating];

fn fresh(config: LogConfig, base: u64) -> (MemMedia, AppendLog) {
    let mut media = MemMedia::new((base + AppendLog::required_size(&config)) as usize);
    let log = AppendLog::create(&mut media, base, config).unwrap();
    (media, log)
}

fn payload(lsn: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 31 + i * 7) as u8).collect()
}

/// A tiny deterministic generator (xorshift64*), so tests need no `rand`.
struct Gen(u64);

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[test]
fn round_trip_every_strategy_and_padding() {
    for tail in STRATEGIES {
        for padding in [Padding::None, Padding::Line, Padding::XpLine] {
            let config = LogConfig::new(64 * 1024, tail).with_padding(padding);
            let (mut media, mut log) = fresh(config, 512);
            for (lsn, len) in [0usize, 1, 15, 64, 255, 256, 1000, 4096].into_iter().enumerate() {
                assert_eq!(log.append(&mut media, &payload(lsn as u64, len)).unwrap(), lsn as u64);
            }
            let reopened = AppendLog::open(&mut media, 512).unwrap();
            assert_eq!(reopened.read_all(&media), log.read_all(&media), "{tail:?} {padding:?}");
            assert_eq!(reopened.next_lsn(), 8);
            assert_eq!(reopened.config(), log.config());
            let all = reopened.read_all(&media);
            assert_eq!(all[6], (6, payload(6, 1000)));
            let mut one = Vec::new();
            assert!(reopened.read_into(&media, 3, &mut one));
            assert_eq!(one, payload(3, 64));
        }
    }
}

#[test]
fn self_validating_append_drains_once_naive_twice() {
    let expected = [(TailStrategy::Naive, 2), (TailStrategy::ROTATING_PAPER, 2), (TailStrategy::SelfValidating, 1)];
    for (tail, drains) in expected {
        let (mut media, mut log) = fresh(LogConfig::new(8192, tail), 0);
        let before = media.drains;
        log.append(&mut media, &[1; 256]).unwrap();
        assert_eq!(media.drains - before, drains, "{tail:?}");
    }
}

#[test]
fn wrap_around_and_truncation_match_a_model_across_reopens() {
    for tail in STRATEGIES {
        for padding in [Padding::None, Padding::Line] {
            model_run(LogConfig::new(2048, tail).with_padding(padding), 0x9e37_79b9 ^ tail.code() as u64);
        }
    }
}

fn model_run(config: LogConfig, seed: u64) {
    let mut gen = Gen(seed | 1);
    let (mut media, mut log) = fresh(config, 256);
    let mut model: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut laps_seen = 0;
    for step in 0..3000 {
        let len = gen.below(300) as usize;
        let data = payload(step, len);
        match log.append(&mut media, &data) {
            Ok(lsn) => model.push_back((lsn, data)),
            Err(AppendError::Full { .. }) => {
                let keep = log.head() + 1 + gen.below(log.len().max(1));
                log.truncate(&mut media, keep.min(log.next_lsn())).unwrap();
                while model.front().is_some_and(|(lsn, _)| *lsn < log.head()) {
                    model.pop_front();
                }
            }
            Err(e) => panic!("step {step}: {e}"),
        }
        laps_seen = log.positions().1 / config.capacity;
        if gen.below(10) == 0 {
            log = AppendLog::open(&mut media, 256).unwrap();
        }
        assert_eq!(log.len(), model.len() as u64);
    }
    assert!(laps_seen >= 20, "{:?}: only {laps_seen} laps", config.tail);
    assert_eq!(log.read_all(&media), Vec::from(model));
}

#[test]
fn truncation_is_durable_and_bounded() {
    for tail in STRATEGIES {
        let (mut media, mut log) = fresh(LogConfig::new(4096, tail), 0);
        for i in 0..10 {
            log.append(&mut media, &payload(i, 40)).unwrap();
        }
        assert_eq!(log.truncate(&mut media, 11), Err(TruncateError::BeyondTail { keep_from: 11, next: 10 }));
        log.truncate(&mut media, 4).unwrap();
        log.truncate(&mut media, 2).unwrap();
        assert_eq!(log.head(), 4);
        let reopened = AppendLog::open(&mut media, 0).unwrap();
        assert_eq!(reopened.head(), 4);
        assert_eq!(reopened.len(), 6);
        assert_eq!(reopened.read_all(&media)[0], (4, payload(4, 40)));
        log.truncate(&mut media, 10).unwrap();
        let mut reopened = AppendLog::open(&mut media, 0).unwrap();
        assert!(reopened.is_empty());
        assert_eq!(reopened.free_bytes(), 4096);
        assert_eq!(reopened.append(&mut media, b"after").unwrap(), 10);
    }
}

#[test]
fn full_log_refuses_and_writes_nothing() {
    for tail in STRATEGIES {
        // Packed entries: 100 B payloads take 120 B each, 8 of them 960 B.
        let (mut media, mut log) = fresh(LogConfig::new(1024, tail).with_padding(Padding::None), 0);
        while log.append(&mut media, &[7; 100]).is_ok() {}
        let before = media.bytes().to_vec();
        let err = log.append(&mut media, &[7; 100]).unwrap_err();
        assert!(matches!(err, AppendError::Full { needed: 184, free: 64 }), "{err:?}");
        assert_eq!(media.bytes(), &before[..]);
        assert_eq!(log.len(), 8);
        log.truncate(&mut media, 1).unwrap();
        log.append(&mut media, &[7; 100]).unwrap();
    }
}

#[test]
fn oversize_payload_refuses_and_writes_nothing() {
    for tail in STRATEGIES {
        let (mut media, mut log) = fresh(LogConfig::new(1024, tail), 0);
        let before = media.bytes().to_vec();
        let err = log.append(&mut media, &[1; 1024 - 15]).unwrap_err();
        assert_eq!(err, AppendError::TooLarge { len: 1009, max: 1008 });
        assert_eq!(media.bytes(), &before[..]);
        assert_eq!(log.append(&mut media, &[1; 1008]).unwrap(), 0);
        assert_eq!(log.free_bytes(), 0);
    }
}

#[test]
fn bad_headers_give_clear_errors() {
    let (mut media, _log) = fresh(LogConfig::new(1024, TailStrategy::Naive), 0);
    let good = media.bytes().to_vec();

    media.write(0, b"NOTALOG!");
    assert!(
        matches!(AppendLog::open(&mut media, 0), Err(OpenError::BadMagic { found, .. }) if found == u64::from_le_bytes(*b"NOTALOG!"))
    );

    let mut media = MemMedia::from_bytes(good.clone());
    media.write(16, &2048u64.to_le_bytes());
    assert!(matches!(AppendLog::open(&mut media, 0), Err(OpenError::HeaderChecksum { .. })));

    let mut media = MemMedia::from_bytes(good.clone());
    media.write(64, &[0xff; 24]);
    media.write(128, &[0xff; 24]);
    assert_eq!(AppendLog::open(&mut media, 0).unwrap_err(), OpenError::BadHead);

    let mut media = MemMedia::from_bytes(good.clone());
    assert!(matches!(AppendLog::open(&mut media, 128), Err(OpenError::Misaligned { base: 128 })));
    assert!(matches!(ExtentLog::open(&mut media, 0), Err(OpenError::BadMagic { .. })));
    let mut empty = MemMedia::new(4096);
    assert!(matches!(AppendLog::open(&mut empty, 0), Err(OpenError::BadMagic { found: 0, .. })));
}

#[test]
fn corrupt_naive_tail_is_reported() {
    let (mut media, mut log) = fresh(LogConfig::new(1024, TailStrategy::Naive), 0);
    log.append(&mut media, &[3; 40]).unwrap();
    media.persist_u64(256, 24);
    let err = AppendLog::open(&mut media, 0).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
}

#[test]
fn create_validates_its_arguments() {
    let config = LogConfig::new(1000, TailStrategy::Naive).with_padding(Padding::Line);
    let mut media = MemMedia::new(1 << 16);
    assert!(matches!(AppendLog::create(&mut media, 0, config), Err(CreateError::BadCapacity { .. })));
    let config = LogConfig::new(1024, TailStrategy::Rotating { blocks: 0, stride: 256 });
    assert!(matches!(AppendLog::create(&mut media, 0, config), Err(CreateError::BadRotation { .. })));
    let config = LogConfig::new(1 << 16, TailStrategy::SelfValidating);
    assert!(matches!(AppendLog::create(&mut media, 0, config), Err(CreateError::MediaTooSmall { .. })));
    assert!(matches!(ExtentLog::create(&mut media, 8, 4), Err(CreateError::Misaligned { .. })));
    assert_eq!(media.bytes(), &vec![0; 1 << 16][..]);
}

/// The two specs of issue 17 item 1: capacities near 2^64 whose required
/// size overflows. They must be refused before anything is computed or written.
fn overflowing_configs() -> [LogConfig; 2] {
    [
        LogConfig::new(0xffff_ffff_ffff_ff00, TailStrategy::SelfValidating).with_padding(Padding::XpLine),
        LogConfig::new(0xffff_ffff_ffff_ffc0, TailStrategy::Rotating { blocks: 4, stride: 64 }).with_padding(Padding::Line),
    ]
}

#[test]
fn capacities_near_2_64_are_refused_without_panicking() {
    for config in overflowing_configs() {
        let mut media = MemMedia::new(1 << 16);
        let err = AppendLog::create(&mut media, 0, config).unwrap_err();
        assert!(matches!(err, CreateError::BadCapacity { .. }), "{err:?}");
        assert!(matches!(config.validate(), Err(CreateError::BadCapacity { .. })), "{config:?}");
        assert_eq!(media.bytes(), &vec![0; 1 << 16][..], "a refused create wrote");
    }
    let largest = LogConfig::new(MAX_CAPACITY_BYTES, TailStrategy::SelfValidating);
    assert_eq!(largest.validate(), Ok(()));
    assert_eq!(AppendLog::required_size(&largest), 256 + MAX_CAPACITY_BYTES);
    let over = LogConfig::new(MAX_CAPACITY_BYTES + 64, TailStrategy::SelfValidating);
    assert!(matches!(over.validate(), Err(CreateError::BadCapacity { .. })));
}

#[test]
fn rotating_tails_spanning_near_2_64_are_refused_without_panicking() {
    // A tail of (2^32 - 2) * (2^32 - 8) + 8 B and 64 GiB of entries: the
    // log's size overflowed.
    let wide = TailStrategy::Rotating { blocks: u32::MAX, stride: u32::MAX - 7 };
    let mut media = MemMedia::new(1 << 16);
    let err = AppendLog::create(&mut media, 0, LogConfig::new(1 << 36, wide)).unwrap_err();
    assert!(matches!(err, CreateError::BadRotation { .. }), "{err:?}");
    assert_eq!(media.bytes(), &vec![0; 1 << 16][..]);
    let widest = (MAX_TAIL_SPAN_BYTES - 8) / 4096 + 1;
    let at_bound = TailStrategy::Rotating { blocks: widest as u32, stride: 4096 };
    assert_eq!(LogConfig::new(4096, at_bound).validate(), Ok(()));
    let past = TailStrategy::Rotating { blocks: widest as u32 + 1, stride: 4096 };
    assert!(matches!(LogConfig::new(4096, past).validate(), Err(CreateError::BadRotation { .. })));
}

/// Overwrites both head slots of the append log at 0 with `head`, sealed
/// with the log's own seed (a checksummed but impossible head).
fn plant_head(media: &mut MemMedia, head: crate::format::Head) {
    let nonce = media.read_u64(40);
    let slot = crate::format::encode_head(head, crate::format::crc_seed(nonce));
    media.write(64, &slot);
    media.write(128, &slot);
}

#[test]
fn impossible_heads_are_refused_at_open() {
    use crate::format::Head;
    let config = LogConfig::new(4096, TailStrategy::SelfValidating);
    for head in [
        Head { lsn: 0, pos: !255 },
        Head { lsn: u64::MAX, pos: 0 },
        Head { lsn: 0, pos: 8 },
    ] {
        let (mut media, _) = fresh(config, 0);
        plant_head(&mut media, head);
        let err = AppendLog::open(&mut media, 0).unwrap_err();
        assert!(matches!(err, OpenError::Corrupt { .. }), "{head:?}: {err:?}");
    }
    let (mut media, _) = fresh(LogConfig::new(4096, TailStrategy::Naive), 0);
    plant_head(&mut media, Head { lsn: 0, pos: !255 });
    assert!(matches!(AppendLog::open(&mut media, 0), Err(OpenError::Corrupt { .. })));
}

#[test]
fn a_head_at_the_lsn_limit_exhausts_instead_of_panicking() {
    let (mut media, _) = fresh(LogConfig::new(4096, TailStrategy::SelfValidating), 0);
    plant_head(&mut media, crate::format::Head { lsn: (1 << 63) - 2, pos: 0 });
    let mut log = AppendLog::open(&mut media, 0).unwrap();
    assert_eq!(log.append(&mut media, b"last").unwrap(), (1 << 63) - 2);
    let before = media.bytes().to_vec();
    let err = log.append(&mut media, b"one too many").unwrap_err();
    assert!(matches!(err, AppendError::Exhausted { next_lsn, .. } if next_lsn == (1 << 63) - 1), "{err:?}");
    assert_eq!(media.bytes(), &before[..]);
    let log = AppendLog::open(&mut media, 0).unwrap();
    assert_eq!(log.read_all(&media), vec![((1 << 63) - 2, b"last".to_vec())]);
}

#[test]
fn self_validating_rejects_entries_of_an_earlier_lap_and_another_log() {
    let config = LogConfig::new(512, TailStrategy::SelfValidating);
    let (mut media, mut log) = fresh(config, 0);
    for i in 0..8 {
        log.append(&mut media, &payload(i, 48)).unwrap();
    }
    log.truncate(&mut media, 8).unwrap();
    log.append(&mut media, &payload(8, 48)).unwrap();
    // Entries 0..8 of the first lap are still on the media past entry 8.
    let reopened = AppendLog::open(&mut media, 0).unwrap();
    assert_eq!(reopened.read_all(&media), vec![(8, payload(8, 48))]);
    // A new log at the same place does not see the old one's entries.
    let mut again = AppendLog::create(&mut media, 0, config).unwrap();
    assert!(AppendLog::open(&mut media, 0).unwrap().is_empty());
    assert_eq!(again.append(&mut media, b"x").unwrap(), 0);
}

#[test]
fn region_backed_log_survives_remap() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("log");
    let config = LogConfig::new(1 << 16, TailStrategy::SelfValidating).with_padding(Padding::XpLine);
    let size = AppendLog::required_size(&config) + ExtentLog::required_size(128);
    let extent_base = AppendLog::required_size(&config);
    {
        let mut region = pmem::Region::create(&path, size).unwrap();
        let mut log = AppendLog::create(&mut region, 0, config).unwrap();
        let mut extents = ExtentLog::create(&mut region, extent_base, 128).unwrap();
        for i in 0..50 {
            log.append(&mut region, &payload(i, 700)).unwrap();
            extents.append(&mut region, Extent { buf_idx: i as u32, offset: 0, len: 700 }).unwrap();
        }
    }
    let mut region = pmem::Region::open(&path, pmem::RegionOptions::default()).unwrap();
    let log = AppendLog::open(&mut region, 0).unwrap();
    assert_eq!(log.len(), 50);
    assert_eq!(log.read_all(&region)[49], (49, payload(49, 700)));
    let extents = ExtentLog::open(&mut region, extent_base).unwrap();
    assert_eq!(extents.read_all(&region)[49].1.buf_idx, 49);
}

fn extent(i: u64) -> Extent {
    Extent { buf_idx: i as u32 * 3, offset: (i % 2048) as u16, len: 1280 }
}

#[test]
fn extent_log_round_trip_groups_wrap_and_truncate() {
    let mut media = MemMedia::new(ExtentLog::required_size(16) as usize);
    let mut log = ExtentLog::create(&mut media, 0, 16).unwrap();
    let mut model = VecDeque::new();
    let mut next = 0;
    for round in 0..40u64 {
        let group: Vec<Extent> = (0..1 + round % 5).map(|k| extent(next + k)).collect();
        if log.free() < group.len() as u64 {
            let err = log.append_group(&mut media, &group).unwrap_err();
            assert!(matches!(err, AppendError::Full { .. }));
            let keep = log.head() + log.len() / 2 + 1;
            log.truncate(&mut media, keep).unwrap();
            model.retain(|(n, _)| *n >= keep);
        }
        let first = if group.len() == 1 {
            log.append(&mut media, group[0]).unwrap()
        } else {
            log.append_group(&mut media, &group).unwrap()
        };
        assert_eq!(first, next);
        model.extend(group.iter().enumerate().map(|(k, e)| (first + k as u64, *e)));
        next += group.len() as u64;
        log = ExtentLog::open(&mut media, 0).unwrap();
        assert_eq!(log.read_all(&media), Vec::from(model.clone()), "round {round}");
    }
    assert!(next > 5 * 16, "wrapped {next} times");
}

#[test]
fn extent_log_rejects_bad_input_and_writes_nothing() {
    let mut media = MemMedia::new(ExtentLog::required_size(4) as usize);
    let mut log = ExtentLog::create(&mut media, 0, 4).unwrap();
    let before = media.bytes().to_vec();
    let wide = Extent { buf_idx: 1, offset: MAX_OFFSET + 1, len: 1 };
    assert!(matches!(log.append(&mut media, wide), Err(AppendError::ExtentOutOfRange { .. })));
    assert!(matches!(log.append_group(&mut media, &[]), Err(AppendError::BadGroup { len: 0, .. })));
    assert!(matches!(log.append_group(&mut media, &[extent(1); 5]), Err(AppendError::Full { needed: 5, free: 4 })));
    assert_eq!(media.bytes(), &before[..]);
}

#[test]
fn extent_log_refuses_an_impossible_head_word() {
    let mut media = MemMedia::new(ExtentLog::required_size(16) as usize);
    ExtentLog::create(&mut media, 0, 16).unwrap();
    media.write_u64(64, u64::MAX - 3);
    assert!(matches!(ExtentLog::open(&mut media, 0), Err(OpenError::Corrupt { .. })));
    assert!(matches!(ExtentLog::create(&mut media, 0, u64::MAX), Err(CreateError::BadCapacity { .. })));
    assert!(matches!(ExtentLog::create(&mut media, 0, MAX_CAPACITY_EXTENTS + 1), Err(CreateError::BadCapacity { .. })));
}

#[test]
fn extent_log_scrubs_the_rest_of_a_torn_group() {
    let mut media = MemMedia::new(ExtentLog::required_size(32) as usize);
    let mut log = ExtentLog::create(&mut media, 0, 32).unwrap();
    log.append(&mut media, extent(0)).unwrap();
    log.append_group(&mut media, &[extent(1), extent(2), extent(3)]).unwrap();
    // Simulate a crash that persisted words 2 and 3 of the group but not word 1.
    media.write_u64(256 + 8, 0);
    let mut log = ExtentLog::open(&mut media, 0).unwrap();
    assert_eq!(log.len(), 1);
    // Two new appends cover slot 1 and 2; without the scrub slot 3 (the old
    // group's last word) would complete a "group" and be recovered.
    log.append(&mut media, extent(10)).unwrap();
    log.append(&mut media, extent(11)).unwrap();
    let log = ExtentLog::open(&mut media, 0).unwrap();
    assert_eq!(log.read_all(&media), vec![(0, extent(0)), (1, extent(10)), (2, extent(11))]);
}
