//! Redis as its users make writes synchronous: a primary and
//! [`REPLICAS`] replicas (`redis-server` children, `--replicaof`), every
//! one with `appendonly yes` and `appendfsync always`, and a client that
//! follows each `SET` with `WAIT 2 0`.
//!
//! A write counts only if `WAIT` answers [`REPLICAS`] (every replica
//! acknowledged it); any other answer is an error. `WAIT 2 0` blocks
//! without a server-side limit; the client's socket timeout bounds it.

use anyhow::{anyhow, bail, Context, Result};
use pmwire_resp::client::{encode_request, parse_reply, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{PutClient, IO_TIMEOUT};
use crate::smr::events::Exchange;
use crate::kv::placement::Placement;
use crate::kv::redis::{Persistence, RedisServer};

/// Replicas behind the primary.
pub const REPLICAS: usize = 2;

/// How long the replicas may take to be online.
const SYNCED_WITHIN: Duration = Duration::from_secs(30);

/// A primary and its replicas, each killed (and its directory removed)
/// on drop.
pub struct RedisWaitCluster {
    primary: RedisServer,
    replicas: Vec<RedisServer>,
}

impl RedisWaitCluster {
    /// Starts the primary and the replicas with their files under
    /// `parent`, unpinned, and waits until every replica is online.
    pub fn start(parent: &Path, label: &str) -> Result<RedisWaitCluster> {
        let always = Persistence::AppendFsyncAlways;
        let unpinned = Placement::unpinned();
        let primary = RedisServer::start_with(always, parent, &unpinned, &format!("{label}-primary"), &[])?;
        let replica_of = ["--replicaof".to_string(), "127.0.0.1".to_string(), primary.port().to_string()];
        let mut replicas = Vec::new();
        for i in 0..REPLICAS {
            replicas.push(RedisServer::start_with(always, parent, &unpinned, &format!("{label}-replica{i}"), &replica_of)?);
        }
        let cluster = RedisWaitCluster { primary, replicas };
        cluster.wait_synced()?;
        Ok(cluster)
    }

    /// Waits until the primary's `INFO replication` lists every replica online.
    fn wait_synced(&self) -> Result<()> {
        let deadline = Instant::now() + SYNCED_WITHIN;
        let mut client = RedisWaitClient::connect(self.primary.port())?;
        loop {
            let info = client.command(&[b"INFO".as_slice(), b"replication"])?;
            let Value::Bulk(text) = info else { bail!("INFO replication answered {info:?}") };
            let online = replicas_online(&String::from_utf8_lossy(&text));
            if online == REPLICAS {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{online} of {REPLICAS} replicas online after {SYNCED_WITHIN:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The primary's port.
    pub fn primary_port(&self) -> u16 {
        self.primary.port()
    }

    /// The data directories: primary first.
    pub fn dirs(&self) -> Vec<&Path> {
        std::iter::once(&self.primary).chain(&self.replicas).map(|s| s.dir()).collect()
    }
}

/// Replicas `INFO replication` reports with `state=online`.
fn replicas_online(info: &str) -> usize {
    info.lines().filter(|l| l.starts_with("slave") && l.contains("state=online")).count()
}

/// One connection to the primary.
pub struct RedisWaitClient {
    stream: TcpStream,
    request: Vec<u8>,
    received: Vec<u8>,
}

impl RedisWaitClient {
    /// Connects to `127.0.0.1:port`, with [`IO_TIMEOUT`] on every read and write.
    pub fn connect(port: u16) -> Result<RedisWaitClient> {
        let stream = TcpStream::connect(("127.0.0.1", port)).with_context(|| format!("connecting to redis on {port}"))?;
        RedisWaitClient::over(stream, IO_TIMEOUT)
    }

    /// Connects to `addr` within `timeout`, which also bounds every read
    /// and write.
    pub fn connect_to(addr: std::net::SocketAddr, timeout: std::time::Duration) -> Result<RedisWaitClient> {
        let stream = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to {addr}"))?;
        RedisWaitClient::over(stream, timeout)
    }

    fn over(stream: TcpStream, timeout: std::time::Duration) -> Result<RedisWaitClient> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(RedisWaitClient { stream, request: Vec::with_capacity(256), received: Vec::with_capacity(4096) })
    }

    /// Sends one command and returns its reply (an error reply is an error).
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Value> {
        match self.reply(args)? {
            Value::Error(text) => bail!("redis answered -{}", String::from_utf8_lossy(&text)),
            value => Ok(value),
        }
    }

    /// Sends one command and returns its reply, an error reply as
    /// [`Value::Error`].
    pub fn reply(&mut self, args: &[&[u8]]) -> Result<Value> {
        self.request.clear();
        encode_request(args, &mut self.request);
        self.stream.write_all(&self.request).context("sending to redis")?;
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            if let Some((value, len)) = parse_reply(&self.received).map_err(|e| anyhow!("redis reply: {e}"))? {
                self.received.drain(..len);
                return Ok(value);
            }
            // The largest reply a bench asks for: a 512 MiB value.
            if self.received.len() > (512 << 20) + 64 {
                bail!("redis reply over {} bytes", self.received.len());
            }
            let n = self.stream.read(&mut chunk).context("reading from redis")?;
            if n == 0 {
                bail!("redis closed the connection mid-reply");
            }
            self.received.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The error, if any, in a `SET` reply and the `WAIT` reply after it.
pub fn check_set_wait(set: &Value, wait: &Value) -> Result<()> {
    if *set != Value::Simple(b"OK".to_vec()) {
        bail!("SET answered {set:?}");
    }
    match wait {
        Value::Integer(n) if *n == REPLICAS as i64 => Ok(()),
        Value::Integer(n) => bail!("WAIT {REPLICAS} 0 answered {n}: only {n} of {REPLICAS} replicas acknowledged"),
        other => bail!("WAIT answered {other:?}"),
    }
}

impl PutClient for RedisWaitClient {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let set = self.command(&[b"SET".as_slice(), key, value])?;
        let wait = self.command(&[b"WAIT".as_slice(), b"2", b"0"])?;
        check_set_wait(&set, &wait)
    }

    fn exchange(&mut self) -> Option<&mut dyn Exchange> {
        Some(self)
    }
}

/// SET, then `WAIT 2 0` once the SET is answered, as `put`.
impl Exchange for RedisWaitClient {
    fn stream(&self) -> &TcpStream {
        &self.stream
    }

    fn steps(&self) -> usize {
        2
    }

    fn encode(&mut self, step: usize, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        resp_step(step, key, value, out);
    }

    fn reply(&mut self, step: usize, buf: &[u8]) -> Result<Option<usize>> {
        resp_reply(step, buf)
    }
}

/// Request `step` of a put over RESP: `SET key value`, then `WAIT 2 0`.
pub fn resp_step(step: usize, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match step {
        0 => encode_request(&[b"SET".as_slice(), key, value], out),
        _ => encode_request(&[b"WAIT".as_slice(), b"2", b"0"], out),
    }
}

/// The length of a good reply to request `step` of a put over RESP (`+OK`
/// to the SET, every replica to the WAIT) at the start of `buf`.
pub fn resp_reply(step: usize, buf: &[u8]) -> Result<Option<usize>> {
    let Some((value, len)) = parse_reply(buf).map_err(|e| anyhow!("reply: {e}"))? else { return Ok(None) };
    match step {
        0 if value == Value::Simple(b"OK".to_vec()) => Ok(Some(len)),
        0 => bail!("SET answered {value:?}"),
        _ => check_set_wait(&Value::Simple(b"OK".to_vec()), &value).map(|()| Some(len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_online_replicas() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=1,state=online,offset=1,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=2,state=wait_bgsave,offset=0,lag=0\r\nmaster_repl_offset:1\r\n";
        assert_eq!(replicas_online(info), 1);
    }

    #[test]
    fn wait_must_reach_every_replica() {
        let ok = Value::Simple(b"OK".to_vec());
        assert!(check_set_wait(&ok, &Value::Integer(2)).is_ok());
        let e = check_set_wait(&ok, &Value::Integer(1)).unwrap_err().to_string();
        assert!(e.contains("only 1 of 2"), "{e}");
        assert!(check_set_wait(&Value::NilBulk, &Value::Integer(2)).is_err());
        assert!(check_set_wait(&ok, &Value::Simple(b"2".to_vec())).is_err());
    }
}
