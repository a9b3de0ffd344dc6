//! The appliance's protocol logic, with no I/O and no allocation (the unikernel image uses it
//! too): given one received Ethernet frame, the reply to send, if any — an ARP reply for the
//! appliance's IPv4 address, an ICMP echo reply, or the UDP datagram echoed back from the
//! echo port. Frames that are malformed, not for the appliance, or carry a wrong IPv4, ICMP
//! or UDP checksum get no reply.

/// Who the appliance is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its IPv4 address.
    pub ip: [u8; 4],
    /// The UDP port it echoes on.
    pub udp_echo_port: u16,
}

/// What a frame was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An ARP request for the appliance's address.
    Arp,
    /// An ICMP echo request to it.
    Ping,
    /// A UDP datagram to its echo port.
    UdpEcho,
    /// Anything else (no reply).
    Ignored,
}

const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const BROADCAST: [u8; 6] = [0xff; 6];

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The Internet checksum of `data` with `acc` already summed in (the result to store).
pub fn checksum(data: &[u8], mut acc: u32) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(*b) << 8;
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Builds in `out` the reply to `frame`; returns its kind and length (0 when ignored).
pub fn respond(me: &Identity, frame: &[u8], out: &mut [u8]) -> (Kind, usize) {
    let ignored = (Kind::Ignored, 0);
    if frame.len() < ETH_HLEN || out.len() < frame.len().max(60) {
        return ignored;
    }
    let dst: [u8; 6] = frame[..6].try_into().unwrap_or_default();
    if dst != me.mac && dst != BROADCAST {
        return ignored;
    }
    match be16(frame, 12) {
        ETHERTYPE_ARP => arp(me, frame, out),
        ETHERTYPE_IPV4 if dst == me.mac => ipv4(me, frame, out),
        _ => ignored,
    }
}

fn arp(me: &Identity, f: &[u8], out: &mut [u8]) -> (Kind, usize) {
    let a = &f[ETH_HLEN..];
    // Ethernet/IPv4 ARP request for our address.
    if a.len() < 28
        || be16(a, 0) != 1
        || be16(a, 2) != ETHERTYPE_IPV4
        || a[4] != 6
        || a[5] != 4
        || be16(a, 6) != 1
        || a[24..28] != me.ip
    {
        return (Kind::Ignored, 0);
    }
    let (sha, spa) = (&a[8..14], &a[14..18]);
    out[..6].copy_from_slice(sha);
    out[6..12].copy_from_slice(&me.mac);
    out[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let r = &mut out[ETH_HLEN..ETH_HLEN + 28];
    r[..6].copy_from_slice(&a[..6]);
    r[6..8].copy_from_slice(&2u16.to_be_bytes());
    r[8..14].copy_from_slice(&me.mac);
    r[14..18].copy_from_slice(&me.ip);
    r[18..24].copy_from_slice(sha);
    r[24..28].copy_from_slice(spa);
    (Kind::Arp, ETH_HLEN + 28)
}

fn ipv4(me: &Identity, f: &[u8], out: &mut [u8]) -> (Kind, usize) {
    let ip = &f[ETH_HLEN..];
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return (Kind::Ignored, 0);
    }
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(be16(ip, 2));
    let frag = be16(ip, 6) & 0x3fff != 0;
    if ihl < 20 || total < ihl || total > ip.len() || frag || ip[16..20] != me.ip {
        return (Kind::Ignored, 0);
    }
    if checksum(&ip[..ihl], 0) != 0 {
        return (Kind::Ignored, 0);
    }
    let payload = &ip[ihl..total];
    let (kind, ok) = match ip[9] {
        1 => (
            Kind::Ping,
            payload.len() >= 8 && payload[0] == 8 && checksum(payload, 0) == 0,
        ),
        17 => {
            let ok = payload.len() >= 8
                && be16(payload, 2) == me.udp_echo_port
                && usize::from(be16(payload, 4)) == payload.len()
                && (be16(payload, 6) == 0 || checksum(payload, pseudo(ip, payload.len())) == 0);
            (Kind::UdpEcho, ok)
        }
        _ => (Kind::Ignored, false),
    };
    if !ok {
        return (Kind::Ignored, 0);
    }
    let len = ETH_HLEN + total;
    out[..len].copy_from_slice(&f[..len]);
    // Ethernet: back to the sender.
    out[..6].copy_from_slice(&f[6..12]);
    out[6..12].copy_from_slice(&me.mac);
    // IPv4: addresses swapped, a fresh TTL, the checksum redone.
    let o = &mut out[ETH_HLEN..len];
    o[12..16].copy_from_slice(&ip[16..20]);
    o[16..20].copy_from_slice(&ip[12..16]);
    o[8] = 64;
    o[10..12].fill(0);
    let c = checksum(&o[..ihl], 0);
    o[10..12].copy_from_slice(&c.to_be_bytes());
    let (hdr, body) = o.split_at_mut(ihl);
    match kind {
        Kind::Ping => {
            body[0] = 0;
            body[2..4].fill(0);
            let c = checksum(body, 0);
            body[2..4].copy_from_slice(&c.to_be_bytes());
        }
        _ => {
            let (sp, dp) = (be16(body, 0), be16(body, 2));
            body[0..2].copy_from_slice(&dp.to_be_bytes());
            body[2..4].copy_from_slice(&sp.to_be_bytes());
            body[6..8].fill(0);
            let mut c = checksum(body, pseudo(hdr, body.len()));
            if c == 0 {
                c = 0xffff;
            }
            body[6..8].copy_from_slice(&c.to_be_bytes());
        }
    }
    (kind, len)
}

/// The UDP pseudo-header sum of a datagram of `len` bytes under IPv4 header `ip`.
fn pseudo(ip: &[u8], len: usize) -> u32 {
    let mut acc = 17 + len as u32;
    for k in (12..20).step_by(2) {
        acc += u32::from(be16(ip, k));
    }
    acc
}
