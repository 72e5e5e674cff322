//! [`AutoSelector`]: what `Method::Auto` does per write, kept right online
//! (issue 13). I/O-free: the client asks [`pick`](AutoSelector::pick)
//! which method to use, times the write when told to, and hands the
//! latency back with [`record`](AutoSelector::record). Tests drive it with
//! synthetic latencies.
//!
//! What it owns, per size class (the calibration's sizes; a write belongs
//! to the smallest class at or above its length, or to the largest):
//! - the chosen method, starting from [`Calibration::choose`] (the default,
//!   Rpc, unless another was faster beyond noise at calibration);
//! - a *reference*: the chosen method's latest latencies, timed on the
//!   writes just before each probe;
//! - for every other candidate, a batch of *paired ratios*: a probe's
//!   latency over the median of the reference taken just before it. A
//!   burst of noise slows the probe and its reference alike, so a ratio
//!   measures the methods, not the moment (the same pairing as the
//!   calibration's rounds);
//! - counters: writes, probes, switches, and each method's recent
//!   latencies (evidence for `pmwire remote status` and the bench's JSON).
//!
//! Rules ([`AutoParams`] gives the numbers and why):
//! - **Probes within a budget.** One write in `probe_every` (64: 1.6%)
//!   goes to an alternative, the one with the fewest ratios (round robin).
//!   Until every alternative has one whole batch (after a calibration or a
//!   switch), one in `probe_every_young` (8). So after `n` writes a class
//!   has made at most `n / 64 + 1 + (switches + 1) × alternatives × batch`
//!   probes.
//! - **Switch only beyond noise.** When every alternative has a whole
//!   batch (`batch` ratios) the batches are judged and emptied: an
//!   alternative whose median ratio is ≤ `1 / (1 + margin)` and whose
//!   upper-quartile ratio is < 1 replaces the chosen method (the lowest
//!   median wins). Batches do not overlap, so each decision rests on fresh
//!   evidence and a rare unlucky batch is not judged again and again. A
//!   calibration fooled by a burst is thus corrected within
//!   `reference_window + alternatives × batch × probe_every_young` writes
//!   of its class (265 with two alternatives); a choice that turns slow is
//!   left within two batches, `2 × alternatives × batch × probe_every`.
//! - **Hysteresis.** Methods within the margin never replace each other:
//!   A gives way to B only if B is 10% faster, and B to A only if A is 10%
//!   faster, a dead band of 20% between the two decisions; a switch
//!   starts the evidence afresh (ratios were against the old choice).
//! - **Invalidation.** The selector is built for one [`TargetKey`]; the
//!   client drops it when the target differs (see [`Calibration::check_target`]).
//!
//! Invariants: the chosen method of a class is one of its candidates, and
//! every candidate gives the key's required guarantee at the class's size;
//! windows are bounded and allocated once.

use serde::Serialize;

use crate::calibration::{stats, Calibration, CalibrationError, Objective, TargetKey};
use crate::proto::Method;

/// The selector's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AutoParams {
    /// An alternative must be this much faster (paired median) to take
    /// over: 10%. Smaller, and two methods of equal cost trade places on
    /// noise; larger, and Auto may sit on a method this much slower than
    /// the best (the bench's target is 1.1×).
    pub margin: f64,
    /// Ratios per alternative in one decision: 16. The median of 16 is
    /// robust to 7 outliers (interrupted writes); with two methods of equal
    /// cost and 0–30% uniform noise, a batch passes the switch rule about
    /// once in 10^4 (a binomial tail: 9 of 16 ratios at or below 1/1.1).
    pub batch: usize,
    /// Chosen-method latencies a ratio's reference is the median of: 9,
    /// timed on the writes just before the probe.
    pub reference_window: usize,
    /// Latencies kept per method for the status: 64.
    pub latency_window: usize,
    /// One write in this many is a probe until every alternative has a
    /// batch: 8 (so a fooled calibration is found within about 265 writes;
    /// this allowance is spent once per calibration or switch).
    pub probe_every_young: u64,
    /// One write in this many is a probe otherwise: 64 (1.6% of writes).
    pub probe_every: u64,
}

