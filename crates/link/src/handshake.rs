//! The handshake's I/O-free core: bytes in, bytes (or a verdict) out.
//!
//! Mutual challenge–response over the cluster's [`Secret`], in four
//! messages on one connection (byte layouts in `docs/FORMAT.md`,
//! "Member-to-member links"):
//!
//! ```text
//! dialer                                   acceptor
//!   HELLO     role, id, nonce_d      ->
//!             <-  CHALLENGE role, id, nonce_a, mac_a = HMAC(K, "acceptor" | transcript)
//!   (checks mac_a: the acceptor knows K)
//!   PROOF     mac_d = HMAC(K, "dialer" | transcript)  ->
//!             <-  ACCEPTED              (checks mac_d: the dialer knows K)
//! ```
//!
//! `transcript` is both sides' version, role, id and fresh 32-byte nonce,
//! so a proof holds for one connection only: a recorded PROOF fails against
//! the next CHALLENGE's nonce (replay), and an acceptor's MAC cannot be
//! reflected as a dialer's (the labels differ). The secret itself never
//! travels. MACs are compared in constant time (`hmac`'s `verify_slice`).
//!
//! The core never reads a clock or a random source: nonces are passed in
//! (the driver draws them from the OS, a simulation from its seed) and the
//! driver bounds the handshake's time. Every message has one exact length;
//! anything else, or a message out of turn, is refused with a
//! [`Refusal`] (which the acceptor sends back before it closes, so an
//! operator with the wrong secret file is told so).
//!
//! Invariants: an [`Acceptor`] says [`AcceptStep::Authenticated`] at most
//! once and only after a PROOF whose MAC matched its own nonce; a
//! [`Dialer`] says [`DialStep::Authenticated`] only after the acceptor's
//! MAC over its own nonce matched and the acceptor said ACCEPTED.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::secret::Secret;

/// The transport header of every link message.
pub const LINK_MAGIC: [u8; 4] = *b"LNK1";
/// The handshake's version.
pub const VERSION: u8 = 1;
/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 32;
/// Bytes of a MAC (HMAC-SHA256).
pub const MAC_BYTES: usize = 32;

/// HELLO: kind, version, role, 0, id u64, nonce.
pub const HELLO_BYTES: usize = 12 + NONCE_BYTES;
/// CHALLENGE: kind, version, role, 0, id u64, nonce, MAC.
pub const CHALLENGE_BYTES: usize = 12 + NONCE_BYTES + MAC_BYTES;
/// PROOF: kind, version, 0, 0, MAC.
pub const PROOF_BYTES: usize = 4 + MAC_BYTES;
/// ACCEPTED, REFUSED, PING, PONG: kind, version, reason (REFUSED) or 0, 0.
pub const SHORT_BYTES: usize = 4;

/// What a link message is (its first byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Dialer → acceptor: who it is and its nonce.
    Hello = 1,
    /// Acceptor → dialer: who it is, its nonce, its proof.
    Challenge = 2,
    /// Dialer → acceptor: its proof.
    Proof = 3,
    /// Acceptor → dialer: the dialer's proof holds.
    Accepted = 4,
    /// Acceptor → dialer: refused, with a [`Refusal`]; the connection closes.
    Refused = 5,
    /// Dialer → acceptor on an open link: are you there?
    Ping = 6,
    /// Acceptor → dialer: the answer to a PING.
    Pong = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Challenge,
            3 => Kind::Proof,
            4 => Kind::Accepted,
            5 => Kind::Refused,
            6 => Kind::Ping,
            7 => Kind::Pong,
            _ => return None,
        })
    }
}

/// What a side of a link is; bound into both MACs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    /// A replica (`pmwire replica`), dialling or accepting its peers.
    Replica = 1,
    /// A client of a replicated cluster (`pmwire smr`, `SmrClient`).
    Client = 2,
    /// A mirror's primary (`pmwire mirror-primary`).
    MirrorPrimary = 3,
    /// A mirror's backup (`pmwire mirror-backup`).
    MirrorBackup = 4,
}

