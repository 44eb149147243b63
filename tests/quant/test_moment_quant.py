"""The 8-bit moment formats and AdamW over them (src/backend/cpu/block_quant.h, adamw_8bit.h) against a numpy
reference written here from their definitions, compared bit for bit with what quant_dump computes:

- the dynamic maps of Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (2022), signed and
  unsigned, from the paper's layout (per decade, the midpoints of equal steps of [0.1, 1]);
- OCP FP8 e4m3: decoded from its bit fields, encoded by rounding to nearest even on its exponent's grid and
  saturating at 448;
- block-wise quantizing (int8: blocks of 2048 with their absmax; fp8: blocks of 128 with absmax / 448) and
  dequantizing, on random data, data spread over many decades, zero blocks, a NaN and a short tail block;
- AdamW steps with int8 and with fp8 moments (torch.optim.AdamW's formula and order of operations, fp32,
  with its fused multiply-adds emulated exactly), on random gradients and on a gradient distribution like a
  transformer's, with weight decay switching inside blocks.

usage: test_moment_quant.py QUANT_DUMP
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

F32 = np.float32
INT8_BLOCK, FP8_BLOCK = 2048, 128
E4M3_MAX = F32(448)


# ---- the formats ---------------------------------------------------------------------------------------------

def dynamic_map(signed):
    """The 256 values, ascending: 0, 1 and, for decade i = 0..6, the midpoints of F_i equal steps of [0.1, 1]
    times 10^(i-6) (F_i = 2^i signed, each also negated; 2^(i+1) unsigned), computed in fp64, rounded once."""
    values = [0.0, 1.0]
    for i in range(7):
        steps = 2 ** i if signed else 2 ** (i + 1)
        for j in range(steps):
            magnitude = (0.1 + 0.9 * (2 * j + 1) / (2.0 * steps)) / float(10 ** (6 - i))
            values += [magnitude, -magnitude] if signed else [magnitude]
    assert len(values) == 256
    return np.sort(np.array(values, dtype=np.float64).astype(F32))


def nearest_code(values, x):
    """Index of the value nearest to x; a tie (x exactly halfway) goes to the smaller value. The midpoints of two
    fp32 values are exact in fp64, so this is exact."""
    v = values.astype(np.float64)
    midpoints = (v[:-1] + v[1:]) / 2
    assert np.all(midpoints * 2 - v[:-1] == v[1:]), "inexact midpoint"
    return np.searchsorted(midpoints, x.astype(np.float64), side="left").astype(np.uint8)


def e4m3_values():
    """Byte b = S EEEE MMM: (-1)^S * M * 2^-9 when E = 0, (-1)^S * (8 + M) * 2^(E - 10) otherwise, NaN at
    S 1111 111."""
    out = np.empty(256, dtype=F32)
    for b in range(256):
        sign, exponent, mantissa = b >> 7, (b >> 3) & 15, b & 7
        if exponent == 15 and mantissa == 7:
            out[b] = np.nan
        else:
            magnitude = mantissa * 2.0 ** -9 if exponent == 0 else (8 + mantissa) * 2.0 ** (exponent - 10)
            out[b] = math.copysign(magnitude, -1.0 if sign else 1.0)  # 0x80 is -0
    return out


def round_to_e4m3(x):
    """Nearest even on e4m3's grid (spacing 2^(e-3) in the binade 2^e, e >= -6; 2^-9 below), saturating every
    magnitude above 448 (and infinity) to 448; NaN to 0x7f; the sign bit kept, -0 too."""
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    _, e = np.frexp(a)  # a = f 2^e, f in [0.5, 1): the binade is 2^(e-1)
    spacing = np.ldexp(1.0, np.maximum(e - 1, -6) - 3)
    rounded = np.rint(a / spacing) * spacing  # both exact: powers of two; rint is nearest even
    positive = e4m3_values()[:0x7f].astype(np.float64)
    magnitude = np.searchsorted(positive, rounded).astype(np.uint8)
    assert np.all(positive[magnitude[~np.isnan(x)]] == rounded[~np.isnan(x)])
    codes = magnitude | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), codes).astype(np.uint8)


CODECS = {
    "dynamic_signed": dict(block=INT8_BLOCK, values=dynamic_map(True)),
    "dynamic_unsigned": dict(block=INT8_BLOCK, values=dynamic_map(False)),
    "e4m3": dict(block=FP8_BLOCK, values=e4m3_values()),
}


def zero_code(codec):
    return 127 if codec == "dynamic_signed" else 0


def quantize_blocks(codec, x):
    """Per block: absmax (NaN if any element is NaN); scale = absmax (int8) or absmax / 448 (fp8); bytes = the
    code of element / scale, except that a positive element never takes the unsigned map's code of 0; all zero
    codes when the scale is not positive."""
    block, values = CODECS[codec]["block"], CODECS[codec]["values"]
    codes, scales = np.empty(len(x), dtype=np.uint8), []
    for first in range(0, len(x), block):
        xb = x[first:first + block]
        absmax = np.max(np.abs(xb))
        scale = absmax / E4M3_MAX if codec == "e4m3" else absmax
        if not scale > 0:
            codes[first:first + block] = zero_code(codec)
        elif codec == "e4m3":
            codes[first:first + block] = round_to_e4m3(xb / scale)
        else:
            nearest = nearest_code(values, xb / scale)
            if codec == "dynamic_unsigned":  # a positive second moment keeps the smallest positive code
                nearest = np.where((nearest == 0) & (xb / scale > 0), np.uint8(1), nearest).astype(np.uint8)
            codes[first:first + block] = nearest
        scales.append(scale)
    return codes, np.array(scales, dtype=F32)


def dequantize_blocks(codec, codes, scales):
    block, values = CODECS[codec]["block"], CODECS[codec]["values"]
    return (values[codes] * np.repeat(scales, block)[:len(codes)]).astype(F32)


# ---- AdamW ---------------------------------------------------------------------------------------------------

def fma(a, b, c):
    """fp32 a * b + c rounded once. a * b is exact in fp64; the fp64 sum is made round-to-odd (from its exact
    error, by TwoSum), after which rounding to fp32 is the single correct rounding (53 >= 24 + 2 bits)."""
    a, b, c = (np.asarray(t, dtype=F32).astype(np.float64) for t in (a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((err != 0) & even, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def lerp(start, end, weight):
    """torch's lerp, as the kernel: the form with the smaller weight."""
    if weight < F32(0.5):
        return fma(weight, end - start, start)
    return fma(-(end - start), F32(1) - weight, end)


