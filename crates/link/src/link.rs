//! [`LinkTransport`]: a [`Transport`] over any transport whose every
//! connection first runs the handshake ([`crate::handshake`]), and whose
//! dialled connections are kept alive by pings and closed once quiet.
//!
//! The service above sees only authenticated connections:
//! - an accepted connection is announced ([`Event::Accepted`]) only once
//!   the dialer has proved the secret; until then nothing it sends reaches
//!   the service. A request or message that is not the handshake's next
//!   step, a wrong proof, or a handshake not done within
//!   [`LinkConfig::handshake_timeout`] closes the connection and is
//!   counted ([`LinkStats::refused_in`]);
//! - on a connection the service dialled, its sends and calls wait in a
//!   bounded queue ([`MAX_QUEUED`], then [`OpError::WindowFull`]) until the
//!   acceptor has proved the secret and accepted ours, then go out in
//!   order. If the handshake fails the connection closes: its queued calls
//!   complete with [`OpError::Disconnected`], then [`Event::Disconnected`]
//!   follows, as for any lost connection.
//!
//! Handshake steps and pings are calls with header [`LINK_MAGIC`] and
//! tokens with the top bit set ([`LINK_TOKEN`]); a service's tokens must
//! leave that bit clear (asserted). Their completions never reach the
//! service.
//!
//! Quiet links ([`Keepalive`]): on a connection it dialled, this side
//! sends a PING every [`Keepalive::every`] while none is outstanding; the
//! acceptor answers PONG at once, on the same connection. A PING
//! unanswered for [`Keepalive::quiet_after`] means the connection is dead
//! or stuck (a partition that healed leaves TCP connections in
//! retransmission backoff for seconds): it is closed, the service sees it
//! lost and dials again ([`LinkStats::quiet_closed`]). An idle healthy
//! link answers its pings and is never closed. Such a link keeps
//! [`PING_SLOTS`] of its connection's window for the ping: its
//! [`Transport::window_free`] (and so `send_room`) leaves it out, so a
//! service that holds its sends until there is room (a replica) never
//! crowds the ping out, and a peer that stops reading is found quiet
//! however busy the link was. A ping refused by a full window all the
//! same (a service that sent without asking) counts the link as busy, not
//! quiet.
//!
//! The handshake's time and the pings run on the clock given at
//! construction (real time in a process, virtual time in a simulation);
//! nonces come from the random source given (the OS, or a simulation's
//! seed).
//!
//! Invariants: every call the service started completes once (forwarded,
//! or failed here); the service sees no event of a connection it neither
//! dialled nor saw accepted; at most [`MAX_QUEUED`] operations wait per
//! connection; every handshake ends within its timeout.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::RngCore;
use transport::{
    AtomicOp, AttachError, Completion, ConnId, ConnectError, Event, LocalRegionId, OpError, Output, Payload, Reach, RegionDescriptor, RegisterError,
    RemoteRegionId, RequestId, RxArena, Transport, WaitError,
};

use crate::handshake::{is_short, ping, pong, AcceptStep, Acceptor, DialStep, Dialer, HandshakeError, Identity, Kind, Refusal, Role, LINK_MAGIC, NONCE_BYTES};
use crate::secret::Secret;

/// Tokens of the link's own calls (the top bit); a service's are below.
pub const LINK_TOKEN: u64 = 1 << 63;
/// Operations a connection holds while its handshake runs.
pub const MAX_QUEUED: usize = 64;

/// Window slots a dialled link that pings keeps for its ping (module docs).
pub const PING_SLOTS: usize = 1;

/// Pings on dialled connections, and when a connection counts as quiet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// A PING goes out this long after the last answer.
    pub every: Duration,
    /// A PING unanswered this long closes the connection.
    pub quiet_after: Duration,
}

/// Who this side is and whom it talks to.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// This side.
    pub me: Identity,
    /// Roles of the dialers this side accepts (empty: it accepts none).
    pub accepts: Vec<Role>,
    /// The role of the acceptors this side dials.
    pub expects: Role,
    /// Longest a handshake may take, either side.
    pub handshake_timeout: Duration,
    /// Pings on dialled connections (`None`: none).
    pub keepalive: Option<Keepalive>,
    /// Print a line on stderr when a connection is refused or a quiet link
    /// closed (at most one a second, with the counts).
    pub log_events: bool,
}

