//! Every bad input end to end (issue 3, Safety): unknown region, wrong key,
//! missing right, out of bounds, oversized, malformed → an error reply, and
//! nothing written.

use pmwire_remote::client::{ClientConfig, ClientCore, ClientError, ClientOptions, RemoteError};
use pmwire_remote::proto::{decode_response, Method, Status, RIGHT_READ};
use pmwire_remote::server::ServerConfig;

use crate::harness::{connect, connect_as, nets, raw_call, start, Net, Running};
use crate::with_client;

fn status(err: ClientError) -> Status {
    match err {
        ClientError::Remote(RemoteError { status, .. }) => status,
        other => panic!("expected a server refusal, got {other}"),
    }
}

/// The first 1 MiB of the data area is still zero.
fn assert_untouched(net: &Net, server: &Running) {
    let mut client = connect(net, server);
    with_client!(&mut client, c => {
        let chunk_bytes = c.hello().max_payload as u64;
        let mut back = vec![1u8; chunk_bytes as usize];
        for chunk in 0..(1 << 20) / chunk_bytes {
            c.read(chunk * chunk_bytes, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == 0), "{}: bytes written by a refused request", net.name());
        }
    });
}

#[test]
fn credentials_rights_and_ranges_are_refused_and_nothing_is_written() {
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let options = ClientOptions::default;
        let err = connect_as(&net, &server, server.region_id + 1, server.key, options()).err().unwrap();
        assert_eq!(status(err), Status::UnknownRegion, "{}", net.name());
        let err = connect_as(&net, &server, server.region_id, server.key ^ 1, options()).err().unwrap();
        assert_eq!(status(err), Status::BadKey, "{}", net.name());

        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            let data_bytes = c.hello().data_bytes;
            // Past the end, straight to the server (the planner would refuse first).
            let err = c.submit_rpc_write(data_bytes - 4, &[7u8; 8], false).and_then(|t| wait(c, t)).unwrap_err();
            assert_eq!(status(err), Status::OutOfBounds);
            let err = c.submit_rpc_write(u64::MAX - 2, &[7u8; 8], true).and_then(|t| wait(c, t)).unwrap_err();
            assert_eq!(status(err), Status::OutOfBounds);
            assert!(matches!(c.write_persistent(data_bytes, b"x", Method::Rpc), Err(ClientError::Method(_))));
            assert_eq!(status(c.atomic_write8(data_bytes, 1).unwrap_err()), Status::OutOfBounds);
            assert_eq!(status(c.atomic_write8(4, 1).unwrap_err()), Status::Misaligned);
            assert_eq!(status(c.flush(data_bytes, 64).unwrap_err()), Status::OutOfBounds);
            assert_eq!(status(c.log_append(5, b"no such log").unwrap_err()), Status::UnknownLog);
        });
        drop(client);
        assert_untouched(&net, &server);
    }
}

fn wait<T: transport::Transport>(c: &mut pmwire_remote::client::Client<T>, token: u64) -> Result<u64, ClientError> {
    loop {
        let (t, result) = c.wait_any()?;
        if t == token {
            return result;
        }
    }
}

#[test]
fn a_read_only_client_cannot_write() {
    for net in nets() {
        let config = ServerConfig { default_rights: RIGHT_READ, ..ServerConfig::default() };
        let server = start(&net, config);
        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            let err = c.submit_rpc_write(0, &[9u8; 64], false).and_then(|t| wait(c, t)).unwrap_err();
            assert_eq!(status(err), Status::Forbidden, "{}", net.name());
            let err = c.submit_rpc_write(0, &[9u8; 64], true).and_then(|t| wait(c, t)).unwrap_err();
            assert_eq!(status(err), Status::Forbidden);
            assert_eq!(status(c.atomic_write8(0, 1).unwrap_err()), Status::Forbidden);
            assert_eq!(status(c.flush(0, 64).unwrap_err()), Status::Forbidden);
            let config = pmwire_log::LogConfig::new(4096, pmwire_log::TailStrategy::Naive);
            assert_eq!(status(c.log_create(b"x", &config).unwrap_err()), Status::Forbidden);
        });
        // A read-only client reads; nothing was written.
        assert_untouched(&net, &server);
    }
}

#[test]
fn oversized_and_malformed_messages_get_error_replies() {
    for net in nets() {
        let config = ServerConfig { max_payload: 4096, ..ServerConfig::default() };
        let server = start(&net, config);
        // A core that has not seen HELLO does not know the 4 KiB limit.
        let mut core = ClientCore::new(ClientConfig { region_id: server.region_id, key: server.key, window: 4, payload_crc: true });
        let mut msg = Vec::new();
        core.persist_write(0, &[5u8; 8192], false, &mut msg).unwrap();
        let payload = msg.split_off(64);
        let reply = raw_call(&net, &server, &msg, payload);
        let refused = decode_response(&reply, 0).unwrap().header;
        assert_eq!(refused.status, Status::TooLarge, "{}", net.name());
        assert_eq!(refused.detail, 4096);

        // Garbled header: a flipped offset bit fails the header CRC.
        core.persist_write(0, &[5u8; 64], false, &mut msg).unwrap();
        let payload = msg.split_off(64);
        msg[33] ^= 1;
        let refused = decode_response(&raw_call(&net, &server, &msg, payload), 0).unwrap().header;
        assert_eq!(refused.status, Status::BadChecksum);
        // Garbled payload: its CRC fails.
        core.persist_write(0, &[5u8; 64], false, &mut msg).unwrap();
        let mut payload = msg.split_off(64);
        payload[3] ^= 0x40;
        let refused = decode_response(&raw_call(&net, &server, &msg, payload), 0).unwrap().header;
        assert_eq!(refused.status, Status::BadChecksum);
        // Not a request at all.
        let refused = decode_response(&raw_call(&net, &server, b"hello there", Vec::new()), 0).unwrap().header;
        assert_eq!(refused.status, Status::Malformed);
        assert_untouched(&net, &server);
    }
}
