//! The Ethernet send queue on the shared send ring: a burst longer than the ring fills it and
//! stops, the rest stays the caller's, the ring drains by completions and the next bursts
//! carry the rest in order; every buffer goes back to its pool.

mod common;

use bareverbs::eth::*;
use bareverbs::testing::{with_eth_pair, EthEndAttr};
use bareverbs::{Config, Device};
use common::two_eth_hcas;

/// A 60-byte frame from `src` to `dst` whose byte 14 is `k`.
fn frame(dst: [u8; 6], src: [u8; 6], k: u8) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14] = k;
    f
}

#[test]
fn a_burst_past_the_ring_fills_it_and_the_rest_follows_in_order_once_it_drains() {
    let (ha, hb) = two_eth_hcas();
    let (da, db) = (
        Device::bring_up(&ha, Config::default()).unwrap(),
        Device::bring_up(&hb, Config::default()).unwrap(),
    );
    let mut ends = [EthEndAttr::default(); 2];
    // Eight WQEBBs on the sender: a 60-byte frame takes one. Room for all twenty at the
    // receiver.
    ends[0].tx = TxQueueAttr::new(8);
    ends[1].rx.entries = 32;
    with_eth_pair(&da, &db, ends, |p| {
        let (a, b) = (&mut p.a, &mut p.b);
        let free = a.pool.available();
        let pkts: Vec<Pkt> = (0..20u8)
            .map(|k| {
                let mut pkt = a.pool.alloc().unwrap();
                let f = frame(b.port.mac(), a.port.mac(), k);
                a.pool.write(&mut pkt, 0, &f).unwrap();
                pkt
            })
            .collect();
        let mut sent = 0;
        let mut bursts = Vec::new();
        while sent < pkts.len() && bursts.len() < 10 {
            let n = a.txq.tx_burst(&pkts[sent..]);
            assert_eq!(a.txq.take_refused(), None);
            bursts.push(n);
            sent += n;
        }
        // The ring holds eight: each burst fills it; the completion the full ring's last WQE
        // asks for drains it for the next.
        assert_eq!(bursts, vec![8, 8, 4]);
        assert_eq!(a.txq.stopped(), None);
        a.txq.reclaim();
        assert_eq!(a.txq.sent(), 20);
        assert_eq!(a.pool.available(), free, "every sent buffer is back");
        let mut got = Vec::new();
        let mut pk = [Pkt::EMPTY; 32];
        let n = b.rxq.rx_burst(&mut pk);
        for pkt in &pk[..n] {
            let mut buf = [0u8; 15];
            b.pool.read(pkt, 0, &mut buf).unwrap();
            got.push(buf[14]);
            b.pool.free(*pkt).unwrap();
        }
        assert_eq!(got, (0..20u8).collect::<Vec<_>>(), "all twenty, in order");
    });
}
