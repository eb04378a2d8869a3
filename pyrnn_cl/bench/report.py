"""The results as people read them: the Markdown table (:func:`format_table`) and the bar chart of
the ratios (:func:`write_png`)."""

from __future__ import annotations

import numpy as np


def _f(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


def _ratio(entry, key):
    if entry.get(key) is None:
        return "-"
    return f"{entry[key]:.2f} ({entry[key + '_min']:.2f})"


def _mib(b):
    return f"{b / 2**20:.1f}"


#: A NumPy SGEMM median below this fraction of its best says that something else ran on the
#: host while the bench measured it (an H200 host's 113 GFLOP/s median against a best of 907).
BUSY_SGEMM_FRACTION = 0.75


def _busy_note(sgemm: dict) -> str:
    """A warning for the SGEMM line where its median is far below its best, else ''."""
    if sgemm["max"] and sgemm["median"] < BUSY_SGEMM_FRACTION * sgemm["max"]:
        return (f" - the host was busy (median {sgemm['median'] / sgemm['max']:.0%} of best): "
                "this run's times are not reliable")
    return ""


def format_table(result: dict) -> str:
    """The results as Markdown: a header, the timing table, the memory table, the summary."""
    m = result["machine"]
    s = result["numpy_sgemm_1024_gflops"]
    lines = [
        f"pyrnn_cl bench - {m['date']} - device: {m['device']} ({m['platform_version']})",
        f"CPU: {m['cpu']} ({m.get('isa', '?')}); threads: {m['threads']} (compute units "
        f"{m['compute_units']}, "
        f"POCL_MAX_PTHREAD_COUNT={m['pocl_threads_env'] or 'unset'}, "
        f"POCL_AFFINITY={m.get('pocl_affinity_env') or 'unset'}); numpy {m['numpy']}, "
        f"torch {m['torch'] or 'not installed'}",
        "Tuning: " + "; ".join(f"{f} {t['source']}" for f, t in m["tuning"].items()),
        f"NumPy SGEMM 1024^3 ({m['threads']} threads): {s['median']:.1f} GFLOP/s median, "
        f"{s['max']:.1f} best" + _busy_note(s),
        f"FLOPs: {result['flop_convention']}.",
        f"Timing: {result['timing']}; {result['repeat']} repetitions after {result['warmup']} "
        f"warm-up calls; PyTorch on {result.get('torch_device', 'cpu')}; our inputs: "
        + ("NumPy arrays (host transfers timed)" if result.get("host_inputs")
           else "pyopencl.array.Array on the device (host transfers not timed)")
        + f", {result.get('dtype', 'float32')} (PyTorch float32).",
        "",
        "| config | cell | H | I | N | T | L x D | fwd ms med (min) | fwd us/step | fwd GFLOP/s "
        "(rec-only) | % sgemm fwd | torch fwd ms med | ratio fwd med (min) | fwd+bwd ms med "
        "(min) | fwd+bwd GFLOP/s | % sgemm f+b | torch f+b ms med | ratio f+b med (min) |",
        "|" + "---|" * 18,
    ]
    intel = m.get("intel_cpu_runtime")
    if intel and m.get("platform") == "Intel(R) OpenCL":
        lines.insert(2, "Intel CPU runtime threads: " + ", ".join(
            f"{k}={v or 'unset'}" for k, v in intel["variables"].items())
            + f" (process CPUs {intel['process_cpus']}, cgroup quota "
            f"{intel['cgroup_cpu_limit'] or 'none'}; set by pyrnn_cl: "
            f"{intel['set_by_pyrnn_cl'] or 'nothing'})")
    for e in result["configs"]:
        c = e["config"]
        head = (f"| {c['name']} | {c['cell']} | {c['H']} | {c['I']} | {c['N']} | {c['T']} | "
                f"{c['layers']}x{c['directions']} |")
        if e.get("error") or e["ours"] is None:
            lines.append(head + f" error: {e.get('error')} |" + " |" * 10)
            continue
        o, t = e["ours"], e["torch"]
        lines.append(
            head
            + f" {o['fwd']['median_ms']:.2f} ({o['fwd']['min_ms']:.2f}) |"
            f" {o['us_per_step_fwd']:.1f} | {o['gflops_fwd']:.1f} ({o['gflops_rec_fwd']:.1f}) |"
            f" {_f(o['pct_sgemm_fwd'], '{:.0f}')} |"
            f" {_f(t and t['fwd']['median_ms'], '{:.2f}')} | {_ratio(e, 'ratio_fwd')} |"
            f" {o['fwd_bwd']['median_ms']:.2f} ({o['fwd_bwd']['min_ms']:.2f}) |"
            f" {o['gflops_fwd_bwd']:.1f} | {_f(o['pct_sgemm_fwd_bwd'], '{:.0f}')} |"
            f" {_f(t and t['fwd_bwd']['median_ms'], '{:.2f}')} |"
            f" {_ratio(e, 'ratio_fwd_bwd')} |")
    sm = result["summary"]
    lines += [
        "",
        f"Geometric mean ratio (torch time / ours): forward {_f(sm['geomean_ratio_fwd'], '{:.2f}')}"
        f", forward+backward {_f(sm['geomean_ratio_fwd_bwd'], '{:.2f}')}; lowest: forward "
        f"{_f(sm['min_ratio_fwd'], '{:.2f}')}, forward+backward "
        f"{_f(sm['min_ratio_fwd_bwd'], '{:.2f}')}.",
        "",
    ]
    if any(e.get("bridge") for e in result["configs"]):
        lines += [
            "Torch bridge: forward+backward through pyrnn_cl.torch (CPU tensors in and out) "
            "against the same cuDNN-dialect calls on device arrays, in turns right after theirs; "
            "ratio = device-array time / bridge time, the median over those pairs of turns "
            "(min: of the minima; 1.00: no overhead):",
            "",
            "| config | device arrays f+b ms med | bridge f+b ms med (min) | ratio med (min) |",
            "|" + "---|" * 4,
        ]
        for e in result["configs"]:
            if e.get("bridge"):
                b = e["bridge"]["fwd_bwd"]
                lines.append(
                    f"| {e['config']['name']} | {e['ours']['fwd_bwd']['median_ms']:.2f} | "
                    f"{b['median_ms']:.2f} ({b['min_ms']:.2f}) | "
                    f"{_ratio(e, 'ratio_bridge_fwd_bwd')} |")
        lines += ["", "Geometric mean bridge ratio: "
                  f"{_f(sm.get('geomean_ratio_bridge_fwd_bwd'), '{:.2f}')}.", ""]
    if any(e.get("vs_float32_fwd") for e in result["configs"]):
        lines += [
            f"{result['dtype']} storage against float32 (our ops, timed in the same turns); "
            "time ratio 16-bit / float32 (< 1: 16-bit faster):",
            "",
            "| config | fwd | fwd+bwd |",
            "|---|---|---|",
        ]
        for e in result["configs"]:
            if e.get("vs_float32_fwd"):
                lines.append(f"| {e['config']['name']} | {e['vs_float32_fwd']:.3f} | "
                             f"{e['vs_float32_fwd_bwd']:.3f} |")
        lines += ["", "Geometric mean: forward "
                  f"{_f(sm.get('geomean_vs_float32_fwd'), '{:.3f}')}, forward+backward "
                  f"{_f(sm.get('geomean_vs_float32_fwd_bwd'), '{:.3f}')}; highest: forward "
                  f"{_f(sm.get('max_vs_float32_fwd'), '{:.3f}')}, forward+backward "
                  f"{_f(sm.get('max_vs_float32_fwd_bwd'), '{:.3f}')}.", ""]
    lines += [
        "Device memory per call, MiB (estimate from the engine's buffers):",
        "",
        "| config | dialect | inputs | reserve (saved for backward) | fwd workspace | "
        "bwd workspace (not growing with T) | bwd temporaries growing with T | "
        "gradient outputs | max abs diff vs torch (fwd y) | note |",
        "|" + "---|" * 10,
    ]
    for e in result["configs"]:
        mb = e["memory_bytes"]
        lines.append(
            f"| {e['config']['name']} | {e.get('dialect', '-')} | {_mib(mb['inputs'])} | "
            f"{_mib(mb['reserve'])} | {_mib(mb['fwd_workspace'])} | {_mib(mb['bwd_workspace'])} "
            f"| {_mib(mb.get('bwd_sequence', 0))} | {_mib(mb.get('grad_outputs', 0))} "
            f"| {_f(e['max_abs_diff_vs_torch'], '{:.1e}')} | {e['note'] or ''} |")
    return "\n".join(lines)


def write_png(result: dict, path: str) -> None:
    """Bar chart of the ratios (torch time / ours) per configuration (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in result["configs"] if e.get("ratio_fwd")]
    names = [e["config"]["name"] for e in entries]
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(names) + 2), 4.5))
    ax.bar(xs - 0.2, [e["ratio_fwd"] for e in entries], 0.4, label="forward")
    ax.bar(xs + 0.2, [e["ratio_fwd_bwd"] for e in entries], 0.4, label="forward+backward")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=35, ha="right")
    ax.set_ylabel("PyTorch time / pyrnn_cl time")
    m = result["machine"]
    ax.set_title(f"pyrnn_cl vs torch {m['torch']}, {m['threads']} threads, {m['device']}",
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
