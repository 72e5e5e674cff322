//! Where the server under test and its load generator run, applied the
//! same way to every server (ours and Redis's), and what the server
//! spends per request.
//!
//! On a small machine the scheduler otherwise moves a single-threaded
//! server and its load generator between the cores from run to run: when
//! both land on one core they fight for it, and a run measures placement
//! rather than the server (the tour once saw redis with `appendfsync
//! always` "beat" redis without persistence by 2×). [`Placement::split`]
//! pins every server process (all its threads) to one CPU and the load
//! generator (`redis-benchmark`, or the in-process generators' thread) to
//! another, as `taskset -c` would; the JSON parameters record it.
//!
//! [`CpuClock`] reads a process's CPU time (its CPU-time clock, or
//! `/proc/<pid>/stat`; user + system, all threads), so a suite can report the server's CPU per
//! request beside its throughput: a figure that depends far less on what
//! else the machine runs than requests per second does.

use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// CPUs for the server and for the load generator (`None`: not pinned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The CPU every server process is pinned to.
    pub server_cpu: Option<usize>,
    /// The CPU the load generator is pinned to.
    pub load_cpu: Option<usize>,
}

impl Placement {
    /// No pinning: the scheduler decides.
    pub fn unpinned() -> Placement {
        Placement { server_cpu: None, load_cpu: None }
    }

    /// The server on the last CPU this process may use, the load generator
    /// on the first; unpinned if fewer than two are allowed.
    pub fn split() -> Placement {
        let cpus = allowed_cpus();
        match (cpus.first(), cpus.last()) {
            (Some(&first), Some(&last)) if first != last => Placement { server_cpu: Some(last), load_cpu: Some(first) },
            _ => Placement::unpinned(),
        }
    }

    /// Pins a server command (and every thread it starts) to the server CPU.
    pub fn pin_server(&self, command: &mut Command) {
        pin_command(command, self.server_cpu);
    }

    /// Pins a load-generator command to the load CPU.
    pub fn pin_load(&self, command: &mut Command) {
        pin_command(command, self.load_cpu);
    }

    /// Runs `f` on the calling thread pinned to the load CPU (the
    /// in-process generators), then restores the thread's affinity.
    pub fn as_load<T>(&self, f: impl FnOnce() -> T) -> T {
        let Some(cpu) = self.load_cpu else { return f() };
        let saved = current_mask();
        let pinned = set_current_mask(&single(cpu)).is_ok();
        let result = f();
        if pinned {
            set_current_mask(&saved).expect("restoring the thread's own affinity");
        }
        result
    }

    /// Pins the calling thread to the server CPU for good (an in-process
    /// server's own thread, e.g. the mirror suite's backup).
    pub fn pin_current_as_server(&self) -> std::io::Result<()> {
        match self.server_cpu {
            Some(cpu) => set_current_mask(&single(cpu)),
            None => Ok(()),
        }
    }

    /// The placement as it goes into a suite's JSON parameters.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "server_cpu": self.server_cpu,
            "load_generator_cpu": self.load_cpu,
            "how": if self.server_cpu.is_some() {
                "sched_setaffinity before exec (as taskset -c): every server process on server_cpu, the load generator on load_generator_cpu"
            } else {
                "not pinned"
            },
        })
    }
}

fn pin_command(command: &mut Command, cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    let mask = single(cpu);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls sched_setaffinity (async-signal-safe) on a mask built before
    // the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mask) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn single(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        set
    }
}

fn current_mask() -> libc::cpu_set_t {
    // SAFETY: plain data, filled by the kernel for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let rc = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        assert_eq!(rc, 0, "sched_getaffinity of the calling thread: {}", std::io::Error::last_os_error());
        set
    }
}

