"""dm.py's ctypes mirrors of mlx5dv.h structures against the installed header."""
import ctypes

from gpuwrite.backends.testbed import dm
from tbref import compile_reference

SOURCE = r"""
#include <infiniband/mlx5dv.h>
#include <stddef.h>
size_t ref_layout(int which) {
    switch (which) {
    case 0: return sizeof(struct mlx5dv_obj);
    case 1: return offsetof(struct mlx5dv_obj, dm.in);
    case 2: return offsetof(struct mlx5dv_obj, dm.out);
    case 3: return sizeof(struct mlx5dv_dm);
    case 4: return offsetof(struct mlx5dv_dm, buf);
    case 5: return offsetof(struct mlx5dv_dm, length);
    case 6: return offsetof(struct mlx5dv_dm, remote_va);
    case 7: return MLX5DV_OBJ_DM;
    }
    return (size_t)-1;
}
"""


def test_ctypes_structures_match_mlx5dv_h():
    ref = compile_reference("_gw_ref_dm", "size_t ref_layout(int which);", SOURCE)
    ours = [ctypes.sizeof(dm.Mlx5dvObj), dm.Mlx5dvObj.dm.offset, dm.Mlx5dvObj.dm.offset + dm._InOut.out.offset,
            ctypes.sizeof(dm.Mlx5dvDm), dm.Mlx5dvDm.buf.offset, dm.Mlx5dvDm.length.offset,
            dm.Mlx5dvDm.remote_va.offset, dm.MLX5DV_OBJ_DM]
    assert ours == [ref.lib.ref_layout(k) for k in range(8)]
