"""The ``gpuwrite`` command line: one sub-command per module in this package.

Each module named in ``COMMANDS`` defines ``register(subparsers)`` which adds its
parser and sets ``func`` to a callable taking the parsed arguments and returning an
exit code. Every command accepts ``--json``.

Every failure leaves through ``main`` in one of a few shapes, the same for all commands:
bad input (``UsageError``, a model ``ParamError``, an experiment file's ``SpecError``,
an output path that cannot be written, argparse's own complaints) is one line on stderr
and exit status 2; no usable GPU is one line and status 3; a sweep's worker process that
died (``WorkerLost``: killed, most often for memory) is one line and status 1; Ctrl-C is one line and 130,
SIGTERM one line and 143. Under ``--json`` the error is also a JSON object on stdout:
``{"error": ..., "value": ..., "allowed": ...}``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import signal
import sys

COMMANDS = ("demo", "bench", "model_cmd", "sim_cmd", "sweep", "figures", "calibrate", "doctor",
            "testbed")
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_GPU = 3
EXIT_SIGINT = 128 + signal.SIGINT     # 130, as a shell reports a Ctrl-C'd command
EXIT_SIGTERM = 128 + signal.SIGTERM   # 143
EXIT_SIGPIPE = 128 + signal.SIGPIPE   # 141, as a shell reports a writer whose reader left
# Tables are never cut when stdout is a pipe or a file: rich then lays them out this wide.
PIPE_COLUMNS = 1000


class UsageError(Exception):
    """Bad input from the user: the message names the value and what is allowed.

    ``value`` and ``allowed`` (when given) go into the JSON error under ``--json``;
    otherwise they are read back from a message of the form ``NAME=VALUE is not
    allowed; allowed: WHAT``.
    """

    def __init__(self, message: str, *, value=None, allowed: str | None = None):
        super().__init__(message)
        self.value = value
        self.allowed = allowed


class NoGPUError(UsageError):
    """The command measures a real GPU and this process has none (the CUDA simulator is
    on): exit status 3, as when numba finds no usable GPU."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks run (worker pools end)."""


# How messages in this project and argparse's name the value and what is allowed.
_VALUE_PATTERNS = (
    re.compile(r"(?P<value>'[^']*'|\S+) is not allowed(?: [^;]*)?; allowed: (?P<allowed>.+)$"),
    re.compile(r"invalid choice: (?P<value>'[^']*') \(choose from (?P<allowed>[^)]*)\)"),
    re.compile(r"invalid (?P<allowed>\w+) value: (?P<value>'[^']*')"),
)


def error_fields(exc: BaseException) -> dict:
    """{"error", "value", "allowed"} of an error, as ``--json`` prints it."""
    message = str(exc)
    value = getattr(exc, "value", None)
    allowed = getattr(exc, "allowed", None)
    if value is None and allowed is None:
        for pattern in _VALUE_PATTERNS:
            match = pattern.search(message)
            if match:
                value, allowed = match.group("value"), match.group("allowed")
                if "=" in value and not value.startswith("'"):
                    value = value.split("=", 1)[1]
                value = value[1:-1] if len(value) > 1 and value[0] == value[-1] == "'" else value
                break
    if value is not None and not isinstance(value, (str, int, float, bool)):
        value = str(value)
    if isinstance(value, float) and not math.isfinite(value):
        value = str(value)  # "inf", not json's Infinity, which no strict JSON reader takes
    return {"error": message, "value": value, "allowed": allowed}


# What an option's value may look like when it starts with "-": argparse's own pattern
# takes only -5 and -.5 for values, so "--share -inf", "--sizes -4K" and "--seed -1e3" were
# "expected one argument", without the value; these reach the option's check instead.
NEGATIVE_VALUE = re.compile(r"^-(?:\d|\.\d|(?:inf|infinity|nan)$)", re.IGNORECASE)


