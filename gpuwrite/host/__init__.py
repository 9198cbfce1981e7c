"""Host verbs of gpuwrite: context, protection domain, memory regions, queue sets."""
from gpuwrite.host.verbs import (Context, LinkConfig, MemoryRegion, ProtectionDomain, QueueSet,
                                 VerbsError)

__all__ = ["Context", "LinkConfig", "MemoryRegion", "ProtectionDomain", "QueueSet", "VerbsError"]