impl LinkConfig {
    /// `me`, accepting `accepts`, dialling `expects`; a 2 s handshake, no
    /// pings, quiet.
    pub fn new(me: Identity, accepts: &[Role], expects: Role) -> LinkConfig {
        LinkConfig { me, accepts: accepts.to_vec(), expects, handshake_timeout: Duration::from_secs(2), keepalive: None, log_events: false }
    }
}

impl LinkConfig {
    /// A mirror's primary: dials its backup, accepts nothing.
    pub fn mirror_primary() -> LinkConfig {
        LinkConfig::new(Identity { role: Role::MirrorPrimary, id: 0 }, &[], Role::MirrorBackup)
    }

    /// A mirror's backup: accepts its primary, dials nothing.
    pub fn mirror_backup() -> LinkConfig {
        LinkConfig::new(Identity { role: Role::MirrorBackup, id: 0 }, &[Role::MirrorPrimary], Role::MirrorPrimary)
    }
}

/// What a link transport did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Accepted connections whose dialer proved the secret.
    pub opened_in: u64,
    /// Dialled connections whose acceptor proved the secret and took ours.
    pub opened_out: u64,
    /// Accepted connections refused (wrong proof, malformed, out of turn,
    /// too slow): closed before the service saw anything of them.
    pub refused_in: u64,
    /// Dialled connections whose handshake failed (closed).
    pub refused_out: u64,
    /// Dialled connections closed because their pings went unanswered.
    pub quiet_closed: u64,
    /// Why the last handshake failed, in words.
    pub last_refusal: Option<String>,
}

/// An operation waiting for its connection's handshake.
enum Queued {
    Send { header: Vec<u8>, payload: Vec<u8> },
    Call { header: Vec<u8>, payload: Vec<u8>, token: u64 },
}

/// Where a connection stands.
enum Link {
    /// The service dialled it; the handshake runs.
    Dialling { dialer: Dialer, deadline: Duration, queue: VecDeque<Queued> },
    /// Accepted; the handshake runs; the service knows nothing of it.
    Accepting { acceptor: Acceptor, deadline: Duration },
    /// Authenticated. `ping_at`: when the outstanding PING went (dialled
    /// side), `heard`: the last answer.
    Open { dialled: bool, queue: VecDeque<Queued>, ping_at: Option<Duration>, heard: Duration },
    /// Closed by this side; waiting for the transport's disconnect.
    /// `known`: the service knows the connection (it sees the disconnect).
    Closing { known: bool, queue: VecDeque<Queued> },
}

/// A transport that authenticates its connections. See the module docs.
pub struct LinkTransport<T: Transport> {
    inner: T,
    /// `None`: unauthenticated pass-through ([`LinkTransport::unauthenticated`]).
    secret: Option<Secret>,
    config: LinkConfig,
    clock: Box<dyn Fn() -> Duration>,
    rng: Box<dyn RngCore>,
    links: BTreeMap<ConnId, Link>,
    /// Events for the service, oldest first.
    ready: VecDeque<Event>,
    scratch: Vec<Event>,
    stats: LinkStats,
    logged_at: Option<Duration>,
}

impl<T: Transport> LinkTransport<T> {
    /// Authenticates every connection of `inner` with `secret`; `clock`
    /// gives the time, `rng` the nonces (`rand::rngs::OsRng` in a process).
    pub fn new(inner: T, secret: Secret, config: LinkConfig, clock: Box<dyn Fn() -> Duration>, rng: Box<dyn RngCore>) -> LinkTransport<T> {
        if let Some(k) = config.keepalive {
            assert!(k.every > Duration::ZERO && k.quiet_after > Duration::ZERO, "keepalive periods are positive");
        }
        LinkTransport {
            inner,
            secret: Some(secret),
            config,
            clock,
            rng,
            links: BTreeMap::new(),
            ready: VecDeque::new(),
            scratch: Vec::new(),
            stats: LinkStats::default(),
            logged_at: None,
        }
    }

