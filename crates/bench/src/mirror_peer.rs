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
//! median of its rounds'. If libpmemobj cannot run, the suite records a
//! skipped entry with the reason, never a number.

use std::time::Instant;

use anyhow::Result;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::mirror::{median, transactions, Config, Primary, DATA_BYTES, WRITE_BYTES};
use crate::pmdk::{Libpmemobj, ObjPool};
use crate::remote::common::ratio;
use crate::schema::{BenchResult, Skipped};
use crate::{table, Headline};

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
            let skipped = configs.iter().map(|c| Skipped::new(BENCH, &c.label(), &reason)).collect();
            return Ok((Vec::new(), skipped, headlines(&[])));
        }
    };
    let mut local = Primary::create("mirror-pmemobj-nosm.pool")?;
    // times[config][side]: NO-SM, libpmemobj; one mean per round.
    let mut times = vec![[Vec::new(), Vec::new()]; configs.len()];
    for round in 0..rounds {
        bar.set_message(format!("NO-SM vs libpmemobj (round {}/{rounds})", round + 1));
        for (c, &config) in configs.iter().enumerate() {
            let seed = 0x7472_616e ^ (u64::from(config.epochs) << 8) ^ u64::from(config.writes) ^ (round << 32);
            let count = transactions(config, quick);
            times[c][0].push(no_sm(&mut local, config, count, seed)?);
            times[c][1].push(pmemobj(&mut pool, config, count, seed)?);
        }
        bar.inc(1);
    }
    let results: Vec<BenchResult> = configs
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
    let headlines = headlines(&results);
    Ok((results, Vec::new(), headlines))
}

/// NO-SM's time over libpmemobj's: the geometric mean over the Transact
/// configurations (target ≤ 1.1x), and the worst one for information.
fn headlines(results: &[BenchResult]) -> Vec<Headline> {
    let ratios: Vec<f64> = results.iter().filter_map(|r| r.get("no_sm_over_pmemobj_x")).collect();
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

    #[test]
    fn a_missing_libpmemobj_is_a_skip_with_its_reason() {
        let bar = indicatif::ProgressBar::hidden();
        let configs = [Config { epochs: 1, writes: 1 }];
        let (results, skipped, headlines) = run(Err("libpmemobj not found".into()), &configs, 1, true, &bar).unwrap();
        assert!(results.is_empty());
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].reason, "libpmemobj not found");
        assert!(headlines.iter().all(|h| !h.value.is_finite()), "no number without libpmemobj");
    }
}
