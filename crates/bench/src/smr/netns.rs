//! Three network namespaces for `pmwire bench smr-crash --netns`, and the
//! faults made in them.
//!
//! Topology (all names start with [`PREFIX`]):
//!
//! ```text
//!  root namespace: clients, bridge pmwc-br 10.231.7.254/24
//!        |                 |                 |
//!     pmwc-h1           pmwc-h2           pmwc-h3        (veth, root side, bridge ports)
//!        |                 |                 |
//!  ns pmwc-1: eth0   ns pmwc-2: eth0   ns pmwc-3: eth0   (veth, namespace side)
//!   10.231.7.1        10.231.7.2        10.231.7.3       (replica 1, 2, 3)
//! ```
//!
//! Replica `i` runs in namespace `pmwc-i` (`ip netns exec`) and listens on
//! 10.231.7.i; the clients stay in the root namespace and reach the
//! replicas through the bridge. A partition downs a replica's `eth0`
//! (inside its namespace: it loses its route to everyone, clients
//! included); `netem` delays and drops what a replica's `eth0` sends. A
//! kernel without netem (this machine's) gets a token-bucket rate limit
//! (`tbf`: queueing delay under load) and an nftables random-drop rule
//! instead, and the report says so.
//!
//! Invariants: [`Namespaces::create`] first removes whatever a previous run
//! left with this prefix (killing processes still inside a namespace), so
//! it is idempotent; dropping [`Namespaces`] removes everything again. One
//! campaign at a time holds [`LOCK`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Every namespace, link and bridge made here starts with this.
pub const PREFIX: &str = "pmwc-";
/// The bridge in the root namespace.
pub const BRIDGE: &str = "pmwc-br";
/// The namespace side of each veth pair.
pub const DEVICE: &str = "eth0";
/// Held (flock) while namespaces with [`PREFIX`] exist.
const LOCK: &str = "/run/pmwire-smr-netns.lock";
/// The nftables table of the loss rule (inside a namespace).
const TABLE: &str = "pmwc";
/// The nftables table of a silent cut (inside a namespace).
const CUT_TABLE: &str = "pmwc_cut";
/// The replicas' port (each replica has its own address).
const PORT: u16 = 7401;

/// Why the namespace mode cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: creating network namespaces and veth pairs needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)".into());
    }
    for tool in ["ip", "tc"] {
        let found = Command::new(tool).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
        if found.is_err() {
            return Some(format!("'{tool}' not found (Debian package iproute2)"));
        }
    }
    None
}

