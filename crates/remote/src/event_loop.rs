//! The server's run-to-completion event loop, over a narrow transport seam,
//! and an in-process transport for tests.
//!
//! The loop drains the transport's events (each whole message goes to
//! [`Server::handle`]), sends the replies, collects the copy engine's
//! completions, and then **blocks** in `poll(2)` on two descriptors: the
//! transport's event fd and the copy engine's eventfd. It never spins.
//!
//! What a real transport (UCX, `crates/transport`) must provide to plug in
//! ([`ServerTransport`]): an fd that becomes readable when events are
//! pending (UCX: `ucp_worker_get_efd` after `ucp_worker_arm` returned
//! `UCS_OK`; on `UCS_ERR_BUSY`, progress again instead of sleeping), a
//! non-blocking `next_event` that progresses the worker and hands over one
//! whole active message (eager data, or an rndv message received into a
//! buffer of its own), and a `send` of one reply. The loop's invariants
//! hold for any such transport: replies are produced only by the server
//! core, and a connection's close is reported so its rights are dropped.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use crate::server::{Action, ClientId, Completed, Server};

/// What a transport reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A client connected.
    Connected(ClientId),
    /// A whole message from a client (its bytes are in the buffer).
    Message(ClientId),
    /// A client went away.
    Disconnected(ClientId),
    /// Stop serving (after the pending offloaded writes complete).
    Shutdown,
}

/// The seam the loop needs from a transport.
pub trait ServerTransport {
    /// Readable when [`next_event`](Self::next_event) may have something.
    fn event_fd(&self) -> RawFd;
    /// The next event, without blocking; a message's bytes go to `buf`.
    fn next_event(&mut self, buf: &mut Vec<u8>) -> Option<Event>;
    /// Sends one message to a client (dropped if it is gone).
    fn send(&mut self, client: ClientId, bytes: &[u8]);
}

/// Serves until the transport reports [`Event::Shutdown`] and every
/// offloaded write has been answered.
pub fn serve(server: &mut Server, transport: &mut impl ServerTransport) {
    let mut msg = Vec::new();
    let mut reply = Vec::new();
    let mut done: Vec<Completed> = Vec::new();
    let mut stopping = false;
    loop {
        while let Some(event) = transport.next_event(&mut msg) {
            match event {
                Event::Connected(client) => server.connect(client),
                Event::Disconnected(client) => server.disconnect(client),
                Event::Shutdown => stopping = true,
                Event::Message(client) => {
                    if server.handle(client, &msg, &mut reply) == Action::Reply {
                        transport.send(client, &reply);
                    }
                }
            }
        }
        server.poll_completions(&mut done);
        for completed in done.drain(..) {
            transport.send(completed.client, &completed.reply);
        }
        if stopping && server.pending() == 0 {
            return;
        }
        block(transport.event_fd(), server.completion_fd());
    }
}

/// Blocks until either descriptor is readable.
fn block(transport: RawFd, engine: Option<RawFd>) {
    let mut fds = [
        libc::pollfd { fd: transport, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: engine.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: two valid pollfds (a negative fd is ignored by poll).
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
    let error = std::io::Error::last_os_error();
    assert!(rc > 0 || error.kind() == std::io::ErrorKind::Interrupted, "poll failed: {error}");
}

/// A queue of messages with an eventfd that counts them.
struct Mailbox {
    queue: Mutex<VecDeque<(Event, Vec<u8>)>>,
    event: OwnedFd,
}

impl Mailbox {
    fn new() -> Arc<Mailbox> {
        // SAFETY: plain syscall; checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor we own.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        Arc::new(Mailbox { queue: Mutex::new(VecDeque::new()), event })
    }

    fn push(&self, event: Event, bytes: &[u8]) {
        self.queue.lock().expect("mailbox").push_back((event, bytes.to_vec()));
        let one = 1u64;
        // SAFETY: 8 bytes from a local into our eventfd.
        let rc = unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
        assert!(rc == 8, "eventfd write: {}", std::io::Error::last_os_error());
    }

    fn pop(&self, buf: &mut Vec<u8>) -> Option<Event> {
        let mut count = 0u64;
        // SAFETY: 8 bytes into a local; EAGAIN when empty is fine.
        unsafe { libc::read(self.event.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        let mut queue = self.queue.lock().expect("mailbox");
        let (event, bytes) = queue.pop_front()?;
        if !queue.is_empty() {
            // Leave the fd readable for what is still queued.
            drop(queue);
            let one = 1u64;
            // SAFETY: as in push.
            unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        buf.clear();
        buf.extend_from_slice(&bytes);
        Some(event)
    }

    /// Blocks until something is queued.
    fn wait(&self) {
        let mut pfd = libc::pollfd { fd: self.event.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, -1) };
    }
}

/// The connected clients' mailboxes.
type Directory = Arc<Mutex<Vec<(ClientId, Arc<Mailbox>)>>>;

/// An in-process network: the server's end.
pub struct InProcServer {
    inbox: Arc<Mailbox>,
    clients: Directory,
}

/// An in-process network: one client's end.
pub struct InProcClient {
    id: ClientId,
    server: Arc<Mailbox>,
    inbox: Arc<Mailbox>,
}

impl InProcServer {
    /// A server end with no clients.
    pub fn new() -> InProcServer {
        InProcServer { inbox: Mailbox::new(), clients: Arc::new(Mutex::new(Vec::new())) }
    }

    /// A handle that connects clients and stops the server from other threads.
    pub fn handle(&self) -> InProcNetwork {
        InProcNetwork { server: Arc::clone(&self.inbox), clients: Arc::clone(&self.clients) }
    }
}

impl Default for InProcServer {
    fn default() -> Self {
        InProcServer::new()
    }
}

/// Connects clients to an [`InProcServer`] and stops it.
#[derive(Clone)]
pub struct InProcNetwork {
    server: Arc<Mailbox>,
    clients: Directory,
}

impl InProcNetwork {
    /// Connects client `id`.
    pub fn connect(&self, id: ClientId) -> InProcClient {
        let inbox = Mailbox::new();
        self.clients.lock().expect("clients").push((id, Arc::clone(&inbox)));
        self.server.push(Event::Connected(id), &[]);
        InProcClient { id, server: Arc::clone(&self.server), inbox }
    }

    /// Asks the server loop to stop.
    pub fn shutdown(&self) {
        self.server.push(Event::Shutdown, &[]);
    }
}

impl InProcClient {
    /// Sends one request.
    pub fn send(&self, bytes: &[u8]) {
        self.server.push(Event::Message(self.id), bytes);
    }

    /// Blocks for the next reply.
    pub fn recv(&self, buf: &mut Vec<u8>) {
        loop {
            if self.inbox.pop(buf).is_some() {
                return;
            }
            self.inbox.wait();
        }
    }
}

impl Drop for InProcClient {
    fn drop(&mut self) {
        self.server.push(Event::Disconnected(self.id), &[]);
    }
}

impl ServerTransport for InProcServer {
    fn event_fd(&self) -> RawFd {
        self.inbox.event.as_raw_fd()
    }

    fn next_event(&mut self, buf: &mut Vec<u8>) -> Option<Event> {
        self.inbox.pop(buf)
    }

    fn send(&mut self, client: ClientId, bytes: &[u8]) {
        let clients = self.clients.lock().expect("clients");
        if let Some((_, inbox)) = clients.iter().find(|(id, _)| *id == client) {
            inbox.push(Event::Message(client), bytes);
        }
    }
}
