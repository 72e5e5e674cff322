//! `SmrClient`: a blocking client of a replicated cluster. It finds the
//! leader (a replica that is not the leader answers `NOT_LEADER` with the
//! one it knows), follows it through leader changes, and numbers its writes
//! in a session so that a write it retries (after a timeout, a lost
//! connection or `RETRY`) is applied once.
//!
//! Membership: [`SmrClient::add_member`] adds a replica as a learner, waits
//! for it to catch up and promotes it to voter; [`SmrClient::remove_member`]
//! removes one (the leader too: it hands over first);
//! [`SmrClient::transfer_leader`] moves leadership. Refusals are
//! [`SmrError::Refused`] with the replica's reason and message.
//!
//! Invariants: one request outstanding; every write of this client has a
//! sequence number one above the last; a request is retried with the same
//! bytes until it gets a final answer or the deadline passes (then its
//! outcome is unknown: [`SmrError::Timeout`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reactor::PollBudget;
use thiserror::Error;
use transport::{ConnId, Event, Output, Transport};

use crate::command::{Op, Refusal, Refused, Request, Response, Status, StatusValue, REQUEST_MAGIC};
use crate::node::PeerAddr;

/// Why a request did not complete.
#[derive(Debug, Error)]
pub enum SmrError {
    /// No final answer before the deadline: a write (a change of data or
    /// of membership) may or may not have been applied (retrying it with
    /// the same client applies it once); a read or a status changed nothing.
    #[error("no answer from the cluster within {0:?} ({note}last attempt: {1})", note = if *.2 { "the write may or may not have been applied; " } else { "" })]
    Timeout(Duration, Failure, bool),
    /// The replica refused the request as malformed.
    #[error("the replica refused the request as malformed")]
    BadRequest,
    /// The session moved past this request (a newer write was applied).
    #[error("stale sequence number")]
    Stale,
    /// The replica's answer did not decode.
    #[error("undecodable answer: {0}")]
    Protocol(String),
    /// A leader transfer was accepted, but its target did not report
    /// leading before the deadline (another member may have won the
    /// election it started).
    #[error("replica {id} did not report leading within {timeout:?} ({last})")]
    NotLeading {
        /// The transfer's target.
        id: u64,
        /// How long the client waited.
        timeout: Duration,
        /// What the target last reported, for a person.
        last: String,
    },
    /// The replica id is not in the client's list.
    #[error("replica {0} is not in the list")]
    UnknownReplica(u64),
    /// A membership request was refused; nothing changed.
    #[error("refused: {message}")]
    Refused {
        /// Why, as a code.
        reason: Refusal,
        /// Why, for a person.
        message: String,
    },
}

/// What became of a request's last attempt (for [`SmrError::Timeout`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The deadline had passed before any attempt.
    NotTried,
    /// Replica `0`'s address could not be connected to (the transport's reason).
    Connect(u64, String),
    /// The request could not be sent to replica `0` (the transport's reason).
    Send(u64, String),
    /// The connection to replica `0` ended before its answer (the transport's reason).
    Lost(u64, String),
    /// Replica `0` did not answer within the attempt's time.
    Silent(u64, Duration),
    /// Replica `0`'s answer did not decode.
    Garbled(u64),
    /// Replica `0` answered with a status that is not final (`NOT_LEADER`, `RETRY`).
    Answered(u64, Status),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotTried => write!(f, "none made"),
            Failure::Connect(id, why) => write!(f, "connecting to replica {id} failed: {why}"),
            Failure::Send(id, why) => write!(f, "sending to replica {id} failed: {why}"),
            Failure::Lost(id, why) => write!(f, "the connection to replica {id} ended: {why}"),
            Failure::Silent(id, waited) => write!(f, "replica {id} did not answer within {waited:?}"),
            Failure::Garbled(id) => write!(f, "replica {id}'s answer did not decode"),
            Failure::Answered(id, status) => write!(f, "replica {id} answered {status:?}"),
        }
    }
}

/// A blocking client of a cluster.
pub struct SmrClient<T: Transport>
where
    T::Addr: PeerAddr,
{
    transport: T,
    replicas: BTreeMap<u64, T::Addr>,
    conns: BTreeMap<u64, ConnId>,
    leader: u64,
    session: u64,
    seq: u64,
    tokens: u64,
    /// Longest a request is retried.
    pub timeout: Duration,
    /// Longest one attempt waits for its answer before trying elsewhere.
    pub attempt_timeout: Duration,
    /// Longest [`SmrClient::add_member`] waits for a learner to catch up.
    pub catch_up_timeout: Duration,
    /// How long to poll before blocking.
    pub poll: PollBudget,
    events: Vec<Event>,
}

