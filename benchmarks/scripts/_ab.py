"""What the same-host A/B scripts of sessions 25 and 26 share: kernel variants of
send_messages for gpu_push run in turn, one message in flight, so that drift on the host
falls on every variant alike."""
import json

from gpuwrite.paths import kernels as K, runner

def block_scope(*args) -> str:
    """``kernels.kernel_scope`` for a run whose kernel an A/B script put in place of the
    block kernel (``K._BY_PATH[path]``): every table goes to it, whatever its sizes."""
    return "block"


def run_rounds(kernels: dict, plan: dict, out_path: str, rounds: int = 5,
               threads=(32, 256), messages=lambda size: 2000, extra=None,
               alternate: bool = False, rotate: bool = False) -> None:
    """For each round, block size and message size of ``plan`` (size -> variant names),
    launches each variant's kernel (``kernels[name]``, what ``runner.run`` then takes for
    gpu_push, or a (kernel, dict of further ``runner.run`` arguments) pair; a ``path``
    among those arguments names the path the kernel stands for, gpu_push by default) on
    ``messages(size)`` messages of that size and writes one JSON line of its p50 (and
    ``extra(result)``'s fields) to ``out_path``. With ``alternate``, odd rounds run the
    variants in the reverse order, so that a cost of going first or second falls on each
    alike (session 34: two variants always in one order read 0.1 to 0.2 us apart at sizes
    where their code was the same). With ``rotate``, round r starts with the variant at
    position r (modulo their number) and keeps their order from there, so that each of
    three or more variants goes first, second, ... alike."""
    with open(out_path, "w") as out:
        for rnd in range(rounds):
            for th in threads:
                for size, names in plan.items():
                    if rotate:
                        order = names[rnd % len(names):] + names[:rnd % len(names)]
                    else:
                        order = names[::-1] if alternate and rnd % 2 else names
                    for v in order:
                        kern, kw = kernels[v] if isinstance(kernels[v], tuple) else (kernels[v], {})
                        kw = dict(kw)
                        path = kw.pop("path", "gpu_push")
                        K._BY_PATH[path] = kern
                        # The variants are block-scope kernels: every table goes to them.
                        scope_was, K.kernel_scope = K.kernel_scope, block_scope
                        try:
                            r = runner.run(path, [size] * messages(size), n_qps=1,
                                           wait_each=True, block_threads=th,
                                           stage_slot_bytes=256, **kw)
                        finally:
                            K._BY_PATH.pop(path, None)
                            K.kernel_scope = scope_was
                        emit(out, round=rnd, v=v, path=path, size=size, threads=th,
                             p50=r.latency_p50_us, delivered=r.delivered, messages=r.messages,
                             **(extra(r) if extra else {}))


def emit(out, **row) -> None:
    """Writes one JSON line of ``row`` to ``out`` (flushed, so a run cut short keeps its
    rows) and prints it."""
    out.write(json.dumps(row) + "\n")
    out.flush()
    print(row, flush=True)


def timing(r) -> dict:
    """A run's p50 and p99 (us) and the engine's mean turnaround (doorbell seen to CQE
    written, us), rounded for the JSON lines of the session 29 scripts."""
    from gpuwrite.bench.suite import engine_split_us
    return dict(p50=round(r.latency_p50_us, 2), p99=round(r.latency_p99_us, 2),
                engine=round(engine_split_us(r)["engine"], 2))


def run_variants(kernels: dict, argv: list, sizes: tuple) -> None:
    """The command line of the A/B scripts that take their sizes and variants:
    ``OUT.jsonl [rounds] [SIZES] [VARIANTS]`` (comma-separated; by default ``sizes`` and
    every variant of ``kernels``, name -> a function that builds it). Builds the variants
    asked for and runs them with ``run_rounds``, sources evicted from L2 as in the sweep,
    the order rotating by round."""
    rounds = int(argv[1]) if len(argv) > 1 else 4
    if len(argv) > 2:
        sizes = tuple(int(x) for x in argv[2].split(","))
    names = argv[3].split(",") if len(argv) > 3 else list(kernels)
    evicted = {"source_l2": "evicted"}
    built = {name: (kernels[name](), evicted) for name in names}
    run_rounds(built, {n: names for n in sizes}, argv[0], rounds=rounds, rotate=True)