def adamw_step(param, grad, m, v, hp, decay_mask):
    """torch.optim.AdamW on fp32 tensors: its Python-float scalars rounded to fp32 where they meet a tensor."""
    lr, beta1, beta2, eps, wd = (float(F32(hp[k])) for k in ("lr", "beta1", "beta2", "eps", "weight_decay"))
    step = hp["step"]
    bias_correction1 = 1.0 - beta1 ** float(step)
    bias_correction2 = 1.0 - beta2 ** float(step)
    decay = np.where(decay_mask, F32(1.0 - lr * wd), F32(1.0 - lr * 0.0)).astype(F32)
    g = grad * F32(hp["grad_multiplier"])
    p = param * decay
    m_new = lerp(m, g, F32(1.0 - beta1))
    v_new = fma(v, F32(beta2), F32(1.0 - beta2) * g * g)
    denom = np.sqrt(v_new) / F32(math.sqrt(bias_correction2)) + F32(eps)
    return fma(F32(-(lr / bias_correction1)), m_new / denom, p), m_new, v_new


# ---- comparing -----------------------------------------------------------------------------------------------

DUMP = None
FAILURES = []


def dump(*args):
    subprocess.run([DUMP, *map(str, args)], check=True)


def expect_same_bits(what, actual, expected):
    a, e = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
    if a.shape != e.shape or a.tobytes() != e.tobytes():
        where = np.nonzero(a.view(np.uint8) != e.view(np.uint8))[0] if a.shape == e.shape else []
        FAILURES.append(f"{what}: differs ({len(where)} bytes, first at byte {where[0] if len(where) else '-'})")
        print("FAIL", FAILURES[-1])
    else:
        print(f"ok   {what} ({a.size} values)")


