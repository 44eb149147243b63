"""The rooms of src/ are layered (docs/architecture.md): a file includes only headers of its own room or of a
room below it, no two headers include each other through any chain, and only the room that chooses the device
(devices/) and forecast/calibrate.cpp, which times the CPU's kernels, include a backend."""
import os
import re
import sys

# Lowest first; rooms on one line are beside each other and include neither.
LAYERS = [
    ["core"],
    ["io", "dist", "data", "memory"],
    ["model", "optim", "report"],
    ["exec"],
    ["backend"],
    ["devices", "ckpt"],
    ["config"],
    ["parallel"],
    ["layout"],
    ["train", "forecast"],
    ["cli"],
]
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
CHOOSE_THE_DEVICE = ("devices/", "forecast/calibrate.cpp")

src = os.path.join(sys.argv[1], "src")
includes = {}
for folder, _, files in os.walk(src):
    for name in files:
        path = os.path.relpath(os.path.join(folder, name), src)
        text = open(os.path.join(src, path), encoding="utf-8").read()
        includes[path] = re.findall(r'^#include "([\w/.]+)"', text, re.M)

problems = []
for path, targets in sorted(includes.items()):
    room = path.split("/")[0]
    if room not in RANK:
        problems.append(f"{path}: room {room}/ is not in tests/build/check_layers.py's LAYERS")
        continue
    for target in targets:
        other = target.split("/")[0]
        if target not in includes:
            continue  # a header of the tests or of a library
        if other == "backend" and room != "backend" and not path.startswith(CHOOSE_THE_DEVICE):
            problems.append(f"{path} includes {target}: only devices/ (and forecast/calibrate.cpp) see a backend")
        elif other != room and RANK[other] >= RANK[room]:
            problems.append(f"{path} includes {target}: {other}/ is not below {room}/")

# No cycle among the headers: a depth-first walk that meets a header on its own path.
state = {}


def walk(path, chain):
    state[path] = "open"
    for target in includes.get(path, []):
        if target not in includes:
            continue
        if state.get(target) == "open":
            problems.append("include cycle: " + " -> ".join(chain + [target]))
        elif target not in state:
            walk(target, chain + [target])
    state[path] = "done"


for path in sorted(includes):
    if path not in state:
        walk(path, [path])
if problems:
    sys.exit("\n".join(problems))
print(f"{len(includes)} files in {len(RANK)} rooms: every include points down, no cycle")