impl Default for AutoParams {
    fn default() -> AutoParams {
        AutoParams {
            margin: 0.10,
            batch: 16,
            reference_window: 9,
            latency_window: 64,
            probe_every_young: 8,
            probe_every: 64,
        }
    }
}

impl AutoParams {
    fn check(&self) {
        assert!(self.margin > 0.0 && self.margin < 1.0, "margin {}", self.margin);
        assert!(self.batch >= 1, "batch");
        assert!(self.reference_window >= 1, "reference_window");
        assert!(self.latency_window >= self.reference_window, "latency_window");
        assert!(self.probe_every_young >= 2, "probe_every_young leaves no write to the choice");
        assert!(self.probe_every >= self.probe_every_young, "probe_every below probe_every_young");
    }
}

/// A bounded window of the latest values.
#[derive(Clone, Debug)]
struct Window<T> {
    values: Vec<T>,
    next: usize,
    cap: usize,
}

impl<T: Copy> Window<T> {
    fn new(cap: usize) -> Window<T> {
        Window { values: Vec::with_capacity(cap), next: 0, cap }
    }

    fn push(&mut self, v: T) {
        if self.values.len() < self.cap {
            self.values.push(v);
        } else {
            self.values[self.next] = v;
        }
        self.next = (self.next + 1) % self.cap;
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn clear(&mut self) {
        self.values.clear();
        self.next = 0;
    }
}

/// One candidate method's evidence in a class.
#[derive(Clone, Debug)]
struct Evidence {
    method: Method,
    calibrated_ns: u64,
    calibrated_samples: u32,
    latencies: Window<u64>,
    observed: u64,
    ratios: Window<f64>,
    /// The last judged batch's median and upper-quartile ratio.
    judged: Option<(f64, f64)>,
}

#[derive(Clone, Debug)]
struct Class {
    size_bytes: u64,
    calibrated: usize,
    chosen: usize,
    methods: Vec<Evidence>,
    reference: Window<u64>,
    writes: u64,
    probes: u64,
    switches: u64,
    since_probe: u64,
}

/// What to do for one `Auto` write (from [`AutoSelector::pick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    /// The concrete method to write with.
    pub method: Method,
    /// The write is a probe of an alternative.
    pub probe: bool,
    /// Time the write and [`record`](AutoSelector::record) its latency.
    pub timed: bool,
    class: Option<usize>,
}

/// A method's evidence in a class, as the status shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodStatus {
    /// The method.
    pub method: Method,
    /// Its calibrated estimate (trimmed mean), ns.
    pub calibrated_ns: u64,
    /// Calibration samples.
    pub calibrated_samples: u32,
    /// Median of its latest latencies seen online, ns (`None`: none yet).
    pub online_ns: Option<u64>,
    /// Latencies seen online (timed writes as the choice, or probes).
    pub online_samples: u64,
    /// Median of its latency over the chosen method's, paired probe by
    /// probe, in the last judged batch (`None` for the chosen method, or
    /// before a whole batch since the last switch).
    pub ratio_to_chosen: Option<f64>,
    /// Ratios gathered towards the next batch.
    pub pairs: usize,
}

/// One size class, as the status shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassStatus {
    /// The class's size (writes up to it, or past the largest class).
    pub size_bytes: u64,
    /// The method `Auto` uses now.
    pub chosen: Method,
    /// The method the calibration chose.
    pub calibrated_choice: Method,
    /// `Auto` writes in the class.
    pub writes: u64,
    /// Of which probes.
    pub probes: u64,
    /// Times the choice changed online.
    pub switches: u64,
    /// Every candidate's evidence.
    pub methods: Vec<MethodStatus>,
}

/// The selector's state, for `pmwire remote status` and the bench's JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoStatus {
    /// What the evidence is valid for.
    pub target: TargetKey,
    /// The numbers it runs with.
    pub params: AutoParams,
    /// Per size class.
    pub classes: Vec<ClassStatus>,
}

/// `Auto`'s per-class choice, corrected online (see the module docs).
#[derive(Clone, Debug)]
pub struct AutoSelector {
    target: TargetKey,
    params: AutoParams,
    table: Calibration,
    classes: Vec<Class>,
    scratch_ns: Vec<u64>,
    scratch_ratio: Vec<f64>,
}