impl Role {
    fn from_u8(b: u8) -> Option<Role> {
        Some(match b {
            1 => Role::Replica,
            2 => Role::Client,
            3 => Role::MirrorPrimary,
            4 => Role::MirrorBackup,
            _ => return None,
        })
    }

    /// The role's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Replica => "replica",
            Role::Client => "client",
            Role::MirrorPrimary => "mirror primary",
            Role::MirrorBackup => "mirror backup",
        }
    }
}

/// Who one side of a link says it is (a replica's id; 0 where there is none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Its role.
    pub role: Role,
    /// Its id.
    pub id: u64,
}

/// Why a handshake was refused (REFUSED's reason byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[repr(u8)]
pub enum Refusal {
    /// A message of the wrong length, kind or layout.
    #[error("a malformed handshake message")]
    Malformed = 1,
    /// Another handshake version.
    #[error("another handshake version")]
    Version = 2,
    /// The peer's role is not one this side talks to.
    #[error("a peer of a role this side does not talk to")]
    Role = 3,
    /// The peer's MAC does not match: it does not hold this cluster's secret.
    #[error("a wrong proof: the peer does not hold this cluster's secret (a different --secret-file?)")]
    WrongProof = 4,
    /// A message out of turn (before the handshake is done, or after).
    #[error("a message before the handshake was done")]
    OutOfTurn = 5,
    /// The handshake did not finish in time.
    #[error("the handshake did not finish in time")]
    Timeout = 6,
}

impl Refusal {
    fn from_u8(b: u8) -> Refusal {
        match b {
            2 => Refusal::Version,
            3 => Refusal::Role,
            4 => Refusal::WrongProof,
            5 => Refusal::OutOfTurn,
            6 => Refusal::Timeout,
            _ => Refusal::Malformed,
        }
    }
}

/// Why a handshake failed, as one side sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// This side refused the peer.
    #[error("refused the peer: {0}")]
    Refused(Refusal),
    /// The peer refused this side (its REFUSED message).
    #[error("the peer refused this side: {0}")]
    RefusedByPeer(Refusal),
}

impl HandshakeError {
    /// The REFUSED message this side sends before closing, if it refused.
    pub fn refusal_message(&self) -> Option<Vec<u8>> {
        match self {
            HandshakeError::Refused(r) => Some(short(Kind::Refused, *r as u8)),
            HandshakeError::RefusedByPeer(_) => None,
        }
    }
}

fn short(kind: Kind, arg: u8) -> Vec<u8> {
    vec![kind as u8, VERSION, arg, 0]
}

/// A PING message.
pub fn ping() -> Vec<u8> {
    short(Kind::Ping, 0)
}

/// A PONG message.
pub fn pong() -> Vec<u8> {
    short(Kind::Pong, 0)
}

/// The kind of a link message, if it is a well-formed short message of
/// that kind (PING, PONG).
pub fn is_short(bytes: &[u8], kind: Kind) -> bool {
    bytes.len() == SHORT_BYTES && bytes[0] == kind as u8 && bytes[1] == VERSION && bytes[2] == 0 && bytes[3] == 0
}

/// The fields of a HELLO or a CHALLENGE.
#[derive(Clone, Copy)]
struct Intro {
    who: Identity,
    nonce: [u8; NONCE_BYTES],
}

fn encode_intro(kind: Kind, intro: &Intro) -> Vec<u8> {
    let mut b = Vec::with_capacity(CHALLENGE_BYTES);
    b.extend_from_slice(&[kind as u8, VERSION, intro.who.role as u8, 0]);
    b.extend_from_slice(&intro.who.id.to_le_bytes());
    b.extend_from_slice(&intro.nonce);
    b
}

