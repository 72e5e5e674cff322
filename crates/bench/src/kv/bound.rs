//! What bounds a closed-loop measurement: the load generator, the server,
//! both, or neither.
//!
//! With the server pinned to one CPU and the generator to another
//! ([`super::placement`]), a closed loop's throughput is set by whichever
//! side has no CPU left. A side whose CPU time over the measurement's wall
//! time (its *busy share*) is at least [`BUSY`] is saturated; when only the
//! generator is, the rate measures the generator's own cost per request,
//! and a ratio of two servers' rates says little about the servers.
//!
//! The generator's CPU time is its own, exactly: an external generator
//! (`redis-benchmark`, `wrk`) is reaped with `wait4(2)`, whose `rusage` is
//! that child's user + system time and nothing else
//! ([`output_with_usage`]); an in-process generator runs on one thread,
//! whose `CLOCK_THREAD_CPUTIME_ID` is read from inside it ([`on_thread`]).
//! The server's CPU time comes from [`super::placement::CpuClock`].

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::Instant;

use crate::schema::BenchResult;

/// The busy share (0..1) at and above which a side counts as saturated.
pub const BUSY: f64 = 0.95;

/// The metric: generator CPU µs per request.
pub const GENERATOR_CPU: &str = "load_generator_cpu_us_per_request";
/// The metric: generator CPU seconds / wall seconds.
pub const GENERATOR_BUSY: &str = "load_generator_busy_share";
/// The metric: server CPU seconds / wall seconds.
pub const SERVER_BUSY: &str = "server_busy_share";
/// The parameter of an aggregated row: the [`Bound`] of its median trial.
pub const BOUND: &str = "bound";

/// Which side bounds a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The generator is saturated, the server is not.
    Generator,
    /// The server is saturated, the generator is not.
    Server,
    /// Both are saturated.
    Both,
    /// Neither is: the round trip's latency bounds the rate.
    Neither,
}

impl Bound {
    /// The verdict for the two sides' busy shares (see [`BUSY`]).
    pub fn of(generator_busy_share: f64, server_busy_share: f64) -> Bound {
        match (generator_busy_share >= BUSY, server_busy_share >= BUSY) {
            (true, false) => Bound::Generator,
            (false, true) => Bound::Server,
            (true, true) => Bound::Both,
            (false, false) => Bound::Neither,
        }
    }

    /// The verdict as it appears in tables, JSON and headlines.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Generator => "generator-bound",
            Bound::Server => "server-bound",
            Bound::Both => "both busy",
            Bound::Neither => "neither (latency-bound)",
        }
    }

    /// The inverse of [`Bound::name`].
    pub fn parse(name: &str) -> Option<Bound> {
        [Bound::Generator, Bound::Server, Bound::Both, Bound::Neither].into_iter().find(|b| b.name() == name)
    }

    /// The verdict of a per-trial result holding both busy shares.
    pub fn of_result(result: &BenchResult) -> Option<Bound> {
        Some(Bound::of(result.get(GENERATOR_BUSY)?, result.get(SERVER_BUSY)?))
    }

    /// The verdict an aggregated row carries in its [`BOUND`] parameter.
    pub fn of_row(row: &BenchResult) -> Option<Bound> {
        row.params.get(BOUND).and_then(|v| v.as_str()).and_then(Bound::parse)
    }
}

/// What a headline comparing `ours` with `peer` should say about what bounds
/// the two measurements; `generator` names the load generator.
pub fn headline_text(ours: Option<Bound>, peer: Option<Bound>, generator: &str) -> Option<String> {
    let (ours, peer) = (ours?, peer?);
    Some(match (ours, peer) {
        (Bound::Generator, Bound::Generator) => {
            format!("generator-bound in both: the ratio measures {generator}, not the servers")
        }
        (Bound::Server, Bound::Server) => "server-bound in both: the ratio compares the servers".to_string(),
        (Bound::Both, Bound::Both) => "generator and server both busy in both: the ratio is bounded by both sides".to_string(),
        (Bound::Neither, Bound::Neither) => "neither side busy in both (latency-bound)".to_string(),
        _ => format!("ours {}, peer {}: the two rates are bounded differently", ours.name(), peer.name()),
    })
}

/// A span of CPU time of one side (generator or server) over wall time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    /// CPU seconds (user + system).
    pub cpu_s: f64,
    /// Wall seconds over which they were spent.
    pub wall_s: f64,
}

impl Usage {
    /// CPU seconds / wall seconds, clamped to 0..1 (one CPU's worth).
    pub fn busy_share(&self) -> f64 {
        (self.cpu_s / self.wall_s.max(1e-9)).clamp(0.0, 1.0)
    }
}

/// Adds the generator's CPU per request (over `requests` served during its
/// span) and busy share, and the server's busy share, to a trial's result.
pub fn with_usage(result: BenchResult, generator: Usage, requests: f64, server: Option<Usage>) -> BenchResult {
    let mut result = result.metric(GENERATOR_CPU, generator.cpu_s * 1e6 / requests.max(1.0)).metric(GENERATOR_BUSY, generator.busy_share());
    if let Some(server) = server {
        result = result.metric(SERVER_BUSY, server.busy_share());
    }
    result
}

