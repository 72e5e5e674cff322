//! WAIT numreplicas timeout on a member.
//!
//! On the leader: the number of followers (voters) whose log holds the
//! connection's last write (their match index, from the leader's
//! progress), answered as soon as it reaches `numreplicas`, or at the
//! timeout with the count then (timeout 0: until it does, or the
//! connection closes). A member that stops leading while a WAIT waits
//! answers it as a follower does.
//!
//! On a follower (Redis answers WAIT on a replica with an error; here a
//! follower serves writes, so it answers): a follower does not see the
//! other members' logs, so it answers at once the count it can vouch for.
//! Every write it acknowledged was committed, so a majority of the voters
//! holds it, the leader among them: at least `majority - 1` followers of
//! the leader do. That is the answer, whatever `numreplicas` asks.
//!
//! Bounds: the timeout is checked (a non-negative integer of ms; one past
//! what the clock can add waits until answered or closed).

use std::time::{Duration, Instant};

use pmwire_netio::ConnId;
use transport::Transport;

use super::{error, Member, Slot};

/// A WAIT waiting on the leader.
pub(super) struct Waiting {
    pub(super) conn: ConnId,
    seq: u64,
    want: usize,
    target: u64,
    deadline: Option<Instant>,
}

/// The earliest deadline of the WAITs waiting.
pub(super) fn next_deadline(waits: &[Waiting]) -> Option<Instant> {
    waits.iter().filter_map(|w| w.deadline).min()
}

fn reply(n: usize) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

impl<T: Transport<Addr = std::net::SocketAddr>> Member<T> {
    /// WAIT numreplicas timeout (module docs).
    pub(super) fn wait(&mut self, id: ConnId, args: &[Vec<u8>]) {
        let answer = match Self::wait_args(args) {
            Err(e) => Some(e),
            Ok((want, timeout_ms)) => {
                let target = self.conn(id).last_write;
                match self.replicas_holding(target) {
                    Some(n) if n < want => {
                        let seq = self.conn(id).push(Slot::Pending);
                        let deadline = (timeout_ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(timeout_ms))).flatten();
                        self.waits.push(Waiting { conn: id, seq, want, target, deadline });
                        None
                    }
                    Some(n) => Some(reply(n)),
                    None => Some(reply(self.vouched())),
                }
            }
        };
        if let Some(a) = answer {
            self.conn(id).push(Slot::Ready(a));
        }
    }

    fn wait_args(args: &[Vec<u8>]) -> Result<(usize, u64), Vec<u8>> {
        if args.len() != 3 {
            return Err(error("ERR wrong number of arguments for 'wait' command"));
        }
        let parse = |a: &[u8]| std::str::from_utf8(a).ok().and_then(|t| t.parse::<i64>().ok());
        let (Some(want), Some(timeout)) = (parse(&args[1]), parse(&args[2])) else {
            return Err(error("ERR value is not an integer or out of range"));
        };
        if timeout < 0 {
            return Err(error("ERR timeout is negative"));
        }
        Ok((usize::try_from(want.max(0)).unwrap_or(usize::MAX), timeout as u64))
    }

    /// On the leader, the voters other than itself whose log holds
    /// `index`; `None` elsewhere.
    fn replicas_holding(&self, index: u64) -> Option<usize> {
        let r = &self.reactor.service;
        r.is_leader().then(|| r.progress().iter().filter(|p| !p.learner && p.matched >= index).count())
    }

    /// What a follower vouches for: a majority of the voters, less the leader.
    fn vouched(&self) -> usize {
        let voters = self.reactor.service.conf_state().voters.len();
        (voters / 2 + 1).saturating_sub(1)
    }

    /// After each drive: the WAITs whose count is reached or whose time is
    /// up are answered.
    pub(super) fn check_waits(&mut self) {
        if self.waits.is_empty() {
            return;
        }
        let now = Instant::now();
        let waits = std::mem::take(&mut self.waits);
        for w in waits {
            let held = self.replicas_holding(w.target);
            let n = match held {
                Some(n) if n >= w.want || w.deadline.is_some_and(|d| d <= now) => n,
                Some(_) => {
                    self.waits.push(w);
                    continue;
                }
                None => self.vouched(),
            };
            if let Some(conn) = self.conns.get_mut(&w.conn) {
                if let Some(slot) = conn.slot(w.seq) {
                    *slot = Slot::Ready(reply(n));
                }
                self.to_wake.push(w.conn);
            }
        }
    }
}