    /// [`LinkTransport::new`] with real time and the OS's random source.
    pub fn real(inner: T, secret: Secret, config: LinkConfig) -> LinkTransport<T> {
        let origin = std::time::Instant::now();
        LinkTransport::new(inner, secret, config, Box::new(move || origin.elapsed()), Box::new(rand::rngs::OsRng))
    }

    /// `inner` unchanged: no handshake, no pings. Only for talking to
    /// builds that predate links (a benchmark's before-and-after); nothing
    /// a user runs makes one.
    pub fn unauthenticated(inner: T, config: LinkConfig) -> LinkTransport<T> {
        let mut t = LinkTransport::real(inner, Secret::from_bytes([0; 32]), config);
        t.secret = None;
        t
    }

    /// The transport below.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The transport below, mutable (to listen before serving).
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// What it did.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// The next time a handshake expires or a ping is due.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.links.values().filter_map(|l| self.deadline_of(l)).min()
    }

    fn deadline_of(&self, link: &Link) -> Option<Duration> {
        match link {
            Link::Dialling { deadline, .. } | Link::Accepting { deadline, .. } => Some(*deadline),
            Link::Open { dialled: true, ping_at, heard, .. } => {
                let k = self.config.keepalive?;
                Some(match ping_at {
                    Some(at) => *at + k.quiet_after,
                    None => *heard + k.every,
                })
            }
            Link::Open { .. } | Link::Closing { .. } => None,
        }
    }

    fn nonce(&mut self) -> [u8; NONCE_BYTES] {
        let mut n = [0u8; NONCE_BYTES];
        self.rng.fill_bytes(&mut n);
        n
    }

    fn secret(&self) -> &Secret {
        self.secret.as_ref().expect("only an authenticating transport tracks links")
    }

    /// Closes `conn` after a failed handshake or a protocol breach.
    fn refuse(&mut self, conn: ConnId, inbound: bool, why: String) {
        if inbound {
            self.stats.refused_in += 1;
        } else {
            self.stats.refused_out += 1;
        }
        self.stats.last_refusal = Some(why.clone());
        self.log(&why);
        self.shut(conn);
    }

    fn log(&mut self, why: &str) {
        if !self.config.log_events {
            return;
        }
        let now = (self.clock)();
        if self.logged_at.is_some_and(|at| now < at + Duration::from_secs(1)) {
            return;
        }
        self.logged_at = Some(now);
        let s = &self.stats;
        eprintln!("link: {why} (so far: {} accepted and {} dialled connections refused, {} quiet links closed)", s.refused_in, s.refused_out, s.quiet_closed);
    }

    /// Closes `conn`; the service learns of it only if it knew the connection.
    fn shut(&mut self, conn: ConnId) {
        let (known, queue) = match self.links.remove(&conn) {
            Some(Link::Dialling { queue, .. }) => (true, queue),
            Some(Link::Open { queue, .. }) => (true, queue),
            Some(Link::Closing { known, queue }) => (known, queue),
            Some(Link::Accepting { .. }) | None => (false, VecDeque::new()),
        };
        self.links.insert(conn, Link::Closing { known, queue });
        self.inner.close(conn);
    }

    /// Hands the queued operations of an open connection to the transport,
    /// in order, while it takes them (each is copied for the attempt, so
    /// one refused with a full window waits at the queue's head).
    fn flush(&mut self, conn: ConnId) {
        loop {
            let Some(Link::Open { queue, .. }) = self.links.get_mut(&conn) else { return };
            let Some(op) = queue.pop_front() else { return };
            let result = match &op {
                Queued::Send { header, payload } => self.inner.send(conn, header, payload.clone()),
                Queued::Call { header, payload, token } => self.inner.call(conn, header, payload.clone(), *token),
            };
            match (result, op) {
                (Ok(()), _) => {}
                (Err(OpError::WindowFull(_)), op) => {
                    if let Some(Link::Open { queue, .. }) = self.links.get_mut(&conn) {
                        queue.push_front(op);
                    }
                    return;
                }
                (Err(e), Queued::Call { token, .. }) => self.ready.push_back(Event::Completion(Completion { conn, token, result: Err(e) })),
                // A send is never promised delivery.
                (Err(_), Queued::Send { .. }) => {}
            }
        }
    }

    /// Expires handshakes, sends pings, closes quiet links.
    fn timers(&mut self) {
        let now = (self.clock)();
        let due: Vec<ConnId> = self.links.iter().filter(|(_, l)| self.deadline_of(l).is_some_and(|d| d <= now)).map(|(&c, _)| c).collect();
        for conn in due {
            match self.links.get_mut(&conn) {
                Some(Link::Dialling { .. }) => self.refuse(conn, false, format!("a dialled connection's handshake did not finish within {:?}", self.config.handshake_timeout)),
                Some(Link::Accepting { .. }) => self.refuse(conn, true, format!("an accepted connection did not finish its handshake within {:?}", self.config.handshake_timeout)),
                Some(Link::Open { ping_at: Some(_), .. }) => {
                    self.stats.quiet_closed += 1;
                    let quiet = self.config.keepalive.map_or(Duration::ZERO, |k| k.quiet_after);
                    self.log(&format!("a dialled link answered no ping for {quiet:?}: closed, to be dialled again"));
                    self.shut(conn);
                }
                Some(Link::Open { ping_at, .. }) => {
                    *ping_at = Some(now);
                    if self.inner.call(conn, &LINK_MAGIC, ping(), LINK_TOKEN).is_err() {
                        // A full window: the link is busy, not quiet;
                        // its time counts from this try.
                        if let Some(Link::Open { ping_at, heard, .. }) = self.links.get_mut(&conn) {
                            *ping_at = None;
                            *heard = now;
                        }
                    }
                }
                Some(Link::Closing { .. }) | None => {}
            }
        }
    }

    /// Takes one event of the transport below.
    fn take(&mut self, event: Event) {
        if self.secret.is_none() {
            return self.ready.push_back(event);
        }
        match event {
            Event::Accepted(conn) => self.on_accepted(conn),
            Event::Request(r) => self.on_request(r),
            Event::Message { conn, header, payload } => self.on_message(conn, header, payload),
            Event::Completion(c) if c.token & LINK_TOKEN != 0 => self.on_link_completion(c),
            Event::Completion(c) => self.ready.push_back(Event::Completion(c)),
            Event::Disconnected { conn, cause } => self.on_disconnected(conn, cause),
        }
    }

    fn on_accepted(&mut self, conn: ConnId) {
        if self.config.accepts.is_empty() {
            return self.refuse(conn, true, "a connection to a side that accepts none".into());
        }
        let nonce = self.nonce();
        let acceptor = Acceptor::new(self.secret(), self.config.me, &self.config.accepts, nonce);
        let deadline = (self.clock)() + self.config.handshake_timeout;
        self.links.insert(conn, Link::Accepting { acceptor, deadline });
    }

    fn on_request(&mut self, r: transport::Request) {
        let conn = r.id.conn();
        if !self.links.contains_key(&conn) {
            self.on_accepted(conn);
        }
        let is_link = r.header == LINK_MAGIC;
        match self.links.get_mut(&conn).expect("tracked above") {
            Link::Accepting { acceptor, .. } if is_link => {
                let step = acceptor.on_request(&r.payload);
                self.inner.recycle(r.payload);
                self.accept_step(conn, r.id, step);
            }
            Link::Open { dialled: false, .. } if is_link && is_short(&r.payload, Kind::Ping) => {
                let _ = self.inner.reply(r.id, &LINK_MAGIC, pong());
            }
            Link::Open { .. } if !is_link => self.ready.push_back(Event::Request(r)),
            Link::Closing { .. } => self.inner.recycle(r.payload),
            Link::Accepting { .. } => {
                self.inner.recycle(r.payload);
                self.refuse(conn, true, format!("an accepted connection sent a request before its handshake: {}", Refusal::OutOfTurn));
            }
            Link::Dialling { .. } | Link::Open { .. } => {
                self.inner.recycle(r.payload);
                let inbound = matches!(self.links.get(&conn), Some(Link::Open { dialled: false, .. }));
                self.refuse(conn, inbound, "a request out of turn on a link".into());
            }
        }
    }

    fn accept_step(&mut self, conn: ConnId, id: RequestId, step: Result<AcceptStep, HandshakeError>) {
        match step {
            Ok(AcceptStep::Reply(bytes)) => {
                if self.inner.reply(id, &LINK_MAGIC, bytes).is_err() {
                    self.shut(conn);
                }
            }
            Ok(AcceptStep::Authenticated(bytes, _who)) => {
                if self.inner.reply(id, &LINK_MAGIC, bytes).is_err() {
                    return self.shut(conn);
                }
                self.stats.opened_in += 1;
                let heard = (self.clock)();
                self.links.insert(conn, Link::Open { dialled: false, queue: VecDeque::new(), ping_at: None, heard });
                self.ready.push_back(Event::Accepted(conn));
            }
            Err(e) => {
                if let Some(bytes) = e.refusal_message() {
                    let _ = self.inner.reply(id, &LINK_MAGIC, bytes);
                }
                self.refuse(conn, true, format!("an accepted connection's handshake: {e}"));
            }
        }
    }

    fn on_message(&mut self, conn: ConnId, header: Vec<u8>, payload: Payload) {
        match self.links.get(&conn) {
            Some(Link::Open { .. }) if header != LINK_MAGIC => self.ready.push_back(Event::Message { conn, header, payload }),
            Some(Link::Closing { .. }) => self.inner.recycle_payload(payload),
            Some(Link::Open { dialled, .. }) => {
                let inbound = !*dialled;
                self.inner.recycle_payload(payload);
                self.refuse(conn, inbound, "a one-way link message (the link speaks in calls)".into());
            }
            Some(Link::Dialling { .. }) => {
                self.inner.recycle_payload(payload);
                self.refuse(conn, false, "the acceptor sent a message before the handshake was done".into());
            }
            Some(Link::Accepting { .. }) | None => {
                self.inner.recycle_payload(payload);
                self.refuse(conn, true, format!("an accepted connection sent a message before its handshake: {}", Refusal::OutOfTurn));
            }
        }
    }

    fn on_link_completion(&mut self, c: Completion) {
        let conn = c.conn;
        let answer = match c.result {
            Ok(Output::Response { header, payload }) if header == LINK_MAGIC => payload,
            // A failed call: the connection is going; its disconnect follows.
            _ => return,
        };
        match self.links.get_mut(&conn) {
            Some(Link::Dialling { dialer, .. }) => {
                let step = dialer.on_answer(&answer);
                self.inner.recycle(answer);
                self.dial_step(conn, step);
            }
            Some(Link::Open { dialled: true, ping_at, heard, .. }) if is_short(&answer, Kind::Pong) => {
                *ping_at = None;
                *heard = (self.clock)();
            }
            Some(Link::Closing { .. }) | None => {}
            Some(_) => self.refuse(conn, false, "an answer out of turn on a link".into()),
        }
    }

    fn dial_step(&mut self, conn: ConnId, step: Result<DialStep, HandshakeError>) {
        match step {
            Ok(DialStep::Send(proof)) => {
                if self.inner.call(conn, &LINK_MAGIC, proof, LINK_TOKEN).is_err() {
                    self.shut(conn);
                }
            }
            Ok(DialStep::Authenticated(_who)) => {
                let Some(Link::Dialling { queue, .. }) = self.links.remove(&conn) else { unreachable!("dialling") };
                self.stats.opened_out += 1;
                let heard = (self.clock)();
                self.links.insert(conn, Link::Open { dialled: true, queue, ping_at: None, heard });
                self.flush(conn);
            }
            Err(e) => self.refuse(conn, false, format!("a dialled connection's handshake: {e}")),
        }
    }

    fn on_disconnected(&mut self, conn: ConnId, cause: Option<transport::Status>) {
        let (known, queue) = match self.links.remove(&conn) {
            Some(Link::Dialling { queue, .. }) | Some(Link::Open { queue, .. }) => (true, queue),
            Some(Link::Closing { known, queue }) => (known, queue),
            Some(Link::Accepting { .. }) => {
                // The dialer went away mid-handshake (a wrong secret
                // found by the dialer, or a stranger): counted, unseen.
                self.stats.refused_in += 1;
                self.log("an accepted connection closed during its handshake");
                (false, VecDeque::new())
            }
            // Not tracked: a connection the service dialled whose start failed.
            None => (true, VecDeque::new()),
        };
        if !known {
            return;
        }
        for op in queue {
            if let Queued::Call { token, .. } = op {
                self.ready.push_back(Event::Completion(Completion { conn, token, result: Err(OpError::Disconnected(conn.0)) }));
            }
        }
        self.ready.push_back(Event::Disconnected { conn, cause });
    }

    /// Queues `op` on a connection whose handshake runs, or whose queue
    /// has not drained; `Ok(None)` if it was queued, `Ok(Some(op))` if it
    /// may go to the transport now.
    fn enqueue(&mut self, conn: ConnId, op: Queued) -> Result<Option<Queued>, OpError> {
        let queue = match self.links.get_mut(&conn) {
            Some(Link::Dialling { queue, .. }) => queue,
            Some(Link::Open { queue, .. }) if !queue.is_empty() => queue,
            Some(Link::Open { .. }) | None => return Ok(Some(op)),
            Some(Link::Accepting { .. }) | Some(Link::Closing { .. }) => return Err(OpError::Disconnected(conn.0)),
        };
        if queue.len() >= MAX_QUEUED {
            return Err(OpError::WindowFull(MAX_QUEUED));
        }
        queue.push_back(op);
        Ok(None)
    }

    /// One-sided operations only on an open link.
    fn open(&self, conn: ConnId) -> Result<(), OpError> {
        match self.links.get(&conn) {
            _ if self.secret.is_none() => Ok(()),
            Some(Link::Open { .. }) | None => Ok(()),
            Some(_) => Err(OpError::Disconnected(conn.0)),
        }
    }
}

