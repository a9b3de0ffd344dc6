//! Ethernet: raw packet queues, the burst API, flow steering and RSS against the model's
//! Ethernet NIC — two HCAs on one wire, frames checked byte for byte.

mod common;

use bareverbs::eth::*;
use bareverbs::testing::{with_eth_pair, EthEndAttr, EthPair};
use bareverbs::{Config, Device, Error};
use bareverbs_model::{Drive, EthObjects, Fabric, ModelConfig, SimHal};
use common::{eth_cfg, two_eth_hcas};

/// The fixture's two Ethernet ends (built as `attrs` says), each on its own brought-up HCA
/// on one wire, handed to `f` with the second HCA (to look at its model).
fn with_ends(attrs: [EthEndAttr; 2], f: impl FnOnce(&mut EthPair<'_, '_, &SimHal>, &SimHal)) {
    let (ha, hb) = two_eth_hcas();
    let (da, db) = (
        Device::bring_up(&ha, Config::default()).unwrap(),
        Device::bring_up(&hb, Config::default()).unwrap(),
    );
    with_eth_pair(&da, &db, attrs, |p| f(p, &hb));
}

/// Two Ethernet ports on one wire, each on its own brought-up HCA, handed to `f` with the
/// second HCA (to look at its model).
fn with_ports(f: impl FnOnce(&EthPort<'_, &SimHal>, &EthPort<'_, &SimHal>, &SimHal)) {
    let (ha, hb) = two_eth_hcas();
    let (da, db) = (
        Device::bring_up(&ha, Config::default()).unwrap(),
        Device::bring_up(&hb, Config::default()).unwrap(),
    );
    let (pa, pb) = (da.open_eth().unwrap(), db.open_eth().unwrap());
    f(&pa, &pb, &hb);
}

/// `attr` with VLAN stripping on.
fn strip_vlan(mut attr: RxQueueAttr) -> RxQueueAttr {
    attr.vlan_strip = true;
    attr
}

/// A UDP/IPv4 frame from `src` to `dst`, ports `sport` → `dport`, checksums left zero (for
/// the NIC to fill) unless `fill`.
fn udp(dst: [u8; 6], src: [u8; 6], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = 20 + 8 + payload.len();
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    let ulen = 8 + payload.len();
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[(ulen >> 8) as u8, ulen as u8, 0, 0]);
    f.extend_from_slice(payload);
    f
}

