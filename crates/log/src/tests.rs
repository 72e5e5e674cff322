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

/// Appends `count` entries of `len` bytes starting from the log's next LSN
/// (payloads tagged with `salt`, so a later generation of an LSN differs).
fn append_many(media: &mut MemMedia, log: &mut AppendLog, count: u64, len: usize, salt: u64) {
    for _ in 0..count {
        let lsn = log.next_lsn();
        assert_eq!(log.append(media, &payload(lsn ^ salt, len)).unwrap(), lsn);
    }
}

#[test]
fn index_reads_any_entry_directly_across_wraps_and_truncations() {
    for tail in STRATEGIES {
        let (mut media, mut log) = fresh(LogConfig::new(2048, tail).with_padding(Padding::None), 0);
        for round in 0..30u64 {
            append_many(&mut media, &mut log, 3, (round * 37 % 200) as usize, 0);
            log.truncate(&mut media, log.next_lsn().saturating_sub(4)).unwrap();
        }
        let all = log.read_all(&media);
        assert_eq!(all.len(), 4);
        let mut dst = Vec::new();
        for (lsn, bytes) in &all {
            assert!(log.read_into(&media, *lsn, &mut dst));
            assert_eq!(&dst, bytes);
            let range = log.payload_range(&media, *lsn).unwrap();
            let mut direct = vec![0; (range.end - range.start) as usize];
            media.read(range.start, &mut direct);
            assert_eq!(&direct, bytes);
        }
        assert!(!log.read_into(&media, log.head() - 1, &mut dst));
        assert!(!log.read_into(&media, log.next_lsn(), &mut dst));
        assert_eq!(log.payload_range(&media, log.next_lsn()), None);
        let from: Vec<_> = log.iter_from(&media, all[2].0).collect();
        assert_eq!(from, all[2..].to_vec());
        assert_eq!(log.iter_from(&media, 0).count(), 4);
        assert_eq!(log.iter_from(&media, u64::MAX).count(), 0);
        let reopened = AppendLog::open(&mut media, 0).unwrap();
        assert!(reopened.read_into(&media, all[1].0, &mut dst));
        assert_eq!(dst, all[1].1);
    }
}

#[test]
fn batch_is_one_drain_and_matches_single_appends() {
    let expected = [(TailStrategy::Naive, 2), (TailStrategy::ROTATING_PAPER, 2), (TailStrategy::SelfValidating, 1)];
    for (tail, drains) in expected {
        let config = LogConfig::new(4096, tail).with_padding(Padding::None);
        let (mut media, mut log) = fresh(config, 0);
        let (mut single_media, mut single) = fresh(config, 0);
        append_many(&mut media, &mut log, 20, 150, 0); // the batch then wraps
        append_many(&mut single_media, &mut single, 20, 150, 0);
        log.truncate(&mut media, 18).unwrap();
        single.truncate(&mut single_media, 18).unwrap();
        let payloads: Vec<Vec<u8>> = (0..6).map(|i| payload(100 + i, 10 + 90 * i as usize)).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
        let before = media.drains;
        assert_eq!(log.append_batch(&mut media, &refs).unwrap(), 20..26, "{tail:?}");
        assert_eq!(media.drains - before, drains, "{tail:?}");
        for p in &refs {
            single.append(&mut single_media, p).unwrap();
        }
        assert_eq!(log.positions(), single.positions(), "{tail:?}: same layout as single appends");
        assert_eq!(log.read_all(&media), single.read_all(&single_media));
        let reopened = AppendLog::open(&mut media, 0).unwrap();
        assert_eq!(reopened.read_all(&media), log.read_all(&media));
        assert_eq!(log.append_batch(&mut media, &[]).unwrap(), 26..26);
        assert_eq!(log.append_batch(&mut media, &[b"one"]).unwrap(), 26..27);
    }
}

#[test]
fn batch_that_does_not_fit_writes_nothing() {
    for tail in STRATEGIES {
        let (mut media, mut log) = fresh(LogConfig::new(1024, tail).with_padding(Padding::None), 0);
        let before = media.bytes().to_vec();
        let big = [7u8; 300];
        let err = log.append_batch(&mut media, &[&big, &big, &big, &big]).unwrap_err();
        assert!(matches!(err, AppendError::Full { .. }), "{err:?}");
        let err = log.append_batch(&mut media, &[&big, &[1; 2000]]).unwrap_err();
        assert!(matches!(err, AppendError::TooLarge { len: 2000, .. }), "{err:?}");
        assert_eq!(media.bytes(), &before[..]);
        assert_eq!(log.next_lsn(), 0);
    }
    let config = LogConfig::new(4 << 20, TailStrategy::SelfValidating);
    let (mut media, mut log) = fresh(config, 0);
    let chunk = vec![1u8; 600 << 10];
    let err = log.append_batch(&mut media, &[&chunk, &chunk]).unwrap_err();
    assert!(matches!(err, AppendError::BatchTooLarge { max: MAX_BATCH_SPAN_BYTES, .. }), "{err:?}");
    assert_eq!(log.append_batch(&mut media, &[&chunk]).unwrap(), 0..1, "one entry is an append");
}