impl<T: Transport> SmrClient<T>
where
    T::Addr: PeerAddr,
{
    /// A client of the replicas `replicas` (id → address) with session id
    /// `session` (non-zero, unique among the cluster's clients: a random
    /// u64 is the usual choice).
    pub fn new(transport: T, replicas: BTreeMap<u64, T::Addr>, session: u64) -> SmrClient<T> {
        assert_ne!(session, 0, "session ids are non-zero");
        assert!(!replicas.is_empty(), "at least one replica");
        let leader = *replicas.keys().next().expect("non-empty");
        SmrClient {
            transport,
            replicas,
            conns: BTreeMap::new(),
            leader,
            session,
            seq: 0,
            tokens: 0,
            timeout: Duration::from_secs(10),
            attempt_timeout: Duration::from_millis(500),
            catch_up_timeout: Duration::from_secs(60),
            poll: PollBudget::default(),
            events: Vec::new(),
        }
    }

    /// The transport (its counters, say).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The replica this client believes leads.
    pub fn leader(&self) -> u64 {
        self.leader
    }

    /// Sets `key` to `value`; the log index it was applied at.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<u64, SmrError> {
        let r = self.write(Op::Put, key, value, None)?;
        Ok(r.index)
    }

    /// Removes `key`.
    pub fn del(&mut self, key: &[u8]) -> Result<u64, SmrError> {
        Ok(self.write(Op::Del, key, &[], None)?.index)
    }

    /// Sets `key` to `new` if it holds `expect` (`None`: absent); whether it
    /// swapped, and the current value if not.
    pub fn cas(&mut self, key: &[u8], expect: Option<&[u8]>, new: &[u8]) -> Result<(bool, Vec<u8>), SmrError> {
        let r = self.write(Op::Cas, key, new, expect.map(<[u8]>::to_vec))?;
        Ok((r.status == Status::Ok, r.value))
    }

    /// The value of `key` (linearizable: served by the leader by ReadIndex).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, SmrError> {
        let req = Request { op: Op::Get, client: 0, seq: 0, key: key.to_vec(), value: Vec::new(), expect: None };
        let r = self.request(&req, None)?;
        Ok((r.status == Status::Ok).then_some(r.value))
    }

    /// Replica `id`'s status (asked of it, whatever its role).
    pub fn status(&mut self, id: u64) -> Result<StatusValue, SmrError> {
        if !self.replicas.contains_key(&id) {
            return Err(SmrError::UnknownReplica(id));
        }
        self.status_until(id, Instant::now() + self.timeout)
    }

    fn status_until(&mut self, id: u64, deadline: Instant) -> Result<StatusValue, SmrError> {
        let req = Request { op: Op::Status, client: 0, seq: 0, key: Vec::new(), value: Vec::new(), expect: None };
        let r = self.request_until(&req, Some(id), deadline)?;
        StatusValue::decode(&r.value).map_err(|e| SmrError::Protocol(e.to_string()))
    }

    /// Adds replica `id` at `addr` to the client's list (a member it
    /// learned of, e.g. from a STATUS).
    pub fn add_replica(&mut self, id: u64, addr: T::Addr) {
        self.replicas.insert(id, addr);
    }

    /// The replicas the client knows.
    pub fn replicas(&self) -> &BTreeMap<u64, T::Addr> {
        &self.replicas
    }

    /// Adds replica `id`, listening at `addr`, as a learner (it receives
    /// the log, does not vote); the log index of the change. Adding a
    /// learner again at the same address does nothing.
    pub fn add_learner(&mut self, id: u64, addr: &T::Addr) -> Result<u64, SmrError> {
        let r = self.member_request(Op::AddMember, id, &addr.to_bytes())?;
        self.replicas.insert(id, addr.clone());
        Ok(r.index)
    }

    /// Makes learner `id` a voter once it has caught up with the log,
    /// asking again until it has or [`SmrClient::catch_up_timeout`] passes.
    pub fn promote(&mut self, id: u64) -> Result<u64, SmrError> {
        self.seq += 1;
        let req = Request::member(Op::PromoteMember, self.session, self.seq, id, &[]);
        let deadline = Instant::now() + self.catch_up_timeout;
        loop {
            match self.request(&req, None) {
                Err(SmrError::Refused { reason: Refusal::CatchingUp, message }) => {
                    if Instant::now() >= deadline {
                        let message = format!("{message} (gave up after {:?})", self.catch_up_timeout);
                        return Err(SmrError::Refused { reason: Refusal::CatchingUp, message });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other.map(|r| r.index),
            }
        }
    }

    /// Adds replica `id` at `addr` as a voter: a learner first, promoted
    /// once it has caught up (so that a new replica never holds up the
    /// quorum while it copies the log). The log index of the promotion.
    pub fn add_member(&mut self, id: u64, addr: &T::Addr) -> Result<u64, SmrError> {
        self.add_learner(id, addr)?;
        self.promote(id)
    }

    /// Removes replica `id` (voter or learner); the log index of the
    /// change. The leader removing itself hands leadership over first.
    pub fn remove_member(&mut self, id: u64) -> Result<u64, SmrError> {
        let r = self.member_request(Op::RemoveMember, id, &[])?;
        if self.replicas.len() > 1 {
            self.drop_conn(id);
            self.replicas.remove(&id);
            if self.leader == id {
                self.leader = *self.replicas.keys().next().expect("non-empty");
            }
        }
        Ok(r.index)
    }

    /// Hands leadership to voter `to` and waits until it leads (its own
    /// STATUS says so). A transfer only starts an election, which another
    /// member may win (a vote lost under load): then it asks again, until
    /// the client's timeout.
    pub fn transfer_leader(&mut self, to: u64) -> Result<(), SmrError> {
        let req = Request::member(Op::TransferLeader, 0, 0, to, &[]);
        let deadline = Instant::now() + self.timeout;
        loop {
            self.request_until(&req, None, deadline)?;
            if !self.replicas.contains_key(&to) {
                return Ok(());
            }
            // Until `to` leads, or another member is seen leading (ask again).
            loop {
                let last = match self.status_until(to, deadline.min(Instant::now() + Duration::from_secs(1))) {
                    Ok(st) if st.role == 2 => {
                        self.leader = to;
                        return Ok(());
                    }
                    Ok(st) if st.role == 0 && st.leader != 0 && st.leader != to => {
                        self.leader = st.leader;
                        break;
                    }
                    Ok(st) => format!("it is a {} in term {}, leader {}", st.role_name(), st.term, st.leader),
                    Err(SmrError::Timeout(_, why, _)) => format!("no status answer ({why})"),
                    Err(e) => format!("status: {e}"),
                };
                if Instant::now() >= deadline {
                    return Err(SmrError::NotLeading { id: to, timeout: self.timeout, last });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    fn member_request(&mut self, op: Op, id: u64, addr: &[u8]) -> Result<Response, SmrError> {
        self.seq += 1;
        let req = Request::member(op, self.session, self.seq, id, addr);
        self.request(&req, None)
    }

    fn write(&mut self, op: Op, key: &[u8], value: &[u8], expect: Option<Vec<u8>>) -> Result<Response, SmrError> {
        self.seq += 1;
        let req = Request { op, client: self.session, seq: self.seq, key: key.to_vec(), value: value.to_vec(), expect };
        self.request(&req, None)
    }

    /// Sends `req` to `only` (or the leader, following redirects) until a
    /// final answer or the deadline.
    fn request(&mut self, req: &Request, only: Option<u64>) -> Result<Response, SmrError> {
        self.request_until(req, only, Instant::now() + self.timeout)
    }

    /// [`Self::request`] with its own deadline (a timeout still reports
    /// the client's timeout: the caller's whole wait).
    fn request_until(&mut self, req: &Request, only: Option<u64>, deadline: Instant) -> Result<Response, SmrError> {
        let bytes = req.to_bytes();
        let write = req.op.writes() || req.op.changes_membership();
        let mut last = Failure::NotTried;
        let mut unanswered = 0usize;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(SmrError::Timeout(self.timeout, last, write));
            }
            let round = if only.is_some() { 1 } else { self.replicas.len() };
            if unanswered > 0 && unanswered % round == 0 {
                // Every replica tried found no answer: wait before the next
                // round (a refused connect fails at once, and the client
                // spun through rounds, 12 s of CPU in a 10 s wait).
                std::thread::sleep(retry_pause(unanswered / round).min(deadline - now));
                if Instant::now() >= deadline {
                    return Err(SmrError::Timeout(self.timeout, last, write));
                }
            }
            let target = only.unwrap_or(self.leader);
            let answer = self.attempt(target, &bytes, deadline);
            let resp = match answer {
                Ok(resp) => resp,
                Err(why) => {
                    last = why;
                    unanswered += 1;
                    // No answer (connection lost, attempt timed out): elsewhere.
                    self.drop_conn(target);
                    if only.is_none() {
                        self.leader = self.next_after(target);
                    }
                    continue;
                }
            };
            unanswered = 0;
            last = Failure::Answered(target, resp.status);
            match resp.status {
                Status::Ok | Status::NotFound | Status::CasFailed => return Ok(resp),
                Status::BadRequest => return Err(SmrError::BadRequest),
                Status::Stale => return Err(SmrError::Stale),
                Status::Refused => {
                    let r = Refused::decode(&resp.value).map_err(|e| SmrError::Protocol(e.to_string()))?;
                    return Err(SmrError::Refused { reason: r.reason, message: r.message });
                }
                Status::NotLeader if only.is_none() => {
                    let hint = resp.leader;
                    if hint != 0 && !self.replicas.contains_key(&hint) {
                        // A leader added since the client's list was made.
                        self.learn_members(target, deadline);
                    }
                    self.leader = if hint != 0 && self.replicas.contains_key(&hint) && hint != target { hint } else { self.next_after(target) };
                    if hint == 0 {
                        std::thread::sleep(Duration::from_millis(1)); // an election is under way
                    }
                }
                Status::NotLeader | Status::Retry => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Adds the members replica `from` knows (from its STATUS) that the
    /// client does not.
    fn learn_members(&mut self, from: u64, deadline: Instant) {
        let req = Request { op: Op::Status, client: 0, seq: 0, key: Vec::new(), value: Vec::new(), expect: None };
        let Ok(resp) = self.attempt(from, &req.to_bytes(), deadline) else { return };
        let Ok(st) = StatusValue::decode(&resp.value) else { return };
        for m in st.members {
            if let (false, Some(addr)) = (self.replicas.contains_key(&m.id), T::Addr::from_bytes(&m.addr)) {
                self.replicas.insert(m.id, addr);
            }
        }
    }

    fn next_after(&self, id: u64) -> u64 {
        self.replicas.range(id + 1..).next().or_else(|| self.replicas.iter().next()).map(|(&k, _)| k).expect("non-empty")
    }

    fn drop_conn(&mut self, id: u64) {
        if let Some(conn) = self.conns.remove(&id) {
            self.transport.close(conn);
        }
    }

    fn conn(&mut self, id: u64) -> Result<ConnId, Failure> {
        if let Some(&c) = self.conns.get(&id) {
            return Ok(c);
        }
        let addr = self.replicas.get(&id).ok_or_else(|| Failure::Connect(id, String::from("not in the client's list")))?.clone();
        let c = self.transport.connect(&addr).map_err(|e| Failure::Connect(id, e.to_string()))?;
        self.conns.insert(id, c);
        Ok(c)
    }

    /// One call to `target`: its response, or why there was none within
    /// the attempt's time.
    fn attempt(&mut self, target: u64, bytes: &[u8], deadline: Instant) -> Result<Response, Failure> {
        let conn = self.conn(target)?;
        self.tokens += 1;
        let token = self.tokens;
        let mut payload = self.transport.take_buffer(bytes.len());
        payload.extend_from_slice(bytes);
        self.transport.call(conn, &REQUEST_MAGIC, payload, token).map_err(|e| Failure::Send(target, e.to_string()))?;
        let started = Instant::now();
        let give_up = (started + self.attempt_timeout).min(deadline);
        let mut since = started;
        let mut empty = 0u32;
        loop {
            self.events.clear();
            self.transport.poll(&mut self.events, 64);
            let mut found = None;
            for e in self.events.drain(..) {
                match e {
                    Event::Completion(c) if c.token == token => found = Some(c.result),
                    Event::Message { payload, .. } => self.transport.recycle_payload(payload),
                    _ => {}
                }
            }
            if let Some(result) = found {
                return match result {
                    Ok(Output::Response { payload, .. }) => {
                        let resp = Response::decode(&payload).map_err(|_| Failure::Garbled(target));
                        self.transport.recycle(payload);
                        resp
                    }
                    Ok(_) => Err(Failure::Garbled(target)),
                    Err(e) => Err(Failure::Lost(target, e.to_string())),
                };
            }
            let now = Instant::now();
            if now >= give_up {
                return Err(Failure::Silent(target, now - started));
            }
            empty += 1;
            if self.poll.keep_polling(since, empty) {
                continue;
            }
            let _ = self.transport.wait(give_up - now);
            since = Instant::now();
            empty = 0;
        }
    }
}

/// The pause after `rounds` rounds in which no replica answered: 5 ms,
/// doubling, at most 200 ms.
fn retry_pause(rounds: usize) -> Duration {
    Duration::from_millis(5u64 << rounds.saturating_sub(1).min(5)).min(Duration::from_millis(200))
}
