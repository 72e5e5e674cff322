//! The peers of `pmwire bench smr` on their own, until the suite calls
//! them: `smr_peers [--full] [--json FILE] [etcd_3members_tmpfs ...]` runs
//! the named peers (all by default), quick unless `--full`, prints every
//! row and every skipped variant, and writes them as JSON if asked.

use pmwire_bench::smr::peers::{run_peers, Peer, PeerOptions};

fn main() -> anyhow::Result<()> {
    let mut options = PeerOptions { peers: Vec::new(), ..PeerOptions::default() };
    let mut json = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--full" => options.quick = false,
            "--json" => json = Some(args.next().ok_or_else(|| anyhow::anyhow!("--json needs a file"))?),
            name => {
                let peer = Peer::ALL.into_iter().find(|p| p.name() == name);
                options.peers.push(peer.ok_or_else(|| anyhow::anyhow!("unknown peer {name}"))?);
            }
        }
    }
    if options.peers.is_empty() {
        options.peers = Peer::ALL.to_vec();
    }
    let (results, skipped) = run_peers(&options);
    for r in &results {
        let clients = r.params.get("clients").cloned().unwrap_or_default();
        let metrics: Vec<String> = r.metrics.iter().map(|(k, v)| format!("{k}={v:.0}")).collect();
        println!("{:<15} {:<32} clients={clients:<3} {}", r.bench, r.variant, metrics.join(" "));
    }
    for s in &skipped {
        println!("skipped {} {}: {}", s.bench, s.variant, s.reason);
    }
    if let Some(path) = json {
        let value = serde_json::json!({ "quick": options.quick, "results": results, "skipped": skipped });
        std::fs::write(&path, serde_json::to_string_pretty(&value)?)?;
    }
    Ok(())
}
