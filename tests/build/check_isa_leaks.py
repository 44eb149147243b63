#!/usr/bin/env python3
"""Fails when a function of a binary outside the per-level kernel builds uses an instruction above x86-64-v2.

The kernels are built once per ISA level, each in its namespace isa_<level>; everything else must run on any
x86-64-v2 CPU. An inline function or template instantiated by a level's build with the same name as the
baseline's (a COMDAT) is kept once by the linker, maybe the level's copy: this finds such a copy, and any
code built with the wrong flags, by disassembling every function and looking for VEX or EVEX instructions
(AVX and up: their mnemonics start with v, or they name ymm, zmm or mask registers).
usage: check_isa_leaks.py BINARY...
"""
import re
import subprocess
import sys

LEVEL_NAMESPACE = re.compile(r"isa_(avx2|avx512|avx512_bf16)::")
AVX = re.compile(r"^\s*[0-9a-f]+:\s+(v[a-z0-9]+)\b|%[yz]mm\d|%k[0-7]\b")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def leaks(binary):
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", binary], check=True,
                         capture_output=True, text=True).stdout
    found, name = {}, None
    for line in out.splitlines():
        m = FUNCTION.match(line)
        if m:
            name = m.group(1)
            continue
        if name and not LEVEL_NAMESPACE.search(name) and AVX.search(line):
            found.setdefault(name, line.strip())
    return found


def main():
    failed = False
    for binary in sys.argv[1:]:
        found = leaks(binary)
        for name, line in sorted(found.items()):
            print(f"{binary}: {name}: {line}")
        print(f"{binary}: {len(found)} functions outside the level builds use AVX or above")
        failed |= bool(found)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
