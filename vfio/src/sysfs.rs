//! What sysfs says about a PCI function: whether it exists, its driver, its IOMMU group and the
//! other members of that group (Documentation/ABI/testing/sysfs-bus-pci,
//! sysfs-kernel-iommu_groups).

use std::io;
use std::path::{Path, PathBuf};

use crate::bdf::Bdf;
use crate::error::{GroupMember, VfioError};
use crate::sys;

/// Where PCI functions appear.
pub(crate) const DEVICES: &str = "/sys/bus/pci/devices";
/// Write a BDF here to probe drivers for it again.
pub(crate) const DRIVERS_PROBE: &str = "/sys/bus/pci/drivers_probe";
/// Exists once the vfio-pci driver is loaded.
pub(crate) const VFIO_PCI_DRIVER: &str = "/sys/bus/pci/drivers/vfio-pci";

/// The sysfs directory of a PCI function.
pub(crate) fn device_dir(bdf: Bdf) -> PathBuf {
    Path::new(DEVICES).join(bdf.to_string())
}

/// Fails with [`VfioError::DeviceNotFound`] unless the function is in sysfs.
pub(crate) fn check_exists(bdf: Bdf) -> Result<(), VfioError> {
    let dir = device_dir(bdf);
    match sys::read_link(&dir) {
        Ok(_) => Ok(()),
        Err(source) if source.kind() == io::ErrorKind::NotFound => {
            Err(VfioError::DeviceNotFound { bdf, source })
        }
        Err(source) => Err(VfioError::sysfs(dir, source)),
    }
}

/// The last component of a link target, as a string.
fn link_name(target: &Path) -> io::Result<String> {
    target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "link without a name"))
}

/// The function's IOMMU group number (`iommu_group` link); `NotFound` when it has none.
pub(crate) fn iommu_group(bdf: Bdf) -> io::Result<u32> {
    let target = sys::read_link(&device_dir(bdf).join("iommu_group"))?;
    link_name(&target)?
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "IOMMU group is not a number"))
}

/// The driver a function (named as in sysfs) is bound to, if any.
fn driver_of(name: &str) -> io::Result<Option<String>> {
    match sys::read_link(&Path::new(DEVICES).join(name).join("driver")) {
        Ok(target) => link_name(&target).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The driver the function is bound to, if any.
pub(crate) fn driver(bdf: Bdf) -> Result<Option<String>, VfioError> {
    driver_of(&bdf.to_string())
        .map_err(|source| VfioError::sysfs(device_dir(bdf).join("driver"), source))
}

/// vfio-pci itself, or a vendor variant of it (`mlx5_vfio_pci`, `pds_vfio_pci`, …), which
/// offer the same device API.
pub(crate) fn is_vfio_pci(driver: &str) -> bool {
    driver == "vfio-pci" || driver.ends_with("_vfio_pci") || driver.ends_with("-vfio-pci")
}

/// The other functions of `group` that are bound to a host driver: what makes the group not
/// viable. Best effort: unreadable entries are skipped, since this only feeds a message.
pub(crate) fn group_blockers(group: u32, bdf: Bdf) -> Vec<GroupMember> {
    let me = bdf.to_string();
    let dir = PathBuf::from(format!("/sys/kernel/iommu_groups/{group}/devices"));
    let mut names = sys::read_dir_names(&dir).unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter(|n| *n != me)
        .filter_map(|n| match driver_of(&n) {
            Ok(Some(d)) if !is_vfio_pci(&d) => Some(GroupMember { bdf: n, driver: d }),
            _ => None,
        })
        .collect()
}

/// A hexadecimal ID attribute such as `vendor` ("0x15b3\n").
pub(crate) fn read_id(bdf: Bdf, attr: &str) -> Result<u16, VfioError> {
    let path = device_dir(bdf).join(attr);
    let text = sys::read_to_string(&path).map_err(|e| VfioError::sysfs(&path, e))?;
    let digits = text.trim().trim_start_matches("0x");
    u16::from_str_radix(digits, 16).map_err(|_| {
        VfioError::sysfs(
            &path,
            io::Error::new(io::ErrorKind::InvalidData, format!("not an ID: {text:?}")),
        )
    })
}

/// The `driver_override` attribute, `None` when unset ("(null)").
pub(crate) fn driver_override(bdf: Bdf) -> Result<Option<String>, VfioError> {
    let path = device_dir(bdf).join("driver_override");
    match sys::read_to_string(&path) {
        Ok(s) => {
            let s = s.trim();
            Ok((!s.is_empty() && s != "(null)").then(|| s.to_owned()))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(VfioError::sysfs(path, e)),
    }
}

/// Writes a sysfs attribute.
pub(crate) fn write(path: &Path, value: &str) -> Result<(), VfioError> {
    sys::write_file(path, value.as_bytes()).map_err(|e| VfioError::sysfs(path, e))
}
