//! The machine's replication floor: a replicated write's four messages
//! (request, append to both followers, the first acknowledgement, reply)
//! over plain blocking TCP sockets on loopback, with no UCX, no event loop,
//! no Raft and nothing persisted. `pmwire bench smr` measures it in the
//! same rounds as the replicas: it bounds what any design could reach over
//! tcp on this machine, where [`pmwire_smr::floor`] bounds what one over
//! our transport and loop can, so the gap between the two is the
//! transport's own cost.
//!
//! The three nodes are threads of the bench process (a thread's wake-up
//! costs what a process's does; no address-space switch, so if anything
//! this floor is a little low). Sockets have `TCP_NODELAY`; the leader
//! waits for its followers' acknowledgements with `poll(2)` and answers
//! the client at the first one; the second is read when it arrives. Every
//! wait blocks: nothing spins.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use super::peers::{PutClient, KEY_BYTES, VALUE_BYTES};

/// A write's bytes on the wire: the key, then the value.
const WRITE_BYTES: usize = KEY_BYTES + VALUE_BYTES;
/// An acknowledgement's and a reply's bytes: the write's sequence number.
const ACK_BYTES: usize = 8;

/// The name of the floor's rows.
pub const VARIANT: &str = "floor_raw_tcp_4_messages_no_ucx";

/// A leader and two followers on loopback, and the client's connection
/// to the leader. Dropping it closes the connection; the nodes then end
/// and are joined.
pub struct RawFloor {
    client: Option<TcpStream>,
    seq: u64,
    nodes: Vec<JoinHandle<std::io::Result<()>>>,
}

fn listener() -> Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0").context("bind a loopback port")
}

fn connect(l: &TcpListener) -> Result<TcpStream> {
    let s = TcpStream::connect(l.local_addr()?).context("connect on loopback")?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn accept(l: &TcpListener) -> std::io::Result<TcpStream> {
    let (s, _) = l.accept()?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// A follower: acknowledges each write once it has all its bytes.
fn follower(l: TcpListener) -> std::io::Result<()> {
    let mut s = accept(&l)?;
    let mut buf = [0u8; WRITE_BYTES];
    let mut seq = 0u64;
    loop {
        if let Err(e) = s.read_exact(&mut buf) {
            return if e.kind() == std::io::ErrorKind::UnexpectedEof { Ok(()) } else { Err(e) };
        }
        seq += 1;
        s.write_all(&seq.to_le_bytes())?;
    }
}

/// The leader: forwards each write to both followers, answers at the
/// first acknowledgement, and reads the other when it comes.
fn leader(l: TcpListener, mut followers: [TcpStream; 2]) -> std::io::Result<()> {
    let mut client = accept(&l)?;
    let mut buf = [0u8; WRITE_BYTES];
    let mut ack = [0u8; ACK_BYTES];
    // Acknowledgements each follower still owes.
    let mut owed = [0u64; 2];
    loop {
        if let Err(e) = client.read_exact(&mut buf) {
            for f in &followers {
                let _ = f.shutdown(Shutdown::Write);
            }
            return if e.kind() == std::io::ErrorKind::UnexpectedEof { Ok(()) } else { Err(e) };
        }
        for (f, o) in followers.iter_mut().zip(&mut owed) {
            f.write_all(&buf)?;
            *o += 1;
        }
        // A majority (this node and one follower) holds the write once one
        // follower has acknowledged it: acknowledgements come in order, so
        // once that follower owes none.
        while owed.iter().all(|&o| o > 0) {
            let mut fds = [0, 1].map(|i| libc::pollfd { fd: followers[i].as_raw_fd(), events: libc::POLLIN, revents: 0 });
            // SAFETY: two pollfds we own, for the duration of the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for (i, fd) in fds.iter().enumerate() {
                if fd.revents != 0 {
                    // Readable, or closed: a closed follower fails the read.
                    followers[i].read_exact(&mut ack)?;
                    owed[i] -= 1;
                }
            }
        }
        client.write_all(&buf[..ACK_BYTES])?;
    }
}

impl RawFloor {
    /// Starts the three nodes and connects the client.
    pub fn start() -> Result<RawFloor> {
        let (lead, f1, f2) = (listener()?, listener()?, listener()?);
        let followers = [connect(&f1)?, connect(&f2)?];
        let mut nodes = Vec::with_capacity(3);
        for l in [f1, f2] {
            nodes.push(std::thread::Builder::new().name("raw-floor-follower".into()).spawn(move || follower(l))?);
        }
        let client = connect(&lead)?;
        nodes.push(std::thread::Builder::new().name("raw-floor-leader".into()).spawn(move || leader(lead, followers))?);
        Ok(RawFloor { client: Some(client), seq: 0, nodes })
    }
}

impl PutClient for RawFloor {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        assert_eq!(key.len(), KEY_BYTES);
        assert_eq!(value.len(), VALUE_BYTES);
        let mut buf = [0u8; WRITE_BYTES];
        buf[..KEY_BYTES].copy_from_slice(key);
        buf[KEY_BYTES..].copy_from_slice(value);
        let s = self.client.as_mut().expect("connected until dropped");
        s.write_all(&buf).context("send to the raw floor's leader")?;
        let mut reply = [0u8; ACK_BYTES];
        s.read_exact(&mut reply).context("the raw floor's reply")?;
        self.seq += 1;
        Ok(())
    }
}

