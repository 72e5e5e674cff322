//! The checker on histories known to be linearizable and known not to be:
//! a checker that passes everything would fail here.

use crate::kv::{first_violation, linearizable, Input, KvOp, Output};

fn op(key: &str, call: u64, ret: Option<u64>, input: Input, output: Output) -> KvOp {
    KvOp { key: key.as_bytes().to_vec(), call, ret: ret.map(|t| (t, output)), input }
}
fn put(call: u64, ret: u64, v: u8) -> KvOp {
    op("k", call, Some(ret), Input::Put(vec![v]), Output::Done)
}
fn get(call: u64, ret: u64, v: Option<u8>) -> KvOp {
    op("k", call, Some(ret), Input::Get, Output::Value(v.map(|v| vec![v])))
}
fn cas(call: u64, ret: u64, expect: Option<u8>, new: u8, swapped: bool) -> KvOp {
    op("k", call, Some(ret), Input::Cas { expect: expect.map(|v| vec![v]), new: vec![new] }, Output::Swapped(swapped))
}

#[test]
fn sequential_history_is_linearizable() {
    assert!(linearizable(&[put(0, 1, 1), get(2, 3, Some(1)), put(4, 5, 2), get(6, 7, Some(2))]));
    assert!(linearizable(&[]));
}

#[test]
fn stale_read_after_acknowledged_write_is_not() {
    assert!(!linearizable(&[put(0, 10, 1), get(20, 30, None)]));
    assert!(!linearizable(&[put(0, 1, 1), put(2, 3, 2), get(4, 5, Some(1))]));
}

#[test]
fn a_concurrent_read_may_see_either_value() {
    assert!(linearizable(&[put(0, 10, 1), get(5, 15, None)]));
    assert!(linearizable(&[put(0, 10, 1), get(5, 15, Some(1))]));
    assert!(!linearizable(&[put(0, 10, 1), get(5, 15, Some(2))]), "a value never written");
}

#[test]
fn reads_cannot_go_back_in_time() {
    // Two reads, the second after the first returned: once 2 is seen, 1 cannot be.
    let h = [put(0, 1, 1), put(2, 100, 2), get(10, 20, Some(2)), get(30, 40, Some(1))];
    assert!(!linearizable(&h));
    let ok = [put(0, 1, 1), put(2, 100, 2), get(10, 20, Some(1)), get(30, 40, Some(2))];
    assert!(linearizable(&ok));
}

#[test]
fn an_unacknowledged_write_may_take_effect_once_or_never() {
    let pending = op("k", 2, None, Input::Put(vec![2]), Output::Done);
    assert!(linearizable(&[put(0, 1, 1), pending.clone(), get(10, 20, Some(1))]));
    assert!(linearizable(&[put(0, 1, 1), pending.clone(), get(10, 20, Some(2))]));
    // Seen, then gone, then seen again: it took effect once only.
    let h = [put(0, 1, 1), pending, get(10, 20, Some(2)), put(21, 22, 1), get(30, 40, Some(1)), get(50, 60, Some(2))];
    assert!(!linearizable(&h));
}

#[test]
fn two_successful_cas_from_the_same_value_is_not() {
    let h = [put(0, 1, 0), cas(2, 10, Some(0), 1, true), cas(3, 11, Some(0), 2, true)];
    assert!(!linearizable(&h));
    let ok = [put(0, 1, 0), cas(2, 10, Some(0), 1, true), cas(3, 11, Some(0), 2, false), get(12, 13, Some(1))];
    assert!(linearizable(&ok));
    assert!(linearizable(&[cas(0, 1, None, 5, true), get(2, 3, Some(5))]), "CAS on an absent key");
}

#[test]
fn a_deleted_value_does_not_come_back() {
    let del = op("k", 2, Some(3), Input::Del, Output::Done);
    assert!(!linearizable(&[put(0, 1, 1), del.clone(), get(4, 5, Some(1))]));
    assert!(linearizable(&[put(0, 1, 1), del, get(4, 5, None)]));
}

#[test]
fn keys_are_checked_separately_and_the_bad_one_named() {
    let mut h = vec![put(0, 1, 1), get(2, 3, Some(1))];
    h.push(op("other", 0, Some(1), Input::Put(vec![7]), Output::Done));
    h.push(op("other", 5, Some(6), Input::Get, Output::Value(None)));
    assert_eq!(first_violation(&h), Some(b"other".to_vec()));
}

/// A tiny deterministic generator (xorshift64*), to keep the crate
/// dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A history produced by a real register: each operation takes effect at
/// a distinct instant inside its own [call, return] interval, clients
/// concurrent. Linearizable by construction.
fn real_history(seed: u64, ops: usize) -> Vec<KvOp> {
    let mut rng = Rng(seed | 1);
    let mut value: Option<Vec<u8>> = None;
    let mut out = Vec::new();
    for i in 0..ops as u64 {
        let at = 10 * i + 5; // the linearization point
        let call = at - rng.below(30).min(at);
        let ret = at + rng.below(30);
        let (input, output) = match rng.below(4) {
            0 => {
                let v = vec![rng.below(4) as u8];
                value = Some(v.clone());
                (Input::Put(v), Output::Done)
            }
            1 => (Input::Get, Output::Value(value.clone())),
            2 => {
                value = None;
                (Input::Del, Output::Done)
            }
            _ => {
                let expect = if rng.below(2) == 0 { value.clone() } else { Some(vec![9]) };
                let new = vec![rng.below(4) as u8];
                let swapped = expect == value;
                if swapped {
                    value = Some(new.clone());
                }
                (Input::Cas { expect, new }, Output::Swapped(swapped))
            }
        };
        out.push(KvOp { key: b"k".to_vec(), call, ret: Some((ret, output)), input });
    }
    out
}

#[test]
fn histories_of_a_real_register_pass_and_a_corrupted_read_fails() {
    for seed in 1..200 {
        let mut h = real_history(seed, 60);
        assert!(linearizable(&h), "seed {seed}: a real register's history");
        // A read that returns a value nobody wrote must fail.
        if let Some(read) = h.iter_mut().find(|o| o.input == Input::Get) {
            read.ret.as_mut().expect("returned").1 = Output::Value(Some(vec![200]));
            assert!(!linearizable(&h), "seed {seed}: a read of a value never written");
        }
    }
}

#[test]
fn a_long_concurrent_history_is_checked_quickly() {
    // 2,000 operations on one key, each overlapping ~6 others.
    let h = real_history(42, 2_000);
    assert!(linearizable(&h));
}
