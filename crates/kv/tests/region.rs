//! The engine on a real emulated region (/dev/shm): create, write in
//! batches (zero-copy and copied, a 64 KB value, the user log), checkpoint
//! half-way, drop the mapping, reopen the file, verify everything.

use pmem::{Media, Region, RegionOptions};
use pmwire_kv::{Engine, KvConfig};
use pmwire_log::Extent;

#[test]
fn survives_unmap_and_reopen_on_dev_shm() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("kv");
    let config = KvConfig { wal_slots: 2048, log_slots: 512, tree_nodes: 128, ..KvConfig::new(1024) };
    let size = 4096 + config.required_size().unwrap();
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let big: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    {
        let mut region = Region::create(&path, size).unwrap();
        let mut kv = Engine::create(&mut region, 4096, &config).unwrap();
        for batch in 0..40u32 {
            for i in 0..8u32 {
                let key = format!("user:{batch}:{i}").into_bytes();
                let value = format!("value {batch} {i} {}", "z".repeat((i * 150) as usize)).into_bytes();
                if i % 2 == 0 {
                    let buf = kv.pool_mut().alloc().unwrap();
                    region.write(kv.pool().buffer_offset(buf) + 16, &value);
                    let extent = Extent { buf_idx: buf, offset: 16, len: value.len() as u16 };
                    kv.set_extents(&mut region, &key, 0, &[extent]).unwrap();
                    kv.pool_mut().release(buf);
                } else {
                    kv.set_copy(&mut region, &key, 1, &value).unwrap();
                }
                expected.push((key, value));
            }
            kv.log_append_copy(&mut region, format!("log {batch}").as_bytes()).unwrap();
            kv.commit(&mut region).unwrap();
            if batch == 20 {
                kv.set_copy(&mut region, b"big", 2, &big).unwrap();
                kv.commit(&mut region).unwrap();
                kv.checkpoint(&mut region).unwrap();
            }
        }
        assert!(kv.wal_records() > 0, "some records are left for replay");
        kv.check(&region).unwrap();
    }
    let mut region = Region::open(&path, RegionOptions::default()).unwrap();
    let kv = Engine::open(&mut region, 4096).unwrap();
    kv.check(&region).unwrap();
    assert_eq!(kv.len(), expected.len() + 1);
    for (key, value) in &expected {
        let mut got = Vec::new();
        assert!(kv.get_bytes(&region, key, &mut got).is_some(), "{key:?}");
        assert_eq!(&got, value);
    }
    let mut got = Vec::new();
    assert_eq!(kv.get_bytes(&region, b"big", &mut got), Some(2));
    assert!(got == big);
    let log: Vec<Vec<u8>> = kv
        .log_read(0)
        .map(|(_, extents)| {
            let mut bytes = Vec::new();
            kv.pool().gather(&region, extents, &mut bytes);
            bytes
        })
        .collect();
    assert_eq!(log.len(), 40);
    assert_eq!(log[39], b"log 39");
}
