//! The local peer of `pmwire bench mirror`: NO-SM (our redo-logged heap,
//! no mirror) against libpmemobj's undo-logged transactions
//! (`pmemobj_tx_begin`, `pmemobj_tx_add_range_direct` then the store for
//! each write, `pmemobj_tx_commit`, `pmemobj_tx_end`), on the same medium
//! (a pool in /dev/shm, `PMEM_IS_PMEM_FORCE=1`, see [`crate::pmdk`]) and
//! the same Transact transactions: the same configurations, counts and
//! seeds, so both write the same 64 B at the same places in the same
//! order. libpmemobj has no ordering fence: its epochs are one
//! transaction's writes in order, which its undo log persists before
//! each store anyway. Rounds interleave the two; a side's time is the
//! median of its rounds'. The WHISPER-like hash map runs on both too:
//! the same structure code (`pmwire_mirror::whisper::HashMap` over a
//! [`Writer`]), the same operations, each libpmemobj write a snapshotted
//! range of the root object. If libpmemobj cannot run, the suite records
//! a skipped entry with the reason, never a number.

use std::time::Instant;

use anyhow::Result;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::measure::median;
use crate::mirror::{transactions, Config, Primary, DATA_BYTES, WRITE_BYTES};
use crate::pmdk::{Libpmemobj, ObjPool, ObjTx};
use crate::remote::common::ratio;
use crate::schema::{BenchResult, Skipped};
use crate::{table, Headline};
use pmwire_mirror::whisper::{transaction, Counts, HashMap, View, WhisperError, Writer, VALUE_BYTES};
use pmwire_mirror::{NoMirror, OutOfBounds};

/// The bench name in results.
pub const BENCH: &str = "mirror_pmemobj";
/// The libpmemobj pool: the 16 MiB root object, its undo logs and metadata.
pub const POOL_BYTES: u64 = 64 << 20;

/// The Transact writes of one transaction: `config.epochs` ×
/// `config.writes` 64 B-aligned offsets, drawn from `rng` exactly as the
/// Transact part draws them.
fn offsets(rng: &mut SplitMix64, config: Config, out: &mut Vec<u64>) {
    let lines = DATA_BYTES / WRITE_BYTES as u64;
    out.clear();
    for _ in 0..config.epochs * config.writes {
        out.push((rng.next_u64() % lines) * WRITE_BYTES as u64);
    }
}

/// NO-SM: `count` transactions on our heap; the mean ns per transaction.
fn no_sm(p: &mut Primary, config: Config, count: u64, seed: u64) -> Result<f64> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let (mut at, mut bytes) = (Vec::new(), [0u8; WRITE_BYTES]);
    let start = Instant::now();
    for i in 0..count {
        offsets(&mut rng, config, &mut at);
        bytes[0] = i as u8;
        let mut tx = p.heap.begin(&mut p.region);
        for (k, &offset) in at.iter().enumerate() {
            tx.write(offset, &bytes)?;
            if (k + 1) % config.writes as usize == 0 && k + 1 < at.len() {
                tx.ofence()?;
            }
        }
        tx.commit()?;
    }
    Ok(start.elapsed().as_nanos() as f64 / count as f64)
}

/// libpmemobj: the same transactions; the mean ns per transaction.
fn pmemobj(pool: &mut ObjPool<'_>, config: Config, count: u64, seed: u64) -> Result<f64> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let (mut at, mut bytes) = (Vec::new(), [0u8; WRITE_BYTES]);
    let start = Instant::now();
    for i in 0..count {
        offsets(&mut rng, config, &mut at);
        bytes[0] = i as u8;
        pool.transaction(at.iter().map(|&o| (o, &bytes[..]))).map_err(anyhow::Error::msg)?;
    }
    Ok(start.elapsed().as_nanos() as f64 / count as f64)
}

/// The hash map's geometry (as the WHISPER-like part's), and the root
/// object it lives in on the libpmemobj side.
const MAP_BUCKETS: u64 = 4096;
const MAP_CAPACITY: u64 = 2 * crate::whisper::KEYS;
const MAP_ROOT_BYTES: u64 = 1 << 20;
const MAP_POOL_BYTES: u64 = 16 << 20;
/// Hash-map operations per transaction (as the WHISPER-like part's).
const MAP_OPS_PER_TX: u64 = 6;