impl<T: Transport> Transport for LinkTransport<T> {
    type Addr = T::Addr;

    fn connect(&mut self, addr: &Self::Addr) -> Result<ConnId, ConnectError> {
        let conn = self.inner.connect(addr)?;
        if self.secret.is_none() {
            return Ok(conn);
        }
        let nonce = self.nonce();
        let (dialer, hello) = Dialer::new(self.secret(), self.config.me, self.config.expects, nonce);
        let deadline = (self.clock)() + self.config.handshake_timeout;
        self.links.insert(conn, Link::Dialling { dialer, deadline, queue: VecDeque::new() });
        if self.inner.call(conn, &LINK_MAGIC, hello, LINK_TOKEN).is_err() {
            self.shut(conn);
        }
        Ok(conn)
    }

    fn close(&mut self, conn: ConnId) {
        if self.secret.is_none() || !self.links.contains_key(&conn) {
            return self.inner.close(conn);
        }
        if !matches!(self.links.get(&conn), Some(Link::Closing { .. })) {
            self.shut(conn);
        }
    }

    fn call(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>, token: u64) -> Result<(), OpError> {
        assert_eq!(token & LINK_TOKEN, 0, "a service's call tokens leave the top bit clear (it marks the link's own)");
        if self.secret.is_none() {
            return self.inner.call(conn, header, payload, token);
        }
        match self.enqueue(conn, Queued::Call { header: header.to_vec(), payload, token })? {
            Some(Queued::Call { header, payload, token }) => self.inner.call(conn, &header, payload, token),
            _ => Ok(()),
        }
    }

