"""gpuwrite: prototype and evaluate GPU-initiated DMA writes into RDMA NICs.

Constants every part shares live here, so each is stated once.
"""

# The longest message any command or experiment accepts: InfiniBand's limit on one
# message's length, 2^31 bytes (IBTA specification vol. 1, 9.4.1). Sizes beyond it would
# make the model walk billions of TLPs and the demo allocate beyond any NIC's reach.
MAX_MESSAGE_BYTES = 1 << 31