/// Checks kind, version and exact length; the refusal otherwise.
fn check(bytes: &[u8], kind: Kind, len: usize) -> Result<(), Refusal> {
    match bytes.first().copied().and_then(Kind::from_u8) {
        Some(k) if k != kind => return Err(Refusal::OutOfTurn),
        None => return Err(Refusal::Malformed),
        Some(_) => {}
    }
    if bytes.len() < 2 {
        return Err(Refusal::Malformed);
    }
    if bytes[1] != VERSION {
        return Err(Refusal::Version);
    }
    if bytes.len() != len {
        return Err(Refusal::Malformed);
    }
    Ok(())
}

fn decode_intro(bytes: &[u8], kind: Kind, len: usize) -> Result<Intro, Refusal> {
    check(bytes, kind, len)?;
    let role = Role::from_u8(bytes[2]).ok_or(Refusal::Role)?;
    if bytes[3] != 0 {
        return Err(Refusal::Malformed);
    }
    let id = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    let nonce = bytes[12..12 + NONCE_BYTES].try_into().expect("32 bytes");
    Ok(Intro { who: Identity { role, id }, nonce })
}

/// The MAC keyed by the secret over `label` and both introductions.
fn mac(secret: &Secret, label: &[u8], dialer: &Intro, acceptor: &Intro) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret.bytes()).expect("HMAC takes any key length");
    m.update(label);
    for intro in [dialer, acceptor] {
        m.update(&[VERSION, intro.who.role as u8]);
        m.update(&intro.who.id.to_le_bytes());
        m.update(&intro.nonce);
    }
    m
}

const ACCEPTOR_LABEL: &[u8] = b"pmwire-link v1 acceptor";
const DIALER_LABEL: &[u8] = b"pmwire-link v1 dialer";

/// Where a dialer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DialState {
    AwaitChallenge,
    AwaitAccepted,
    Done,
    Failed,
}

/// What a dialer does next.
#[derive(Debug, PartialEq, Eq)]
pub enum DialStep {
    /// Send this (a PROOF) and wait for the answer.
    Send(Vec<u8>),
    /// The link is open: the acceptor proved the secret and accepted ours.
    Authenticated(Identity),
}

/// The dialling side of a handshake.
pub struct Dialer {
    secret: Secret,
    me: Intro,
    expects: Role,
    peer: Option<Intro>,
    state: DialState,
}

impl Dialer {
    /// A dialer for `me` with fresh `nonce`, expecting an acceptor of role
    /// `expects`; the HELLO to send first.
    pub fn new(secret: &Secret, me: Identity, expects: Role, nonce: [u8; NONCE_BYTES]) -> (Dialer, Vec<u8>) {
        let me = Intro { who: me, nonce };
        let hello = encode_intro(Kind::Hello, &me);
        assert_eq!(hello.len(), HELLO_BYTES, "HELLO's length");
        (Dialer { secret: secret.clone(), me, expects, peer: None, state: DialState::AwaitChallenge }, hello)
    }

    /// Takes the acceptor's answer to what this side sent last.
    pub fn on_answer(&mut self, bytes: &[u8]) -> Result<DialStep, HandshakeError> {
        let step = self.step(bytes);
        self.state = match (&step, self.state) {
            (Err(_), _) => DialState::Failed,
            (Ok(DialStep::Send(_)), _) => DialState::AwaitAccepted,
            (Ok(DialStep::Authenticated(_)), _) => DialState::Done,
        };
        step
    }

