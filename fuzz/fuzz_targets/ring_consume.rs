//! Arbitrary bytes as the contents of a ring's shared region, written by a process that
//! may be hostile: the index words and the data area (mode bit 0 clear), or the whole
//! region from offset 0, header included (bit 0 set, which fuzzes the attach checks). A
//! consumer then pops until the ring is empty or broken, and a producer pushes once.
//!
//! Input: [mode u8][tail u64 LE][head u64 LE][waiting u64 LE][bytes...].
//! Properties: no panic; every packet returned fits its buffer (pop) or its slot inside the
//! pool (pop_batch); the loop ends (each entry advances the head by at least 8 bytes, and
//! the tail is at most a capacity ahead).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_emu::ring::{
    bell_pair, create_region, Consumer, Meta, Popped, Producer, HEADER_LEN, MIN_CAPACITY, OFF_HEAD,
    OFF_TAIL, OFF_WAITING,
};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let fd = create_region(MIN_CAPACITY).unwrap();
    let f = File::from(fd.try_clone().unwrap());
    let size = HEADER_LEN + MIN_CAPACITY;
    if mode & 1 == 0 {
        let (idx, body) = rest.split_at(rest.len().min(24));
        for (i, off) in [OFF_TAIL, OFF_HEAD, OFF_WAITING].into_iter().enumerate() {
            let mut w = [0u8; 8];
            let src = idx.get(8 * i..).unwrap_or(&[]);
            let n = src.len().min(8);
            w[..n].copy_from_slice(&src[..n]);
            f.write_all_at(&w, off as u64).unwrap();
        }
        let body = &body[..body.len().min(MIN_CAPACITY)];
        f.write_all_at(body, HEADER_LEN as u64).unwrap();
    } else {
        f.write_all_at(&rest[..rest.len().min(size)], 0).unwrap();
    }
    let (producer_bell, bell) = bell_pair().unwrap();
    let Ok(mut c) = Consumer::attach(fd.as_fd(), bell) else {
        return;
    };
    // Buffers from 16 bytes (most packets too long) to 64 KiB.
    let slot = 16usize << (mode >> 1 & 15).min(12);
    let mut buf = vec![0u8; slot];
    if mode & 0x20 == 0 {
        for _ in 0..=MIN_CAPACITY / 8 {
            match c.pop(&mut buf) {
                Ok(Some((_, len))) => assert!(len <= buf.len()),
                Ok(None) | Err(_) => break,
            }
        }
    } else {
        let mut pool = vec![0u8; 4 * slot];
        let blank = Meta::new(([0, 0, 0, 0], 0).into(), ([0, 0, 0, 0], 0).into());
        let mut out = [Popped {
            meta: blank,
            offset: 0,
            len: 0,
        }; 4];
        for _ in 0..=MIN_CAPACITY / 8 {
            match c.pop_batch(&mut pool, slot, &mut out) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    for (i, o) in out[..n].iter().enumerate() {
                        assert_eq!(o.offset, i * slot);
                        assert!(o.len <= slot);
                    }
                }
            }
        }
    }
    // The producer end over the same bytes (its head and tail are the fuzzer's too).
    if let Ok(mut p) = Producer::attach(fd.as_fd(), producer_bell) {
        let m = Meta::new(([10, 0, 0, 1], 1).into(), ([10, 0, 0, 2], 4791).into());
        let _ = p.push(&m, &[0u8; 100]);
    }
});
