//! What the NIC reads from a frame: L2 addresses, the first VLAN tag, the L3 and L4 headers
//! the steering, RSS and checksum offloads look at (IPv4, IPv6, TCP, UDP).

/// Ethertypes the NIC knows.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
}

/// IP protocol numbers the NIC knows.
pub mod ip_proto {
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
}

/// The parsed headers of a frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    /// The first VLAN tag: its TPID and TCI.
    pub vlan: Option<(u16, u16)>,
    /// The ethertype after the VLAN tags.
    pub ethertype: u16,
    /// Offset of the L3 header.
    pub l3: usize,
    pub ip: Option<Ip>,
    pub l4: Option<L4>,
}

/// An IPv4 or IPv6 header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ip {
    pub version: u8,
    /// Addresses as 16 bytes; IPv4 in the last four (`ipv4_layout`).
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub proto: u8,
    pub ttl: u8,
    pub dscp: u8,
    pub ecn: u8,
    /// A fragment (IPv4 MF set or a non-zero offset).
    pub frag: bool,
    /// IPv4 header length in dwords.
    pub ihl: u8,
    /// Header length in bytes.
    pub len: usize,
    /// Where the L3 payload ends (the IP total length; padding past it is not payload).
    pub end: usize,
}

/// A TCP or UDP header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L4 {
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub tcp_flags: u16,
    /// Offset of the L4 header.
    pub off: usize,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl Headers {
    /// Parses `frame`; `None` for a runt (shorter than an Ethernet header).
    pub fn parse(frame: &[u8]) -> Option<Headers> {
        let mut h = Headers {
            dmac: frame.get(0..6)?.try_into().ok()?,
            smac: frame.get(6..12)?.try_into().ok()?,
            ..Headers::default()
        };
        let mut at = 12;
        let mut ty = be16(frame, at)?;
        at += 2;
        while ty == ethertype::VLAN || ty == ethertype::QINQ {
            let tci = be16(frame, at)?;
            if h.vlan.is_none() {
                h.vlan = Some((ty, tci));
            }
            ty = be16(frame, at + 2)?;
            at += 4;
        }
        h.ethertype = ty;
        h.l3 = at;
        h.ip = match ty {
            ethertype::IPV4 => parse_ipv4(frame, at),
            ethertype::IPV6 => parse_ipv6(frame, at),
            _ => None,
        };
        if let Some(ip) = h.ip.as_ref().filter(|ip| !ip.frag) {
            let off = at + ip.len;
            if matches!(ip.proto, ip_proto::TCP | ip_proto::UDP) {
                h.l4 = (|| {
                    let mut l4 = L4 {
                        proto: ip.proto,
                        sport: be16(frame, off)?,
                        dport: be16(frame, off + 2)?,
                        tcp_flags: 0,
                        off,
                    };
                    if ip.proto == ip_proto::TCP {
                        l4.tcp_flags = be16(frame, off + 12)? & 0x1ff;
                    }
                    Some(l4)
                })();
            }
        }
        Some(h)
    }

    /// Whether the destination is a group address (multicast or broadcast).
    pub fn multicast(&self) -> bool {
        self.dmac[0] & 1 != 0
    }
}

fn parse_ipv4(f: &[u8], at: usize) -> Option<Ip> {
    let b = f.get(at..at + 20)?;
    if b[0] >> 4 != 4 {
        return None;
    }
    let ihl = b[0] & 0xf;
    let len = usize::from(ihl) * 4;
    let total = usize::from(u16::from_be_bytes([b[2], b[3]]));
    if ihl < 5 || f.len() < at + len || total < len {
        return None;
    }
    let flags_frag = u16::from_be_bytes([b[6], b[7]]);
    let mut ip = Ip {
        version: 4,
        proto: b[9],
        ttl: b[8],
        dscp: b[1] >> 2,
        ecn: b[1] & 3,
        frag: flags_frag & 0x3fff != 0,
        ihl,
        len,
        end: (at + total).min(f.len()),
        ..Ip::default()
    };
    ip.src[12..].copy_from_slice(&b[12..16]);
    ip.dst[12..].copy_from_slice(&b[16..20]);
    Some(ip)
}