def verdict():
    """The exit code: 1, with the count, when any comparison differed."""
    if FAILURES:
        print(f"{len(FAILURES)} comparisons differ")
        return 1
    print("every comparison is bit for bit equal")
    return 0


def check_maps(tmp):
    dump("maps", tmp)
    for codec in CODECS:
        cpp = np.fromfile(os.path.join(tmp, codec + ".f32"), dtype=F32)
        expect_same_bits(f"map {codec}", cpp, CODECS[codec]["values"])
    e4m3 = CODECS["e4m3"]["values"]
    finite = e4m3[~np.isnan(e4m3)]
    expect_same_bits("e4m3 round trip", round_to_e4m3(finite), np.nonzero(~np.isnan(e4m3))[0].astype(np.uint8))


def quantize_inputs(rng):
    """name -> fp32 data, each longer than several blocks with a short tail."""
    n = 3 * INT8_BLOCK + 77
    normal = rng.standard_normal(n).astype(F32) * F32(1e-3)
    decades = (rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-12, 0, n)).astype(F32)
    special = normal.copy()
    special[:INT8_BLOCK] = 0  # a zero block in both formats
    special[INT8_BLOCK + 5] = np.nan  # poisons its block
    special[2 * INT8_BLOCK + 9] *= 1e4  # an outlier
    ties = CODECS["dynamic_signed"]["values"].astype(np.float64)
    halfway = ((ties[:-1] + ties[1:]) / 2).astype(F32)  # some are exactly midpoints: the tie rule
    with_ties = np.concatenate([np.float32([1.0]), halfway, -halfway, normal[:1000]]).astype(F32)
    return {"normal": normal, "decades": decades, "special": special, "ties": with_ties}


def check_quantize(tmp, rng):
    for name, x in quantize_inputs(rng).items():
        for codec in CODECS:
            data = np.abs(x) if codec == "dynamic_unsigned" else x
            path, prefix = os.path.join(tmp, "x.f32"), os.path.join(tmp, "q")
            data.tofile(path)
            dump("quantize", codec, path, prefix)
            codes, scales = quantize_blocks(codec, data)
            expect_same_bits(f"quantize {codec} {name}: codes", np.fromfile(prefix + ".codes", np.uint8), codes)
            expect_same_bits(f"quantize {codec} {name}: scales", np.fromfile(prefix + ".scales", F32), scales)
            expect_same_bits(f"dequantize {codec} {name}", np.fromfile(prefix + ".back", F32),
                             dequantize_blocks(codec, codes, scales))