impl Drop for RawFloor {
    fn drop(&mut self) {
        drop(self.client.take());
        for n in self.nodes.drain(..) {
            // A node's I/O error ends only that node; the measurement
            // already saw it as a failed put.
            let _ = n.join();
        }
    }
}

/// The floor under load: one leader that many clients share, for the
/// throughput sweep. The leader waits with `poll(2)` on its listener, its
/// followers and every client; the writes it read in one round go to each
/// follower as one send, a follower acknowledges each read of its socket
/// with one count of the writes it holds so far, and the leader answers,
/// in order, every write one follower has acknowledged (a majority with
/// itself). That is the batching a Raft leader does (one append per turn
/// for what arrived in it, one acknowledgement per append): without it,
/// a replicated system that batches beat this floor under load (Redis +
/// `WAIT` did, 34 K against 27 K SETs/s), and a floor the system beats is
/// no floor. Plain blocking sockets otherwise, as [`RawFloor`]; a stop
/// eventfd ends it.
pub struct SharedRawFloor {
    addr: std::net::SocketAddr,
    stop: std::os::fd::OwnedFd,
    nodes: Vec<JoinHandle<std::io::Result<()>>>,
}

/// One client of a [`SharedRawFloor`].
pub struct SharedRawFloorClient(TcpStream);

/// The shared leader's state: clients by index (a gone one is `None`),
/// and the client of each forwarded write not yet answered, in order.
struct SharedLeader {
    clients: Vec<Option<TcpStream>>,
    waiting: std::collections::VecDeque<usize>,
    acked: [u64; 2],
    answered: u64,
}

/// A follower of the shared floor: acknowledges each read of its socket
/// with the count of whole writes it holds so far.
fn batch_follower(l: TcpListener) -> std::io::Result<()> {
    let mut s = accept(&l)?;
    let mut buf = vec![0u8; 256 << 10];
    let (mut held, mut partial) = (0u64, 0usize);
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let bytes = partial + n;
        held += (bytes / WRITE_BYTES) as u64;
        partial = bytes % WRITE_BYTES;
        s.write_all(&held.to_le_bytes())?;
    }
}

/// The latest count in the acknowledgements a follower's read brought
/// (`pending` keeps a count cut by the read).
fn latest_ack(s: &mut TcpStream, pending: &mut Vec<u8>) -> std::io::Result<Option<u64>> {
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf)?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    pending.extend_from_slice(&buf[..n]);
    let whole = pending.len() / ACK_BYTES * ACK_BYTES;
    let latest = pending[..whole].chunks_exact(ACK_BYTES).last().map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
    pending.drain(..whole);
    Ok(latest)
}

impl SharedLeader {
    /// Answers every write a follower has acknowledged.
    fn answer(&mut self) {
        let committed = self.acked[0].max(self.acked[1]);
        while self.answered < committed {
            let client = self.waiting.pop_front().expect("a forwarded write per acknowledgement");
            self.answered += 1;
            if let Some(s) = &mut self.clients[client] {
                if s.write_all(&self.answered.to_le_bytes()).is_err() {
                    self.clients[client] = None;
                }
            }
        }
    }
}

