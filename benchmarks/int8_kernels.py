"""int8 products one at a time: fbgemm's dynamic int8 linear (ours, model.quantize) against oneDNN's int8 linear
(torch.ops.onednn.qlinear_pointwise, which runs on AMX where the processor has it), each input quantized per call
as fbgemm's does (asymmetric, 8 bits); and the resident memory each packed weight holds. The same int8 weights
(model.quantize's rows and fbgemm packing), the best of 5 repeats of many calls, one thread by default.

    python benchmarks/int8_kernels.py --threads 1
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import warnings
from collections.abc import Callable

import torch
from files import rss_kib

from model.quantize import pack_int8, quantize_rows

SHAPES = [  # rows x (out, in): a Marian model's, base-size and NLLB-600M's layers and pre-softmax linears
    (4, 512, 512),
    (4, 2048, 512),
    (4, 8000, 512),
    (32, 8000, 512),
    (128, 8000, 512),
    (4, 1024, 1024),
    (128, 1024, 1024),
    (4, 256206, 1024),
    (32, 256206, 1024),
]


def onednn_linear(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """x W^T + b through oneDNN, x quantized per call as fbgemm's dynamic linear does; scale, zero (out,) per row."""
    qx = torch.quantize_per_tensor_dynamic(x, torch.quint8, False)
    out = torch.ops.onednn.qlinear_pointwise(
        qx.int_repr(), qx.q_scale(), qx.q_zero_point(), packed, scale, zero, bias, 1.0, 0, torch.float32, "none", [], ""
    )
    return out  # type: ignore[no-any-return]


def best_us(f: Callable[[], object], calls: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def packed_mib(pack: Callable[[], object]) -> float:
    """Resident memory a packed weight adds, beyond the int8 rows it was made from."""
    gc.collect()
    before = rss_kib(os.getpid(), "VmRSS")
    kept = pack()
    gc.collect()
    grown = (rss_kib(os.getpid(), "VmRSS") - before) / 1024
    del kept
    return grown


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", UserWarning)  # torch's quantized tensors are deprecated: the kernels' entry
    print("| rows x (out, in) | fbgemm us | oneDNN us | fbgemm / oneDNN | largest difference |")
    print("|---|---|---|---|---|")
    for rows, n, k in SHAPES:
        q, scale = quantize_rows(torch.randn(n, k))
        bias, x = torch.randn(n), torch.randn(rows, k)
        fb, dn = pack_int8(q, scale, bias), torch.ops.onednn.qlinear_prepack(q, None)
        zero = torch.zeros(n, dtype=torch.long)
        a = torch.ops.quantized.linear_dynamic(x, fb, False)
        b = onednn_linear(x, dn, scale, zero, bias)
        calls = max(3, int(5e7 // (n * k)))
        t_fb = best_us(lambda: torch.ops.quantized.linear_dynamic(x, fb, False), calls)  # noqa: B023
        t_dn = best_us(lambda: onednn_linear(x, dn, scale, zero, bias), calls)  # noqa: B023
        diff = float((a - b).abs().max()) / float(a.abs().max())
        print(f"| {rows} x ({n}, {k}) | {t_fb:.1f} | {t_dn:.1f} | {t_fb / t_dn:.2f}x | {diff:.1e} of the largest |")
    n, k = 16384, 4096
    q, scale, bias = torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n) + 0.1, torch.zeros(n)
    print(f"\nmemory a packed ({n}, {k}) int8 weight adds ({n * k / 2**20:.0f} MiB of int8):")
    for engine in ("fbgemm", "onednn"):
        mib = packed_mib(lambda: pack_int8(q, scale, bias, engine))  # noqa: B023
        print(f"  torch.ops.quantized.linear_prepack, engine {engine}: {mib:.0f} MiB")
    print(
        f"  torch.ops.onednn.qlinear_prepack: {packed_mib(lambda: torch.ops.onednn.qlinear_prepack(q, None)):.0f} MiB"
    )


if __name__ == "__main__":
    main()