/// Runs `ip`/`tc` with `args`; an error with its stderr if it fails.
fn run(tool: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(tool).args(args).stdin(Stdio::null()).output().with_context(|| format!("running {tool}"))?;
    if !out.status.success() {
        bail!("{tool} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Runs `tool args`, ignoring failure (teardown of what may not exist).
fn quiet(tool: &str, args: &[&str]) {
    let _ = Command::new(tool).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// Output of `ip ARGS` (empty if it fails).
fn ip_text(args: &[&str]) -> String {
    Command::new("ip").args(args).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
}

/// Namespaces, then links, with [`PREFIX`].
fn leftovers() -> (Vec<String>, Vec<String>) {
    let namespaces = ip_text(&["netns", "list"]).lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with(PREFIX)).map(String::from).collect();
    let links = ip_text(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    (namespaces, links)
}

/// Removes every namespace, bridge and veth with [`PREFIX`], killing any
/// process still inside such a namespace (a previous run that crashed),
/// and waits (at most 10 s) until the kernel has let them go: a deleted
/// namespace is dismantled asynchronously, and its veth's root-side peer
/// lingers until then.
pub fn remove_stale() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (namespaces, links) = leftovers();
        if (namespaces.is_empty() && links.is_empty()) || std::time::Instant::now() > deadline {
            return;
        }
        for ns in &namespaces {
            for pid in ip_text(&["netns", "pids", ns]).split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: plain syscall; these processes run in our namespace.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            quiet("ip", &["netns", "del", ns]);
        }
        for link in &links {
            quiet("ip", &["link", "del", link]);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The three namespaces, removed on drop.
pub struct Namespaces {
    /// The campaign's lock; `None` for a run's process that attached to
    /// its campaign's namespaces ([`Namespaces::attach`]), which neither
    /// made nor removes them.
    lock: Option<File>,
    /// The kernel has netem.
    pub netem: bool,
    /// `nft` is installed (loss without netem).
    pub nft: bool,
}

impl Namespaces {
    /// Removes stale ones and creates the topology of the module docs.
    pub fn create() -> Result<Namespaces> {
        if let Some(why) = unavailable() {
            bail!("the network-namespace mode cannot run: {why}");
        }
        let lock = File::create(LOCK).with_context(|| format!("create {LOCK}"))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            bail!("another smr-crash --netns campaign is running (it holds {LOCK})");
        }
        remove_stale();
        let nft = Command::new("nft").arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
        let mut made = Namespaces { lock: Some(lock), netem: false, nft };
        made.build().context("setting up the network namespaces")?;
        made.netem = netem_works(&namespace(1));
        Ok(made)
    }

    /// The namespaces a running campaign made, for the process that runs
    /// one of its runs: it impairs, cuts and heals them, and leaves them
    /// to the campaign to remove.
    pub fn attach() -> Result<Namespaces> {
        if !Path::new(&format!("/run/netns/{}", namespace(1))).exists() {
            bail!("no campaign's network namespaces to run in ({} is missing)", namespace(1));
        }
        let nft = Command::new("nft").arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
        Ok(Namespaces { lock: None, netem: netem_works(&namespace(1)), nft })
    }

    fn build(&self) -> Result<()> {
        run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        run("ip", &["addr", "add", &format!("{}/24", Ipv4Addr::new(10, 231, 7, 254)), "dev", BRIDGE])?;
        run("ip", &["link", "set", BRIDGE, "up"])?;
        for id in 1..=3u64 {
            let (ns, host) = (namespace(id), format!("{PREFIX}h{id}"));
            run("ip", &["netns", "add", &ns])?;
            run("ip", &["link", "add", &host, "type", "veth", "peer", "name", DEVICE, "netns", &ns])?;
            run("ip", &["link", "set", &host, "master", BRIDGE])?;
            run("ip", &["link", "set", &host, "up"])?;
            run("ip", &["-n", &ns, "addr", "add", &format!("{}/24", address(id)), "dev", DEVICE])?;
            run("ip", &["-n", &ns, "link", "set", DEVICE, "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Every replica's address.
    pub fn peers(&self) -> BTreeMap<u64, SocketAddr> {
        (1..=3).map(|id| (id, SocketAddr::from((address(id), PORT)))).collect()
    }

    /// The command prefix that runs a process in replica `id`'s namespace.
    pub fn prefix(&self, id: u64) -> Vec<String> {
        ["ip", "netns", "exec", &namespace(id)].map(String::from).to_vec()
    }

    /// Replica `id`'s namespace's TCP sockets with their internals (`ss
    /// -tinpa`), for a failing run's diagnosis; the error's text if `ss`
    /// failed.
    pub fn sockets(&self, id: u64) -> String {
        match std::process::Command::new("ip").args(["netns", "exec", &namespace(id), "ss", "-tinpa"]).output() {
            Ok(o) => format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
            Err(e) => format!("ss: {e}"),
        }
    }

    /// Downs (`up == false`) or ups replica `id`'s link.
    pub fn set_link(&self, id: u64, up: bool) -> Result<()> {
        run("ip", &["-n", &namespace(id), "link", "set", DEVICE, if up { "up" } else { "down" }])
    }

    /// Cuts replica `id` off silently (`cut`) or ends the cut: an
    /// nftables table in its namespace drops every IPv4 packet in and out.
    /// Unlike a link taken down (whose sockets get an error at once, so
    /// UCX drops their connections and the replicas dial again), the
    /// replicas' TCP connections stay up and retransmit into the void with
    /// exponential backoff, as across a real partition. Needs `nft`.
    pub fn set_silent_cut(&self, id: u64, cut: bool) -> Result<()> {
        let ns = namespace(id);
        if cut {
            let rules = format!(
                "add table ip {CUT_TABLE}; add chain ip {CUT_TABLE} in {{ type filter hook input priority 0; policy drop; }}; add chain ip {CUT_TABLE} out {{ type filter hook output priority 0; policy drop; }}"
            );
            return run("ip", &["netns", "exec", &ns, "nft", &rules]);
        }
        run("ip", &["netns", "exec", &ns, "nft", "delete", "table", "ip", CUT_TABLE])
    }

    /// Impairs what replica `id` sends: netem's `delay_ms` and
    /// `loss_percent` where the kernel has netem; otherwise a token bucket
    /// of `fallback_mbit` (queueing delay under load, at most `delay_ms`
    /// queued, then drops) and, if `nft` is installed, a random drop of
    /// `loss_percent`. What was applied, in words.
    pub fn impair(&self, id: u64, delay_ms: u32, loss_percent: f64, fallback_mbit: u32) -> Result<String> {
        let ns = namespace(id);
        if self.netem {
            let (delay, loss) = (format!("{delay_ms}ms"), format!("{loss_percent}%"));
            run("tc", &["-n", &ns, "qdisc", "replace", "dev", DEVICE, "root", "netem", "delay", &delay, "loss", &loss])?;
            return Ok(format!("netem delay {delay_ms} ms loss {loss_percent}%"));
        }
        let (rate, latency) = (format!("{fallback_mbit}mbit"), format!("{}ms", delay_ms.max(1)));
        run("tc", &["-n", &ns, "qdisc", "replace", "dev", DEVICE, "root", "tbf", "rate", &rate, "burst", "8kb", "latency", &latency])?;
        let mut text = format!("tbf {fallback_mbit} Mbit/s, at most {delay_ms} ms queued");
        if self.nft && loss_percent > 0.0 {
            let per_mille = (loss_percent * 10.0).round() as u32;
            let rules = format!("add table ip {TABLE}; add chain ip {TABLE} out {{ type filter hook output priority 0; }}; add rule ip {TABLE} out numgen random mod 1000 < {per_mille} drop");
            run("ip", &["netns", "exec", &ns, "nft", &rules])?;
            write!(text, ", nft random drop {loss_percent}%").expect("a String");
        }
        Ok(text)
    }

    /// Removes replica `id`'s impairments and ups its link.
    pub fn heal(&self, id: u64) -> Result<()> {
        let ns = namespace(id);
        quiet("tc", &["-n", &ns, "qdisc", "del", "dev", DEVICE, "root"]);
        if self.nft {
            quiet("ip", &["netns", "exec", &ns, "nft", "delete", "table", "ip", TABLE]);
            quiet("ip", &["netns", "exec", &ns, "nft", "delete", "table", "ip", CUT_TABLE]);
        }
        self.set_link(id, true)
    }

    /// Why delay and loss are not netem's, if they are not.
    pub fn impairment_note(&self) -> Option<String> {
        if self.netem {
            return None;
        }
        let loss = if self.nft { "loss by an nftables random-drop rule" } else { "no loss ('nft' not found: Debian package nftables)" };
        Some(format!("this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): delay is a tbf rate limit's queueing instead, {loss}"))
    }
}

/// Whether `tc` can make a netem qdisc in namespace `ns`.
fn netem_works(ns: &str) -> bool {
    let made = run("tc", &["-n", ns, "qdisc", "replace", "dev", DEVICE, "root", "netem", "delay", "1ms"]).is_ok();
    quiet("tc", &["-n", ns, "qdisc", "del", "dev", DEVICE, "root"]);
    made
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if self.lock.is_some() {
            remove_stale();
        }
    }
}

fn namespace(id: u64) -> String {
    format!("{PREFIX}{id}")
}

fn address(id: u64) -> Ipv4Addr {
    assert!((1..=3).contains(&id), "replica ids 1 to 3");
    Ipv4Addr::new(10, 231, 7, id as u8)
}
