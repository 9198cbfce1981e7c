"""Two local processes exchange PeerRecords: over TCP always, under mpirun where MPI exists."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest

from gpuwrite.backends.testbed.bootstrap import (BootstrapError, PeerRecord, TcpBootstrap,
                                                 from_environment)


def record(rank: int) -> PeerRecord:
    return PeerRecord(rank=rank, host=f"host{rank}", lid=0x10 + rank,
                      gid=f"fe80:0000:0000:0000:0202:c9ff:fe00:{rank:04x}", mtu_bytes=4096,
                      qpns=(0x100 + rank, 0x200 + rank), psns=(0xABCDE0 + rank, 0x12340 + rank),
                      addr=0x7F0000000000 + rank * 4096, rkey=0x1234500 + rank, length=1 << 20,
                      extra={"dm": rank == 0})


CHILD = textwrap.dedent("""
    import json, sys
    from gpuwrite.backends.testbed.bootstrap import PeerRecord, TcpBootstrap, MpiBootstrap
    sys.path.insert(0, sys.argv[1])
    from test_bootstrap import record
    if sys.argv[2] == "mpi":
        boot = MpiBootstrap()
    else:
        boot = TcpBootstrap.connect("127.0.0.1", int(sys.argv[4]), timeout_s=30)
    with boot:
        records = boot.exchange(record(boot.rank))
        results = boot.allgather({"rank": boot.rank, "delivered": [boot.rank, 1]})
    # one file per rank: mpirun interleaves the ranks' standard output
    with open(f"{sys.argv[3]}/rank{boot.rank}.json", "w") as out:
        json.dump({"rank": boot.rank, "size": boot.size, "kind": boot.kind,
                   "records": [r.to_dict() for r in records], "results": results}, out)
""")


def child_env() -> dict:
    """The child imports the same gpuwrite as this process, from outside the checkout."""
    import gpuwrite

    here = os.path.dirname(os.path.dirname(gpuwrite.__file__))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))


def test_tcp_two_processes_exchange_records_and_results(tmp_path):
    server = TcpBootstrap.listen("127.0.0.1", 0, timeout_s=60)
    child = subprocess.Popen([sys.executable, "-c", CHILD, os.path.dirname(__file__), "tcp",
                              str(tmp_path), str(server.port)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env(),
                             cwd=tempfile.gettempdir())
    with server:
        mine = server.exchange(record(0))
        results = server.allgather({"rank": 0, "delivered": [0, 1]})
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err[-2000:]
    theirs = json.loads((tmp_path / "rank1.json").read_text())
    assert mine == [record(0), record(1)]
    assert [PeerRecord.from_dict(d) for d in theirs["records"]] == [record(0), record(1)]
    assert results == theirs["results"] == [{"rank": 0, "delivered": [0, 1]},
                                            {"rank": 1, "delivered": [1, 1]}]
    assert (theirs["rank"], theirs["size"], theirs["kind"]) == (1, 2, "tcp")


def test_mpirun_two_processes_exchange_records(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun here (Debian: openmpi-bin)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (pip install mpi4py)")
    env = dict(child_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    proc = subprocess.run([mpirun, "-n", "2", sys.executable, "-c", CHILD, os.path.dirname(__file__),
                           "mpi", str(tmp_path)], capture_output=True, text=True, env=env, timeout=180,
                          cwd=tempfile.gettempdir())
    assert proc.returncode == 0, proc.stderr[-2000:]
    outs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [o["rank"] for o in outs] == [0, 1]
    for out in outs:
        assert out["kind"] == "mpi" and out["size"] == 2
        assert [PeerRecord.from_dict(d) for d in out["records"]] == [record(0), record(1)]
        assert out["results"] == [{"rank": 0, "delivered": [0, 1]}, {"rank": 1, "delivered": [1, 1]}]


def test_connect_to_nobody_times_out_with_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # closed again: nobody listens there
    with pytest.raises(BootstrapError, match=f"rank 0 at 127.0.0.1:{port} within 0.3 s"):
        TcpBootstrap.connect("127.0.0.1", port, timeout_s=0.3)


def test_listener_without_peer_times_out():
    with TcpBootstrap.listen("127.0.0.1", 0, timeout_s=0.2) as server:
        with pytest.raises(BootstrapError, match="no peer connected"):
            server.allgather({})


def test_a_peer_that_is_not_a_bootstrap_is_named():
    with TcpBootstrap.listen("127.0.0.1", 0, timeout_s=5) as server:
        with socket.create_connection(("127.0.0.1", server.port)) as rogue:
            rogue.sendall(b"GET / HTTP/1.1\r\n\r\n")
            with pytest.raises(BootstrapError, match="announced a record of .* bytes"):
                server.allgather({})


def test_records_validate_and_environment_needs_a_peer(monkeypatch):
    with pytest.raises(ValueError, match="one PSN per QP"):
        PeerRecord(0, "h", 1, "::", 4096, (1, 2), (3,), 0, 0, 0)
    with pytest.raises(ValueError, match="mtu_bytes=1500"):
        PeerRecord(0, "h", 1, "::", 1500, (1,), (3,), 0, 0, 0)
    for name in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BootstrapError, match="run both sides under mpirun, or pass --listen"):
        from_environment()
    with pytest.raises(BootstrapError, match="is not HOST:PORT"):
        from_environment(connect="nohost")
