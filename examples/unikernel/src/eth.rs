//! The Ethernet run: on HCAs whose ports are Ethernet, the packet appliance (the same
//! responder as `examples/src/eth_appliance.rs`) serves on HCA 0, and a peer on HCA 1 sends it
//! an ARP request, pings and UDP datagrams and checks every reply byte for byte, both polled
//! from this one loop. No allocation: frames are built in stack arrays.

use bareverbs::eth::{
    FlowDest, FlowMatch, Pkt, PktPool, RxQueue, RxQueueAttr, TxQueue, TxQueueAttr,
};
use bareverbs::hal::Hal;
use bareverbs::Device;

use crate::println;
use crate::responder::{checksum, respond, Identity, Kind};
use crate::run::{verb, Fail, COMPLETION_TIMEOUT};

/// Pings and UDP datagrams the peer sends.
const ROUNDS: u32 = 20;
const APPLIANCE_IP: [u8; 4] = [10, 0, 0, 2];
const PEER_IP: [u8; 4] = [10, 0, 0, 1];
const ECHO_PORT: u16 = 7;

/// One side's queues.
struct Side<'p, 'd, H: Hal> {
    pool: &'p PktPool<'p, 'd, H>,
    rxq: RxQueue<'p, 'd, H>,
    txq: TxQueue<'p, 'd, H>,
}

/// The appliance's work: every frame received answered or freed.
fn serve<H: Hal>(
    s: &mut Side<'_, '_, H>,
    me: &Identity,
    served: &mut [u32; 4],
) -> Result<(), Fail> {
    let mut rx = [Pkt::EMPTY; 16];
    let mut tx = [Pkt::EMPTY; 16];
    let (mut frame, mut reply) = ([0u8; 1536], [0u8; 1536]);
    let n = s.rxq.rx_burst(&mut rx);
    let mut m = 0;
    for p in &rx[..n] {
        let len = s
            .pool
            .read(p, 0, &mut frame)
            .map_err(verb("read a frame"))?;
        let (kind, rlen) = respond(me, &frame[..len], &mut reply);
        let mut p = *p;
        served[kind as usize] += 1;
        if kind == Kind::Ignored {
            s.pool.free(p).map_err(verb("free a buffer"))?;
            continue;
        }
        s.pool.set_len(&mut p, 0).map_err(verb("reuse a buffer"))?;
        s.pool
            .write(&mut p, 0, &reply[..rlen])
            .map_err(verb("write a reply"))?;
        tx[m] = p;
        m += 1;
    }
    let sent = s.txq.tx_burst(&tx[..m]);
    for p in &tx[sent..m] {
        s.pool.free(*p).map_err(verb("free a buffer"))?;
    }
    Ok(())
}

/// Sends `frame` from the peer and serves until the peer receives a frame (its length, in
/// `got`), or the timeout.
#[allow(clippy::too_many_arguments)]
fn exchange<H: Hal>(
    hal: &H,
    peer: &mut Side<'_, '_, H>,
    app: &mut Side<'_, '_, H>,
    me: &Identity,
    served: &mut [u32; 4],
    frame: &[u8],
    got: &mut [u8],
    what: &'static str,
) -> Result<usize, Fail> {
    let mut p = peer.pool.alloc().ok_or(Fail::Timeout(what))?;
    peer.pool.write(&mut p, 0, frame).map_err(verb(what))?;
    if peer.txq.tx_burst(&[p]) != 1 {
        return Err(Fail::Verb(
            what,
            peer.txq
                .take_refused()
                .unwrap_or(bareverbs::Error::QueueFull),
        ));
    }
    let start = hal.now();
    let mut r = [Pkt::EMPTY; 1];
    loop {
        serve(app, me, served)?;
        if peer.rxq.rx_burst(&mut r) == 1 {
            let n = peer.pool.read(&r[0], 0, got).map_err(verb(what))?;
            peer.pool.free(r[0]).map_err(verb(what))?;
            return Ok(n);
        }
        if hal.now().since(start) > COMPLETION_TIMEOUT {
            return Err(Fail::Timeout(what));
        }
    }
}