def transformer_like(rng, n):
    """Gradients as a transformer's look: tensors whose scales span four decades, heavy-tailed (Student-t, 3
    degrees of freedom) within each, and rows of exact zeros (embedding rows of tokens not in the batch)."""
    g = np.empty(n, dtype=F32)
    first = 0
    while first < n:
        size = min(n - first, int(rng.integers(200, 3000)))
        g[first:first + size] = rng.standard_t(3, size) * 10.0 ** rng.uniform(-6, -2)
        if rng.random() < 0.3:
            g[first:first + size // 4] = 0
        first += size
    return g


def make_gradients(rng, kind, n):
    if kind == "transformer":
        return transformer_like(rng, n)
    return rng.standard_normal(n).astype(F32) * F32(1e-2)


def check_adamw(tmp, rng, fmt, gradients):
    n = 4 * INT8_BLOCK + 333
    check_adamw_steps(tmp, rng, fmt, gradients + " gradients", [make_gradients(rng, gradients, n) for _ in range(4)])


def check_adamw_steps(tmp, rng, fmt, what_gradients, grads):
    """Three AdamW steps with grads[1:], from moments made of grads[0] and random weights; the weight decay
    switches inside blocks."""
    n = len(grads[0])
    codecs = ("dynamic_signed", "dynamic_unsigned") if fmt == "int8" else ("e4m3", "e4m3")
    param = rng.standard_normal(n).astype(F32) * F32(0.02)
    m_codes, m_scales = quantize_blocks(codecs[0], (grads[0] * F32(0.1)).astype(F32))
    v_codes, v_scales = quantize_blocks(codecs[1], (grads[0] * grads[0] * F32(0.05)).astype(F32))
    runs = np.array([0, 1, 3000, 0, 3001, 1, 7000, 0], dtype=np.int64)
    decay_mask = np.ones(n, dtype=bool)
    decay_mask[3000:3001] = False
    decay_mask[7000:] = False
    for step in (1, 2, 3):
        grad = grads[step]
        hp = dict(lr=1e-3, beta1=0.9 if step != 3 else 0.2, beta2=0.95, eps=1e-8, weight_decay=0.1, step=step + 4,
                  grad_multiplier=0.37 if step == 2 else 1.0)
        for name, a in (("param.f32", param), ("grad.f32", grad), ("m.codes", m_codes), ("m.scales", m_scales),
                        ("v.codes", v_codes), ("v.scales", v_scales), ("runs.i64", runs)):
            a.tofile(os.path.join(tmp, name))
        # Each hyperparameter as the exact decimal of its fp32 value, so both sides start from the same floats.
        exact = [float(F32(hp[k])) for k in ("lr", "beta1", "beta2", "eps", "weight_decay")]
        dump("adamw", fmt, tmp, *exact, hp["step"], float(F32(hp["grad_multiplier"])))
        m = dequantize_blocks(codecs[0], m_codes, m_scales)
        v = dequantize_blocks(codecs[1], v_codes, v_scales)
        param, m, v = adamw_step(param, grad, m, v, hp, decay_mask)
        m_codes, m_scales = quantize_blocks(codecs[0], m)
        v_codes, v_scales = quantize_blocks(codecs[1], v)
        what = f"adamw {fmt} {what_gradients}, step {step}"
        read = lambda name, dtype: np.fromfile(os.path.join(tmp, "out." + name), dtype)
        expect_same_bits(what + ": weights", read("param.f32", F32), param)
        expect_same_bits(what + ": m codes", read("m.codes", np.uint8), m_codes)
        expect_same_bits(what + ": m scales", read("m.scales", F32), m_scales)
        expect_same_bits(what + ": v codes", read("v.codes", np.uint8), v_codes)
        expect_same_bits(what + ": v scales", read("v.scales", F32), v_scales)
        # Continue from the C++ state (the same bits when this passes).
        param, m_codes, m_scales = read("param.f32", F32), read("m.codes", np.uint8), read("m.scales", F32)
        v_codes, v_scales = read("v.codes", np.uint8), read("v.scales", F32)


def check_fma():
    """The emulation against cases whose single rounding differs from rounding a*b and the sum separately, the
    last one also from rounding the fp64 sum: 1 + 3 2^-24 - 2^-60 lies just below an fp32 midpoint."""
    a = np.float32([1 + 2 ** -12, 2 ** 60, 3.0, 2 ** -12 * (1 + 2 ** -18)])
    b = np.float32([1 + 2 ** -12, 2 ** 60, 1 / 3, 2 ** -12 * (1 - 2 ** -18)])
    c = np.float32([-(1 + 2 ** -11), -(2 ** 120), -1.0, 1 + 2 ** -23])
    exact = [2.0 ** -24, 0.0, float(np.float64(F32(3.0)) * np.float64(F32(1 / 3)) - 1), 1 + 2 ** -23]
    expect_same_bits("fma emulation", fma(a, b, c), np.array(exact, dtype=np.float64).astype(F32))


def main():
    global DUMP
    DUMP = sys.argv[1]
    rng = np.random.default_rng(2024)
    with tempfile.TemporaryDirectory() as tmp:
        check_fma()
        check_maps(tmp)
        check_quantize(tmp, rng)
        for fmt in ("int8", "fp8"):
            for gradients in ("random", "transformer"):
                check_adamw(tmp, rng, fmt, gradients)
    return verdict()


if __name__ == "__main__":
    with np.errstate(invalid="ignore"):
        sys.exit(main())
