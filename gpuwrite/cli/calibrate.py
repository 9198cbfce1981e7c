"""``gpuwrite calibrate``: measure this GPU and write a parameter file the model reads.

Doorbell ping-pong, dependent-read round trip to host memory, bulk store and load
bandwidth to host memory, copy-engine bandwidth; the file (TOML) holds the device, the
date, the driver, every measurement with its unit and runs, and ``[params]``, which
``Params.with_calibration(file)`` and ``gpuwrite model --calibration FILE`` apply.
"""
from __future__ import annotations

from pathlib import Path

from gpuwrite.calibfiles import free_name
from gpuwrite.cli import NoGPUError, UsageError
from gpuwrite.cli.common import add_json_flag, check_range, check_writable, console, print_json, status, table

DEFAULT_DIR = Path("experiments") / "calibration"
MAX_RUNS = 1000     # runs per measurement; the default is 5


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this GPU and write a model parameter file (TOML)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--out", help="file to write (default experiments/calibration/<device>-<date>.toml)")
    p.add_argument("--runs", type=int, default=5, help=f"runs per measurement, 1 to {MAX_RUNS}; the file keeps the "
                   "median (default 5)")
    p.add_argument("--quick", action="store_true", help="smaller transfers (64 MiB) and fewer round trips")
    p.add_argument("--allow-simulator", action="store_true",
                   help="run on the CUDA simulator anyway; the file is labelled simulator (timings meaningless)")
    add_json_flag(p)
    p.set_defaults(func=main)


def main(args) -> int:
    from gpuwrite.cudaenv import SIMULATOR, world

    # bad input first, as every command does, then the GPU
    check_range("--runs", args.runs, 1, MAX_RUNS)
    if args.out is not None and not args.out.strip():
        raise UsageError(f"--out={args.out!r} is not allowed; allowed: a file path this user can write "
                         f"(or no --out: {DEFAULT_DIR}/<device>-<date>.toml)", value=args.out,
                         allowed="a writable path")
    if args.out is not None and not args.out.strip().lower().endswith(".toml"):
        # the file is TOML whatever its name; one named .json would be read as JSON
        raise UsageError(f"--out={args.out!r} is not allowed; allowed: a file ending in .toml "
                         "(calibrate writes TOML, which the model and every command read)",
                         value=args.out, allowed="a path ending in .toml")
    # an --out that cannot be written is bad input too: status 2 before the GPU's 3
    out = check_writable(args.out, "--out") if args.out is not None else None
    if SIMULATOR and not args.allow_simulator:
        raise NoGPUError("calibrate measures a real GPU and none was found (NUMBA_ENABLE_CUDASIM=1); the "
                         "simulator's timings are Python's. Run it on a GPU machine, or pass "
                         "--allow-simulator for a file labelled simulator (to check the format)",
                         value="NUMBA_ENABLE_CUDASIM=1", allowed="a CUDA GPU, or --allow-simulator")
    from gpuwrite.bench import calib
    from gpuwrite.model.params import Params

    with status("calibrating") as spinner:     # on stderr: stdout keeps --json's document
        data = calib.calibrate(args.runs, args.quick,
                               progress=lambda message: spinner.update(message))
    if out is None:
        try:
            out = free_name(DEFAULT_DIR / calib.default_file_name(data))
        except FileExistsError as exc:
            raise UsageError(str(exc), value=str(DEFAULT_DIR), allowed="--out FILE") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(calib.to_toml(data))
    Params().with_calibration(out)  # the model accepts what was written
    if args.json:
        print_json({"file": str(out), "world": world(), **data})
        return 0
    console.print(f"[bold]gpuwrite calibrate[/bold] on {world()}")
    rows = [[name, m["value"], m["unit"], ", ".join(f"{v:g}" for v in m["runs"])]
            for name, m in data["measurements"].items()]
    console.print(table("measurements (median of runs)", ["what", "median", "unit", "runs"], rows))
    for key, how in data["derivation"].items():
        section, name = key.split(".", 1)
        console.print(f"  {key} = {data['params'][section][name]}  ({how})")
    if SIMULATOR:
        console.print("[yellow]simulator: every timing above is meaningless; the file is labelled so[/yellow]")
    console.print(f"wrote {out}")
    return 0