#[test]
fn suffix_truncation_is_durable_and_dropped_entries_stay_dropped() {
    for tail in STRATEGIES {
        for padding in [Padding::None, Padding::Line] {
            let (mut media, mut log) = fresh(LogConfig::new(2048, tail).with_padding(padding), 0);
            append_many(&mut media, &mut log, 12, 100, 0);
            log.truncate(&mut media, 6).unwrap();
            append_many(&mut media, &mut log, 4, 100, 0); // wraps: 6..16 retained
            let err = log.truncate_suffix(&mut media, 5).unwrap_err();
            assert_eq!(err, SuffixTruncateError::BelowHead { from: 5, head: 6 });
            let err = log.truncate_suffix(&mut media, 17).unwrap_err();
            assert_eq!(err, SuffixTruncateError::BeyondTail { from: 17, next: 16 });
            log.truncate_suffix(&mut media, 16).unwrap();
            log.truncate_suffix(&mut media, 9).unwrap();
            assert_eq!(log.next_lsn(), 9);
            let reopened = AppendLog::open(&mut media, 0).unwrap();
            assert_eq!(reopened.next_lsn(), 9, "{tail:?} {padding:?}");
            assert_eq!(reopened.read_all(&media), log.read_all(&media));
            // New generation of 9.. at other sizes, then drop back into it.
            append_many(&mut media, &mut log, 5, 40, 0xabc);
            log.truncate_suffix(&mut media, 11).unwrap();
            let reopened = AppendLog::open(&mut media, 0).unwrap();
            assert_eq!(reopened.read_all(&media), log.read_all(&media), "{tail:?} {padding:?}");
            assert_eq!(reopened.read_all(&media).last().unwrap(), &(10, payload(10 ^ 0xabc, 40)));
            log.truncate_suffix(&mut media, 6).unwrap();
            assert!(log.is_empty());
            assert!(AppendLog::open(&mut media, 0).unwrap().is_empty());
        }
    }
}

#[test]
fn self_validating_suffix_truncation_costs_three_drains_and_scrubs() {
    let (mut media, mut log) = fresh(LogConfig::new(2048, TailStrategy::SelfValidating), 0);
    append_many(&mut media, &mut log, 6, 50, 0);
    let dropped = log.payload_range(&media, 3).unwrap().start - 8;
    let before = media.drains;
    log.truncate_suffix(&mut media, 3).unwrap();
    assert_eq!(media.drains - before, 3);
    assert_eq!(media.read_u64(dropped), u64::MAX, "the dropped header's length/CRC word is scrubbed");
    assert_eq!(media.read_u64(192 + 32), u64::MAX, "the truncation record is cleared");
}

#[test]
fn recovery_finishes_a_recorded_suffix_truncation() {
    use crate::format::{crc_seed, encode_truncation, get_u64, Truncation};
    let (mut media, mut log) = fresh(LogConfig::new(2048, TailStrategy::SelfValidating), 0);
    append_many(&mut media, &mut log, 6, 50, 0);
    let keep_pos = log.payload_range(&media, 3).unwrap().start - 16 - 256; // logical: entries start at 256
    let end_pos = log.positions().1;
    let mut header = [0u8; 64];
    media.read(0, &mut header);
    let seed = crc_seed(get_u64(&header, 40));
    // The crash came after the record was durable, before any scrub.
    media.write(192, &encode_truncation(Truncation { keep_lsn: 3, keep_pos, end_pos }, seed));
    let reopened = AppendLog::open(&mut media, 0).unwrap();
    assert_eq!(reopened.next_lsn(), 3);
    assert_eq!(media.read_u64(192 + 32), u64::MAX, "recovery clears the record");
    assert_eq!(media.read_u64(keep_pos + 256 + 8), u64::MAX, "and scrubs the dropped headers");
    // A record that contradicts the head is corruption, not a guess.
    media.write(192, &encode_truncation(Truncation { keep_lsn: 3, keep_pos: end_pos + 64, end_pos: keep_pos }, seed));
    assert!(matches!(AppendLog::open(&mut media, 0), Err(OpenError::Corrupt { .. })));
}

