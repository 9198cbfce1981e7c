"""Applications built on the put/signal/quiet device API (gpuwrite.device.api).

* ``alltoall``: an all-to-all among N ranks emulated in one process, as an MoE dispatch.
* ``pipeline``: a producer kernel put_signals tiles, a consumer kernel polls the signals.
* ``bench``: put + quiet against ``send_messages``, and the all-to-all per path, as JSON.

Each is a module with a ``main`` (``python3 -m experiments.apps.alltoall --help``).
"""
