"""docs/architecture.md's reading path names `file:function` pairs; each file must exist under src/ and define
or declare that name, so the path a newcomer follows stays true as the code moves."""
import os
import re
import sys

root = sys.argv[1]
text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
pairs = re.findall(r"`(?:src/)?([\w/]+\.(?:cpp|h)):([\w:~]+)`", text)
if len(pairs) < 10:
    sys.exit(f"docs/architecture.md: expected the reading path's file:function pairs, found {len(pairs)}")
missing = []
for path, name in pairs:
    file = os.path.join(root, "src", path)
    if not os.path.isfile(file):
        missing.append(f"{path} (no such file)")
        continue
    source = open(file, encoding="utf-8").read()
    # Class::member is written as such in a .cpp; a plain name is a function or a table.
    if not re.search(rf"\b{re.escape(name)}\s*[(\[{{=]", source) and not re.search(
            rf"\b{re.escape(name.split('::')[-1])}\s*\(", source):
        missing.append(f"{path}:{name}")
if missing:
    sys.exit("docs/architecture.md names what the code lacks: " + ", ".join(missing))
print(f"{len(pairs)} file:function pairs, all present")