fn ones_sum(data: &[u8], mut acc: u32) -> u32 {
    for c in data.chunks(2) {
        acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

fn send(
    pool: &PktPool<'_, '_, &SimHal>,
    txq: &mut TxQueue<'_, '_, &SimHal>,
    frame: &[u8],
    csum: bool,
) {
    let mut p = pool.alloc().expect("a free buffer");
    pool.write(&mut p, 0, frame).unwrap();
    p.set_tx_csum(csum);
    assert_eq!(txq.tx_burst(&[p]), 1, "{:?}", txq.take_refused());
}

fn recv_all(
    pool: &PktPool<'_, '_, &SimHal>,
    rxq: &mut RxQueue<'_, '_, &SimHal>,
) -> Vec<(Vec<u8>, Pkt)> {
    let mut out = Vec::new();
    let mut pk = [Pkt::EMPTY; 16];
    loop {
        let n = rxq.rx_burst(&mut pk);
        for p in &pk[..n] {
            let mut b = vec![0u8; p.len()];
            assert_eq!(pool.read(p, 0, &mut b).unwrap(), p.len());
            out.push((b, *p));
            pool.free(*p).unwrap();
        }
        if n == 0 {
            return out;
        }
    }
}

#[test]
fn a_udp_frame_crosses_the_wire_with_its_checksums_filled_and_checked() {
    // 64 buffers a side, a receive queue of 16 steered from each port's MAC.
    with_ends([EthEndAttr::default(); 2], |EthPair { a, b }, _| {
        let (pa, pb) = (a.port, b.port);
        assert_ne!(pa.mac(), pb.mac());
        assert_eq!(pa.mac()[0] & 3, 2, "locally administered unicast");
        assert!(pa.link_up().unwrap());
        assert_eq!(pa.inline_mode(), InlineMode::L2);
        assert!(pa.caps().csum);
        let (pool_a, pool_b) = (a.pool, b.pool);
        let (txq, rxq) = (&mut a.txq, &mut b.rxq);
        let free = pool_a.available();
        let frame = udp(pb.mac(), pa.mac(), 1234, 7, b"hello over the model's wire");
        send(pool_a, txq, &frame, true);
        let got = recv_all(pool_b, rxq);
        assert_eq!(got.len(), 1);
        let (bytes, p) = &got[0];
        // The NIC filled both checksums: the IPv4 header sums to 0xffff, and so does the UDP
        // datagram with its pseudo-header.
        assert_eq!(&bytes[..24], &frame[..24]);
        assert_eq!(fold(ones_sum(&bytes[14..34], 0)), 0xffff);
        let pseudo = ones_sum(&bytes[26..34], 17 + (bytes.len() - 34) as u32);
        assert_eq!(fold(ones_sum(&bytes[34..], pseudo)), 0xffff);
        assert_eq!(&bytes[42..], b"hello over the model's wire");
        assert!(p
            .flags()
            .contains(PktFlags::L3_CSUM_OK | PktFlags::L4_CSUM_OK));
        // Padded to the 60-byte minimum on the wire? This frame is longer: sent as is.
        assert_eq!(bytes.len(), frame.len());
        // Without the offload the zero UDP checksum means "none" and stays; the IPv4 one is
        // wrong (zero) and the NIC says so.
        send(pool_a, txq, &frame, false);
        let got = recv_all(pool_b, rxq);
        assert_eq!(got[0].0, frame);
        assert!(!got[0].1.flags().contains(PktFlags::L3_CSUM_OK));
        txq.reclaim();
        assert_eq!(txq.sent(), 2);
        assert_eq!(pool_a.available(), free, "sent buffers came back");
    });
}

#[test]
fn steering_sends_each_frame_to_the_first_rule_it_matches_and_drops_the_rest() {
    // The receiver's rules are the test's; its fixture queue takes the echo port.
    let attr = RxQueueAttr::new(16);
    let receiver = EthEndAttr {
        pool_bufs: 128,
        rx: attr,
        steer: false,
        ..EthEndAttr::default()
    };
    with_ends([EthEndAttr::default(), receiver], |EthPair { a, b }, _| {
        let (pa, pb, pool_a, pool_b) = (a.port, b.port, a.pool, b.pool);
        let (txq, q_echo) = (&mut a.txq, &mut b.rxq);
        let mut q_rest = RxQueue::new(pb, pool_b, attr).unwrap();
        let _echo = pb
            .add_rule(
                &FlowMatch::any().dmac(pb.mac()).udp_dport(7),
                FlowDest::Queue(q_echo),
            )
            .unwrap();
        let _drop9 = pb
            .add_rule(&FlowMatch::any().udp_dport(9), FlowDest::Drop)
            .unwrap();
        let _mine = pb
            .add_rule(&FlowMatch::any().dmac(pb.mac()), FlowDest::Queue(&q_rest))
            .unwrap();
        send(pool_a, txq, &udp(pb.mac(), pa.mac(), 1, 7, b"echo"), true);
        send(pool_a, txq, &udp(pb.mac(), pa.mac(), 1, 8, b"other"), true);
        send(
            pool_a,
            txq,
            &udp(pb.mac(), pa.mac(), 1, 9, b"dropped"),
            true,
        );
        send(
            pool_a,
            txq,
            &udp([2, 9, 9, 9, 9, 9], pa.mac(), 1, 7, b"not mine"),
            true,
        );
        let echo = recv_all(pool_b, q_echo);
        let rest = recv_all(pool_b, &mut q_rest);
        assert_eq!(echo.len(), 1);
        // Short frames arrive padded to the 60-byte minimum.
        assert_eq!(echo[0].0.len(), 60);
        assert_eq!(&echo[0].0[42..46], b"echo");
        assert_eq!(rest.len(), 1);
        assert_eq!(&rest[0].0[42..47], b"other");
        // With the first rule gone, port 7 falls to the MAC rule.
        drop(_echo);
        send(pool_a, txq, &udp(pb.mac(), pa.mac(), 1, 7, b"echo2"), true);
        assert!(recv_all(pool_b, q_echo).is_empty());
        assert_eq!(&recv_all(pool_b, &mut q_rest)[0].0[42..47], b"echo2");
    });
}

/// The Toeplitz hash (Microsoft's definition), computed here independently of the model.
fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let bit = |i: usize| u32::from((key[i / 8] >> (7 - i % 8)) & 1);
    let mut w = (0..32).fold(0u32, |w, i| (w << 1) | bit(i));
    let mut r = 0;
    for (n, b) in input.iter().enumerate() {
        for k in 0..8 {
            if b & (0x80 >> k) != 0 {
                r ^= w;
            }
            w = (w << 1)
                | if 32 + n * 8 + k < 320 {
                    bit(32 + n * 8 + k)
                } else {
                    0
                };
        }
    }
    r
}

#[test]
fn rss_spreads_udp_flows_over_its_queues_by_the_toeplitz_hash() {
    with_ports(|pa, pb, _| {
        let (pool_a, pool_b) = (
            PktPool::new(pa, 64, 2048).unwrap(),
            PktPool::new(pb, 256, 2048).unwrap(),
        );
        let mut txq = TxQueue::new(pa, &pool_a, TxQueueAttr::default()).unwrap();
        let attr = RxQueueAttr::new(32);
        let mut qs: Vec<_> = (0..4)
            .map(|_| RxQueue::new(pb, &pool_b, attr).unwrap())
            .collect();
        let refs: Vec<&RxQueue<'_, '_, &SimHal>> = qs.iter().collect();
        let rss = RssGroup::new(pb, &refs, RssFields::Ipv4Udp, &DEFAULT_RSS_KEY).unwrap();
        let rule = pb
            .add_rule(&FlowMatch::any().dmac(pb.mac()), FlowDest::Rss(&rss))
            .unwrap();
        for sport in 1000..1040u16 {
            send(
                &pool_a,
                &mut txq,
                &udp(pb.mac(), pa.mac(), sport, 4789, &sport.to_be_bytes()),
                true,
            );
        }
        let mut per_queue = [0usize; 4];
        for (k, q) in qs.iter_mut().enumerate() {
            for (bytes, p) in recv_all(&pool_b, q) {
                let sport = u16::from_be_bytes([bytes[42], bytes[43]]);
                let mut input = vec![10, 0, 0, 1, 10, 0, 0, 2];
                input.extend(sport.to_be_bytes());
                input.extend(4789u16.to_be_bytes());
                let h = toeplitz(&DEFAULT_RSS_KEY, &input);
                assert!(p.flags().contains(PktFlags::RSS_HASH));
                assert_eq!(p.rss_hash(), h, "sport {sport}");
                assert_eq!(h as usize % 4, k, "sport {sport} in queue {k}");
                per_queue[k] += 1;
            }
        }
        assert_eq!(per_queue.iter().sum::<usize>(), 40);
        assert!(
            per_queue.iter().all(|&n| n > 0),
            "every queue got flows: {per_queue:?}"
        );
        drop(rule);
        drop(rss);
    });
}

#[test]
fn bad_packets_are_refused_with_typed_errors_and_stay_the_callers() {
    let h = SimHal::new(eth_cfg(0), Drive::Synchronous);
    let dev = Device::bring_up(&h, Config::default()).unwrap();
    let port = dev.open_eth().unwrap();
    let pool = PktPool::new(&port, 16, 2048).unwrap();
    let other = PktPool::new(&port, 4, 2048).unwrap();
    let mut txq = TxQueue::new(&port, &pool, TxQueueAttr::new(8)).unwrap();
    // A runt (shorter than an Ethernet header).
    let mut p = pool.alloc().unwrap();
    pool.write(&mut p, 0, &[0u8; 10]).unwrap();
    assert_eq!(txq.tx_burst(&[p]), 0);
    assert!(matches!(
        txq.take_refused(),
        Some(Error::InvalidArgument {
            what: bareverbs::Invalid::PacketLength
        })
    ));
    // Longer than the port's MTU (1500 + 22 bytes of L2 header, tag and FCS).
    pool.set_len(&mut p, 1600).unwrap();
    assert_eq!(txq.tx_burst(&[p]), 0);
    assert!(txq.take_refused().is_some());
    // Past the buffer.
    assert!(pool.set_len(&mut p, 4096).is_err());
    assert!(pool.write(&mut p, 2040, &[0u8; 16]).is_err());
    // Another pool's handle.
    let q = other.alloc().unwrap();
    assert!(matches!(
        pool.free(q),
        Err(Error::InvalidArgument {
            what: bareverbs::Invalid::ForeignPacket
        })
    ));
    pool.set_len(&mut p, 60).unwrap();
    assert_eq!(
        txq.tx_burst(&[q, p]),
        0,
        "the foreign one stops the burst at once"
    );
    assert!(txq.take_refused().is_some());
    other.free(q).unwrap();
    // Freed twice.
    pool.free(p).unwrap();
    assert!(pool.free(p).is_err());
    // Queue full: 8 WQEBBs, one packet each; the rest of the burst is still the caller's.
    let pkts: Vec<Pkt> = (0..12)
        .map(|_| {
            let mut p = pool.alloc().unwrap();
            pool.write(&mut p, 0, &udp([2, 0, 0, 0, 0, 9], port.mac(), 1, 2, b"x"))
                .unwrap();
            p
        })
        .collect();
    let n = txq.tx_burst(&pkts);
    assert_eq!(n, 8);
    for p in &pkts[n..] {
        pool.free(*p).unwrap();
    }
    // The model completed them: the next burst reclaims the ring.
    txq.reclaim();
    assert_eq!(pool.available(), 16);
    // Nonsense sizes.
    assert!(PktPool::new(&port, 0, 2048).is_err());
    assert!(
        RxQueue::new(&port, &pool, RxQueueAttr::new(64)).is_err(),
        "more entries than buffers"
    );
    assert!(TxQueue::new(&port, &pool, TxQueueAttr::new(0)).is_err());
}

#[test]
fn an_infiniband_port_is_not_ethernet() {
    let h = SimHal::synchronous();
    let dev = Device::bring_up(&h, Config::default()).unwrap();
    assert!(matches!(
        dev.open_eth(),
        Err(Error::InvalidArgument {
            what: bareverbs::Invalid::NotEthernet
        })
    ));
}

#[test]
fn a_full_pool_backs_off_and_the_device_drops_what_finds_no_buffer() {
    // 8 buffers posted on the receiver, 2 spare; every frame steered to its queue.
    let receiver = EthEndAttr {
        pool_bufs: 10,
        rx: RxQueueAttr::new(8),
        steer: false,
        ..EthEndAttr::default()
    };
    with_ends([EthEndAttr::default(), receiver], |EthPair { a, b }, hb| {
        let (pa, pb, pool_b) = (a.port, b.port, b.pool);
        let rxq = &mut b.rxq;
        let _r = pb
            .add_rule(&FlowMatch::any(), FlowDest::Queue(rxq))
            .unwrap();
        for k in 0..12u8 {
            send(
                a.pool,
                &mut a.txq,
                &udp(pb.mac(), pa.mac(), 1, 2, &[k]),
                true,
            );
        }
        // 8 frames found a WQE; 4 were dropped by the device.
        let mut pk = [Pkt::EMPTY; 16];
        let n = rxq.rx_burst(&mut pk);
        assert_eq!(n, 2, "two spare buffers to replace what is handed over");
        let m = rxq.rx_burst(&mut pk[n..]);
        assert_eq!(m, 0, "the pool is empty: the rest wait in the CQ");
        for p in &pk[..n] {
            pool_b.free(*p).unwrap();
        }
        let got = recv_all(pool_b, rxq);
        assert_eq!(got.len(), 6);
        let firsts: Vec<u8> = got.iter().map(|(b, _)| b[42]).collect();
        assert_eq!(
            firsts,
            vec![2, 3, 4, 5, 6, 7],
            "in order, the first eight only"
        );
        assert_eq!(hb.model().with(|h| h.eth_work()).unwrap().rx_dropped, 4);
    });
}

#[test]
fn everything_is_released_when_the_objects_go() {
    let h = SimHal::new(eth_cfg(0), Drive::Synchronous);
    let dev = Device::bring_up(&h, Config::default()).unwrap();
    {
        let port = dev.open_eth().unwrap();
        let pool = PktPool::new(&port, 512, 2048).unwrap();
        let q1 = RxQueue::new(&port, &pool, RxQueueAttr::new(64)).unwrap();
        let q2 = RxQueue::new(&port, &pool, strip_vlan(RxQueueAttr::new(16))).unwrap();
        let _t = TxQueue::new(&port, &pool, TxQueueAttr::default());
        let rss = RssGroup::new(&port, &[&q1, &q2], RssFields::Ipv4, &DEFAULT_RSS_KEY).unwrap();
        let r1 = port
            .add_rule(&FlowMatch::any(), FlowDest::Rss(&rss))
            .unwrap();
        let r2 = port
            .add_rule(&FlowMatch::any().ethertype(0x0806), FlowDest::Queue(&q1))
            .unwrap();
        let o = h.model().with(|h| h.eth_objects()).unwrap();
        assert_eq!((o.sqs, o.rqs, o.tirs, o.rqts, o.tises), (1, 2, 3, 1, 1));
        assert_eq!(
            (o.flow_tables, o.flow_groups, o.flow_entries, o.root),
            (1, 2, 2, true)
        );
        drop((r1, r2, rss));
        assert_eq!(
            pool.available(),
            512 - 64 - 16,
            "the posted buffers are the queues'"
        );
    }
    assert_eq!(
        h.model().with(|h| h.eth_objects()).unwrap(),
        EthObjects::default()
    );
    dev.teardown().unwrap();
}

#[test]
fn vlan_tags_are_stripped_on_request_and_frames_past_the_receivers_mtu_are_dropped() {
    with_ports(|pa, pb, _| {
        // The receiver takes frames of 600 bytes at most (L2 header and FCS included).
        pb.set_hw_mtu(600).unwrap();
        assert_eq!(pb.hw_mtu(), 600);
        assert!(pb.set_hw_mtu(10).is_err());
        let (pool_a, pool_b) = (
            PktPool::new(pa, 64, 2048).unwrap(),
            PktPool::new(pb, 64, 2048).unwrap(),
        );
        let mut txq = TxQueue::new(pa, &pool_a, TxQueueAttr::default()).unwrap();
        let mut strip = RxQueue::new(pb, &pool_b, strip_vlan(RxQueueAttr::new(16))).unwrap();
        let mut keep = RxQueue::new(pb, &pool_b, RxQueueAttr::new(16)).unwrap();
        let _a = pb
            .add_rule(&FlowMatch::any().vlan_id(5), FlowDest::Queue(&strip))
            .unwrap();
        let _b = pb
            .add_rule(&FlowMatch::any().dmac(pb.mac()), FlowDest::Queue(&keep))
            .unwrap();
        let plain = udp(pb.mac(), pa.mac(), 1, 2, &[7u8; 100]);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0xa0, 0x05]); // PCP 5, VLAN 5
        tagged.extend_from_slice(&plain[12..]);
        send(&pool_a, &mut txq, &tagged, true);
        let got = recv_all(&pool_b, &mut strip);
        assert_eq!(got.len(), 1);
        assert!(got[0].1.flags().contains(PktFlags::VLAN_STRIPPED));
        assert_eq!(got[0].1.vlan_tci(), 0xa005);
        // The tag left the frame (the checksums at 24 and 40 are the NIC's).
        assert_eq!(got[0].0.len(), plain.len());
        assert_eq!(&got[0].0[..24], &plain[..24], "the tag left the frame");
        assert_eq!(&got[0].0[26..40], &plain[26..40]);
        assert_eq!(&got[0].0[42..], &plain[42..]);
        assert!(got[0].1.flags().contains(PktFlags::L4_CSUM_OK));
        // Untagged to the other queue, as sent.
        send(&pool_a, &mut txq, &plain, true);
        let got = recv_all(&pool_b, &mut keep);
        assert_eq!(got.len(), 1);
        assert!(!got[0].1.flags().contains(PktFlags::VLAN_STRIPPED));
        // 700 bytes: past the receiver's 600, dropped there (the sender's 1522 allows it).
        send(
            &pool_a,
            &mut txq,
            &udp(pb.mac(), pa.mac(), 1, 2, &[1u8; 658]),
            true,
        );
        assert!(recv_all(&pool_b, &mut keep).is_empty());
        assert!(recv_all(&pool_b, &mut strip).is_empty());
    });
}

