"""What rate_sticky.py and rate_power.py share: the put bench's 64-byte rate kernel
(256 QPs of one warp, a doorbell every 16 messages), launched again and again on one
session's rings and buffers."""
import numpy as np
from experiments.apps import bench, common
from gpuwrite.cudaenv import cuda
from gpuwrite.device import api


class RateLaunches:
    def __init__(self, s: api.Session, n_qps: int, per_qp: int):
        self.s, self.n_qps, self.n = s, n_qps, n_qps * per_qp
        self.payload, self.src, smr, self.dst, dmr = bench._buffers(s, self.n, 64)
        self.t_first = cuda.to_device(np.zeros(n_qps, dtype=np.int64))
        self.t_last = cuda.to_device(np.zeros(n_qps, dtype=np.int64))
        self.status = cuda.to_device(np.full(n_qps, 99, dtype=np.int64))
        s.start()
        self.prm = bench._prm(dmr, smr, 64, per_qp, 16)

    def launch(self) -> dict:
        """One launch: its rate (M/s), whether every QP ended OK and every byte arrived."""
        s = self.s
        bench.put_stream_kernel(api.PATH_IDS["gpu_push"], True)[self.n_qps, 32](
            s.Q, s.cfg, self.src, self.prm, self.t_first, self.t_last, self.status)
        common.sync()
        span = int(self.t_last.copy_to_host().max() - self.t_first.copy_to_host().min())
        return dict(mpps=round(self.n / span * 1e3, 1),
                    ok=bool((self.status.copy_to_host() == 0).all()),
                    delivered=bench._delivered(self.payload, self.dst, self.n))
