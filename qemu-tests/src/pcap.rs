//! Captures of what crosses the model's fabric, in the pcap format: each InfiniBand packet
//! (`ib_wire.rs`) as an ERF record of type 21 (InfiniBand) in a file of link type 197
//! (LINKTYPE_ERF), which is how Mellanox's `ibdump` writes captures and what Wireshark and
//! `tshark` dissect as InfiniBand (LRH, BTH, the extended headers). `tcpdump -r` reads the
//! file too (it prints ERF records without decoding InfiniBand). An Ethernet fabric's
//! capture is a plain Ethernet pcap (link type 1) that `tcpdump -r` and Wireshark decode:
//! the link type is that of the first packet (the header is written then).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// LINKTYPE_ERF.
const LINKTYPE_ERF: u32 = 197;
/// ERF record type InfiniBand.
const ERF_TYPE_INFINIBAND: u8 = 21;
/// LINKTYPE_ETHERNET.
const LINKTYPE_ETHERNET: u32 = 1;
/// ERF record type Ethernet (two bytes of offset and padding before the frame).
const ERF_TYPE_ETH: u8 = 2;

/// A pcap file being written.
pub struct Capture {
    out: BufWriter<File>,
    packets: u64,
    /// The file's link type, once its header is written.
    link: Option<u32>,
}

impl Capture {
    /// Creates `path` (truncating it); the pcap header follows with the first packet.
    ///
    /// # Errors
    /// The file's.
    pub fn create(path: &Path) -> io::Result<Self> {
        let out = BufWriter::new(File::create(path)?);
        Ok(Capture {
            out,
            packets: 0,
            link: None,
        })
    }

    /// Writes the pcap header for `link` unless one is written; returns the file's link type.
    fn header(&mut self, link: u32) -> io::Result<u32> {
        if let Some(l) = self.link {
            return Ok(l);
        }
        // Magic (microsecond timestamps), version 2.4, zone 0, sigfigs 0, snaplen, link type.
        self.out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        self.out.write_all(&2u16.to_le_bytes())?;
        self.out.write_all(&4u16.to_le_bytes())?;
        self.out.write_all(&0i32.to_le_bytes())?;
        self.out.write_all(&0u32.to_le_bytes())?;
        self.out.write_all(&262_144u32.to_le_bytes())?;
        self.out.write_all(&link.to_le_bytes())?;
        self.link = Some(link);
        Ok(link)
    }

    /// Appends one Ethernet frame (FCS excluded), stamped now: a plain record in an Ethernet
    /// capture, an ERF Ethernet record in an InfiniBand one.
    ///
    /// # Errors
    /// The file's.
    pub fn write_eth(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.header(LINKTYPE_ETHERNET)? == LINKTYPE_ERF {
            let mut rec = vec![0u8, 0u8];
            rec.extend_from_slice(frame);
            return self.write_erf(ERF_TYPE_ETH, &rec, frame.len());
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.out.write_all(&(now.as_secs() as u32).to_le_bytes())?;
        self.out.write_all(&now.subsec_micros().to_le_bytes())?;
        self.out.write_all(&(frame.len() as u32).to_le_bytes())?;
        self.out.write_all(&(frame.len() as u32).to_le_bytes())?;
        self.out.write_all(frame)?;
        self.packets += 1;
        Ok(())
    }

    /// Appends one InfiniBand packet (from its LRH through its VCRC), stamped now.
    ///
    /// # Errors
    /// The file's.
    pub fn write_ib(&mut self, pkt: &[u8]) -> io::Result<()> {
        if self.header(LINKTYPE_ERF)? != LINKTYPE_ERF {
            return Err(io::Error::other(
                "an InfiniBand packet in an Ethernet capture",
            ));
        }
        self.write_erf(ERF_TYPE_INFINIBAND, pkt, pkt.len())
    }

    /// One ERF record of `ty` carrying `body`, `wire` bytes on the wire.
    fn write_erf(&mut self, ty: u8, body: &[u8], wire: usize) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (sec, usec) = (now.as_secs(), now.subsec_micros());
        let rlen = 16 + body.len();
        // pcap record header.
        self.out.write_all(&(sec as u32).to_le_bytes())?;
        self.out.write_all(&usec.to_le_bytes())?;
        self.out.write_all(&(rlen as u32).to_le_bytes())?;
        self.out.write_all(&(rlen as u32).to_le_bytes())?;
        // ERF header: timestamp (little-endian 32.32 fixed point), type, flags (varying
        // record length, interface 0), record length, loss counter, wire length.
        let frac = (u64::from(now.subsec_nanos()) << 32) / 1_000_000_000;
        self.out.write_all(&((sec << 32) | frac).to_le_bytes())?;
        self.out.write_all(&[ty, 0x04])?;
        self.out.write_all(&(rlen as u16).to_be_bytes())?;
        self.out.write_all(&0u16.to_be_bytes())?;
        self.out.write_all(&(wire as u16).to_be_bytes())?;
        self.out.write_all(body)?;
        self.packets += 1;
        Ok(())
    }

    /// Packets written.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Writes out what is buffered.
    ///
    /// # Errors
    /// The file's.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes; a capture that saw no packet still gets a header (ERF).
    ///
    /// # Errors
    /// The file's.
    pub fn finish(&mut self) -> io::Result<()> {
        self.header(LINKTYPE_ERF)?;
        self.out.flush()
    }
}