#[test]
fn a_vlan_tag_is_inserted_on_send_in_the_inline_headers_or_by_the_nic() {
    // Sender A inlines L2 headers (the tag goes into the WQE's copy); sender C inlines nothing
    // (the NIC inserts the tag: the Ethernet segment's insert union).
    let f = Fabric::new();
    let ha = SimHal::on_fabric(eth_cfg(0), Drive::Synchronous, &f);
    let hb = SimHal::on_fabric(eth_cfg(1), Drive::Synchronous, &f);
    let hc = SimHal::on_fabric(
        ModelConfig {
            eth_min_inline: 0,
            ..eth_cfg(2)
        },
        Drive::Synchronous,
        &f,
    );
    // One by one: a device is large, arrays of them overflow a debug test's stack.
    let da = Device::bring_up(&ha, Config::default()).unwrap();
    let db = Device::bring_up(&hb, Config::default()).unwrap();
    let dc = Device::bring_up(&hc, Config::default()).unwrap();
    let (pa, pb, pc) = (
        da.open_eth().unwrap(),
        db.open_eth().unwrap(),
        dc.open_eth().unwrap(),
    );
    assert_eq!(pa.inline_mode(), InlineMode::L2);
    assert_eq!(pc.inline_mode(), InlineMode::None);
    assert!(pc.caps().vlan_insert);
    let pools = [
        PktPool::new(&pa, 32, 2048).unwrap(),
        PktPool::new(&pb, 32, 2048).unwrap(),
        PktPool::new(&pc, 32, 2048).unwrap(),
    ];
    let mut txa = TxQueue::new(&pa, &pools[0], TxQueueAttr::default()).unwrap();
    let mut txc = TxQueue::new(&pc, &pools[2], TxQueueAttr::default()).unwrap();
    let mut rx = RxQueue::new(&pb, &pools[1], RxQueueAttr::new(8)).unwrap();
    let _r = pb
        .add_rule(&FlowMatch::any().vlan_id(0x123), FlowDest::Queue(&rx))
        .unwrap();
    for (txq, port, pool) in [(&mut txa, &pa, &pools[0]), (&mut txc, &pc, &pools[2])] {
        let frame = udp(pb.mac(), port.mac(), 5, 6, b"tag me");
        let mut p = pool.alloc().unwrap();
        pool.write(&mut p, 0, &frame).unwrap();
        p.set_tx_csum(true);
        p.set_vlan_insert(Some(0x6123)); // PCP 3, VLAN 0x123
        assert_eq!(txq.tx_burst(&[p]), 1, "{:?}", txq.take_refused());
        let got = recv_all(&pools[1], &mut rx);
        txq.reclaim();
        assert_eq!(txq.stopped(), None);
        assert_eq!(
            got.len(),
            1,
            "matched by the VLAN rule: {:?}",
            hb.model().with(|h| h.eth_work())
        );
        let b = &got[0].0;
        assert_eq!(&b[12..16], &[0x81, 0x00, 0x61, 0x23]);
        assert_eq!(&b[..12], &frame[..12]);
        assert_eq!(&b[16..18], &frame[12..14]);
        assert_eq!(&b[46..52], b"tag me");
        assert!(got[0].1.flags().contains(PktFlags::L4_CSUM_OK));
    }
    // A plain send from the port that inlines nothing: the data segment right after the
    // Ethernet segment.
    let _mine = pb
        .add_rule(&FlowMatch::any().dmac(pb.mac()), FlowDest::Queue(&rx))
        .unwrap();
    let frame = udp(pb.mac(), pc.mac(), 5, 6, b"no inline");
    let mut p = pools[2].alloc().unwrap();
    pools[2].write(&mut p, 0, &frame).unwrap();
    assert_eq!(txc.tx_burst(&[p]), 1);
    let got = recv_all(&pools[1], &mut rx);
    assert_eq!(got.len(), 1);
    assert_eq!(
        &got[0].0[..frame.len()],
        &frame[..],
        "as sent, padded to 60 bytes"
    );
}