    fn reply(&mut self, request: RequestId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        self.inner.reply(request, header, payload)
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        if self.secret.is_none() {
            return self.inner.send(conn, header, payload);
        }
        match self.enqueue(conn, Queued::Send { header: header.to_vec(), payload })? {
            Some(Queued::Send { header, payload }) => self.inner.send(conn, &header, payload),
            _ => Ok(()),
        }
    }

    /// A dialled link that pings keeps one slot of the window for its ping
    /// (module docs, "Keepalive").
    fn window_free(&self, conn: ConnId) -> usize {
        if self.secret.is_none() {
            return self.inner.window_free(conn);
        }
        match self.links.get(&conn) {
            Some(Link::Dialling { queue, .. }) => MAX_QUEUED.saturating_sub(queue.len()),
            Some(Link::Open { queue, .. }) if !queue.is_empty() => MAX_QUEUED.saturating_sub(queue.len()),
            // An outstanding ping holds its slot already.
            Some(Link::Open { dialled: true, ping_at: None, .. }) if self.config.keepalive.is_some() => self.inner.window_free(conn).saturating_sub(PING_SLOTS),
            Some(Link::Open { .. }) | None => self.inner.window_free(conn),
            Some(Link::Accepting { .. }) | Some(Link::Closing { .. }) => usize::MAX,
        }
    }