fn parse_ipv6(f: &[u8], at: usize) -> Option<Ip> {
    let b = f.get(at..at + 40)?;
    if b[0] >> 4 != 6 {
        return None;
    }
    let tc = ((b[0] & 0xf) << 4) | (b[1] >> 4);
    let payload = usize::from(u16::from_be_bytes([b[4], b[5]]));
    let mut ip = Ip {
        version: 6,
        proto: b[6],
        ttl: b[7],
        dscp: tc >> 2,
        ecn: tc & 3,
        // A fragment header (44) makes the packet a fragment.
        frag: b[6] == 44,
        len: 40,
        end: (at + 40 + payload).min(f.len()),
        ..Ip::default()
    };
    ip.src.copy_from_slice(&b[8..24]);
    ip.dst.copy_from_slice(&b[24..40]);
    Some(ip)
}

/// The 16-bit ones' complement sum of `data` (big-endian words, an odd byte padded), not
/// complemented, added to `acc`.
pub fn ones_sum(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

/// Folds a running sum to 16 bits.
pub fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The pseudo-header sum of an L4 segment of `len` bytes.
fn pseudo_sum(frame: &[u8], h: &Headers, ip: &Ip, len: usize) -> u32 {
    let mut acc = 0;
    if ip.version == 4 {
        acc = ones_sum(&frame[h.l3 + 12..h.l3 + 20], acc);
    } else {
        acc = ones_sum(&frame[h.l3 + 8..h.l3 + 40], acc);
    }
    acc + u32::from(ip.proto) + len as u32
}

/// Whether the IPv4 header checksum is right (IPv6 has none: true).
pub fn l3_ok(frame: &[u8], h: &Headers) -> bool {
    match &h.ip {
        Some(ip) if ip.version == 4 => fold(ones_sum(&frame[h.l3..h.l3 + ip.len], 0)) == 0xffff,
        Some(_) => true,
        None => false,
    }
}

/// Whether the TCP or UDP checksum is right (a UDP checksum of 0 over IPv4 means none).
pub fn l4_ok(frame: &[u8], h: &Headers) -> bool {
    let (Some(ip), Some(l4)) = (&h.ip, &h.l4) else {
        return false;
    };
    let Some(seg) = frame.get(l4.off..ip.end) else {
        return false;
    };
    if l4.proto == ip_proto::UDP && ip.version == 4 && be16(seg, 6) == Some(0) {
        return true;
    }
    fold(ones_sum(seg, pseudo_sum(frame, h, ip, seg.len()))) == 0xffff
}

/// Writes the IPv4 header checksum.
pub fn fill_l3_csum(frame: &mut [u8], h: &Headers) {
    if let Some(ip) = h.ip.as_ref().filter(|ip| ip.version == 4) {
        let hdr = h.l3..h.l3 + ip.len;
        frame[h.l3 + 10..h.l3 + 12].fill(0);
        let c = !fold(ones_sum(&frame[hdr], 0));
        frame[h.l3 + 10..h.l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Writes the TCP or UDP checksum, computed from scratch with the pseudo-header.
pub fn fill_l4_csum(frame: &mut [u8], h: &Headers) {
    let (Some(ip), Some(l4)) = (&h.ip, &h.l4) else {
        return;
    };
    let at = l4.off + if l4.proto == ip_proto::TCP { 16 } else { 6 };
    if at + 2 > ip.end {
        return;
    }
    frame[at..at + 2].fill(0);
    let seg = &frame[l4.off..ip.end];
    let mut c = !fold(ones_sum(seg, pseudo_sum(frame, h, ip, seg.len())));
    if c == 0 && l4.proto == ip_proto::UDP {
        c = 0xffff;
    }
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A UDP/IPv4 frame from 10.0.0.1:1234 to 10.0.0.2:7 with a right checksum.
    pub fn udp4(payload: &[u8], vlan: Option<u16>) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        if let Some(tci) = vlan {
            f.extend_from_slice(&[0x81, 0, (tci >> 8) as u8, tci as u8]);
        }
        f.extend_from_slice(&[0x08, 0]);
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
        ]);
        f.extend_from_slice(&[0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let ulen = 8 + payload.len();
        f.extend_from_slice(&[4, 0xd2, 0, 7, (ulen >> 8) as u8, ulen as u8, 0, 0]);
        f.extend_from_slice(payload);
        let h = Headers::parse(&f).unwrap();
        fill_l3_csum(&mut f, &h);
        fill_l4_csum(&mut f, &h);
        f
    }

    #[test]
    fn a_udp_frame_parses_and_its_checksums_verify() {
        let f = udp4(b"hello", Some(0x0005));
        let h = Headers::parse(&f).unwrap();
        assert_eq!(h.vlan, Some((ethertype::VLAN, 5)));
        assert_eq!(h.ethertype, ethertype::IPV4);
        assert_eq!(h.l3, 18);
        let ip = h.ip.clone().unwrap();
        assert_eq!((ip.version, ip.proto, ip.frag), (4, ip_proto::UDP, false));
        assert_eq!(&ip.dst[12..], &[10, 0, 0, 2]);
        let l4 = h.l4.unwrap();
        assert_eq!((l4.sport, l4.dport), (1234, 7));
        assert!(l3_ok(&f, &h) && l4_ok(&f, &h));
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(
            !l4_ok(&bad, &h),
            "a flipped payload bit breaks the UDP checksum"
        );
        bad[18 + 8] ^= 1;
        assert!(
            !l3_ok(&bad, &h),
            "a flipped TTL bit breaks the IPv4 checksum"
        );
    }

    #[test]
    fn runts_and_non_ip_frames() {
        assert!(Headers::parse(&[0u8; 13]).is_none());
        let mut arp = vec![0xffu8; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        let h = Headers::parse(&arp).unwrap();
        assert!(h.multicast());
        assert_eq!(
            (h.ethertype, h.ip.is_none(), h.l4.is_none()),
            (0x0806, true, true)
        );
    }

    /// Frames of random bytes (often with an IPv4/IPv6 ethertype, a VLAN tag, TCP or UDP, and
    /// lengths that cut headers short) through everything the NIC reads from a frame: no
    /// panic, no read past the frame.
    #[test]
    fn random_frames_are_parsed_without_panicking() {
        let mut r = crate::rng::Rng(0x5eed_f00d);
        for _ in 0..20_000 {
            let len = r.below(120) as usize;
            let mut f: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            if len > 14 && r.below(2) == 0 {
                let (ty, at) = if r.below(3) == 0 && len > 18 {
                    f[12..14].copy_from_slice(&[0x81, 0x00]);
                    (
                        [0x86, 0xdd, 0x08, 0x00][r.below(2) as usize * 2..][..2].to_vec(),
                        16,
                    )
                } else {
                    (
                        [0x08, 0x00, 0x86, 0xdd][r.below(2) as usize * 2..][..2].to_vec(),
                        12,
                    )
                };
                f[at..at + 2].copy_from_slice(&ty);
                if len > at + 3 {
                    f[at + 2] = if ty[0] == 0x08 { 0x45 } else { 0x60 };
                }
                if len > at + 11 {
                    f[at + 11] = [6, 17][r.below(2) as usize];
                }
            }
            let Some(h) = Headers::parse(&f) else {
                assert!(len < 14);
                continue;
            };
            let _ = crate::eth::steering::match_param(&h);
            let _ = (l3_ok(&f, &h), l4_ok(&f, &h));
            let key = [0x5a; 40];
            for fields in [0, 3, 15] {
                let _ = crate::eth::rss::hash(
                    &h,
                    2,
                    &key,
                    h.ip.as_ref().is_some_and(|i| i.version == 6),
                    true,
                    fields,
                );
            }
            let mut g = f.clone();
            fill_l3_csum(&mut g, &h);
            fill_l4_csum(&mut g, &h);
            assert_eq!(g.len(), f.len());
        }
    }
}