    fn step(&mut self, bytes: &[u8]) -> Result<DialStep, HandshakeError> {
        if bytes.len() == SHORT_BYTES && bytes[0] == Kind::Refused as u8 {
            return Err(HandshakeError::RefusedByPeer(Refusal::from_u8(bytes[2])));
        }
        let refused = HandshakeError::Refused;
        match self.state {
            DialState::AwaitChallenge => {
                let peer = decode_intro(bytes, Kind::Challenge, CHALLENGE_BYTES).map_err(refused)?;
                if peer.who.role != self.expects {
                    return Err(refused(Refusal::Role));
                }
                let expected = mac(&self.secret, ACCEPTOR_LABEL, &self.me, &peer);
                expected.verify_slice(&bytes[12 + NONCE_BYTES..]).map_err(|_| refused(Refusal::WrongProof))?;
                self.peer = Some(peer);
                let mut proof = short(Kind::Proof, 0);
                proof.extend_from_slice(&mac(&self.secret, DIALER_LABEL, &self.me, &peer).finalize().into_bytes());
                assert_eq!(proof.len(), PROOF_BYTES, "PROOF's length");
                Ok(DialStep::Send(proof))
            }
            DialState::AwaitAccepted => {
                check(bytes, Kind::Accepted, SHORT_BYTES).map_err(refused)?;
                Ok(DialStep::Authenticated(self.peer.expect("a challenge came first").who))
            }
            DialState::Done | DialState::Failed => Err(refused(Refusal::OutOfTurn)),
        }
    }
}

/// Where an acceptor stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AcceptState {
    AwaitHello,
    AwaitProof,
    Done,
    Failed,
}

/// What an acceptor does next.
#[derive(Debug, PartialEq, Eq)]
pub enum AcceptStep {
    /// Answer with this (a CHALLENGE) and wait for the PROOF.
    Reply(Vec<u8>),
    /// Answer with this (ACCEPTED): the link is open to this dialer.
    Authenticated(Vec<u8>, Identity),
}

/// The accepting side of a handshake.
pub struct Acceptor {
    secret: Secret,
    me: Intro,
    accepts: Vec<Role>,
    peer: Option<Intro>,
    state: AcceptState,
}

impl Acceptor {
    /// An acceptor for `me` with fresh `nonce`, talking to dialers of the
    /// roles `accepts`.
    pub fn new(secret: &Secret, me: Identity, accepts: &[Role], nonce: [u8; NONCE_BYTES]) -> Acceptor {
        assert!(!accepts.is_empty(), "an acceptor accepts some role");
        Acceptor { secret: secret.clone(), me: Intro { who: me, nonce }, accepts: accepts.to_vec(), peer: None, state: AcceptState::AwaitHello }
    }

    /// Takes one request of the dialer.
    pub fn on_request(&mut self, bytes: &[u8]) -> Result<AcceptStep, HandshakeError> {
        let step = self.step(bytes);
        self.state = match &step {
            Err(_) => AcceptState::Failed,
            Ok(AcceptStep::Reply(_)) => AcceptState::AwaitProof,
            Ok(AcceptStep::Authenticated(..)) => AcceptState::Done,
        };
        step
    }

