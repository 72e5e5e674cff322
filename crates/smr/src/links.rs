//! The links of a replica and of its clients: the [`LinkConfig`]s that
//! `pmwire replica`, `pmwire smr`, the benchmarks and the simulation put
//! between a replica and the network ([`link::LinkTransport`]).
//!
//! A replica accepts replicas and clients, dials replicas, and pings what
//! it dials ([`keepalive`]): a dialled link whose PING goes unanswered
//! for three minimum election timeouts is closed, and the replica dials
//! the peer again after its reconnect delay (10 ticks) instead of waiting
//! for TCP to retransmit into a connection that a healed partition left in
//! backoff. Why the ping and not Raft's own traffic: each replica sends to
//! a peer on the connection it dialled and hears the peer's answers on the
//! connection the peer dialled, so "I have not heard from X" cannot say
//! which of the two is stuck (X may hear our heartbeats and answer over a
//! dead connection of its own, and would never notice); a PING is answered
//! on the connection it came on, so each side tests the one it sends on.
//! Followers that exchange no Raft messages still ping each other, so an
//! idle healthy cluster keeps every link and churns none.

use std::time::Duration;

use link::{Identity, Keepalive, LinkConfig, Role};

use crate::node::ReplicaConfig;

/// How a replica pings what it dials: a link is quiet after three
/// minimum election timeouts without an answer (300 ms at 10 ms ticks:
/// longer than TCP's 200 ms minimum retransmission timeout, so one lost
/// segment does not close a healthy link; far below the 5-7 s TCP's
/// backoff reaches), pinged four times in that span.
pub fn keepalive(config: &ReplicaConfig) -> Keepalive {
    let ticks = u32::try_from(3 * config.election_ticks).expect("election ticks fit u32");
    let quiet_after = config.tick * ticks;
    Keepalive { every: quiet_after / 4, quiet_after }
}

/// A replica's links: accepts replicas and clients, dials replicas, pings
/// what it dials ([`keepalive`]); a handshake may take as long as a quiet
/// link is given.
pub fn replica_link(config: &ReplicaConfig) -> LinkConfig {
    let mut c = LinkConfig::new(Identity { role: Role::Replica, id: config.id }, &[Role::Replica, Role::Client], Role::Replica);
    let keepalive = keepalive(config);
    c.keepalive = Some(keepalive);
    c.handshake_timeout = keepalive.quiet_after;
    c
}

/// A client's links (`pmwire smr`, `SmrClient`): dials replicas, accepts
/// nothing, no pings (its requests have their own timeouts).
pub fn client_link() -> LinkConfig {
    let mut c = LinkConfig::new(Identity { role: Role::Client, id: 0 }, &[], Role::Replica);
    c.handshake_timeout = Duration::from_secs(2);
    c
}
