//! Binding a PCI function to vfio-pci and back, the way driverctl does it: `driver_override`,
//! unbind from the current driver, `drivers_probe` (Documentation/ABI/testing/sysfs-bus-pci).
//!
//! Everything here needs root. Unbinding a function that a process still holds through VFIO
//! blocks in the kernel until that process lets go.

use std::fmt;
use std::io;

use crate::bdf::Bdf;
use crate::error::VfioError;
use crate::sys;
use crate::sysfs::{self, DRIVERS_PROBE, VFIO_PCI_DRIVER};

/// What sysfs says about a PCI function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    /// The function.
    pub bdf: Bdf,
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// The driver it is bound to, if any.
    pub driver: Option<String>,
    /// The driver forced by `driver_override`, if set.
    pub driver_override: Option<String>,
    /// Its IOMMU group, if the IOMMU is on.
    pub iommu_group: Option<u32>,
}

impl fmt::Display for DeviceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device:          {} [{:04x}:{:04x}]",
            self.bdf, self.vendor, self.device
        )?;
        writeln!(
            f,
            "driver:          {}",
            self.driver.as_deref().unwrap_or("(none)")
        )?;
        writeln!(
            f,
            "driver_override: {}",
            self.driver_override.as_deref().unwrap_or("(none)")
        )?;
        match self.iommu_group {
            Some(g) => write!(f, "iommu group:     {g} (/dev/vfio/{g})"),
            None => write!(f, "iommu group:     (none: the IOMMU is off)"),
        }
    }
}

/// What [`bind`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// The function was already bound to vfio-pci; nothing was changed.
    AlreadyBound,
    /// The function is now bound to vfio-pci.
    Bound {
        /// The driver it was bound to before, if any.
        previous: Option<String>,
    },
}

/// Reads a function's driver, `driver_override`, IOMMU group and IDs.
///
/// # Errors
/// [`VfioError::DeviceNotFound`] when it does not exist; [`VfioError::Sysfs`] or
/// [`VfioError::PermissionDenied`] when an attribute cannot be read.
pub fn status(bdf: Bdf) -> Result<DeviceStatus, VfioError> {
    sysfs::check_exists(bdf)?;
    let iommu_group = match sysfs::iommu_group(bdf) {
        Ok(g) => Some(g),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(VfioError::sysfs(
                sysfs::device_dir(bdf).join("iommu_group"),
                e,
            ))
        }
    };
    Ok(DeviceStatus {
        bdf,
        vendor: sysfs::read_id(bdf, "vendor")?,
        device: sysfs::read_id(bdf, "device")?,
        driver: sysfs::driver(bdf)?,
        driver_override: sysfs::driver_override(bdf)?,
        iommu_group,
    })
}

/// Binds a function to vfio-pci: sets `driver_override`, unbinds the current driver, and asks
/// the kernel to probe it again.
///
/// # Errors
/// [`VfioError::NoIommuGroup`] (vfio-pci would refuse it), [`VfioError::VfioMissing`] when
/// vfio-pci is not loaded, [`VfioError::PermissionDenied`] when not root,
/// [`VfioError::BindFailed`] when the function ends up elsewhere.
pub fn bind(bdf: Bdf) -> Result<BindOutcome, VfioError> {
    sysfs::check_exists(bdf)?;
    let previous = sysfs::driver(bdf)?;
    if previous.as_deref().is_some_and(sysfs::is_vfio_pci) {
        return Ok(BindOutcome::AlreadyBound);
    }
    sysfs::iommu_group(bdf).map_err(|source| VfioError::NoIommuGroup { bdf, source })?;
    let driver_dir = std::path::Path::new(VFIO_PCI_DRIVER);
    if !sys::path_exists(driver_dir).map_err(|e| VfioError::sysfs(driver_dir, e))? {
        return Err(VfioError::VfioMissing {
            path: driver_dir.into(),
            source: io::ErrorKind::NotFound.into(),
        });
    }
    let dir = sysfs::device_dir(bdf);
    sysfs::write(&dir.join("driver_override"), "vfio-pci")?;
    if previous.is_some() {
        sysfs::write(&dir.join("driver/unbind"), &bdf.to_string())?;
    }
    sysfs::write(DRIVERS_PROBE.as_ref(), &bdf.to_string())?;
    match sysfs::driver(bdf)? {
        Some(d) if sysfs::is_vfio_pci(&d) => Ok(BindOutcome::Bound { previous }),
        driver => Err(VfioError::BindFailed { bdf, driver }),
    }
}