fn shared_leader(l: TcpListener, mut followers: [TcpStream; 2], stop: std::os::fd::RawFd) -> std::io::Result<()> {
    let mut leader = SharedLeader { clients: Vec::new(), waiting: std::collections::VecDeque::new(), acked: [0; 2], answered: 0 };
    let mut buf = [0u8; WRITE_BYTES];
    let mut pending_acks = [Vec::new(), Vec::new()];
    let mut batch = Vec::new();
    let mut fds = Vec::new();
    loop {
        fds.clear();
        for fd in [stop, l.as_raw_fd(), followers[0].as_raw_fd(), followers[1].as_raw_fd()] {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        for c in &leader.clients {
            // A gone client's entry stays (-1 is ignored by poll) so indexes hold.
            fds.push(libc::pollfd { fd: c.as_ref().map_or(-1, |s| s.as_raw_fd()), events: libc::POLLIN, revents: 0 });
        }
        // SAFETY: pollfds we own, for the duration of the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 {
            return Ok(());
        }
        if fds[1].revents != 0 {
            leader.clients.push(Some(accept(&l)?));
        }
        for i in 0..2 {
            if fds[2 + i].revents != 0 {
                if let Some(count) = latest_ack(&mut followers[i], &mut pending_acks[i])? {
                    leader.acked[i] = count;
                }
            }
        }
        leader.answer();
        batch.clear();
        for (i, fd) in fds[4..].iter().enumerate() {
            if fd.revents == 0 {
                continue;
            }
            let Some(s) = &mut leader.clients[i] else { continue };
            if s.read_exact(&mut buf).is_err() {
                leader.clients[i] = None;
                continue;
            }
            batch.extend_from_slice(&buf);
            leader.waiting.push_back(i);
        }
        if !batch.is_empty() {
            for f in &mut followers {
                f.write_all(&batch)?;
            }
        }
    }
}

impl SharedRawFloor {
    /// Starts the leader and its two followers.
    pub fn start() -> Result<SharedRawFloor> {
        let (lead, f1, f2) = (listener()?, listener()?, listener()?);
        let followers = [connect(&f1)?, connect(&f2)?];
        // SAFETY: plain syscall; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        anyhow::ensure!(efd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd we own.
        let stop = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
        let mut nodes = Vec::with_capacity(3);
        for l in [f1, f2] {
            nodes.push(std::thread::Builder::new().name("raw-floor-follower".into()).spawn(move || batch_follower(l))?);
        }
        let addr = lead.local_addr()?;
        nodes.push(std::thread::Builder::new().name("raw-floor-leader".into()).spawn(move || shared_leader(lead, followers, efd))?);
        Ok(SharedRawFloor { addr, stop, nodes })
    }

    /// A new client connection to the leader.
    pub fn client(&self) -> Result<SharedRawFloorClient> {
        let s = TcpStream::connect(self.addr).context("connect to the shared raw floor")?;
        s.set_nodelay(true)?;
        Ok(SharedRawFloorClient(s))
    }
}

impl PutClient for SharedRawFloorClient {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut buf = [0u8; WRITE_BYTES];
        buf[..KEY_BYTES].copy_from_slice(key);
        buf[KEY_BYTES..].copy_from_slice(value);
        self.0.write_all(&buf).context("send to the raw floor's leader")?;
        let mut reply = [0u8; ACK_BYTES];
        self.0.read_exact(&mut reply).context("the raw floor's reply")?;
        Ok(())
    }

    fn exchange(&mut self) -> Option<&mut dyn crate::smr::events::Exchange> {
        Some(self)
    }
}

/// The write's bytes and the leader's 8 B acknowledgement, as `put`.
impl crate::smr::events::Exchange for SharedRawFloorClient {
    fn stream(&self) -> &TcpStream {
        &self.0
    }

    fn encode(&mut self, _step: usize, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }

    fn reply(&mut self, _step: usize, buf: &[u8]) -> Result<Option<usize>> {
        Ok((buf.len() >= ACK_BYTES).then_some(ACK_BYTES))
    }
}

impl Drop for SharedRawFloor {
    fn drop(&mut self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        for n in self.nodes.drain(..) {
            let _ = n.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_put_is_answered_and_the_nodes_end_when_the_client_goes() {
        let mut floor = RawFloor::start().expect("start");
        let key = [b'k'; KEY_BYTES];
        let value = [b'v'; VALUE_BYTES];
        for _ in 0..1000 {
            floor.put(&key, &value).expect("put");
        }
        assert_eq!(floor.seq, 1000);
        drop(floor); // joins the three threads: they ended.
    }

    #[test]
    fn a_shared_floor_answers_every_client_and_ends_on_drop() {
        let floor = SharedRawFloor::start().expect("start");
        let key = [b'k'; KEY_BYTES];
        let value = [b'v'; VALUE_BYTES];
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut c = floor.client().expect("client");
                    for _ in 0..500 {
                        c.put(&key, &value).expect("put");
                    }
                });
            }
        });
        drop(floor); // joins the three threads: they ended.
    }
}