def _plain(text: str) -> str:
    """``text`` with reStructuredText's doubled backticks (````literal````) removed."""
    return re.sub(r"``(.+?)``", r"\1", text)


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors routed through ``main``'s one error path, and values
    that start with "-" (``-inf``, ``-4K``, ``-1e30``) taken as values, to be refused by the
    option's own check, which names them."""

    def __init__(self, *args, **kwargs):
        # no abbreviations: "--js" was --json to argparse but not to main's JSON mode, and
        # an abbreviation that works today is ambiguous once an option is added
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_VALUE

    def _parse_optional(self, arg_string):
        # before argparse's prefix matching, which read "--qps -nan" as "--qps" then "-n an"
        if NEGATIVE_VALUE.match(arg_string) and arg_string not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)

    def format_help(self):
        # descriptions come from the modules' docstrings: their ``literals`` (reStructuredText)
        # are plain text in a terminal
        return _plain(super().format_help())

    def error(self, message):
        allowed = value = None
        for action in self._actions:    # a missing command: say which there are
            if isinstance(action, argparse._SubParsersAction) and message.startswith("the following arguments "
                                                                                     "are required"):
                allowed = ", ".join(action.choices)
                message = f"{message}; allowed: {allowed}"
        # a missing argument (sim's CONFIG): name it (the value) and say what it takes, from its help
        missing = re.match(r"the following arguments are required: ([^;]+)", message)
        value = missing[1] if missing else None
        if missing and allowed is None:
            wanted = [a for a in self._actions if not a.option_strings and a.required
                      and (a.metavar or a.dest) in value.split(", ")]
            allowed = "; ".join(f"{a.metavar or a.dest}: {a.help}" if a.help else str(a.metavar or a.dest)
                                for a in wanted) or value
            message = f"{message}; allowed: {allowed}"
        # two options of a mutually exclusive group: name the second and what is allowed
        clash = re.match(r"argument (\S+): not allowed with argument (\S+)$", message)
        if clash:
            value, allowed = clash[1], f"{clash[2]} or {clash[1]}, not both"
            message = f"{message}; allowed: {allowed}"
        # a flag given a value (--json=yes): name the value and that the flag takes none
        flag = re.match(r"argument (\S+): ignored explicit argument '(.*)'$", message)
        if flag:
            value, allowed = flag[2], f"{flag[1]} alone (it takes no value)"
            message = f"{message}; allowed: {allowed}"
        exc = UsageError(f"{message} (see {self.prog} --help)", value=value, allowed=allowed)
        exc.prog = self.prog
        raise exc


class VersionAction(argparse.Action):
    """``--version``: ``gpuwrite VERSION``, or under ``--json`` the same as a JSON object
    (``{"gpuwrite": VERSION}``), as every other answer is. argparse's own version action
    prints text only, and it runs before a later ``--json`` is read, so whether JSON was
    asked for comes from the command line as a whole (``build_parser(as_json=...)``)."""

    def __init__(self, option_strings, version: str, as_json: bool = False, dest=argparse.SUPPRESS,
                 default=argparse.SUPPRESS, help="print the version (a JSON object under --json) and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)
        self.version = version
        self.as_json = as_json

    def __call__(self, parser, namespace, values, option_string=None):
        print(json.dumps({"gpuwrite": self.version}) if self.as_json else f"gpuwrite {self.version}")
        parser.exit()


def build_parser(as_json: bool = False) -> argparse.ArgumentParser:
    """The parser of every command; ``as_json``: ``--json`` is on the command line (for
    ``--version``, which answers before the rest is parsed)."""
    from gpuwrite.experiments.store import gpuwrite_version

    parser = Parser(
        prog="gpuwrite",
        description="Prototype and evaluate GPU-initiated DMA writes into RDMA NICs.",
    )
    parser.add_argument("--version", action=VersionAction, version=gpuwrite_version(), as_json=as_json)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"gpuwrite.cli.{name}")
        module.register(sub)
    return parser


def _report(command: str, exc: BaseException, as_json: bool, status: int) -> int:
    """One line on stderr (and the JSON object on stdout under --json); returns ``status``."""
    text = str(exc).strip().splitlines()
    line = " ".join(part.strip() for part in text) or type(exc).__name__
    prefix = getattr(exc, "prog", None) or " ".join(filter(None, ("gpuwrite", command)))
    print(f"{prefix}: error: {line}", file=sys.stderr)
    if as_json:
        fields = error_fields(exc)
        fields["error"] = line
        fields["exit_status"] = status
        print(json.dumps(fields, default=str))
    return status


def _cuda_unavailable(exc: BaseException) -> bool:
    """numba found no CUDA driver, GPU or NVVM to use (not an error of a running kernel,
    which keeps its traceback)."""
    module = type(exc).__module__ or ""
    return module.startswith("numba.cuda") and type(exc).__name__ in ("CudaSupportError", "NvvmSupportError")


def _output_error(exc: OSError) -> UsageError:
    path = exc.filename if exc.filename is not None else "?"
    reason = exc.strerror or type(exc).__name__
    return UsageError(f"cannot use {str(path)!r} ({reason}); allowed: a path this user can read or "
                      "write, a folder where a folder is needed and a file where a file is",
                      value=str(path), allowed="a usable path")


def _unrecognized(parser: argparse.ArgumentParser, args, extra: list[str]) -> UsageError:
    """Arguments no parser took, named with the options of the command they were given to
    (argparse named only the top-level ``gpuwrite`` and not what it takes)."""
    while True:     # down to the (sub-)command that ran: model's questions are one more level
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subparsers[0].dest, None) if subparsers else None
        if name is None or name not in subparsers[0].choices:
            break
        parser = subparsers[0].choices[name]
    options = sorted({s for a in parser._actions for s in a.option_strings if s.startswith("--")})
    shown = " ".join(extra)
    allowed = f"the options of {parser.prog}: {', '.join(options)}" if options else "no more arguments"
    exc = UsageError(f"{shown!r} is not allowed (unrecognized arguments); allowed: {allowed} "
                     f"(see {parser.prog} --help)", value=shown, allowed=allowed)
    exc.prog = parser.prog
    return exc