/// Gives a function back to its default driver: clears `driver_override`, unbinds, and
/// probes again. Returns the driver it ends up with, if any.
///
/// # Errors
/// [`VfioError::DeviceNotFound`], [`VfioError::PermissionDenied`] when not root,
/// [`VfioError::Sysfs`] when a write fails.
pub fn unbind(bdf: Bdf) -> Result<Option<String>, VfioError> {
    sysfs::check_exists(bdf)?;
    let dir = sysfs::device_dir(bdf);
    sysfs::write(&dir.join("driver_override"), "\n")?;
    if sysfs::driver(bdf)?.is_some() {
        sysfs::write(&dir.join("driver/unbind"), &bdf.to_string())?;
    }
    sysfs::write(DRIVERS_PROBE.as_ref(), &bdf.to_string())?;
    sysfs::driver(bdf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::{self, BDF};

    fn bdf() -> Bdf {
        BDF.parse().unwrap()
    }

    fn writes() -> Vec<String> {
        fake::calls()
            .into_iter()
            .filter(|c| c.starts_with("write"))
            .collect()
    }

    #[test]
    fn bind_overrides_unbinds_and_reprobes() {
        fake::reset();
        fake::with(|f| f.set_driver(BDF, Some("mlx5_core")));
        assert_eq!(
            bind(bdf()).unwrap(),
            BindOutcome::Bound {
                previous: Some("mlx5_core".into())
            }
        );
        assert_eq!(
            writes(),
            [
                r#"write /sys/bus/pci/devices/0000:01:00.0/driver_override "vfio-pci""#,
                r#"write /sys/bus/pci/devices/0000:01:00.0/driver/unbind "0000:01:00.0""#,
                r#"write /sys/bus/pci/drivers_probe "0000:01:00.0""#,
            ]
        );
        fake::clear_calls();
        assert_eq!(bind(bdf()).unwrap(), BindOutcome::AlreadyBound);
        assert!(writes().is_empty());
    }

    #[test]
    fn unbind_clears_the_override_and_reprobes() {
        fake::reset();
        fake::with(|f| f.set_driver(BDF, Some("mlx5_core")));
        bind(bdf()).unwrap();
        assert_eq!(
            status(bdf()).unwrap().driver_override.as_deref(),
            Some("vfio-pci")
        );
        fake::clear_calls();
        assert_eq!(unbind(bdf()).unwrap().as_deref(), Some("mlx5_core"));
        assert_eq!(
            writes(),
            [
                r#"write /sys/bus/pci/devices/0000:01:00.0/driver_override "\n""#,
                r#"write /sys/bus/pci/devices/0000:01:00.0/driver/unbind "0000:01:00.0""#,
                r#"write /sys/bus/pci/drivers_probe "0000:01:00.0""#,
            ]
        );
        assert_eq!(status(bdf()).unwrap().driver_override, None);
    }

    #[test]
    fn status_reports_driver_group_and_ids() {
        fake::reset();
        let s = status(bdf()).unwrap();
        assert_eq!(
            s,
            DeviceStatus {
                bdf: bdf(),
                vendor: 0x15b3,
                device: 0x1017,
                driver: Some("vfio-pci".into()),
                driver_override: None,
                iommu_group: Some(3),
            }
        );
        assert!(s.to_string().contains("/dev/vfio/3"));
        fake::with(|f| {
            f.links.remove(std::path::Path::new(
                "/sys/bus/pci/devices/0000:01:00.0/iommu_group",
            ));
            f.set_driver(BDF, None);
        });
        let s = status(bdf()).unwrap();
        assert_eq!((s.driver, s.iommu_group), (None, None));
    }

    #[test]
    fn bind_failures_are_named() {
        fake::reset();
        assert!(matches!(
            bind("0000:09:00.0".parse().unwrap()),
            Err(VfioError::DeviceNotFound { .. })
        ));

        fake::reset();
        fake::with(|f| {
            f.set_driver(BDF, Some("mlx5_core"));
            f.dirs.remove(std::path::Path::new(VFIO_PCI_DRIVER));
        });
        let e = bind(bdf()).unwrap_err();
        assert!(matches!(e, VfioError::VfioMissing { .. }), "{e:?}");
        assert!(writes().is_empty());

        fake::reset();
        fake::with(|f| {
            f.set_driver(BDF, Some("mlx5_core"));
            f.links.remove(std::path::Path::new(
                "/sys/bus/pci/devices/0000:01:00.0/iommu_group",
            ));
        });
        assert!(matches!(bind(bdf()), Err(VfioError::NoIommuGroup { .. })));

        fake::reset();
        fake::with(|f| f.set_driver(BDF, Some("mlx5_core")));
        fake::fail(
            "write /sys/bus/pci/devices/0000:01:00.0/driver_override",
            libc::EACCES,
        );
        let e = bind(bdf()).unwrap_err();
        assert!(matches!(e, VfioError::PermissionDenied { .. }), "{e:?}");
        assert!(e.to_string().contains("run as root"), "{e}");

        // The kernel probes another driver anyway (override ignored).
        fake::reset();
        fake::with(|f| {
            f.set_driver(BDF, Some("mlx5_core"));
            f.simulate_probe = false;
        });
        match bind(bdf()) {
            Err(VfioError::BindFailed { driver, .. }) => {
                assert_eq!(driver.as_deref(), Some("mlx5_core"))
            }
            other => panic!("{other:?}"),
        }
    }
}
