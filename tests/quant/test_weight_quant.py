"""The base-weight quantizers (src/backend/cpu/weight_quant.h) against a numpy reference written here from their
definitions, compared bit for bit with what quant_dump computes:

- NF4 (Dettmers et al., "QLoRA", 2023): the 16 values are the normalized quantiles of N(0, 1), 8 from
  linspace(offset, 1/2, 9) for the positive side and 7 from linspace(offset, 1/2, 8) for the negative one, with
  offset 0.9677083 and an exact zero. memtrain holds the published fp32 table; derived here with the standard
  library's inverse normal CDF, it agrees to 2e-7 (inverse CDFs differ in their last bits, so not bit for bit);
- nf4 blocks of 64 with their absmax, each element the nearest NF4 value to element / absmax (a tie to the
  smaller), two to a byte, the first in the high nibble; int8 blocks of 64, element / (absmax / 127) rounded to
  nearest even;
- double quantization: the absmaxes' mean as offset (an fp64 sum in index order), absmax - offset quantized
  with the signed dynamic map in blocks of 256, read back with one fused multiply-add;
- dequantizing all of a tensor, and an odd range of it in fp32 and in bf16 (nearest even).

usage: test_weight_quant.py QUANT_DUMP
"""
import os
import sys
import tempfile
from statistics import NormalDist

import numpy as np

import test_moment_quant as quant

F32 = np.float32
BLOCK, ABSMAX_BLOCK = 64, 256
NF4_OFFSET = 0.9677083


def nf4_from_definition():
    inv = NormalDist().inv_cdf
    positive = [inv(p) for p in np.linspace(NF4_OFFSET, 0.5, 9)[:-1]]
    negative = [-inv(p) for p in np.linspace(NF4_OFFSET, 0.5, 8)[:-1]]
    values = np.sort(np.array(positive + [0.0] + negative))
    return values / values.max()


def check_nf4_table(tmp):
    quant.dump("maps", tmp)
    table = np.fromfile(os.path.join(tmp, "nf4.f32"), dtype=F32)
    error = np.max(np.abs(table.astype(np.float64) - nf4_from_definition()))
    exact = table[7] == 0 and table[0] == -1 and table[15] == 1 and np.all(np.diff(table) > 0)
    print(f"{'ok  ' if error <= 2e-7 and exact else 'FAIL'} nf4 table against its definition: max error {error:.2e}")
    if not (error <= 2e-7 and exact):
        quant.FAILURES.append("nf4 table")
    return table


def blocks_of(x, block):
    return [x[first:first + block] for first in range(0, len(x), block)]


def quantize(x, fmt, nf4):
    absmax = np.array([np.max(np.abs(b)) for b in blocks_of(x, BLOCK)], dtype=F32)
    codes = []
    for b, a in zip(blocks_of(x, BLOCK), absmax):
        if fmt == "int8":
            scale = F32(a) / F32(127)
            codes.append(np.rint(b / scale).astype(np.int8).view(np.uint8) if scale > 0 else np.zeros(len(b), np.uint8))
        else:
            codes.append(quant.nearest_code(nf4, b / a if a > 0 else np.zeros(len(b), F32)))
    codes = np.concatenate(codes)
    if fmt == "nf4":
        padded = np.append(codes, np.uint8(0)) if len(codes) % 2 else codes
        codes = (padded[0::2] << 4 | padded[1::2]).astype(np.uint8)
    return codes, absmax


def double_quantize(absmax):
    signed = quant.dynamic_map(True)
    offset = F32(np.cumsum(absmax.astype(np.float64))[-1] / len(absmax))
    centered = (absmax - offset).astype(F32)
    codes, scales = [], []
    for b in blocks_of(centered, ABSMAX_BLOCK):
        a = np.max(np.abs(b))
        codes.append(quant.nearest_code(signed, b / a) if a > 0 else np.full(len(b), 127, np.uint8))
        scales.append(a)
    codes, scales = np.concatenate(codes), np.array(scales, dtype=F32)
    stored = quant.fma(signed[codes], np.repeat(scales, ABSMAX_BLOCK)[:len(codes)], np.full(len(codes), offset, F32))
    return codes, scales, offset, stored


def dequantize(codes, absmax, n, fmt, nf4):
    per_element = np.repeat(absmax, BLOCK)[:n]
    if fmt == "int8":
        return (codes[:n].view(np.int8).astype(F32) * (per_element / F32(127))).astype(F32)
    nibbles = np.stack([codes >> 4, codes & 15], axis=1).ravel()[:n]
    return (nf4[nibbles] * per_element).astype(F32)


def to_bf16(x):
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def weight_inputs(rng):
    n = 5 * BLOCK * ABSMAX_BLOCK + 77  # several absmax blocks, a short tail of each kind
    normal = (rng.standard_normal(n) * 0.02).astype(F32)
    outliers = normal.copy()
    outliers[::97] *= F32(40)  # a large value in most blocks
    outliers[BLOCK:3 * BLOCK] = 0  # two zero blocks
    nf4_ties = np.float32([1.0, 0.5, -0.5, 0.25])  # a block of exact values and midpoints (scaled by absmax 1)
    return {"normal": normal, "outliers": outliers, "short": np.concatenate([nf4_ties, normal[:9]]).astype(F32)}


def check_weights(tmp, rng, nf4):
    for name, x in weight_inputs(rng).items():
        x.tofile(os.path.join(tmp, "w.f32"))
        first = min(37, len(x) // 3)
        count = min(1003, len(x) - first)
        for fmt in ("nf4", "int8"):
            for double in (0, 1):
                what, prefix = f"{fmt} {name}{' double-quantized' if double else ''}", os.path.join(tmp, "out")
                quant.dump("weights", fmt, double, os.path.join(tmp, "w.f32"), prefix, first, count)
                read = lambda suffix, dtype: np.fromfile(prefix + suffix, dtype=dtype)
                codes, absmax = quantize(x, fmt, nf4)
                quant.expect_same_bits(what + ": codes", read(".codes", np.uint8), codes)
                if double:
                    a_codes, a_scales, offset, absmax = double_quantize(absmax)
                    quant.expect_same_bits(what + ": absmax codes", read(".absmax_codes", np.uint8), a_codes)
                    quant.expect_same_bits(what + ": absmax scales", read(".absmax_scales", F32), a_scales)
                    quant.expect_same_bits(what + ": absmax offset", read(".absmax_offset", F32), np.float32([offset]))
                else:
                    quant.expect_same_bits(what + ": absmax", read(".absmax", F32), absmax)
                back = dequantize(codes, absmax, len(x), fmt, nf4)
                quant.expect_same_bits(what + ": dequantized", read(".back", F32), back)
                quant.expect_same_bits(what + ": a range", read(".range.f32", F32), back[first:first + count])
                quant.expect_same_bits(what + ": a range in bf16", read(".range.bf16", np.uint16),
                                       to_bf16(back[first:first + count]))


def main():
    quant.DUMP = sys.argv[1]
    rng = np.random.default_rng(64)
    with tempfile.TemporaryDirectory() as tmp:
        nf4 = check_nf4_table(tmp)
        check_weights(tmp, rng, nf4)
    return quant.verdict()


if __name__ == "__main__":
    with np.errstate(invalid="ignore", divide="ignore"):
        sys.exit(main())