#[test]
fn counted_rules_count_what_they_match_and_an_admin_down_port_is_silent() {
    let end = |steer| EthEndAttr {
        pool_bufs: 32,
        rx: RxQueueAttr::new(8),
        steer,
        ..EthEndAttr::default()
    };
    // The receiver's rules are the test's: the counted one first.
    with_ends([end(true), end(false)], |EthPair { a, b }, hb| {
        let (pa, pb, pool_a, pool_b) = (a.port, b.port, a.pool, b.pool);
        let (txq, rxq) = (&mut a.txq, &mut b.rxq);
        let counted = pb
            .add_counted_rule(&FlowMatch::any().udp_dport(53), FlowDest::Drop)
            .unwrap();
        let plain = pb
            .add_rule(&FlowMatch::any().dmac(pb.mac()), FlowDest::Queue(rxq))
            .unwrap();
        assert_eq!(plain.counts().unwrap(), None);
        let dns = udp(pb.mac(), pa.mac(), 1, 53, &[0u8; 100]);
        for _ in 0..3 {
            send(pool_a, txq, &dns, true);
        }
        send(pool_a, txq, &udp(pb.mac(), pa.mac(), 1, 54, b"x"), true);
        assert_eq!(counted.counts().unwrap(), Some((3, 3 * dns.len() as u64)));
        assert_eq!(recv_all(pool_b, rxq).len(), 1, "only the one to port 54");
        assert_eq!(
            hb.model().with(|h| h.eth_objects()).unwrap().flow_counters,
            1
        );
        drop(counted);
        assert_eq!(
            hb.model().with(|h| h.eth_objects()).unwrap().flow_counters,
            0
        );
        // Down: the link reads down and nothing arrives; up again, traffic flows.
        pb.set_admin_up(false).unwrap();
        assert!(!pb.link_up().unwrap());
        send(pool_a, txq, &dns, true);
        assert!(recv_all(pool_b, rxq).is_empty());
        pb.set_admin_up(true).unwrap();
        assert!(pb.link_up().unwrap());
        send(pool_a, txq, &dns, true);
        assert_eq!(recv_all(pool_b, rxq).len(), 1);
    });
}

