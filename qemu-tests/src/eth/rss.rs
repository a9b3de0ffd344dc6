//! Receive-side scaling: a TIR with an indirection table hashes the fields it selects
//! (source and destination IP, L4 ports) with Toeplitz or inverted XOR8 and picks the RQ at
//! `hash mod size` of its RQT. The hash and what was hashed go into the CQE.

use bareverbs_firmware_cmd::ifc::{rx_hash_fields as sel, rx_hash_fn};

use super::packet::{ip_proto, Headers};

/// The Toeplitz hash of `input` under `key` (the Microsoft RSS definition: for each set bit
/// of the input, most significant first, XOR in the 32 key bits starting there).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1))
    };
    let mut window: u32 = (0..32).fold(0, |w, i| (w << 1) | key_bit(i));
    let mut result = 0;
    for (n, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            window = (window << 1) | key_bit(32 + n * 8 + bit);
        }
    }
    result
}

/// `cqe.rss_hash_type`: bits 3:2 the IP type hashed (1 IPv4, 2 IPv6), bits 7:6 the L4 type
/// (1 TCP, 2 UDP).
pub fn hash_type(ipv6: bool, l4: Option<u8>) -> u8 {
    let l3 = if ipv6 { 2 } else { 1 };
    let l4 = match l4 {
        Some(ip_proto::TCP) => 1,
        Some(ip_proto::UDP) => 2,
        _ => 0,
    };
    (l4 << 6) | (l3 << 2)
}

/// The hash a TIR computes for a frame and the CQE's hash type; `None` when the frame lacks
/// the L3 (or, when ports are selected, the L4) type the TIR hashes.
pub fn hash(
    h: &Headers,
    hash_fn: u8,
    key: &[u8; 40],
    l3_ipv6: bool,
    l4_udp: bool,
    fields: u32,
) -> Option<(u32, u8)> {
    let ip = h.ip.as_ref()?;
    if (ip.version == 6) != l3_ipv6 {
        return None;
    }
    let addr = |a: &[u8; 16]| -> Vec<u8> {
        if ip.version == 4 {
            a[12..].to_vec()
        } else {
            a.to_vec()
        }
    };
    let mut input = Vec::with_capacity(36);
    if fields & sel::SRC_IP != 0 {
        input.extend(addr(&ip.src));
    }
    if fields & sel::DST_IP != 0 {
        input.extend(addr(&ip.dst));
    }
    let ports = fields & (sel::L4_SPORT | sel::L4_DPORT) != 0;
    let mut l4_hashed = None;
    if ports {
        let l4 = h.l4?;
        let want = if l4_udp { ip_proto::UDP } else { ip_proto::TCP };
        if l4.proto != want {
            return None;
        }
        if fields & sel::L4_SPORT != 0 {
            input.extend(l4.sport.to_be_bytes());
        }
        if fields & sel::L4_DPORT != 0 {
            input.extend(l4.dport.to_be_bytes());
        }
        l4_hashed = Some(l4.proto);
    }
    let value = match hash_fn {
        rx_hash_fn::TOEPLITZ => toeplitz(key, &input),
        rx_hash_fn::INVERTED_XOR8 => u32::from(!input.iter().fold(0u8, |a, b| a ^ b)),
        _ => 0,
    };
    Some((value, hash_type(l3_ipv6, l4_hashed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verification key and vectors of Microsoft's "Verifying the RSS Hash Calculation".
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    #[test]
    fn toeplitz_matches_the_published_ipv4_vectors() {
        // 66.9.149.187:2794 → 161.142.100.80:1766: IPv4 only 0x323e8fc2, with TCP 0x51ccc178.
        let ips = [66u8, 9, 149, 187, 161, 142, 100, 80];
        assert_eq!(toeplitz(&MS_KEY, &ips), 0x323e_8fc2);
        let mut tcp = ips.to_vec();
        tcp.extend(2794u16.to_be_bytes());
        tcp.extend(1766u16.to_be_bytes());
        assert_eq!(toeplitz(&MS_KEY, &tcp), 0x51cc_c178);
        // 199.92.111.2:14230 → 65.69.140.83:4739.
        let mut t2 = vec![199u8, 92, 111, 2, 65, 69, 140, 83];
        assert_eq!(toeplitz(&MS_KEY, &t2), 0xd718_262a);
        t2.extend(14230u16.to_be_bytes());
        t2.extend(4739u16.to_be_bytes());
        assert_eq!(toeplitz(&MS_KEY, &t2), 0xc626_b0ea);
    }

    #[test]
    fn the_tir_hashes_only_frames_of_its_types() {
        let f = crate::eth::packet::tests::udp4(b"x", None);
        let h = Headers::parse(&f).unwrap();
        let all = sel::SRC_IP | sel::DST_IP | sel::L4_SPORT | sel::L4_DPORT;
        let (v, ty) = hash(&h, rx_hash_fn::TOEPLITZ, &MS_KEY, false, true, all).unwrap();
        let mut input = vec![10u8, 0, 0, 1, 10, 0, 0, 2];
        input.extend(1234u16.to_be_bytes());
        input.extend(7u16.to_be_bytes());
        assert_eq!(v, toeplitz(&MS_KEY, &input));
        assert_eq!(ty, (2 << 6) | (1 << 2));
        assert!(hash(&h, rx_hash_fn::TOEPLITZ, &MS_KEY, false, false, all).is_none());
        assert!(hash(&h, rx_hash_fn::TOEPLITZ, &MS_KEY, true, true, all).is_none());
        let ip_only = sel::SRC_IP | sel::DST_IP;
        let (v, ty) = hash(&h, rx_hash_fn::TOEPLITZ, &MS_KEY, false, false, ip_only).unwrap();
        assert_eq!(v, toeplitz(&MS_KEY, &input[..8]));
        assert_eq!(ty, 1 << 2);
    }
}
