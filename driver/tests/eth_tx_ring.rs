//! The Ethernet send queue on the shared send ring: a burst longer than the ring fills it and
//! stops, the rest stays the caller's, the ring drains by completions and the next bursts
//! carry the rest in order; every buffer goes back to its pool.

use bareverbs::eth::*;
use bareverbs::{Config, Device};
use bareverbs_model::{Drive, Fabric, ModelConfig, SimHal};

fn eth_cfg(n: u64) -> ModelConfig {
    ModelConfig {
        port_type_eth: true,
        node_guid: ModelConfig::default().node_guid + (n << 8),
        base_lid: 1 + 16 * n as u16,
        ..ModelConfig::default()
    }
}

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
    let f = Fabric::new();
    let (ha, hb) = (
        SimHal::on_fabric(eth_cfg(0), Drive::Synchronous, &f),
        SimHal::on_fabric(eth_cfg(1), Drive::Synchronous, &f),
    );
    let (da, db) = (
        Device::bring_up(&ha, Config::default()).unwrap(),
        Device::bring_up(&hb, Config::default()).unwrap(),
    );
    let (pa, pb) = (da.open_eth().unwrap(), db.open_eth().unwrap());
    let pool_a = PktPool::new(&pa, 64, 2048).unwrap();
    let pool_b = PktPool::new(&pb, 64, 2048).unwrap();
    // Eight WQEBBs: a 60-byte frame takes one.
    let mut txq = TxQueue::new(&pa, &pool_a, TxQueueAttr::new(8)).unwrap();
    let mut rxq = RxQueue::new(&pb, &pool_b, RxQueueAttr::new(32)).unwrap();
    let _r = pb
        .add_rule(&FlowMatch::any(), FlowDest::Queue(&rxq))
        .unwrap();
    let pkts: Vec<Pkt> = (0..20u8)
        .map(|k| {
            let mut p = pool_a.alloc().unwrap();
            pool_a
                .write(&mut p, 0, &frame(pb.mac(), pa.mac(), k))
                .unwrap();
            p
        })
        .collect();
    let mut sent = 0;
    let mut bursts = Vec::new();
    while sent < pkts.len() && bursts.len() < 10 {
        let n = txq.tx_burst(&pkts[sent..]);
        assert_eq!(txq.take_refused(), None);
        bursts.push(n);
        sent += n;
    }
    // The ring holds eight: each burst fills it; the completion the full ring's last WQE
    // asks for drains it for the next.
    assert_eq!(bursts, vec![8, 8, 4]);
    assert_eq!(txq.stopped(), None);
    txq.reclaim();
    assert_eq!(txq.sent(), 20);
    assert_eq!(pool_a.available(), 64, "every sent buffer is back");
    let mut got = Vec::new();
    let mut pk = [Pkt::EMPTY; 32];
    let n = rxq.rx_burst(&mut pk);
    for p in &pk[..n] {
        let mut b = [0u8; 15];
        pool_b.read(p, 0, &mut b).unwrap();
        got.push(b[14]);
        pool_b.free(*p).unwrap();
    }
    assert_eq!(got, (0..20u8).collect::<Vec<_>>(), "all twenty, in order");
}
