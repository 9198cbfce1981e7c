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


AH_SOURCE = r"""
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <stddef.h>
size_t ref_ah_layout(int which) {
    switch (which) {
    case 0: return sizeof(struct ibv_ah_attr);
    case 1: return offsetof(struct ibv_ah_attr, dlid);
    case 2: return offsetof(struct ibv_ah_attr, is_global);
    case 3: return offsetof(struct ibv_ah_attr, port_num);
    case 4: return offsetof(struct ibv_global_route, flow_label);
    case 5: return offsetof(struct ibv_global_route, sgid_index);
    case 6: return offsetof(struct ibv_global_route, hop_limit);
    case 7: return sizeof(struct ibv_global_route);
    case 8: return sizeof(struct mlx5dv_ah);
    case 9: return offsetof(struct mlx5_wqe_av, rmac);
    case 10: return offsetof(struct mlx5dv_obj, ah.in);
    case 11: return offsetof(struct mlx5dv_obj, ah.out);
    case 12: return MLX5DV_OBJ_AH;
    }
    return (size_t)-1;
}
"""


def test_address_handle_structures_match_verbs_h_and_mlx5dv_h():
    from gpuwrite.backends.testbed import ah

    ref = compile_reference("_gw_ref_ah", "size_t ref_ah_layout(int which);", AH_SOURCE)
    ours = [ctypes.sizeof(ah.IbvAhAttr), ah.IbvAhAttr.dlid.offset, ah.IbvAhAttr.is_global.offset,
            ah.IbvAhAttr.port_num.offset, ah.IbvGlobalRoute.flow_label.offset,
            ah.IbvGlobalRoute.sgid_index.offset, ah.IbvGlobalRoute.hop_limit.offset,
            ctypes.sizeof(ah.IbvGlobalRoute), ctypes.sizeof(ah.Mlx5dvAh), ah.MLX5_WQE_AV_RMAC_OFFSET,
            dm.Mlx5dvObj.ah.offset, dm.Mlx5dvObj.ah.offset + dm._InOut.out.offset, ah.MLX5DV_OBJ_AH]
    assert ours == [ref.lib.ref_ah_layout(k) for k in range(13)]


MR_SOURCE = r"""
#include <infiniband/verbs.h>
#include <stddef.h>
size_t ref_mr_layout(int which) {
    switch (which) {
    case 0: return sizeof(struct ibv_mr);
    case 1: return offsetof(struct ibv_mr, addr);
    case 2: return offsetof(struct ibv_mr, length);
    case 3: return offsetof(struct ibv_mr, handle);
    case 4: return offsetof(struct ibv_mr, lkey);
    case 5: return offsetof(struct ibv_mr, rkey);
    }
    return (size_t)-1;
}
"""


def test_dmabuf_mr_structure_matches_verbs_h():
    from gpuwrite.backends.testbed.dmabuf_mr import IbvMr

    ref = compile_reference("_gw_ref_mr", "size_t ref_mr_layout(int which);", MR_SOURCE)
    ours = [ctypes.sizeof(IbvMr), IbvMr.addr.offset, IbvMr.length.offset, IbvMr.handle.offset,
            IbvMr.lkey.offset, IbvMr.rkey.offset]
    assert ours == [ref.lib.ref_mr_layout(k) for k in range(6)]
