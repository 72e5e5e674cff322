//! The executor as a test's client sees it: a server, one session and an
//! in-memory keyspace, commands given inline or as arguments (the test
//! modules beside the families share it; each adds what it inspects).

use super::*;
use crate::chunked::ChunkConfig;
use crate::store::{Clock, Keyspace, MemKeyspace};
use pmwire_resp::request::Parsed;

/// Runs one command whose arguments are `line`'s words on `session`: its
/// reply as text, and its flow.
pub(super) fn run_line(
    server: &mut Server,
    session: &mut Session,
    ks: &mut MemKeyspace,
    line: &str,
) -> (String, Flow) {
    let args: Vec<&str> = line.split(' ').collect();
    let (out, flow) = execute_args(server, session, ks, &args);
    (String::from_utf8_lossy(&out).into_owned(), flow)
}

/// Runs one command given as its arguments on `session`: its reply and flow.
pub(super) fn execute_args<A: AsRef<[u8]>>(
    server: &mut Server,
    session: &mut Session,
    ks: &mut MemKeyspace,
    args: &[A],
) -> (Vec<u8>, Flow) {
    let mut input = Vec::new();
    pmwire_resp::client::encode_request(args, &mut input);
    let segs: [&[u8]; 1] = [&input];
    let mut p = Parsed::new(Limits::default());
    assert_eq!(p.parse(&segs).commands, 1);
    let mut out: Vec<u8> = Vec::new();
    let flow = server.execute(session, ks, &p.request(&segs, 0), &mut out);
    (out, flow)
}

pub(super) struct Fixture {
    pub(super) server: Server,
    pub(super) session: Session,
    pub(super) ks: MemKeyspace,
}

impl Fixture {
    pub(super) fn new() -> Self {
        Fixture::with(ServerConfig::default(), MemKeyspace::new())
    }

    pub(super) fn with(config: ServerConfig, ks: MemKeyspace) -> Self {
        let mut server = Server::new(config);
        let session = server.open_session();
        Fixture {
            server,
            session,
            ks,
        }
    }

    /// `collections`' chunking, the keyspace's clock fixed at `now_ms`.
    pub(super) fn at(collections: ChunkConfig, now_ms: u64) -> Self {
        let mut ks = MemKeyspace::new();
        ks.set_clock(Clock::Fixed(now_ms));
        Fixture::with(
            ServerConfig {
                collections,
                ..ServerConfig::default()
            },
            ks,
        )
    }

    /// A fresh executor on this keyspace (a restart of the server).
    pub(super) fn restarted(self) -> Self {
        Fixture::with(ServerConfig::default(), self.ks)
    }

    /// Runs inline commands (one per line) and returns all replies.
    pub(super) fn run(&mut self, input: &str) -> String {
        let input = format!("{input}\r\n");
        let segs: [&[u8]; 1] = [input.as_bytes()];
        let mut p = Parsed::new(Limits::default());
        let s = p.parse(&segs);
        assert_eq!(s.error, None);
        let mut out: Vec<u8> = Vec::new();
        for i in 0..s.commands {
            self.server.execute(
                &mut self.session,
                &mut self.ks,
                &p.request(&segs, i),
                &mut out,
            );
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Runs one command given as its arguments; its reply bytes.
    pub(super) fn raw<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Vec<u8> {
        execute_args(&mut self.server, &mut self.session, &mut self.ks, args).0
    }

    /// Runs one command given as its arguments; its reply as text.
    pub(super) fn call(&mut self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.raw(args)).into_owned()
    }

    /// Runs one command whose arguments are `line`'s words; its reply as text.
    pub(super) fn cmd(&mut self, line: &str) -> String {
        let args: Vec<&str> = line.split(' ').collect();
        self.call(&args)
    }

    /// Every internal entry: key and bytes.
    pub(super) fn internal(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys = Vec::new();
        self.ks
            .internal_scan(&[], usize::MAX, &mut |k| keys.push(k.to_vec()));
        keys.into_iter()
            .map(|k| {
                let mut v = Vec::new();
                assert!(self.ks.internal_read(&k, &mut v));
                (k, v)
            })
            .collect()
    }

    /// The stream header stored at `key`.
    pub(super) fn stream_header(&mut self, key: &str) -> crate::stream::Header {
        let s = self.ks.get(key.as_bytes()).expect("a stream");
        let mut v = Vec::new();
        self.ks.read(&s.value, &mut v);
        crate::stream::Header::decode(&v).expect("a stream header")
    }
}