#[test]
fn queues_run_on_their_own_threads_sharing_one_pool() {
    with_ports(|pa, pb, _| {
        let (pool_a, pool_b) = (
            PktPool::new(pa, 256, 2048).unwrap(),
            PktPool::new(pb, 256, 2048).unwrap(),
        );
        let mut rxq = RxQueue::new(pb, &pool_b, RxQueueAttr::new(128)).unwrap();
        let _r = pb
            .add_rule(&FlowMatch::any().dmac(pb.mac()), FlowDest::Queue(&rxq))
            .unwrap();
        // Two send queues, one per thread, on one pool: 50 frames each, tagged by sender.
        std::thread::scope(|s| {
            for sender in 0..2u8 {
                let pool = &pool_a;
                let frame = udp(
                    pb.mac(),
                    pa.mac(),
                    1000 + u16::from(sender),
                    9,
                    &[sender; 32],
                );
                s.spawn(move || {
                    let mut txq = TxQueue::new(pa, pool, TxQueueAttr::new(16)).unwrap();
                    let mut sent = 0;
                    while sent < 50 {
                        let mut p = pool.alloc().expect("a buffer");
                        pool.write(&mut p, 0, &frame).unwrap();
                        if txq.tx_burst(&[p]) == 1 {
                            sent += 1;
                        } else {
                            pool.free(p).unwrap();
                            txq.reclaim();
                        }
                    }
                    txq.reclaim();
                });
            }
        });
        let got = recv_all(&pool_b, &mut rxq);
        assert_eq!(got.len(), 100);
        for sender in 0..2u8 {
            assert_eq!(got.iter().filter(|(b, _)| b[42] == sender).count(), 50);
        }
        assert_eq!(
            pool_a.available(),
            256,
            "every sent buffer came back to the shared pool"
        );
    });
}

