#!/usr/bin/env python
"""What a cold run of the test suite compiles, and for which tests (a developer's tool).

A cold run spends most of its time compiling: on PoCL each program build (``clBuildProgram``)
and then, at a kernel's first launch with a new local size, a work-group function of that
kernel (a "specialisation", one ``.so`` in PoCL's cache). Two parts:

* a pytest plugin that appends one JSON line per program source build to
  ``$BUILD_CENSUS_DIR/<pid>.jsonl`` (the test, the source, the defines, the seconds)::

      BUILD_CENSUS_DIR=/tmp/census PYTHONPATH=tools POCL_CACHE_DIR=/tmp/census/pocl \\
      PYRNN_CL_CACHE_DIR=/tmp/census/cache pytest -p build_census tests -m "not slow" -n auto

* a summary of those lines and of PoCL's cache: builds and seconds per test file, per source
  and which defines vary, and the specialisations per kernel with their local sizes::

      python tools/build_census.py /tmp/census [--pocl /tmp/census/pocl]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

# -- the plugin ------------------------------------------------------------------------------

_current = ["(outside a test)"]


def pytest_configure(config):
    """Wrap ``programs._build`` to record each source build (the plugin's entry point)."""
    from pyrnn_cl import programs

    out_dir = Path(os.environ["BUILD_CENSUS_DIR"])
    out_dir.mkdir(parents=True, exist_ok=True)
    out = open(out_dir / f"{os.getpid()}.jsonl", "a")  # noqa: SIM115 - open for the session
    build = programs._build

    def recorded(device, name, defines, options, source):
        start = time.perf_counter()
        try:
            return build(device, name, defines, options, source)
        finally:
            out.write(json.dumps({
                "test": _current[0], "source": name, "s": round(time.perf_counter() - start, 3),
                "key": programs.cache_key(source, options, device.info)[:16],
                "defines": {k: str(v) for k, v in (defines or {}).items()}}) + "\n")
            out.flush()

    programs._build = recorded
    config._build_census_out = out


def pytest_unconfigure(config):
    """Close the session's record file (left open, it gave a ResourceWarning at exit)."""
    out = getattr(config, "_build_census_out", None)
    if out is not None:
        out.close()


def pytest_runtest_setup(item):
    _current[0] = item.nodeid


# -- the summary -----------------------------------------------------------------------------

def _summary(census: Path, pocl: Path | None) -> None:
    rows = [json.loads(line) for f in sorted(census.glob("*.jsonl")) for line in f.open()]
    print(f"{len(rows)} source builds, {len({r['key'] for r in rows})} distinct programs, "
          f"{sum(r['s'] for r in rows):.0f} s")
    per_file: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for r in rows:
        per_file[r["test"].split("::")[0]] += r["s"]
        count[r["test"].split("::")[0]] += 1
    print("\nseconds  builds  test file")
    for name, s in per_file.most_common(15):
        print(f"{s:7.1f} {count[name]:7d}  {name}")
    print("\nprograms per source, and the defines that vary (number of values)")
    for source in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == source]
        values = collections.defaultdict(set)
        for r in mine:
            for k, v in r["defines"].items():
                values[k].add(v)
        varying = sorted(((len(v), k) for k, v in values.items() if len(v) > 1), reverse=True)
        print(f"  {source}: {len({r['key'] for r in mine})}; "
              + ", ".join(f"{k} {n}" for n, k in varying[:10]))
    if pocl is not None:
        # <pocl>/<2 letters>/<program>/<kernel>/<local size and flags>/<kernel>.so
        specs = [p.relative_to(pocl).parts for p in pocl.glob("*/*/*/*/*.so")]
        print(f"\n{len(specs)} PoCL work-group functions; per kernel: programs, functions, "
              "most common local sizes")
        by_kernel = collections.defaultdict(list)
        for _, program, kernel, spec, _ in specs:
            by_kernel[kernel].append((program, spec.split("-goffs")[0]))
        for kernel, got in sorted(by_kernel.items(), key=lambda kv: -len(kv[1])):
            locals_ = collections.Counter(s for _, s in got).most_common(4)
            print(f"  {kernel:20s} {len({p for p, _ in got}):5d} {len(got):5d}  "
                  + " ".join(f"{s}:{n}" for s, n in locals_))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("census", type=Path, help="the plugin's BUILD_CENSUS_DIR")
    p.add_argument("--pocl", type=Path, default=None, help="the run's POCL_CACHE_DIR")
    args = p.parse_args(argv)
    _summary(args.census, args.pocl)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
