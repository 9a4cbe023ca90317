"""ragged: dispatch-aware ragged attention for token-pruned Vision Transformers."""

from .attention import (
    BACKENDS,
    BackendUnavailableError,
    available_backends,
    backend_implementation,
    varlen_attention,
)
from .layout_attention import LayoutAttention
from .packing import FixedPack, gather_cls, pack, pack_fixed, unpack

__all__ = [
    "BACKENDS",
    "BackendUnavailableError",
    "FixedPack",
    "LayoutAttention",
    "available_backends",
    "backend_implementation",
    "gather_cls",
    "pack",
    "pack_fixed",
    "unpack",
    "varlen_attention",
]
__version__ = "0.1.0"
