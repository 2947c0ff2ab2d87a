"""Thunder transforms shipped by thunder-ext (installed as ``thunder_ext.transforms``)."""

from thunder_ext.transforms.inplace_barrier import InplaceBarrierTransform

__all__ = ["InplaceBarrierTransform"]