impl AutoSelector {
    /// A selector starting from `table`, which must name its target; every
    /// method of the table that gives the target's required guarantee at a
    /// size is a candidate there.
    pub fn new(table: Calibration, params: AutoParams) -> Result<AutoSelector, CalibrationError> {
        params.check();
        table.validate()?;
        let target = table.target.clone().ok_or_else(|| CalibrationError::OtherTarget("the table names no target".into()))?;
        let mut classes = Vec::new();
        for size_bytes in table.sizes() {
            let allowed = |m: Method| target.allows(m, size_bytes);
            let Some(first) = table.choose(size_bytes, Objective::Latency, allowed) else { continue };
            let methods: Vec<Evidence> = table
                .points
                .iter()
                .filter(|p| p.size_bytes == size_bytes && allowed(p.method))
                .map(|p| Evidence {
                    method: p.method,
                    calibrated_ns: p.estimate_ns(),
                    calibrated_samples: p.samples,
                    latencies: Window::new(params.latency_window),
                    observed: 0,
                    ratios: Window::new(params.batch),
                    judged: None,
                })
                .collect();
            let chosen = methods.iter().position(|e| e.method == first).expect("choose picks a candidate");
            classes.push(Class {
                size_bytes,
                calibrated: chosen,
                chosen,
                methods,
                reference: Window::new(params.reference_window),
                writes: 0,
                probes: 0,
                switches: 0,
                since_probe: 0,
            });
        }
        if classes.is_empty() {
            return Err(CalibrationError::Invalid("no measured method gives the required guarantee"));
        }
        let cap = params.latency_window.max(params.batch);
        Ok(AutoSelector { target, params, table, classes, scratch_ns: Vec::with_capacity(cap), scratch_ratio: Vec::with_capacity(cap) })
    }

    /// The target the evidence is valid for.
    pub fn target(&self) -> &TargetKey {
        &self.target
    }

    /// The calibration it started from.
    pub fn calibration(&self) -> &Calibration {
        &self.table
    }

    fn class_of(&self, len: u64) -> usize {
        self.classes.iter().position(|c| c.size_bytes >= len).unwrap_or(self.classes.len() - 1)
    }

    /// The method `Auto` uses now for a `len`-byte write, among those
    /// `allowed` for it (no probe, no state change).
    pub fn current(&self, len: u64, allowed: impl Fn(Method) -> bool) -> Option<Method> {
        let class = &self.classes[self.class_of(len)];
        let chosen = class.methods[class.chosen].method;
        if allowed(chosen) {
            return Some(chosen);
        }
        class.methods.iter().filter(|e| allowed(e.method)).min_by_key(|e| e.calibrated_ns).map(|e| e.method)
    }

    /// Decides one `Auto` write of `len` bytes among the methods `allowed`
    /// for it: the chosen method, or now and then a probe.
    pub fn pick(&mut self, len: u64, allowed: impl Fn(Method) -> bool) -> Option<Pick> {
        let at = self.class_of(len);
        let params = self.params;
        let chosen = self.classes[at].methods[self.classes[at].chosen].method;
        if !allowed(chosen) {
            let method = self.current(len, allowed)?;
            return Some(Pick { method, probe: false, timed: false, class: None });
        }
        let class = &mut self.classes[at];
        class.writes += 1;
        class.since_probe += 1;
        let young = class.methods.iter().enumerate().any(|(i, e)| i != class.chosen && e.judged.is_none());
        let every = if young { params.probe_every_young } else { params.probe_every };
        let reference_full = class.reference.len() >= params.reference_window;
        if reference_full && class.since_probe >= every {
            let target = class
                .methods
                .iter()
                .enumerate()
                .filter(|(i, e)| *i != class.chosen && allowed(e.method) && e.ratios.len() < params.batch)
                .min_by_key(|(_, e)| (e.ratios.len(), e.observed))
                .map(|(i, _)| i);
            // With nothing to probe (a single candidate), the turn passes
            // all the same, so only the writes before a turn are timed.
            class.since_probe = 0;
            if let Some(i) = target {
                class.probes += 1;
                return Some(Pick { method: class.methods[i].method, probe: true, timed: true, class: Some(at) });
            }
        }
        let timed = !reference_full || class.since_probe + params.reference_window as u64 >= every;
        Some(Pick { method: chosen, probe: false, timed, class: Some(at) })
    }

