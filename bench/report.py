"""Assembles bench/run's measurements into one table, a JSON file and a plot."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

work, out = sys.argv[1], sys.argv[2]
ops = {t: json.load(open(f"{work}/ops-{t}.json")) for t in (1, 2)}
e2e = []
for line in open(f"{work}/e2e.txt"):
    threads, tokens, rate, rss = (int(x) for x in line.split())
    e2e.append({"threads": threads, "tokens": tokens, "tokens_per_s": rate, "peak_rss_mib": rss})

rows = [f"{'op':24} {'1 thread':>18} {'2 threads':>18}   (model GFLOP/s, % of sgemm)"]
rows.append(f"{'sgemm 2048^3 yardstick':24} {ops[1]['sgemm_gflops']:>10.1f} GFLOP/s {ops[2]['sgemm_gflops']:>10.1f} GFLOP/s")
if "sgemm_openblas_gflops" in ops[1]:
    rows.append(f"{'  of it OpenBLAS':24} {ops[1]['sgemm_openblas_gflops']:>10.1f} GFLOP/s {ops[2]['sgemm_openblas_gflops']:>10.1f} GFLOP/s"
                f"   (oneDNN {ops[1]['sgemm_onednn_gflops']:.1f} / {ops[2]['sgemm_onednn_gflops']:.1f})")
has_bf16 = ops[1].get("bf16_matmul_gflops", 0) > 0
if has_bf16:
    rows.append(f"{'bf16 matmul 2048^3':24} {ops[1]['bf16_matmul_gflops']:>10.1f} GFLOP/s {ops[2]['bf16_matmul_gflops']:>10.1f} GFLOP/s"
                f"   ({ops[1]['bf16_matmul_kernel']})")
for i, op in enumerate(ops[2]["ops"]):
    a, b = ops[1]["ops"][i], op
    rows.append(f"{op['op']:24} {a['gflops']:>9.1f} {100 * a['of_sgemm']:5.1f}%  {b['gflops']:>9.1f} {100 * b['of_sgemm']:5.1f}%")
for i, op in enumerate(ops[2]["ops"]):
    a, b = ops[1]["ops"][i], op
    if "bf16_gflops" not in b:
        continue
    of = (lambda r: f"{100 * r['bf16_of_bf16_matmul']:5.1f}%") if has_bf16 else (lambda r: f"{100 * r['bf16_of_sgemm']:5.1f}%")
    rows.append(f"{op['op'] + ', bf16':24} {a['bf16_gflops']:>9.1f} {of(a)}  {b['bf16_gflops']:>9.1f} {of(b)}"
                f"   (of the {'bf16 matmul' if has_bf16 else 'sgemm'})")
la, lb = ops[1]["layer"], ops[2]["layer"]
rows.append(f"{'whole layer':24} {la['gflops']:>9.1f} {100 * la['of_sgemm']:5.1f}%  {lb['gflops']:>9.1f} {100 * lb['of_sgemm']:5.1f}%")
if "layer_openblas" in ops[1]:
    oa, ob = ops[1]["layer_openblas"], ops[2]["layer_openblas"]
    rows.append(f"{'whole layer, OpenBLAS':24} {oa['gflops']:>9.1f} {100 * oa['of_sgemm']:5.1f}%  {ob['gflops']:>9.1f} {100 * ob['of_sgemm']:5.1f}%"
                f"   (oneDNN's sgemm {oa['onednn_speedup']:.2f}x / {ob['onednn_speedup']:.2f}x faster)")
if "layer_unsliced" in ops[2]:
    ub = ops[2]["layer_unsliced"]
    rows.append(f"{'whole layer, unsliced':24} {'':>9} {'':>6}  {ub['gflops']:>9.1f} {100 * ub['of_sgemm']:5.1f}%"
                f"   (row slices off; with them {ub['slices_speedup']:.2f}x faster)")
if "layer_bf16" in ops[1]:
    ba, bb = ops[1]["layer_bf16"], ops[2]["layer_bf16"]
    rows.append(f"{'whole layer, bf16':24} {ba['gflops']:>9.1f} {100 * ba['of_sgemm']:5.1f}%  {bb['gflops']:>9.1f} {100 * bb['of_sgemm']:5.1f}%"
                f"   (of sgemm; {ba['vs_fp32_layer_time']:.2f}x / {bb['vs_fp32_layer_time']:.2f}x the fp32 layer's time)")
    if "of_bf16_matmul" in ba:
        rows.append(f"{'':24} {'':>9} {100 * ba['of_bf16_matmul']:5.1f}%  {'':>9} {100 * bb['of_bf16_matmul']:5.1f}%   (of the bf16 matmul)")
    if "layer_bf16_emulated" in ops[1]:
        ea, eb = ops[1]["layer_bf16_emulated"], ops[2]["layer_bf16_emulated"]
        rows.append(f"{'whole layer, bf16 emul.':24} {ea['gflops']:>9.1f} {100 * ea['of_sgemm']:5.1f}%  {eb['gflops']:>9.1f} {100 * eb['of_sgemm']:5.1f}%"
                    f"   (the bf16 matmul at {ea['matmul_speedup']:.2f}x / {eb['matmul_speedup']:.2f}x its speed)")
    rows.append(f"  bf16 mode: {ba['mode']}")
sa, sb = ops[1]["scan"], ops[2]["scan"]
rows.append(f"{'scan: SSD vs recurrence':24} {sa['speedup']:>13.1f}x  {sb['speedup']:>13.1f}x faster (both directions)")
rows.append("")
rows.append(f"{'lact run preset:small':24} {'threads':>8} {'tokens/s':>10} {'peak RSS MiB':>13}")
for r in e2e:
    rows.append(f"{r['tokens']:>24} {r['threads']:>8} {r['tokens_per_s']:>10} {r['peak_rss_mib']:>13}")
by_len = {r["tokens"]: r["tokens_per_s"] for r in e2e if r["threads"] == 2}
if 65536 in by_len and 1048576 in by_len:
    rows.append(f"linearity: tokens/s at 1M = {by_len[1048576] / by_len[65536]:.2f} x tokens/s at 64K")
table = "\n".join(rows)
print(table)

json.dump({"ops": ops, "end_to_end": e2e, "table": table}, open(f"{out}.json", "w"), indent=2)

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
two = [r for r in e2e if r["threads"] == 2]
left.plot([r["tokens"] for r in two], [r["tokens_per_s"] for r in two], "o-")
left.set_xscale("log", base=2)
left.set_xlabel("context tokens")
left.set_ylabel("tokens/s (lact run, 2 threads)")
left.set_title("throughput vs context length")
left.set_ylim(bottom=0)
at64k = sorted((r["threads"], r["tokens_per_s"]) for r in e2e if r["tokens"] == 65536)
right.plot([t for t, _ in at64k], [v for _, v in at64k], "o-", label="lact run, 64K tokens")
right.plot([1, 2], [ops[1]["layer"]["tokens_per_s"] / 2, ops[2]["layer"]["tokens_per_s"] / 2], "s--",
           label="layer bench / 2 layers")
right.set_xticks([1, 2])
right.set_xlabel("threads")
right.set_ylabel("tokens/s")
right.set_title("throughput vs threads")
right.set_ylim(bottom=0)
right.legend()
fig.suptitle("lact CPU, preset:small")
fig.tight_layout()
fig.savefig(f"{out}.png", dpi=100)
print(f"wrote {out}.json and {out}.png")