/// A libpmemobj transaction as the structures' [`Writer`]: a write is
/// `pmemobj_tx_add_range_direct` then the store; libpmemobj has no
/// ordering fence (its undo log orders each store after its snapshot).
struct ObjWriter<'t, 'p, 'a> {
    tx: &'t mut ObjTx<'p, 'a>,
}

impl View for ObjWriter<'_, '_, '_> {
    fn get(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        let data_bytes = self.tx.root_bytes();
        if offset.checked_add(dst.len() as u64).is_none_or(|end| end > data_bytes) {
            return Err(OutOfBounds { offset, len: dst.len() as u64, data_bytes });
        }
        self.tx.read(offset, dst);
        Ok(())
    }
}

impl Writer for ObjWriter<'_, '_, '_> {
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<(), WhisperError> {
        self.tx.write(offset, bytes).map_err(WhisperError::Peer)
    }

    fn order(&mut self) -> Result<(), WhisperError> {
        Ok(())
    }
}

/// One hash-map operation drawn from `rng` (an insert or a delete of one
/// of the WHISPER-like part's keys).
fn map_op(w: &mut impl Writer, map: HashMap, rng: &mut SplitMix64) -> Result<(), WhisperError> {
    let key = rng.next_u64() % crate::whisper::KEYS;
    if rng.next_u32() % 2 == 0 {
        let mut value = [0u8; VALUE_BYTES];
        value[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
        map.insert(w, key, &value).map(drop)
    } else {
        map.remove(w, key).map(drop)
    }
}

/// `operations` hash-map operations on our heap (NO-SM); mean ns per operation.
fn map_no_sm(p: &mut Primary, map: HashMap, operations: u64, seed: u64) -> Result<f64> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut counts = Counts::default();
    let start = Instant::now();
    for _ in 0..operations / MAP_OPS_PER_TX {
        transaction(&mut p.heap, &mut p.region, NoMirror, &mut counts, |o| {
            (0..MAP_OPS_PER_TX).try_for_each(|_| map_op(o, map, &mut rng))
        })?;
    }
    Ok(start.elapsed().as_nanos() as f64 / (operations / MAP_OPS_PER_TX * MAP_OPS_PER_TX) as f64)
}

/// The same operations as libpmemobj transactions; mean ns per operation.
fn map_pmemobj(pool: &mut ObjPool<'_>, map: HashMap, operations: u64, seed: u64) -> Result<f64> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let start = Instant::now();
    for _ in 0..operations / MAP_OPS_PER_TX {
        let mut tx = pool.begin().map_err(anyhow::Error::msg)?;
        let mut w = ObjWriter { tx: &mut tx };
        (0..MAP_OPS_PER_TX).try_for_each(|_| map_op(&mut w, map, &mut rng))?;
        tx.commit().map_err(anyhow::Error::msg)?;
    }
    Ok(start.elapsed().as_nanos() as f64 / (operations / MAP_OPS_PER_TX * MAP_OPS_PER_TX) as f64)
}

/// Both hash maps, formatted.
fn map_sides(lib: &Libpmemobj) -> Result<(Primary, ObjPool<'_>, HashMap)> {
    let mut local = Primary::create("mirror-pmemobj-map-nosm.pool")?;
    let map = transaction(&mut local.heap, &mut local.region, NoMirror, &mut Counts::default(), |o| {
        HashMap::format(o, 0, MAP_BUCKETS, MAP_CAPACITY)
    })?;
    let path = crate::remote::server::shm_path("mirror-pmemobj-map.pool");
    let mut pool = lib.create(&path, MAP_POOL_BYTES, MAP_ROOT_BYTES).map_err(anyhow::Error::msg)?;
    let mut tx = pool.begin().map_err(anyhow::Error::msg)?;
    let same = HashMap::format(&mut ObjWriter { tx: &mut tx }, 0, MAP_BUCKETS, MAP_CAPACITY)?;
    tx.commit().map_err(anyhow::Error::msg)?;
    assert_eq!(same, map, "the same layout on both sides");
    Ok((local, pool, map))
}

