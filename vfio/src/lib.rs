//! bareverbs-vfio: the Linux VFIO backend (container/group/device, BAR0 mmap, a hugepage DMA
//! arena mapped with `VFIO_IOMMU_MAP_DMA`, MSI-X eventfds, a bind/unbind helper).
//!
//! Not implemented yet: this package reserves its place in the workspace. Until it lands, the
//! driver runs against the in-process model (`bareverbs_model::SimHal`); see the README.
//! Nothing here pretends to work.