    /// Takes the latency of a write done as `pick` said (only timed picks
    /// are recorded).
    pub fn record(&mut self, pick: Pick, latency_ns: u64) {
        let Some(at) = pick.class else { return };
        if !pick.timed {
            return;
        }
        let latency_ns = latency_ns.max(1);
        let class = &mut self.classes[at];
        let Some(i) = class.methods.iter().position(|e| e.method == pick.method) else { return };
        if !pick.probe {
            if i != class.chosen {
                return; // chosen before a switch: not this reference's
            }
            class.reference.push(latency_ns);
            class.methods[i].latencies.push(latency_ns);
            class.methods[i].observed += 1;
            return;
        }
        if class.reference.len() == 0 {
            return; // a probe is only picked with a full reference
        }
        self.scratch_ns.clear();
        self.scratch_ns.extend_from_slice(&class.reference.values);
        self.scratch_ns.sort_unstable();
        let reference = stats::quantile_sorted(&self.scratch_ns, 0.5) as f64;
        let e = &mut class.methods[i];
        e.latencies.push(latency_ns);
        e.observed += 1;
        e.ratios.push(latency_ns as f64 / reference);
        self.consider_switch(at);
    }

    /// Median and upper quartile of an alternative's ratios.
    fn ratio_quartiles(scratch: &mut Vec<f64>, e: &Evidence) -> (f64, f64) {
        scratch.clear();
        scratch.extend_from_slice(&e.ratios.values);
        scratch.sort_unstable_by(f64::total_cmp);
        (stats::quantile_sorted(scratch, 0.5), stats::quantile_sorted(scratch, 0.75))
    }

    fn consider_switch(&mut self, at: usize) {
        let params = self.params;
        let class = &mut self.classes[at];
        let whole = class.methods.iter().enumerate().all(|(i, e)| i == class.chosen || e.ratios.len() >= params.batch);
        if !whole {
            return;
        }
        let mut best: Option<(usize, f64)> = None;
        for (i, e) in class.methods.iter_mut().enumerate() {
            if i == class.chosen {
                continue;
            }
            let (p50, p75) = Self::ratio_quartiles(&mut self.scratch_ratio, e);
            e.judged = Some((p50, p75));
            e.ratios.clear();
            let beyond_noise = p50 * (1.0 + params.margin) <= 1.0 && p75 < 1.0;
            if beyond_noise && best.is_none_or(|(_, b)| p50 < b) {
                best = Some((i, p50));
            }
        }
        if let Some((i, _)) = best {
            class.chosen = i;
            class.switches += 1;
            class.since_probe = 0;
            class.reference.clear();
            class.methods.iter_mut().for_each(|e| e.judged = None);
        }
    }

    /// The choice of every class and its evidence.
    pub fn status(&self) -> AutoStatus {
        let mut scratch_ns = Vec::new();
        let classes = self
            .classes
            .iter()
            .map(|c| ClassStatus {
                size_bytes: c.size_bytes,
                chosen: c.methods[c.chosen].method,
                calibrated_choice: c.methods[c.calibrated].method,
                writes: c.writes,
                probes: c.probes,
                switches: c.switches,
                methods: c
                    .methods
                    .iter()
                    .map(|e| {
                        let online_ns = (e.latencies.len() > 0).then(|| {
                            scratch_ns.clear();
                            scratch_ns.extend_from_slice(&e.latencies.values);
                            scratch_ns.sort_unstable();
                            stats::quantile_sorted(&scratch_ns, 0.5)
                        });
                        let ratio = e.judged.map(|(p50, _)| p50);
                        MethodStatus {
                            method: e.method,
                            calibrated_ns: e.calibrated_ns,
                            calibrated_samples: e.calibrated_samples,
                            online_ns,
                            online_samples: e.observed,
                            ratio_to_chosen: ratio,
                            pairs: e.ratios.len(),
                        }
                    })
                    .collect(),
            })
            .collect();
        AutoStatus { target: self.target.clone(), params: self.params, classes }
    }
}

#[cfg(test)]
mod tests;