/// Runs the peer part: results, skipped entries and headlines.
pub(crate) fn run(
    library: Result<&'static Libpmemobj, String>,
    configs: &[Config],
    rounds: u64,
    quick: bool,
    bar: &indicatif::ProgressBar,
) -> Result<(Vec<BenchResult>, Vec<Skipped>, Vec<Headline>)> {
    let pool_path = crate::remote::server::shm_path("mirror-pmemobj.pool");
    let opened = library.and_then(|lib| {
        let pool = lib.create(&pool_path, POOL_BYTES, DATA_BYTES)?;
        let libpmem = crate::pmdk::libpmem()?;
        if !libpmem.is_pmem(pool.root(), DATA_BYTES as usize) {
            return Err("pmem_is_pmem says 0 on the pool: libpmemobj would msync".to_string());
        }
        Ok(pool)
    });
    let mut pool = match opened {
        Ok(pool) => pool,
        Err(reason) => {
            bar.inc(rounds);
            let mut skipped: Vec<Skipped> = configs.iter().map(|c| Skipped::new(BENCH, &c.label(), &reason)).collect();
            skipped.push(Skipped::new(BENCH, "hashmap", &reason));
            return Ok((Vec::new(), skipped, headlines(&[])));
        }
    };
    let lib = library_of(&pool);
    let mut local = Primary::create("mirror-pmemobj-nosm.pool")?;
    let (mut map_local, mut map_pool, map) = map_sides(lib)?;
    let map_operations = crate::whisper::Workload::HashMap.operations(quick);
    // times[config][side]: NO-SM, libpmemobj; one mean per round; the hash map last.
    let mut times = vec![[Vec::new(), Vec::new()]; configs.len() + 1];
    for round in 0..rounds {
        bar.set_message(format!("NO-SM vs libpmemobj (round {}/{rounds})", round + 1));
        for (c, &config) in configs.iter().enumerate() {
            let seed = 0x7472_616e ^ (u64::from(config.epochs) << 8) ^ u64::from(config.writes) ^ (round << 32);
            let count = transactions(config, quick);
            times[c][0].push(no_sm(&mut local, config, count, seed)?);
            times[c][1].push(pmemobj(&mut pool, config, count, seed)?);
        }
        let seed = 0x6861_7368 ^ (round << 32);
        times[configs.len()][0].push(map_no_sm(&mut map_local, map, map_operations, seed)?);
        times[configs.len()][1].push(map_pmemobj(&mut map_pool, map, map_operations, seed)?);
        bar.inc(1);
    }
    let [ours, theirs] = &mut times[configs.len()];
    let (ours, theirs) = (median(ours), median(theirs));
    let map_result = BenchResult::new(BENCH, "hashmap")
        .param("operations_per_round", map_operations)
        .param("operations_per_tx", MAP_OPS_PER_TX)
        .metric("no_sm_op_us", ours / 1e3)
        .metric("pmemobj_op_us", theirs / 1e3)
        .metric("no_sm_over_pmemobj_x", ours / theirs);
    let mut results: Vec<BenchResult> = configs
        .iter()
        .zip(&mut times)
        .map(|(config, [ours, theirs])| {
            let (ours, theirs) = (median(ours), median(theirs));
            BenchResult::new(BENCH, &config.label())
                .param("epochs", config.epochs)
                .param("writes_per_epoch", config.writes)
                .param("transactions_per_round", transactions(*config, quick))
                .metric("no_sm_tx_us", ours / 1e3)
                .metric("pmemobj_tx_us", theirs / 1e3)
                .metric("no_sm_over_pmemobj_x", ours / theirs)
        })
        .collect();
    results.push(map_result);
    let headlines = headlines(&results);
    Ok((results, Vec::new(), headlines))
}

fn library_of<'a>(pool: &ObjPool<'a>) -> &'a Libpmemobj {
    pool.library()
}

