//! Captures of what crosses the model's fabric, in the pcap format: each InfiniBand packet
//! (`ib_wire.rs`) as an ERF record of type 21 (InfiniBand) in a file of link type 197
//! (LINKTYPE_ERF), which is how Mellanox's `ibdump` writes captures and what Wireshark and
//! `tshark` dissect as InfiniBand (LRH, BTH, the extended headers). `tcpdump -r` reads the
//! file too (it prints ERF records without decoding InfiniBand).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// LINKTYPE_ERF.
const LINKTYPE_ERF: u32 = 197;
/// ERF record type InfiniBand.
const ERF_TYPE_INFINIBAND: u8 = 21;

/// A pcap file being written.
pub struct Capture {
    out: BufWriter<File>,
    packets: u64,
}

impl Capture {
    /// Creates `path` (truncating it) and writes the pcap header.
    ///
    /// # Errors
    /// The file's.
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        // Magic (microsecond timestamps), version 2.4, zone 0, sigfigs 0, snaplen, link type.
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&262_144u32.to_le_bytes())?;
        out.write_all(&LINKTYPE_ERF.to_le_bytes())?;
        Ok(Capture { out, packets: 0 })
    }

    /// Appends one InfiniBand packet (from its LRH through its VCRC), stamped now.
    ///
    /// # Errors
    /// The file's.
    pub fn write_ib(&mut self, pkt: &[u8]) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (sec, usec) = (now.as_secs(), now.subsec_micros());
        let rlen = 16 + pkt.len();
        // pcap record header.
        self.out.write_all(&(sec as u32).to_le_bytes())?;
        self.out.write_all(&usec.to_le_bytes())?;
        self.out.write_all(&(rlen as u32).to_le_bytes())?;
        self.out.write_all(&(rlen as u32).to_le_bytes())?;
        // ERF header: timestamp (little-endian 32.32 fixed point), type, flags (varying
        // record length, interface 0), record length, loss counter, wire length.
        let frac = (u64::from(now.subsec_nanos()) << 32) / 1_000_000_000;
        self.out.write_all(&((sec << 32) | frac).to_le_bytes())?;
        self.out.write_all(&[ERF_TYPE_INFINIBAND, 0x04])?;
        self.out.write_all(&(rlen as u16).to_be_bytes())?;
        self.out.write_all(&0u16.to_be_bytes())?;
        self.out.write_all(&(pkt.len() as u16).to_be_bytes())?;
        self.out.write_all(pkt)?;
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
}
