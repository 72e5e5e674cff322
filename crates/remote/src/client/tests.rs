use super::*;
use crate::calibration::tests::synthetic;
use crate::pool::PoolConfig;
use crate::server::{Action, OneSided, Server, ServerConfig};
use pmem::Region;

/// A client core wired straight to a server core: the simplest event loop.
struct Pair {
    _dir: tempfile::TempDir,
    server: Server,
    client: ClientCore,
    msg: Vec<u8>,
    reply: Vec<u8>,
}

fn pair(window: usize) -> Pair {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let region = Region::create(dir.path().join("pool"), 4 << 20).unwrap();
    let pool = PoolConfig { region_id: 3, dir_slots: 4, log_area_bytes: 256 << 10 };
    let config = ServerConfig { max_payload: 64 << 10, ..ServerConfig::default() };
    let mut server = Server::format(region, pool, config).unwrap();
    server.connect(1);
    let (region_id, key) = server.credentials();
    let client = ClientCore::new(ClientConfig { region_id, key, window, payload_crc: true });
    Pair { _dir: dir, server, client, msg: Vec::new(), reply: Vec::new() }
}

impl Pair {
    /// Sends what the client built and returns the server's immediate reply.
    fn exchange(&mut self) -> &[u8] {
        assert_eq!(self.server.handle(1, &self.msg, &mut self.reply), Action::Reply);
        &self.reply
    }

    fn hello(&mut self) {
        self.client.hello_request(&mut self.msg).unwrap();
        self.exchange();
        let reply = self.reply.clone();
        assert!(self.client.on_response(&reply).unwrap().result.is_ok());
    }
}

#[test]
fn round_trip_through_the_server_core() {
    let mut p = pair(4);
    p.hello();
    assert_eq!(p.client.hello().unwrap().max_payload, 64 << 10);
    p.client.persist_write(128, b"durable", false, &mut p.msg).unwrap();
    let reply = p.exchange().to_vec();
    assert_eq!(p.client.on_response(&reply).unwrap().result, Ok(7));
    p.client.read(128, 7, &mut p.msg).unwrap();
    let reply = p.exchange().to_vec();
    let r = p.client.on_response(&reply).unwrap();
    assert_eq!(r.payload, b"durable");
    p.client.read(p.client.hello().unwrap().data_bytes, 1, &mut p.msg).unwrap();
    let reply = p.exchange().to_vec();
    let err = p.client.on_response(&reply).unwrap().result.unwrap_err();
    assert_eq!(err.status, Status::OutOfBounds);
    let config = LogConfig::new(4096, TailStrategy::SelfValidating);
    p.client.log_create(b"events", &config, &mut p.msg).unwrap();
    let reply = p.exchange().to_vec();
    let log = p.client.on_response(&reply).unwrap().result.unwrap();
    p.client.log_append(log, b"e0", &mut p.msg).unwrap();
    let reply = p.exchange().to_vec();
    assert_eq!(p.client.on_response(&reply).unwrap().result, Ok(0));
    assert_eq!(p.client.outstanding(), 0);
}

#[test]
fn window_bounds_and_matching() {
    let mut p = pair(2);
    let mut a = Vec::new();
    let mut b = Vec::new();
    let id_a = p.client.echo(b"a", false, &mut a).unwrap();
    p.client.echo(b"b", false, &mut b).unwrap();
    assert_eq!(p.client.echo(b"c", false, &mut p.msg), Err(IssueError::WindowFull(2)));
    let mut reply_a = Vec::new();
    p.server.handle(1, &a, &mut reply_a);
    let mut reply_b = Vec::new();
    p.server.handle(1, &b, &mut reply_b);
    // Out of order is fine; a duplicate is not.
    assert_eq!(p.client.on_response(&reply_b).unwrap().payload, b"b");
    let r = p.client.on_response(&reply_a).unwrap();
    assert_eq!((r.request_id, r.payload), (id_a, &b"a"[..]));
    assert_eq!(p.client.on_response(&reply_a).unwrap_err(), ResponseError::Unknown(id_a));
    // A reply to a reused slot with the old id is stale.
    p.client.echo(b"d", false, &mut p.msg).unwrap();
    assert!(matches!(p.client.on_response(&reply_b), Err(ResponseError::Unknown(_))));
    assert!(matches!(p.client.on_response(&[0; 10]), Err(ResponseError::Decode(_))));
    // A response with the right id but another opcode.
    let id = p.client.read(0, 8, &mut p.msg).unwrap();
    let header = crate::proto::ResponseHeader { opcode: Opcode::Echo as u8, status: Status::Ok, request_id: id, value: 0, detail: 0 };
    let forged = crate::proto::encode_response_header(&header, &[]);
    assert!(matches!(p.client.on_response(&forged), Err(ResponseError::Opcode { expected: Opcode::Read, .. })));
    let too_big = vec![0; (MAX_PAYLOAD_BYTES + 1) as usize];
    assert!(matches!(p.client.persist_write(0, &too_big, false, &mut p.msg), Err(IssueError::TooLarge { .. })));
    assert_eq!(p.client.log_open(b"", &mut p.msg), Err(IssueError::BadName(0)));
}