/// A UDP/IPv6 frame from 2001:db8::1 to `dst_ip`, checksum left for the NIC.
fn udp6(
    dst: [u8; 6],
    src: [u8; 6],
    dst_ip: [u8; 16],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    let ulen = (8 + payload.len()) as u16;
    f.extend_from_slice(&ulen.to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    let mut src_ip = [0u8; 16];
    src_ip[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    src_ip[15] = 1;
    f.extend_from_slice(&src_ip);
    f.extend_from_slice(&dst_ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&ulen.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

#[test]
fn ipv6_rules_and_rss_over_ipv6_udp() {
    with_ports(|pa, pb, _| {
        let (pool_a, pool_b) = (
            PktPool::new(pa, 64, 2048).unwrap(),
            PktPool::new(pb, 256, 2048).unwrap(),
        );
        let mut txq = TxQueue::new(pa, &pool_a, TxQueueAttr::default()).unwrap();
        let attr = RxQueueAttr::new(32);
        let mut qs: Vec<_> = (0..2)
            .map(|_| RxQueue::new(pb, &pool_b, attr).unwrap())
            .collect();
        let mut other = RxQueue::new(pb, &pool_b, attr).unwrap();
        let refs: Vec<&RxQueue<'_, '_, &SimHal>> = qs.iter().collect();
        let rss = RssGroup::new(pb, &refs, RssFields::Ipv6Udp, &DEFAULT_RSS_KEY).unwrap();
        let mut mine = [0u8; 16];
        mine[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        mine[15] = 2;
        let _r6 = pb
            .add_rule(
                &FlowMatch::any().ip_version(6).dst_ipv6(mine),
                FlowDest::Rss(&rss),
            )
            .unwrap();
        let _rest = pb
            .add_rule(&FlowMatch::any(), FlowDest::Queue(&other))
            .unwrap();
        for sport in 0..16u16 {
            send(
                &pool_a,
                &mut txq,
                &udp6(pb.mac(), pa.mac(), mine, 5000 + sport, 9, b"v6"),
                true,
            );
        }
        let mut not_mine = mine;
        not_mine[15] = 3;
        send(
            &pool_a,
            &mut txq,
            &udp6(pb.mac(), pa.mac(), not_mine, 1, 9, b"v6"),
            true,
        );
        send(
            &pool_a,
            &mut txq,
            &udp(pb.mac(), pa.mac(), 1, 9, b"v4"),
            true,
        );
        let mut per_queue = [0usize; 2];
        for (k, q) in qs.iter_mut().enumerate() {
            for (bytes, p) in recv_all(&pool_b, q) {
                let sport = u16::from_be_bytes([bytes[54], bytes[55]]);
                let mut input = bytes[22..54].to_vec(); // source and destination addresses
                input.extend(sport.to_be_bytes());
                input.extend(9u16.to_be_bytes());
                let h = toeplitz(&DEFAULT_RSS_KEY, &input);
                assert!(p
                    .flags()
                    .contains(PktFlags::RSS_HASH | PktFlags::L4_CSUM_OK));
                assert_eq!(p.rss_hash(), h);
                assert_eq!(h as usize % 2, k);
                per_queue[k] += 1;
            }
        }
        assert_eq!(per_queue.iter().sum::<usize>(), 16);
        assert!(per_queue.iter().all(|&n| n > 0), "{per_queue:?}");
        assert_eq!(
            recv_all(&pool_b, &mut other).len(),
            2,
            "the other address and the IPv4 frame"
        );
    });
}