/// The calling thread's CPU time (user + system), seconds.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: plain data filled by the kernel.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a live timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID): {}", std::io::Error::last_os_error());
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Runs `f` (an in-process generator on the calling thread) and returns its
/// result with the thread's CPU time and the wall time it took.
pub fn on_thread<T>(f: impl FnOnce() -> T) -> (T, Usage) {
    let (cpu, wall) = (thread_cpu_seconds(), Instant::now());
    let result = f();
    let usage = Usage { cpu_s: thread_cpu_seconds() - cpu, wall_s: wall.elapsed().as_secs_f64() };
    (result, usage)
}

/// Runs `command` to completion like [`Command::output`] (stdin null,
/// stdout and stderr captured), and returns the child's own CPU time
/// (`wait4`'s rusage, all its threads) over the wall time from spawn to
/// exit.
pub fn output_with_usage(command: &mut Command) -> std::io::Result<(Output, Usage)> {
    let wall = Instant::now();
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).map(|_| bytes)
    });
    let mut stdout = Vec::new();
    let read = child.stdout.take().expect("stdout is piped").read_to_end(&mut stdout);
    let (status, rusage) = wait4(child.id())?;
    let wall_s = wall.elapsed().as_secs_f64();
    read?;
    let stderr = reader.join().expect("the stderr reader does not panic")?;
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let usage = Usage { cpu_s: seconds(rusage.ru_utime) + seconds(rusage.ru_stime), wall_s };
    Ok((Output { status, stdout, stderr }, usage))
}

/// Reaps child `pid` (and only it), returning its status and rusage.
fn wait4(pid: u32) -> std::io::Result<(ExitStatus, libc::rusage)> {
    let mut status = 0;
    // SAFETY: plain data filled by the kernel.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: our own child, not yet reaped (std only reaps in wait/try_wait, never called on it).
        let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut rusage) };
        if rc == pid as libc::pid_t {
            return Ok((ExitStatus::from_raw(status), rusage));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_at_the_threshold() {
        assert_eq!(Bound::of(0.99, 0.80), Bound::Generator);
        assert_eq!(Bound::of(BUSY, 0.9499), Bound::Generator);
        assert_eq!(Bound::of(0.9499, BUSY), Bound::Server);
        assert_eq!(Bound::of(0.97, 1.0), Bound::Both);
        assert_eq!(Bound::of(0.5, 0.6), Bound::Neither);
        assert_eq!(Bound::of(f64::NAN, 0.99), Bound::Server, "an unknown share is not saturated");
        for b in [Bound::Generator, Bound::Server, Bound::Both, Bound::Neither] {
            assert_eq!(Bound::parse(b.name()), Some(b));
        }
        assert_eq!(Bound::parse("generator"), None);
    }

    #[test]
    fn a_result_and_a_row_carry_their_verdict() {
        let trial =
            with_usage(BenchResult::new("kv", "x"), Usage { cpu_s: 0.99, wall_s: 1.0 }, 1000.0, Some(Usage { cpu_s: 0.8, wall_s: 1.0 }));
        assert_eq!(trial.get(GENERATOR_CPU), Some(990.0));
        assert_eq!(Bound::of_result(&trial), Some(Bound::Generator));
        assert_eq!(Bound::of_result(&BenchResult::new("kv", "x").metric(GENERATOR_BUSY, 1.0)), None);
        let row = BenchResult::new("kv", "x").param(BOUND, Bound::Server.name());
        assert_eq!(Bound::of_row(&row), Some(Bound::Server));
        assert_eq!(Usage { cpu_s: 2.0, wall_s: 1.0 }.busy_share(), 1.0, "one CPU's worth at most");
    }

    #[test]
    fn headline_says_what_the_ratio_measures() {
        let text = headline_text(Some(Bound::Generator), Some(Bound::Generator), "redis-benchmark").unwrap();
        assert_eq!(text, "generator-bound in both: the ratio measures redis-benchmark, not the servers");
        let mixed = headline_text(Some(Bound::Server), Some(Bound::Generator), "wrk").unwrap();
        assert!(mixed.contains("ours server-bound") && mixed.contains("peer generator-bound"), "{mixed}");
        assert_eq!(headline_text(None, Some(Bound::Server), "wrk"), None);
    }

    #[test]
    fn thread_clock_counts_work_not_sleep() {
        let ((), usage) = on_thread(|| std::thread::sleep(std::time::Duration::from_millis(100)));
        assert!(usage.wall_s >= 0.1, "{usage:?}");
        assert!(usage.busy_share() < 0.5, "sleeping is not busy: {usage:?}");
        let (x, usage) = on_thread(|| {
            let mut x = 1u64;
            for _ in 0..50_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            x
        });
        std::hint::black_box(x);
        assert!(usage.cpu_s > 0.0 && usage.cpu_s <= usage.wall_s + 0.001, "spinning is work: {usage:?}");
    }

    #[test]
    fn child_rusage_is_the_childs_own() {
        let script = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo out; echo err >&2; exit 3";
        let (output, usage) = output_with_usage(Command::new("sh").args(["-c", script])).unwrap();
        assert_eq!(output.status.code(), Some(3));
        assert_eq!(output.stdout, b"out\n");
        assert_eq!(output.stderr, b"err\n");
        assert!(usage.cpu_s > 0.0 && usage.cpu_s <= usage.wall_s * 1.05 + 0.01, "{usage:?}");
        let (sleeper, usage) = output_with_usage(Command::new("sleep").arg("0.2")).unwrap();
        assert!(sleeper.status.success());
        assert!(usage.wall_s >= 0.2 && usage.busy_share() < 0.5, "{usage:?}");
        assert!(output_with_usage(&mut Command::new("/nonexistent/generator")).is_err());
    }
}