/// A HELLO whose data area would end past 2^64 (remote address near the
/// top): refused when decoded, so planning a one-sided write cannot
/// overflow `remote_addr + offset`.
#[test]
fn a_hello_whose_data_area_wraps_is_refused() {
    let mut p = pair(4);
    let hostile = u64::MAX - 100;
    let reach = crate::proto::OneSidedReach::Process;
    p.server.set_one_sided(Some(OneSided { rkey: vec![1; 16], remote_addr: hostile, writes_bypass_cache: false, reach }));
    p.client.hello_request(&mut p.msg).unwrap();
    let reply = p.exchange().to_vec();
    let result = p.client.on_response(&reply);
    let plan = p.client.plan_write(4096, 64, Method::OneSidedFlush, Guarantee::Persistence, None);
    assert!(matches!(result, Err(ResponseError::Hello(_))), "{result:?}");
    assert_eq!(plan, Err(MethodError::NotConnected));
}

#[test]
fn methods_are_checked_against_the_targets_guarantees() {
    let mut p = pair(4);
    let persist = Guarantee::Persistence;
    assert_eq!(p.client.plan_write(0, 64, Method::Rpc, persist, None), Err(MethodError::NotConnected));
    p.server.set_one_sided(Some(OneSided { rkey: vec![1; 16], remote_addr: 0x10_0000, writes_bypass_cache: false, reach: crate::proto::OneSidedReach::Process }));
    p.hello();
    let c = &p.client;
    let plan = c.plan_write(64, 64, Method::OneSidedFlush, persist, None).unwrap();
    assert_eq!(plan.remote_addr, Some(0x10_0040));
    assert_eq!(plan.guarantee, Guarantee::Persistence);
    let err = c.plan_write(0, 64, Method::OneSidedReadAfterWrite, persist, None).unwrap_err();
    assert_eq!(
        err,
        MethodError::Weaker { method: Method::OneSidedReadAfterWrite, required: persist, available: Guarantee::Visibility }
    );
    assert!(err.to_string().contains("Visibility"), "{err}");
    let visible = c.plan_write(0, 64, Method::OneSidedReadAfterWrite, Guarantee::Visibility, None).unwrap();
    assert_eq!(visible.guarantee, Guarantee::Visibility);
    assert_eq!(c.plan_write(0, 64, Method::Rpc, persist, None).unwrap().remote_addr, None);
    let data_bytes = c.hello().unwrap().data_bytes;
    assert!(matches!(c.plan_write(data_bytes, 1, Method::Rpc, persist, None), Err(MethodError::OutOfBounds { .. })));
    assert!(matches!(c.plan_write(0, 65 << 10, Method::Rpc, persist, None), Err(MethodError::TooLarge { .. })));
    // Auto: the synthetic table's winner at 64 B only gives visibility here.
    let selector = |required: Guarantee| {
        let mut table = synthetic();
        table.target.as_mut().unwrap().required = required;
        AutoSelector::new(table, crate::auto::AutoParams::default()).unwrap()
    };
    let (durable, visible) = (selector(persist), selector(Guarantee::Visibility));
    assert_eq!(c.plan_write(0, 64, Method::Auto, persist, Some(&durable)).unwrap().method, Method::Rpc);
    assert_eq!(c.plan_write(0, 64, Method::Auto, Guarantee::Visibility, Some(&visible)).unwrap().method, Method::OneSidedReadAfterWrite);
    assert_eq!(c.plan_write(0, 60_000, Method::Auto, persist, Some(&durable)).unwrap().method, Method::RpcOffload);
    // 128 KiB is over this server's RPC limit: Auto keeps to one-sided methods.
    assert_eq!(c.plan_write(0, 128 << 10, Method::Auto, persist, Some(&durable)).unwrap().method, Method::OneSidedFlush);
    assert!(matches!(c.plan_write(0, 64, Method::Auto, persist, None), Err(MethodError::NoCandidate { .. })));
}