#[test]
fn restart_at_empties_the_log_forward_and_back() {
    for tail in STRATEGIES {
        let mut media = MemMedia::new(AppendLog::required_size(&LogConfig::new(2048, tail)) as usize);
        let mut log = AppendLog::create_at(&mut media, 0, LogConfig::new(2048, tail), 1).unwrap();
        assert_eq!(log.head(), 1);
        assert_eq!(AppendLog::open(&mut media, 0).unwrap().next_lsn(), 1, "Raft indices start at 1");
        append_many(&mut media, &mut log, 8, 30, 0);
        assert_eq!(log.restart_at(&mut media, 0), Err(RestartError::BelowHead { first: 0, head: 1 }));
        assert_eq!(log.restart_at(&mut media, 1 << 63), Err(RestartError::TooLarge { first: 1 << 63 }));
        log.restart_at(&mut media, 100).unwrap(); // a snapshot beyond the log
        let reopened = AppendLog::open(&mut media, 0).unwrap();
        assert_eq!((reopened.head(), reopened.next_lsn()), (100, 100), "{tail:?}");
        append_many(&mut media, &mut log, 6, 30, 0);
        log.restart_at(&mut media, 103).unwrap(); // a snapshot inside the log
        let mut reopened = AppendLog::open(&mut media, 0).unwrap();
        assert_eq!((reopened.head(), reopened.next_lsn()), (103, 103), "{tail:?}");
        append_many(&mut media, &mut reopened, 2, 30, 0x55);
        let again = AppendLog::open(&mut media, 0).unwrap();
        assert_eq!(again.read_all(&media), vec![(103, payload(103 ^ 0x55, 30)), (104, payload(104 ^ 0x55, 30))]);
    }
    let mut media = MemMedia::new(1 << 14);
    let err = AppendLog::create_at(&mut media, 0, LogConfig::new(1024, TailStrategy::Naive), u64::MAX >> 1);
    assert!(matches!(err, Err(CreateError::BadFirstLsn { .. })));
}

#[test]
fn older_version_logs_are_refused_by_name() {
    for old in [1u32, 2] {
        let (mut media, _log) = fresh(LogConfig::new(1024, TailStrategy::SelfValidating), 0);
        let mut line = [0u8; 64];
        media.read(0, &mut line);
        line[8..12].copy_from_slice(&old.to_le_bytes());
        crate::format::seal_header(&mut line);
        media.write(0, &line);
        let err = AppendLog::open(&mut media, 0).unwrap_err();
        assert_eq!(err, OpenError::UnsupportedVersion { found: old, supported: 3 });
    }
}

/// A payload as the Raft store writes an extent-form entry: a prefix
/// (the term) that differs per write, then a body sealed by its own
/// CRC-32C.
fn sealed(prefix: u64, body: u8) -> Vec<u8> {
    let mut p = prefix.to_le_bytes().to_vec();
    let inner = vec![body; 40];
    p.extend_from_slice(&inner);
    p.extend_from_slice(&pmem::crc::crc32c(&inner).to_le_bytes());
    p
}

/// The minimal crash image of the zero-copy finding (`docs/FORMAT.md`,
/// "Entry checksum"): entry 1 (prefix 1, body A) is dropped by a suffix
/// truncation (its length/CRC word scrubbed) and re-appended at the same
/// place with the same length (prefix 2, body B); the crash lets through
/// the new header and the new prefix word only, the old sealed body stays.
/// Format version 2's plain CRC-32C accepted that entry (CRC-32C of a
/// message followed by its own CRC-32C is the same for every message of a
/// length); it must end the log before LSN 1.
#[test]
fn a_torn_reappend_over_a_sealed_payload_is_not_accepted() {
    let config = LogConfig::new(4096, TailStrategy::SelfValidating);
    let (mut media, mut log) = fresh(config, 0);
    log.append(&mut media, &sealed(1, 0xa0)).unwrap();
    log.append(&mut media, &sealed(1, 0xa1)).unwrap();
    log.truncate_suffix(&mut media, 1).unwrap();
    let mut image = MemMedia::new(media.len() as usize);
    let mut bytes = vec![0u8; media.len() as usize];
    media.read(0, &mut bytes);
    image.write(0, &bytes);
    let new = sealed(2, 0xb1);
    log.append(&mut media, &new).unwrap();
    let at = log.payload_range(&media, 1).unwrap().start;
    let mut torn = [0u8; 24];
    media.read(at - 16, &mut torn);
    image.write(at - 16, &torn);
    let mut whole = vec![0u8; new.len()];
    image.read(at, &mut whole);
    assert_ne!(whole, new, "the image holds the old body");
    let reopened = AppendLog::open(&mut image, 0).unwrap();
    assert_eq!(reopened.next_lsn(), 1, "a torn entry over a sealed body was accepted: {:?}", reopened.read_all(&image));
}
