"""``pyrnn-cl`` / ``python -m pyrnn_cl``: the command line (API.md §5).

* ``devices [-v]``: every OpenCL platform and device, the default marked ``*``.
* ``selftest [...]``: every op against the float64 reference (``pyrnn_cl.selftest.main``).
* ``bench [...]``: benchmarks (``pyrnn_cl.bench.main``).
* ``tune [...]``: the autotuner (``pyrnn_cl.tuner.main``).

``selftest`` and ``bench`` live in their own modules, imported only when asked for; their
arguments are passed through as a list of strings and their return value is the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import ConfigurationError

__all__ = ["main", "devices_table"]

# Subcommands implemented in other modules: name -> (module, one-line help).
_DELEGATED = {
    "selftest": ("pyrnn_cl.selftest", "run every op on a device against the float64 reference"),
    "bench": ("pyrnn_cl.bench", "benchmark the kernels on a device"),
    "tune": ("pyrnn_cl.tuner", "tune the kernels on a device and store the result"),
}


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size else "?"


def devices_table(infos, default_info=None, verbose: bool = False) -> str:
    """The ``devices`` table for ``infos``; the row equal to ``default_info`` gets a ``*``."""
    from .devices import profile_for, rank_key
    from .tuning import is_tuned

    header = ("", "index", "platform", "device", "profile", "type", "fp64", "fp16", "CUs",
              "memory", "OpenCL C", "tuned")
    rows = []
    for info in infos:
        skipped = rank_key(info) is None
        rows.append((
            "*" if info == default_info else ("-" if skipped else ""),
            info.index,
            info.platform_name,
            info.name,
            profile_for(info).name,
            info.type,
            "yes" if info.has_fp64 else "no",
            "yes" if info.has_fp16 else "no",
            str(info.compute_units),
            _gib(info.global_mem_size),
            info.opencl_c_version.replace("OpenCL C", "").strip() or "?",
            is_tuned(info) or "no",
        ))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    if verbose:
        for info in infos:
            lines += [
                "",
                f"[{info.index}] {info.name}",
                f"    platform: {info.platform_name} ({info.platform_vendor})",
                f"    platform version: {info.platform_version}",
                f"    device version: {info.version}; driver: {info.driver_version}",
                f"    max work-group size: {info.max_work_group_size}; local memory: "
                f"{info.local_mem_size // 1024} KiB",
                f"    extensions: {' '.join(info.extensions) or '(none)'}",
                f"    tuning: {_tuning_line(info)}",
            ]
    return "\n".join(lines)


def _tuning_line(info) -> str:
    """Where the device's tuning comes from, for ``devices -v``."""
    from . import tuning

    where = tuning.is_tuned(info)
    if where == "user":
        return f"tuned entry {tuning.entry_path(info)}"
    if where == "shipped":
        return f"entry shipped with pyrnn_cl ({tuning.shipped_path(info).name})"
    return ("derived from the device's queries (not tuned: `pyrnn-cl tune --device "
            f"{info.index}` would write {tuning.entry_path(info)})")


def _cmd_devices(args) -> int:
    from . import _env
    from .devices import INSTALL_HINT, get_device, list_devices, profile_for, rank_key
    from .errors import DeviceNotFoundError

    infos = list_devices()
    if not infos:
        print("No OpenCL device found: no OpenCL platform is installed or visible.")
        print(INSTALL_HINT)
        return 1
    default = None
    problem = None
    try:
        default = get_device().info
    except DeviceNotFoundError as exc:
        problem = str(exc)
    # Match by index: a default set from a user's queue is a different DeviceInfo object.
    match = next((i for i in infos if default is not None and i.index == default.index), None)
    print(devices_table(infos, match, verbose=args.verbose))
    print()
    if match is not None:
        source = ("PYRNN_CL_DEVICE" if _env.device_spec() else
                  "PYOPENCL_CTX" if _env.pyopencl_ctx() is not None else "ranking")
        legend = f"* default device (chosen by {source})"
        if any(row.startswith("-") for row in devices_table(infos).splitlines()):
            legend += "; - used only when asked for by name"
        print(legend + ".")
        # Two CPU runtimes on one CPU (PoCL and Intel's): say why the ranking put one first.
        cpu_profiles = {profile_for(i).name: profile_for(i) for i in infos
                        if i.type == "cpu" and rank_key(i) is not None}
        if match.type == "cpu" and len(cpu_profiles) > 1:
            for profile in cpu_profiles.values():
                note = getattr(profile, "CPU_RANK_NOTE", None)
                if note:
                    print(f"Ranking of the CPU runtimes: {note}.")
        print("Choose another with PYRNN_CL_DEVICE=<index|profile|gpu|cpu|name substring> or "
              "device=... on any op.")
    else:
        print(f"No default device: {problem}")
    return 0


def _cmd_delegated(name: str, rest: list[str]) -> int:
    module_name, _ = _DELEGATED[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # a missing dependency inside the module: show the real error
        print(f"pyrnn-cl {name}: this installation has no {module_name} module "
              f"(the {name} command is not available).", file=sys.stderr)
        return 2
    status = module.main(rest)
    return int(status or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyrnn-cl", description="pyrnn_cl: RNN/LSTM/GRU kernels on any OpenCL device.")
    commands = parser.add_subparsers(dest="command", metavar="command")
    devices = commands.add_parser("devices", help="list OpenCL devices; the default is marked *")
    devices.add_argument("-v", "--verbose", action="store_true",
                         help="also show versions, driver and extensions")
    for name, (_, help_text) in _DELEGATED.items():
        sub = commands.add_parser(name, help=help_text, add_help=False)
        sub.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in _DELEGATED:
            # Everything after the command, --help included, belongs to the delegated module.
            return _cmd_delegated(argv[0], argv[1:])
        parser = _parser()
        args = parser.parse_args(argv)
        if args.command == "devices":
            return _cmd_devices(args)
    except ConfigurationError as exc:      # a bad environment variable: say which, no traceback
        print(f"pyrnn-cl: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`pyrnn-cl devices | head`): stop quietly, as other tools do;
        # stdout goes to /dev/null so the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    parser.print_help()
    return 2