fn set_current_mask(set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: a valid mask for the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs the calling thread may run on, ascending.
pub fn allowed_cpus() -> Vec<usize> {
    let set = current_mask();
    // SAFETY: CPU_ISSET only reads the mask.
    (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
}

/// How busy the whole machine was over an interval, and how much of that
/// was neither the server nor this process (the load generator, its
/// `redis-benchmark` children included): the share of all CPUs that other
/// processes took, which makes a trial's throughput untrustworthy. The
/// machine's busy time counts the hypervisor's steal time too, so a host
/// that takes this guest's CPUs away shows up here as well.
#[derive(Clone, Copy, Debug)]
pub struct LoadProbe {
    machine_busy_s: f64,
    server_s: f64,
    own_s: f64,
    at: std::time::Instant,
    server: Option<CpuClock>,
    /// CPUs of the machine share (`None`: those the calling thread may use).
    cpus: Option<usize>,
}

impl LoadProbe {
    /// Starts an interval for server `server`.
    pub fn start(server: CpuClock) -> Result<LoadProbe> {
        Ok(LoadProbe {
            machine_busy_s: machine_busy_seconds()?,
            server_s: server.seconds()?,
            own_s: own_and_children_seconds()?,
            at: std::time::Instant::now(),
            server: Some(server),
            cpus: None,
        })
    }

    /// Starts an interval for a server that runs inside this process (its
    /// threads count as this process's), over `cpus` CPUs (taken before
    /// any thread is pinned: [`allowed_cpus`] of a pinned thread is one).
    pub fn start_in_process(cpus: usize) -> Result<LoadProbe> {
        Ok(LoadProbe {
            machine_busy_s: machine_busy_seconds()?,
            server_s: 0.0,
            own_s: own_and_children_seconds()?,
            at: std::time::Instant::now(),
            server: None,
            cpus: Some(cpus),
        })
    }

    /// The share (0..1) of all CPUs' time since `start` that processes other
    /// than the server and this one (with its waited-for children) used.
    pub fn other_share(&self) -> Result<f64> {
        let wall = self.at.elapsed().as_secs_f64();
        let busy = machine_busy_seconds()? - self.machine_busy_s;
        let server = match &self.server {
            Some(clock) => clock.seconds()? - self.server_s,
            None => 0.0,
        };
        let ours = server + (own_and_children_seconds()? - self.own_s);
        let cpus = self.cpus.unwrap_or_else(|| allowed_cpus().len()).max(1) as f64;
        Ok(((busy - ours) / (wall * cpus)).clamp(0.0, 1.0))
    }
}

/// Busy time of all CPUs (`/proc/stat`: user, nice, system, irq, softirq, steal), seconds.
fn machine_busy_seconds() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = text.lines().find(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().unwrap_or(0)).collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = field(0) + field(1) + field(2) + field(5) + field(6) + field(7);
    Ok(busy as f64 / clock_ticks_per_second())
}

/// This process's CPU time plus that of its waited-for children, seconds.
fn own_and_children_seconds() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    let rest = &text[text.rfind(')').context("no ')' in /proc/self/stat")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: utime, stime, cutime, cstime are fields 14-17, at 11..=14.
    let sum: u64 = (11..=14).map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)).sum();
    Ok(sum as f64 / clock_ticks_per_second())
}

/// A process's CPU time (user + system, all threads) since it started.
#[derive(Clone, Copy, Debug)]
pub struct CpuClock {
    pid: u32,
}

impl CpuClock {
    /// The clock of process `pid`.
    pub fn of(pid: u32) -> CpuClock {
        CpuClock { pid }
    }

    /// CPU seconds used so far: the process's CPU-time clock
    /// (`clock_getcpuclockid`, nanoseconds), or `/proc/<pid>/stat` (clock
    /// ticks) where that clock cannot be read.
    pub fn seconds(&self) -> Result<f64> {
        if let Some(seconds) = self.clock_seconds() {
            return Ok(seconds);
        }
        let path = format!("/proc/{}/stat", self.pid);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        cpu_seconds(&text, clock_ticks_per_second()).with_context(|| format!("parsing {path}"))
    }
}

