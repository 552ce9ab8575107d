"""Plots the handover and failover distributions from the benchmark's results.json.

usage: bench-plot.py <results.json> <out.png>
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def panel(ax, result, title, bounds):
    samples = sorted(result["samples"])
    stats = result["seconds"]
    ax.hist(samples, bins=max(5, min(30, len(samples))), color="#4c72b0", alpha=0.8)
    ax.axvline(stats["median"], color="black", linestyle="-", label=f"median {stats['median']:.3f} s")
    ax.axvline(stats["p95"], color="#dd8452", linestyle="--", label=f"p95 {stats['p95']:.3f} s")
    ax.axvline(result["target_p95_seconds"], color="#c44e52", linestyle=":",
               label=f"target p95 ≤ {result['target_p95_seconds']:.1f} s")
    for low, high, label in bounds:
        ax.axvspan(low, high, color="grey", alpha=0.12, label=label)
    ax.set_title(f"{title} (n = {stats['n']})")
    ax.set_xlabel("seconds from the signal to the next leader's task start")
    ax.set_ylabel("repetitions")
    ax.legend(fontsize=8)


def main():
    results = json.load(open(sys.argv[1]))
    panels = []
    if "graceful_handover" in results:
        panels.append((results["graceful_handover"], "Graceful handover (SIGTERM)",
                       [(0.0, 1.2, "follower retry window 0–1.2 s")]))
    if "crash_failover" in results:
        panels.append((results["crash_failover"], "Crash failover (SIGKILL)",
                       [(10.0, 16.2, "lease left 10–15 s + retry ≤ 1.2 s")]))
    if not panels:
        print("nothing to plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (result, title, bounds) in zip(axes[0], panels):
        panel(ax, result, title, bounds)
    fig.suptitle("blob-mutex on Azurite, default options (lease 15 s, renew 5 s, retry 1 s ± 20 %)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
