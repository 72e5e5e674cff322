//! The bounded search ([`crate::check_with`]) on Redis histories that a
//! fault campaign makes: clients whose connections are cut leave writes of
//! unknown outcome (some applied, some not) pending for the rest of the
//! history. Large linearizable ones must be decided within a step budget
//! (a deterministic count, not a clock); non-linearizable ones must be
//! rejected; a budget too small must answer undecided, never linearizable.
//!
//! Limit found here: rejecting a long history takes an exhaustive search,
//! which stays within budget with a few unknown operations per key (5,000
//! operations with 5 unknown: rejected; with 15: undecided at 20 million
//! steps). A fault campaign's keys have a few per kill.

use crate::redis::{judge, Input, Output, RedisOp, RedisString};
use crate::{check_with, Budget, Operation, Verdict};

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// A real Redis string on one key: operation i takes effect at 10 i + 100
/// ns, inside an interval reaching up to `spread` ns either side (so each
/// overlaps up to about `spread` / 5 others); one in
/// `unknown_every` loses its reply (its client never learns), and half of
/// those never took effect. Linearizable by construction.
fn redis_history(seed: u64, clients: u64, ops: usize, unknown_every: u64, spread: u64) -> Vec<Operation<Input, Output>> {
    let mut rng = Rng(seed | 1);
    let mut value: Option<Vec<u8>> = None;
    let mut out = Vec::with_capacity(ops);
    for i in 0..ops as u64 {
        let at = 10 * i + 100; // this operation's linearization point
        let c = rng.below(clients) as usize;
        let call = at - rng.below(spread);
        let ret = at + 1 + rng.below(spread);
        let unknown = rng.below(unknown_every) == 0;
        let applies = !unknown || rng.below(2) == 0;
        let input = match rng.below(10) {
            0..=3 => Input::Set(format!("{c}:{i}").into_bytes()),
            4..=6 => Input::Get,
            7 => Input::Incr,
            8 => Input::Del,
            _ => Input::Append(b"x".to_vec()),
        };
        let (next, output) = RedisString::apply(&value, &input);
        if applies {
            value = next;
        }
        if unknown {
            out.push(Operation { call, ret: None, input });
        } else {
            out.push(Operation { call, ret: Some((ret, output)), input });
        }
    }
    out
}

const STEPS: u64 = 20_000_000;

fn budget() -> Budget {
    Budget { max_steps: STEPS, max_cache: 1 << 20 }
}

#[test]
fn large_histories_with_many_unknown_writes_are_decided() {
    for seed in 1..6 {
        // 20,000 operations on one key, one in 50 of unknown outcome:
        // 400 operations pending to the end, each concurrent with all.
        let h = redis_history(seed, 4, 20_000, 50, 40);
        assert_eq!(check_with(&RedisString, &h, budget()), Verdict::Linearizable, "seed {seed}");
    }
}

#[test]
fn corrupted_large_histories_are_rejected() {
    for seed in 1..6 {
        let mut h = redis_history(seed, 4, 5_000, 1_000, 20);
        // A read late in the history that returns a value nobody wrote.
        let late = h.iter().rposition(|o| o.input == Input::Get && o.ret.is_some()).expect("a read");
        h[late].ret.as_mut().expect("returned").1 = Output::Bulk(Some(b"never written".to_vec()));
        assert_eq!(check_with(&RedisString, &h, budget()), Verdict::NotLinearizable, "seed {seed}");
    }
}

#[test]
fn a_lost_acknowledged_write_among_unknown_ones_is_rejected() {
    let mut h = redis_history(7, 3, 5_000, 1_000, 20);
    let end = h.iter().filter_map(|o| o.ret.as_ref().map(|r| r.0)).max().expect("returns");
    let first_set = h.iter().find(|o| matches!(o.input, Input::Set(_)) && o.ret.is_some()).expect("an acknowledged SET").input.clone();
    let Input::Set(old) = first_set else { unreachable!() };
    // An acknowledged SET of a fresh value, then a read after it that
    // finds an old acknowledged value: no unknown write makes that value
    // again (SET values are unique, APPEND lengthens, INCR of it fails),
    // so the SET was lost.
    h.push(Operation { call: end + 10, ret: Some((end + 20, Output::Ok)), input: Input::Set(b"acked".to_vec()) });
    h.push(Operation { call: end + 30, ret: Some((end + 40, Output::Bulk(Some(old)))), input: Input::Get });
    assert_eq!(check_with(&RedisString, &h, budget()), Verdict::NotLinearizable);
}

#[test]
fn an_incr_counted_twice_is_rejected() {
    let op = |call, ret, out| Operation { call, ret: Some((ret, out)), input: Input::Incr };
    let mut h: Vec<_> = (0..500).map(|i| op(10 * i, 10 * i + 5, Output::Int(i as i64 + 1))).collect();
    // Unknown INCRs all along (their clients were cut off): at most
    // 40 more, so 541 is possible, 542 is not.
    for i in 0..40 {
        h.push(Operation { call: 10 * i * 10 + 3, ret: None, input: Input::Incr });
    }
    h.push(Operation { call: 10_000, ret: Some((10_001, Output::Bulk(Some(b"540".to_vec())))), input: Input::Get });
    assert_eq!(check_with(&RedisString, &h, budget()), Verdict::Linearizable);
    let last = h.len() - 1;
    h[last].ret = Some((10_001, Output::Bulk(Some(b"541".to_vec()))));
    assert_eq!(check_with(&RedisString, &h, budget()), Verdict::NotLinearizable, "only 40 unknown INCRs");
}

#[test]
fn a_budget_too_small_answers_undecided_never_linearizable() {
    let h = redis_history(3, 4, 2_000, 50, 40);
    let tiny = Budget { max_steps: 100, max_cache: 16 };
    assert_eq!(check_with(&RedisString, &h, tiny), Verdict::Undecided);
    // A cache too small to hold anything still gives an exact answer.
    let no_cache = Budget { max_steps: STEPS, max_cache: 0 };
    let small = redis_history(3, 3, 300, 1_000, 40);
    assert_eq!(check_with(&RedisString, &small, no_cache), Verdict::Linearizable);
}

#[test]
fn judge_counts_undecided_keys_apart_from_violations() {
    let mut ops = Vec::new();
    for (key, seed) in [("a", 1), ("b", 2)] {
        for o in redis_history(seed, 4, 2_000, 50, 40) {
            ops.push(RedisOp { key: key.as_bytes().to_vec(), call: o.call, ret: o.ret, input: o.input });
        }
    }
    ops.push(RedisOp { key: b"c".to_vec(), call: 0, ret: Some((1, Output::Int(1))), input: Input::Del });
    let j = judge(&ops, Budget { max_steps: 100, max_cache: 16 });
    assert_eq!(j.keys, 3);
    assert_eq!(j.violation, Some(b"c".to_vec()));
    assert_eq!(j.undecided, vec![b"a".to_vec(), b"b".to_vec()]);
    assert!(!j.linearizable());
    let j = judge(&ops, budget());
    assert_eq!(j.violation, Some(b"c".to_vec()));
    assert!(j.undecided.is_empty());
}