    fn reach(&self) -> Reach {
        self.inner.reach()
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<LocalRegionId, RegisterError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.register(addr, len) }
    }

    fn deregister(&mut self, region: LocalRegionId) {
        self.inner.deregister(region)
    }

    fn export(&self, region: LocalRegionId) -> Result<RegionDescriptor, RegisterError> {
        self.inner.export(region)
    }

    fn attach(&mut self, conn: ConnId, desc: &RegionDescriptor) -> Result<RemoteRegionId, AttachError> {
        self.open(conn).map_err(|_| AttachError::NotConnected(conn.0))?;
        self.inner.attach(conn, desc)
    }

    fn put(&mut self, conn: ConnId, region: RemoteRegionId, offset: u64, buf: Vec<u8>, token: u64) -> Result<(), OpError> {
        assert_eq!(token & LINK_TOKEN, 0, "a service's tokens leave the top bit clear");
        self.open(conn)?;
        self.inner.put(conn, region, offset, buf, token)
    }

    fn get(&mut self, conn: ConnId, region: RemoteRegionId, offset: u64, buf: Vec<u8>, token: u64) -> Result<(), OpError> {
        assert_eq!(token & LINK_TOKEN, 0, "a service's tokens leave the top bit clear");
        self.open(conn)?;
        self.inner.get(conn, region, offset, buf, token)
    }

    fn atomic(&mut self, conn: ConnId, region: RemoteRegionId, offset: u64, op: AtomicOp, token: u64) -> Result<(), OpError> {
        assert_eq!(token & LINK_TOKEN, 0, "a service's tokens leave the top bit clear");
        self.open(conn)?;
        self.inner.atomic(conn, region, offset, op, token)
    }

    fn flush(&mut self, conn: ConnId, token: u64) -> Result<(), OpError> {
        assert_eq!(token & LINK_TOKEN, 0, "a service's tokens leave the top bit clear");
        self.open(conn)?;
        self.inner.flush(conn, token)
    }

    fn fence(&mut self) -> Result<(), OpError> {
        self.inner.fence()
    }

    fn poll(&mut self, events: &mut Vec<Event>, max: usize) -> usize {
        if self.secret.is_some() {
            let backlog: Vec<ConnId> = self.links.iter().filter(|(_, l)| matches!(l, Link::Open { queue, .. } if !queue.is_empty())).map(|(&c, _)| c).collect();
            for conn in backlog {
                self.flush(conn);
            }
            self.timers();
        }
        let room = max.saturating_sub(self.ready.len());
        if room > 0 {
            let mut scratch = std::mem::take(&mut self.scratch);
            self.inner.poll(&mut scratch, room);
            for e in scratch.drain(..) {
                self.take(e);
            }
            self.scratch = scratch;
        }
        let n = self.ready.len().min(max);
        events.extend(self.ready.drain(..n));
        n
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool, WaitError> {
        if !self.ready.is_empty() {
            return Ok(true);
        }
        let timeout = match self.next_deadline() {
            Some(d) => timeout.min(d.saturating_sub((self.clock)())),
            None => timeout,
        };
        if timeout.is_zero() {
            return Ok(true);
        }
        self.inner.wait(timeout)
    }

    fn progressed(&self) -> bool {
        self.inner.progressed()
    }

    /// Events already taken from the inner transport are ready now;
    /// otherwise the inner transport's fd (the links' timers are the
    /// caller's to wake for: [`LinkTransport::next_deadline`]).
    fn event_fd(&mut self) -> transport::EventFd {
        if !self.ready.is_empty() {
            return transport::EventFd::Ready;
        }
        self.inner.event_fd()
    }

    fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        self.inner.take_buffer(len)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }

    fn recycle_payload(&mut self, payload: Payload) {
        self.inner.recycle_payload(payload)
    }

    fn lend_rx(&mut self, arena: Box<dyn RxArena>) -> bool {
        self.inner.lend_rx(arena)
    }
}