impl CpuClock {
    fn clock_seconds(&self) -> Option<f64> {
        // The clock id encodes the pid in 29 bits, and pid 0 would be this
        // process: only pids that can exist (PID_MAX_LIMIT is 2^22).
        if self.pid == 0 || self.pid > 1 << 22 {
            return None;
        }
        let mut clock: libc::clockid_t = 0;
        // SAFETY: plain syscalls writing into locals.
        unsafe {
            if libc::clock_getcpuclockid(self.pid as libc::pid_t, &mut clock) != 0 {
                return None;
            }
            let mut ts: libc::timespec = std::mem::zeroed();
            if libc::clock_gettime(clock, &mut ts) != 0 {
                return None;
            }
            Some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
        }
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(ticks > 0, "sysconf(_SC_CLK_TCK)");
    ticks as f64
}

/// utime + stime of a `/proc/<pid>/stat` line, in seconds. The command
/// name (field 2) is in parentheses and may hold spaces, so fields are
/// counted after its closing parenthesis.
fn cpu_seconds(stat: &str, ticks_per_second: f64) -> Result<f64> {
    let rest = &stat[stat.rfind(')').context("no ')' after the command name")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let field = |i: usize| -> Result<f64> {
        let text = fields.get(i).with_context(|| format!("only {} fields", fields.len()))?;
        Ok(text.parse::<u64>().with_context(|| format!("field {text:?}"))? as f64)
    };
    Ok((field(11)? + field(12)?) / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_after_a_name_with_spaces() {
        let stat = "4242 (redis-server *:6) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 5 0 100 1 2 3";
        assert_eq!(cpu_seconds(stat, 100.0).unwrap(), 4.0);
        assert!(cpu_seconds("4242 (x) S 1 2", 100.0).is_err());
        assert!(cpu_seconds("no parenthesis", 100.0).is_err());
    }

    #[test]
    fn own_cpu_clock_advances_with_work() {
        let clock = CpuClock::of(std::process::id());
        let before = clock.seconds().unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while clock.seconds().unwrap() <= before {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            assert!(start.elapsed().as_secs() < 60, "no CPU time accounted in a minute of work");
        }
        std::hint::black_box(x);
    }

    #[test]
    fn cpu_clock_agrees_with_proc() {
        let clock = CpuClock::of(std::process::id());
        let precise = clock.clock_seconds().expect("the process CPU clock of our own pid");
        let path = format!("/proc/{}/stat", std::process::id());
        let ticks = cpu_seconds(&std::fs::read_to_string(path).unwrap(), clock_ticks_per_second()).unwrap();
        assert!((precise - ticks).abs() < 0.5, "clock {precise} s, /proc {ticks} s");
        assert!(CpuClock::of(u32::MAX / 2).seconds().is_err(), "no such process");
        assert!(CpuClock::of((1 << 22) - 1).clock_seconds().is_none_or(|_| std::path::Path::new("/proc/4194303").exists()));
    }

    #[test]
    fn other_load_is_a_share() {
        let probe = LoadProbe::start(CpuClock::of(std::process::id())).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let share = probe.other_share().unwrap();
        assert!((0.0..=1.0).contains(&share), "{share}");
    }

    #[test]
    fn split_puts_server_and_load_apart_and_pins_the_thread() {
        let placement = Placement::split();
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        if cpus.len() < 2 {
            assert_eq!(placement, Placement::unpinned());
            return;
        }
        assert_ne!(placement.server_cpu, placement.load_cpu);
        let inside = placement.as_load(allowed_cpus);
        assert_eq!(inside, vec![placement.load_cpu.unwrap()]);
        assert_eq!(allowed_cpus(), cpus, "affinity restored");
    }

    #[test]
    fn pinned_command_runs_on_its_cpu() {
        let placement = Placement::split();
        let Some(cpu) = placement.server_cpu else { return };
        let mut command = Command::new("grep");
        command.args(["Cpus_allowed_list", "/proc/self/status"]);
        placement.pin_server(&mut command);
        let out = command.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.split_whitespace().last(), Some(cpu.to_string().as_str()), "{text}");
    }
}
