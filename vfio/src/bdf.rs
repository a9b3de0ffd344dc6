//! PCI addresses (`domain:bus:device.function`), validated before they become sysfs paths or
//! the name passed to `VFIO_GROUP_GET_DEVICE_FD`.

use std::fmt;
use std::str::FromStr;

use crate::error::VfioError;

/// A PCI function address. Displays as sysfs and VFIO spell it: `0000:01:00.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl Bdf {
    /// The address `domain:bus:device.function`, or `None` when `device > 0x1f` or
    /// `function > 7`.
    pub const fn new(domain: u32, bus: u8, device: u8, function: u8) -> Option<Bdf> {
        if device > 0x1f || function > 7 {
            return None;
        }
        Some(Bdf {
            domain,
            bus,
            device,
            function,
        })
    }

    /// PCI domain (segment).
    pub const fn domain(self) -> u32 {
        self.domain
    }

    /// Bus number.
    pub const fn bus(self) -> u8 {
        self.bus
    }

    /// Device number (0..=0x1f).
    pub const fn device(self) -> u8 {
        self.device
    }

    /// Function number (0..=7).
    pub const fn function(self) -> u8 {
        self.function
    }
}

fn hex(s: &str, min: usize, max: usize) -> Option<u32> {
    if s.len() < min || s.len() > max || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

fn parse(s: &str) -> Option<Bdf> {
    let (head, devfn) = s.rsplit_once(':')?;
    let (domain, bus) = match head.split_once(':') {
        Some((d, b)) => (hex(d, 4, 8)?, b),
        None => (0, head),
    };
    let (dev, func) = devfn.split_once('.')?;
    Bdf::new(
        domain,
        u8::try_from(hex(bus, 2, 2)?).ok()?,
        u8::try_from(hex(dev, 2, 2)?).ok()?,
        u8::try_from(hex(func, 1, 1)?).ok()?,
    )
}

impl FromStr for Bdf {
    type Err = VfioError;

    /// Parses `dddd:bb:dd.f` (domain of 4 to 8 hex digits) or `bb:dd.f` (domain 0).
    fn from_str(s: &str) -> Result<Bdf, VfioError> {
        parse(s.trim()).ok_or_else(|| VfioError::BadBdf {
            input: s.to_owned(),
        })
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sysfs_names_and_prints_them_back() {
        let b: Bdf = "0000:01:00.0".parse().unwrap();
        assert_eq!(b, Bdf::new(0, 1, 0, 0).unwrap());
        assert_eq!(b.to_string(), "0000:01:00.0");
        assert_eq!(
            "3b:1F.7".parse::<Bdf>().unwrap().to_string(),
            "0000:3b:1f.7"
        );
        assert_eq!(
            "10000:e1:00.1".parse::<Bdf>().unwrap().to_string(),
            "10000:e1:00.1"
        );
    }

    #[test]
    fn rejects_what_is_not_an_address() {
        for bad in [
            "",
            "0000:01:00",
            "0000:01:20.0",
            "0000:01:00.8",
            "000:01:00.0",
            "0000:1:00.0",
            "../../x:00.0",
            "0000:01:+0.0",
            "0000:01:00.0/..",
        ] {
            assert!(
                matches!(bad.parse::<Bdf>(), Err(VfioError::BadBdf { .. })),
                "{bad:?} accepted"
            );
        }
    }
}
