//! Restarting on the same pool keeps everything; the pool refuses what it is not.

use pmwire_kv_server::client::{HttpClient, RespClient};
use pmwire_kv_server::{KvServer, Mode, StoreError};

use crate::common::*;

#[test]
fn restart_keeps_keys_values_and_log_across_modes() {
    let pool = Pool::new();
    let mut lsns = Vec::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    {
        let mut r = RespClient::connect(server.resp).unwrap();
        let mut h = HttpClient::connect(server.http).unwrap();
        for i in 0..300u64 {
            let len = [1, 100, 2000, 5000, 64 << 10][i as usize % 5];
            r.call(&[b"SET".to_vec(), format!("r{i}").into_bytes(), value(i, len)]).unwrap();
            assert_eq!(h.request("POST", &format!("/kv/h{i}"), &value(i + 1000, len)).unwrap().status, 204);
        }
        r.call(&["HSET", "hash", "f", "v"]).unwrap();
        r.call(&["DEL", "r0"]).unwrap();
        for i in 0..10u64 {
            let body = h.request("POST", "/log", &value(i + 5000, 300)).unwrap().body;
            lsns.push(String::from_utf8(body).unwrap().trim().to_string());
        }
    }
    let first = server.stop();
    assert!(first.recovered().created);
    drop(first);
    for mode in [Mode::Copy, Mode::ZeroCopy] {
        let server = KvServer::open(&options(&pool.path, mode)).unwrap();
        let recovered = server.recovered().clone();
        assert!(!recovered.created);
        assert_eq!(recovered.keys, 600);
        assert_eq!(recovered.log_entries, 10);
        let server = start_with(server);
        let mut r = RespClient::connect(server.resp).unwrap();
        let mut h = HttpClient::connect(server.http).unwrap();
        assert_eq!(r.get(b"r0").unwrap(), None);
        for i in 1..300u64 {
            let len = [1, 100, 2000, 5000, 64 << 10][i as usize % 5];
            assert!(r.get(format!("r{i}").as_bytes()).unwrap().unwrap() == value(i, len), "r{i} after restart");
            let got = h.request("GET", &format!("/kv/h{i}"), b"").unwrap();
            assert!(got.status == 200 && got.body == value(i + 1000, len), "h{i} after restart");
        }
        assert_eq!(r.call(&["HGET", "hash", "f"]).unwrap(), pmwire_resp::client::Value::Bulk(b"v".to_vec()));
        for (i, lsn) in lsns.iter().enumerate() {
            let got = h.request("GET", &format!("/log/{lsn}"), b"").unwrap();
            assert!(got.status == 200 && got.body == value(i as u64 + 5000, 300), "log entry {lsn}");
        }
        drop((r, h));
        server.stop();
    }
}

#[test]
fn a_file_that_is_not_a_kv_pool_is_refused_untouched() {
    let pool = Pool::new();
    let junk: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(&pool.path, &junk).unwrap();
    let err = KvServer::open(&options(&pool.path, Mode::ZeroCopy)).unwrap_err();
    assert!(matches!(err, pmwire_kv_server::ServeError::Store(StoreError::NotKvPool { .. })), "{err}");
    assert!(std::fs::read(&pool.path).unwrap() == junk, "nothing written");
}

#[test]
fn a_too_small_size_is_refused_before_creating_anything() {
    let pool = Pool::new();
    let mut opts = options(&pool.path, Mode::ZeroCopy);
    opts.size = 1 << 20;
    let err = KvServer::open(&opts).unwrap_err();
    assert!(matches!(err, pmwire_kv_server::ServeError::Store(StoreError::TooSmall { .. })), "{err}");
    assert!(!pool.path.exists());
}