class StdoutError(OSError):
    """A write to stdout failed (not a reader that went away): the output is lost."""


class _Stdout:
    """sys.stdout while a command runs: the same stream, whose failed writes are told from
    the command's other errors without a file name (a full disk under ``> out.json``,
    ``> /dev/full``: ENOSPC, EIO) as ``StdoutError``, reported in one line."""

    def __init__(self, stream):
        self.stream = stream

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror or str(exc)) from None

    def write(self, text):
        return self._guarded(self.stream.write, text)

    def writelines(self, lines):
        return self._guarded(self.stream.writelines, lines)

    def flush(self):
        return self._guarded(self.stream.flush)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _stdout_to_devnull() -> None:
    """stdout pointed at /dev/null, and what its buffer held dropped, so that the
    interpreter's final flush fails no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def wants_json(argv: list[str]) -> bool:
    """Whether ``--json`` is on the command line, as argparse reads it (before a ``--``):
    ``--json``, or ``--json=VALUE``, which argparse refuses (the refusal is JSON too)."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    return any(word == "--json" or word.startswith("--json=") for word in words)


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    state = {"command": "", "json": wants_json(argv)}
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    if piped:
        os.environ["COLUMNS"] = str(PIPE_COLUMNS)
    previous_term = None
    try:
        previous_term = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread (an embedding program): leave SIGTERM alone
        pass
    guard = sys.stdout = _Stdout(sys.stdout)
    try:
        status = _run(argv, state)
        sys.stdout.flush()      # here, where a failed write is reported, not at the interpreter's exit
        return status
    except BrokenPipeError:
        # the reader went away (`gpuwrite ... | head`): as a shell tool, stop quietly; point
        # stdout at /dev/null so that the interpreter's final flush fails no more
        _stdout_to_devnull()
        return EXIT_SIGPIPE
    except StdoutError as exc:
        # stdout cannot be written (`> /dev/full`, a full disk, EIO): one line, not a traceback
        _stdout_to_devnull()
        name = " ".join(filter(None, ("gpuwrite", state["command"])))
        print(f"{name}: error: cannot write to stdout ({exc.strerror or type(exc).__name__}); the "
              "output is lost", file=sys.stderr)
        return EXIT_FAILED
    except (KeyboardInterrupt, Terminated) as exc:
        how, status = (("interrupted (Ctrl-C)", EXIT_SIGINT) if isinstance(exc, KeyboardInterrupt)
                       else ("terminated (SIGTERM)", EXIT_SIGTERM))
        name = " ".join(filter(None, ("gpuwrite", state["command"])))
        resumes = "; finished points are stored and a rerun resumes from them" \
            if state["command"] in ("sweep", "figures") else ""
        print(f"{name}: {how}{resumes}", file=sys.stderr)
        if state["json"]:   # a script reading stdout gets a JSON document here too
            print(json.dumps({"error": f"{how}{resumes}", "value": None, "allowed": None, "exit_status": status}))
        return status
    finally:
        if sys.stdout is guard:
            sys.stdout = guard.stream
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        if piped:
            os.environ.pop("COLUMNS", None)


def _run(argv: list[str], state: dict) -> int:
    from gpuwrite.experiments.spec import SpecError
    from gpuwrite.experiments.sweep import WorkerLost
    from gpuwrite.model.errors import ParamError

    try:
        parser = build_parser(as_json=state["json"])
        args, extra = parser.parse_known_args(argv)
        if extra:
            raise _unrecognized(parser, args, extra)
        state["command"] = args.command
        state["json"] = bool(getattr(args, "json", state["json"]))
        return int(args.func(args) or 0)
    except NoGPUError as exc:
        return _report(state["command"], exc, state["json"], EXIT_NO_GPU)
    except (UsageError, ParamError, SpecError) as exc:
        return _report(state["command"], exc, state["json"], EXIT_USAGE)
    except WorkerLost as exc:
        return _report(state["command"], exc, state["json"], EXIT_FAILED)
    except OSError as exc:
        if exc.filename is None:
            raise
        return _report(state["command"], _output_error(exc), state["json"], EXIT_USAGE)
    except Exception as exc:
        if not _cuda_unavailable(exc):
            raise
        why = UsageError(f"no usable CUDA GPU ({type(exc).__name__}: {exc}); unset "
                         "NUMBA_ENABLE_CUDASIM (or set it to 1) to run on Numba's CUDA simulator",
                         value=os.environ.get("NUMBA_ENABLE_CUDASIM"), allowed="a CUDA GPU, or the simulator")
        return _report(state["command"], why, state["json"], EXIT_NO_GPU)


if __name__ == "__main__":
    sys.exit(main())