    fn step(&mut self, bytes: &[u8]) -> Result<AcceptStep, HandshakeError> {
        let refused = HandshakeError::Refused;
        match self.state {
            AcceptState::AwaitHello => {
                let peer = decode_intro(bytes, Kind::Hello, HELLO_BYTES).map_err(refused)?;
                if !self.accepts.contains(&peer.who.role) {
                    return Err(refused(Refusal::Role));
                }
                self.peer = Some(peer);
                let mut challenge = encode_intro(Kind::Challenge, &self.me);
                challenge.extend_from_slice(&mac(&self.secret, ACCEPTOR_LABEL, &peer, &self.me).finalize().into_bytes());
                assert_eq!(challenge.len(), CHALLENGE_BYTES, "CHALLENGE's length");
                Ok(AcceptStep::Reply(challenge))
            }
            AcceptState::AwaitProof => {
                check(bytes, Kind::Proof, PROOF_BYTES).map_err(refused)?;
                if bytes[2] != 0 || bytes[3] != 0 {
                    return Err(refused(Refusal::Malformed));
                }
                let peer = self.peer.expect("a hello came first");
                let expected = mac(&self.secret, DIALER_LABEL, &peer, &self.me);
                expected.verify_slice(&bytes[4..]).map_err(|_| refused(Refusal::WrongProof))?;
                Ok(AcceptStep::Authenticated(short(Kind::Accepted, 0), peer.who))
            }
            AcceptState::Done | AcceptState::Failed => Err(refused(Refusal::OutOfTurn)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(b: u8) -> Secret {
        Secret::from_bytes([b; 32])
    }

    const REPLICA: Identity = Identity { role: Role::Replica, id: 1 };
    const OTHER: Identity = Identity { role: Role::Replica, id: 2 };

    fn acceptor(s: &Secret, nonce: u8) -> Acceptor {
        Acceptor::new(s, OTHER, &[Role::Replica, Role::Client], [nonce; 32])
    }

    /// Runs a whole handshake; both sides' verdicts.
    fn run(dial: &Secret, accept: &Secret) -> (Result<Identity, HandshakeError>, Result<Identity, HandshakeError>) {
        let (mut d, hello) = Dialer::new(dial, REPLICA, Role::Replica, [1; 32]);
        let mut a = acceptor(accept, 2);
        let AcceptStep::Reply(challenge) = a.on_request(&hello).expect("a hello is answered") else { panic!("a challenge") };
        let proof = match d.on_answer(&challenge) {
            Ok(DialStep::Send(p)) => p,
            Ok(other) => panic!("{other:?}"),
            Err(e) => return (Err(e), Err(e)),
        };
        match a.on_request(&proof) {
            Ok(AcceptStep::Authenticated(accepted, who)) => (d.on_answer(&accepted).map(|s| match s {
                DialStep::Authenticated(w) => w,
                other => panic!("{other:?}"),
            }), Ok(who)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => (d.on_answer(&e.refusal_message().expect("the acceptor refused")).map(|_| REPLICA), Err(e)),
        }
    }

    #[test]
    fn both_sides_holding_the_secret_open_the_link() {
        let (d, a) = run(&secret(7), &secret(7));
        assert_eq!(d, Ok(OTHER));
        assert_eq!(a, Ok(REPLICA));
    }

    #[test]
    fn a_dialer_with_another_secret_is_refused_and_told() {
        // The dialer checks the acceptor's MAC first: it fails there.
        let (d, _) = run(&secret(8), &secret(7));
        assert_eq!(d, Err(HandshakeError::Refused(Refusal::WrongProof)));
    }

    #[test]
    fn a_wrong_proof_is_refused_by_the_acceptor() {
        let s = secret(7);
        let (_, hello) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        let mut a = acceptor(&s, 2);
        assert!(matches!(a.on_request(&hello), Ok(AcceptStep::Reply(_))));
        let mut proof = short(Kind::Proof, 0);
        proof.extend_from_slice(&[0xAB; 32]);
        let e = a.on_request(&proof).unwrap_err();
        assert_eq!(e, HandshakeError::Refused(Refusal::WrongProof));
        assert_eq!(e.refusal_message(), Some(vec![5, VERSION, 4, 0]));
        // Nothing more is taken after a refusal.
        assert_eq!(a.on_request(&proof), Err(HandshakeError::Refused(Refusal::OutOfTurn)));
    }

    #[test]
    fn a_replayed_proof_fails_against_a_fresh_nonce() {
        let s = secret(7);
        let (mut d, hello) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        let mut first = acceptor(&s, 2);
        let AcceptStep::Reply(challenge) = first.on_request(&hello).unwrap() else { panic!() };
        let Ok(DialStep::Send(proof)) = d.on_answer(&challenge) else { panic!() };
        assert!(matches!(first.on_request(&proof), Ok(AcceptStep::Authenticated(..))));
        // An eavesdropper replays HELLO and PROOF to a new connection.
        let mut second = acceptor(&s, 3);
        assert!(matches!(second.on_request(&hello), Ok(AcceptStep::Reply(_))));
        assert_eq!(second.on_request(&proof), Err(HandshakeError::Refused(Refusal::WrongProof)));
    }

    #[test]
    fn a_reflected_challenge_is_not_a_proof() {
        // The acceptor's own MAC, sent back as the dialer's proof.
        let s = secret(7);
        let (_, hello) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        let mut a = acceptor(&s, 2);
        let AcceptStep::Reply(challenge) = a.on_request(&hello).unwrap() else { panic!() };
        let mut proof = short(Kind::Proof, 0);
        proof.extend_from_slice(&challenge[12 + NONCE_BYTES..]);
        assert_eq!(a.on_request(&proof), Err(HandshakeError::Refused(Refusal::WrongProof)));
    }

    #[test]
    fn truncated_and_oversized_messages_are_malformed() {
        let s = secret(7);
        let (_, hello) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        for bad in [&hello[..HELLO_BYTES - 1], &hello[..1], &[][..]] {
            assert_eq!(acceptor(&s, 2).on_request(bad), Err(HandshakeError::Refused(Refusal::Malformed)), "{} B", bad.len());
        }
        let mut long = hello.clone();
        long.push(0);
        assert_eq!(acceptor(&s, 2).on_request(&long), Err(HandshakeError::Refused(Refusal::Malformed)));
        let mut a = acceptor(&s, 2);
        let AcceptStep::Reply(challenge) = a.on_request(&hello).unwrap() else { panic!() };
        let (mut d, _) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        assert_eq!(d.on_answer(&challenge[..CHALLENGE_BYTES - 1]), Err(HandshakeError::Refused(Refusal::Malformed)));
        let mut v2 = hello.clone();
        v2[1] = 2;
        assert_eq!(acceptor(&s, 2).on_request(&v2), Err(HandshakeError::Refused(Refusal::Version)));
    }

    #[test]
    fn messages_out_of_turn_are_refused() {
        let s = secret(7);
        // A PROOF (or a PING) before any HELLO.
        let mut proof = short(Kind::Proof, 0);
        proof.extend_from_slice(&[0; 32]);
        assert_eq!(acceptor(&s, 2).on_request(&proof), Err(HandshakeError::Refused(Refusal::OutOfTurn)));
        assert_eq!(acceptor(&s, 2).on_request(&ping()), Err(HandshakeError::Refused(Refusal::OutOfTurn)));
        // Anything that is not a link message at all (a Raft message's bytes).
        assert_eq!(acceptor(&s, 2).on_request(b"\x08\x03\x10\x01"), Err(HandshakeError::Refused(Refusal::Malformed)));
        // A second HELLO after the first.
        let (_, hello) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        let mut a = acceptor(&s, 2);
        a.on_request(&hello).unwrap();
        assert_eq!(a.on_request(&hello), Err(HandshakeError::Refused(Refusal::OutOfTurn)));
        // ACCEPTED before a challenge.
        let (mut d, _) = Dialer::new(&s, REPLICA, Role::Replica, [1; 32]);
        assert_eq!(d.on_answer(&short(Kind::Accepted, 0)), Err(HandshakeError::Refused(Refusal::OutOfTurn)));
    }

    #[test]
    fn roles_are_checked_both_ways() {
        let s = secret(7);
        let primary = Identity { role: Role::MirrorPrimary, id: 0 };
        let (_, hello) = Dialer::new(&s, primary, Role::Replica, [1; 32]);
        assert_eq!(acceptor(&s, 2).on_request(&hello), Err(HandshakeError::Refused(Refusal::Role)));
        // A dialer that expects a backup but reaches a replica.
        let (mut d, hello) = Dialer::new(&s, primary, Role::MirrorBackup, [1; 32]);
        let mut a = Acceptor::new(&s, OTHER, &[Role::MirrorPrimary], [2; 32]);
        let AcceptStep::Reply(challenge) = a.on_request(&hello).unwrap() else { panic!() };
        assert_eq!(d.on_answer(&challenge), Err(HandshakeError::Refused(Refusal::Role)));
    }

    #[test]
    fn a_refusal_reaches_the_dialer_with_its_reason() {
        let (mut d, _) = Dialer::new(&secret(7), REPLICA, Role::Replica, [1; 32]);
        assert_eq!(d.on_answer(&short(Kind::Refused, Refusal::WrongProof as u8)), Err(HandshakeError::RefusedByPeer(Refusal::WrongProof)));
    }
}