/// An IPv4 frame from the peer to the appliance: headers in `f`, `payload` after them.
fn ipv4(f: &mut [u8], to: [u8; 6], from: [u8; 6], proto: u8, payload: &[u8]) -> usize {
    f[..6].copy_from_slice(&to);
    f[6..12].copy_from_slice(&from);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let total = (20 + payload.len()) as u16;
    let ip = &mut f[14..34];
    ip.copy_from_slice(&[
        0x45, 0, 0, 0, 0, 7, 0x40, 0, 64, proto, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[12..16].copy_from_slice(&PEER_IP);
    ip[16..20].copy_from_slice(&APPLIANCE_IP);
    let c = checksum(ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..34 + payload.len()].copy_from_slice(payload);
    34 + payload.len()
}

/// The run on two Ethernet HCAs.
pub fn appliance<H: Hal>(d0: &Device<H>, d1: &Device<H>) -> Result<(), Fail> {
    let (p0, p1) = (
        d0.open_eth().map_err(verb("open_eth"))?,
        d1.open_eth().map_err(verb("open_eth"))?,
    );
    let (pool0, pool1) = (
        PktPool::new(&p0, 128, 2048).map_err(verb("packet pool"))?,
        PktPool::new(&p1, 128, 2048).map_err(verb("packet pool"))?,
    );
    let rx = RxQueueAttr::new(64);
    let tx = TxQueueAttr::new(64);
    let mut app = Side {
        pool: &pool0,
        rxq: RxQueue::new(&p0, &pool0, rx).map_err(verb("receive queue"))?,
        txq: TxQueue::new(&p0, &pool0, tx).map_err(verb("send queue"))?,
    };
    let mut peer = Side {
        pool: &pool1,
        rxq: RxQueue::new(&p1, &pool1, rx).map_err(verb("receive queue"))?,
        txq: TxQueue::new(&p1, &pool1, tx).map_err(verb("send queue"))?,
    };
    let me = Identity {
        mac: p0.mac(),
        ip: APPLIANCE_IP,
        udp_echo_port: ECHO_PORT,
    };
    let mine = FlowMatch::any().dmac(me.mac);
    let arp = FlowMatch::any().dmac([0xff; 6]).ethertype(0x0806);
    let peer_mac = p1.mac();
    let _r0 = p0
        .add_rule(&mine, FlowDest::Queue(&app.rxq))
        .map_err(verb("flow rule"))?;
    let _r1 = p0
        .add_rule(&arp, FlowDest::Queue(&app.rxq))
        .map_err(verb("flow rule"))?;
    let to_peer = FlowMatch::any().dmac(peer_mac);
    let _r2 = p1
        .add_rule(&to_peer, FlowDest::Queue(&peer.rxq))
        .map_err(verb("flow rule"))?;
    let hal = d0.hal();
    let mut served = [0u32; 4];
    let mut f = [0u8; 1536];
    let mut got = [0u8; 1536];

    // ARP: who has the appliance's address?
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&peer_mac);
    f[12..22].copy_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f[22..28].copy_from_slice(&peer_mac);
    f[28..32].copy_from_slice(&PEER_IP);
    f[32..38].fill(0);
    f[38..42].copy_from_slice(&APPLIANCE_IP);
    let n = exchange(
        hal,
        &mut peer,
        &mut app,
        &me,
        &mut served,
        &f[..42],
        &mut got,
        "ARP",
    )?;
    if n < 42 || got[20..22] != [0, 2] || got[22..28] != me.mac || got[28..32] != APPLIANCE_IP {
        return Err(Fail::Data("ARP reply", 0));
    }
    println!("eth: ARP reply from the appliance, MAC checked");
    let mut body = [0u8; 1400];
    for seq in 0..ROUNDS {
        body[..8].copy_from_slice(&[8, 0, 0, 0, 0x12, 0x34, (seq >> 8) as u8, seq as u8]);
        for (k, b) in body[8..64].iter_mut().enumerate() {
            *b = (k as u32 + seq) as u8;
        }
        let c = checksum(&body[..64], 0);
        body[2..4].copy_from_slice(&c.to_be_bytes());
        let len = ipv4(&mut f, me.mac, peer_mac, 1, &body[..64]);
        let n = exchange(
            hal,
            &mut peer,
            &mut app,
            &me,
            &mut served,
            &f[..len],
            &mut got,
            "ping",
        )?;
        let r = &got[34..98];
        if n < 98 || r[0] != 0 || r[4..] != body[4..64] || checksum(r, 0) != 0 {
            return Err(Fail::Data("ping reply", seq));
        }
    }
    println!("eth: {ROUNDS} pings answered, checked byte for byte");
    for k in 0..ROUNDS {
        let size = 16 + 60 * k as usize;
        body[..2].copy_from_slice(&40000u16.to_be_bytes());
        body[2..4].copy_from_slice(&ECHO_PORT.to_be_bytes());
        body[4..6].copy_from_slice(&((8 + size) as u16).to_be_bytes());
        body[6..8].fill(0);
        for (i, b) in body[8..8 + size].iter_mut().enumerate() {
            *b = (i as u32 * 7 + k) as u8;
        }
        let len = ipv4(&mut f, me.mac, peer_mac, 17, &body[..8 + size]);
        let n = exchange(
            hal,
            &mut peer,
            &mut app,
            &me,
            &mut served,
            &f[..len],
            &mut got,
            "UDP echo",
        )?;
        let u = &got[34..];
        if n < 42 + size || u[..2] != ECHO_PORT.to_be_bytes() || u[8..8 + size] != body[8..8 + size]
        {
            return Err(Fail::Data("UDP echo", k));
        }
    }
    println!("eth: {ROUNDS} UDP echoes checked byte for byte");
    println!(
        "eth: the appliance answered {} ARP, {} pings, {} UDP; ignored {}",
        served[Kind::Arp as usize],
        served[Kind::Ping as usize],
        served[Kind::UdpEcho as usize],
        served[Kind::Ignored as usize]
    );
    Ok(())
}
