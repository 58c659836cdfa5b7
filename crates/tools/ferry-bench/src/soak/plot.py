# The soak's plot: ferryd's and the NFs' memory, and each steady chain's
# throughput (frames sunk per second between samples), over the run.
# Reads the report (JSON) on stdin; writes the PNG named by argv[1].
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

r = json.load(sys.stdin)
s = r["samples"]
t = [x["minute"] for x in s]
fig, (mem, thr) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
mem.plot(t, [x["ferryd"]["anon_kib"] / 1024 for x in s], label="ferryd (own pages)", linewidth=2)
mem.plot(t, [sum(n["anon_kib"] for n in x["nfs"]) / 1024 for x in s], label="all NFs (own pages)", linewidth=2)
mem.plot(t, [x["ferryd"]["rss_kib"] / 1024 for x in s], label="ferryd RSS (with shared memory)", linestyle="--")
mem.set_ylabel("MiB")
mem.set_ylim(bottom=0)
mem.legend()
mem.set_title("ferry bench soak: %d min, %d fps per chain, %d faults" % (r["minutes"], r["rate"], sum(r["faults"].values())))
for chain in sorted(s[0]["frames"]):
    pts = [(b["minute"], (b["frames"][chain][1] - a["frames"][chain][1]) / max((b["minute"] - a["minute"]) * 60, 1e-9))
           for a, b in zip(s, s[1:])]
    thr.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], label=chain + " sunk")
# Where a new ferryd took over (its pid changed): between two samples.
for a, b in zip(s, s[1:]):
    if a["ferryd"]["pid"] != b["ferryd"]["pid"]:
        for ax in (mem, thr):
            ax.axvline(b["minute"], color="grey", linestyle=":", linewidth=1)
thr.set_ylabel("kframes/s")
thr.set_xlabel("minute")
thr.set_ylim(bottom=0)
thr.legend()
thr.text(0.01, 0.02, "dotted: a new ferryd adopted the chains", transform=thr.transAxes, fontsize=8, color="grey")
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=100)