/// NO-SM's time over libpmemobj's: the geometric mean over the Transact
/// configurations (target ≤ 1.1x), the worst one for information, and
/// the hash map's (target ≤ 1.1x).
fn headlines(results: &[BenchResult]) -> Vec<Headline> {
    let ratios: Vec<f64> = results
        .iter()
        .filter(|r| r.params.contains_key("epochs"))
        .filter_map(|r| r.get("no_sm_over_pmemobj_x"))
        .collect();
    let map = results.iter().find(|r| r.variant == "hashmap").and_then(|r| r.get("no_sm_over_pmemobj_x"));
    let geomean =
        (!ratios.is_empty()).then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp());
    let worst = ratios.iter().copied().reduce(f64::max);
    vec![
        ratio(
            "NO-SM / libpmemobj time per transaction (geometric mean over Transact configurations)",
            geomean,
            1.1,
            false,
            "libpmemobj, same run",
        ),
        ratio(
            "NO-SM / libpmemobj time per transaction (worst configuration)",
            worst,
            1.1,
            false,
            "libpmemobj, same run",
        )
        .for_information(),
        ratio("NO-SM / libpmemobj time per operation (WHISPER-like hashmap)", map, 1.1, false, "libpmemobj, same run"),
    ]
}

/// NO-SM beside libpmemobj, as text.
pub(crate) fn table(results: &[BenchResult]) -> String {
    let mut rows = vec![["e-w", "NO-SM us/tx", "libpmemobj us/tx", "NO-SM / libpmemobj"].map(String::from).to_vec()];
    for r in results.iter().filter(|r| r.bench == BENCH) {
        let n = |k: &str| r.get(k).map_or("-".to_string(), table::num);
        rows.push(vec![
            r.variant.clone(),
            n("no_sm_tx_us"),
            n("pmemobj_tx_us"),
            format!("{}x", n("no_sm_over_pmemobj_x")),
        ]);
    }
    format!(
        "\nNO-SM beside libpmemobj on the same Transact transactions and medium, median of rounds\n{}",
        table::render(&rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_draw_the_same_writes() {
        let config = Config { epochs: 4, writes: 2 };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        offsets(&mut SplitMix64::seed_from_u64(9), config, &mut a);
        let mut rng = SplitMix64::seed_from_u64(9);
        let lines = DATA_BYTES / WRITE_BYTES as u64;
        for _ in 0..8 {
            b.push((rng.next_u64() % lines) * WRITE_BYTES as u64);
        }
        assert_eq!(a, b, "the Transact part's draw, write by write");
    }

    /// Both sides run the same hash-map operations to the same map: the
    /// peer does the same work, not less.
    #[test]
    fn the_hash_map_ends_the_same_on_both_sides() {
        let lib = match crate::pmdk::libpmemobj() {
            Ok(lib) => lib,
            Err(reason) => {
                eprintln!("libpmemobj not run: {reason}");
                return;
            }
        };
        let (mut local, mut pool, map) = map_sides(lib).unwrap();
        map_no_sm(&mut local, map, 600, 5).unwrap();
        map_pmemobj(&mut pool, map, 600, 5).unwrap();
        let mut ours =
            map.entries(&pmwire_mirror::whisper::Snapshot { heap: &local.heap, media: &local.region }).unwrap();
        let mut tx = pool.begin().unwrap();
        let mut theirs = map.entries(&ObjWriter { tx: &mut tx }).unwrap();
        drop(tx);
        ours.sort_by_key(|e| e.0);
        theirs.sort_by_key(|e| e.0);
        assert!(ours.len() > 100, "{} entries", ours.len());
        assert!(ours == theirs, "{} entries against {}", ours.len(), theirs.len());
    }

    #[test]
    fn a_missing_libpmemobj_is_a_skip_with_its_reason() {
        let bar = indicatif::ProgressBar::hidden();
        let configs = [Config { epochs: 1, writes: 1 }];
        let (results, skipped, headlines) = run(Err("libpmemobj not found".into()), &configs, 1, true, &bar).unwrap();
        assert!(results.is_empty());
        assert_eq!(skipped.len(), 2, "the configuration and the hash map");
        assert_eq!(skipped[0].reason, "libpmemobj not found");
        assert!(headlines.iter().all(|h| !h.value.is_finite()), "no number without libpmemobj");
    }
}
