"""Generate the Python protobuf and gRPC code from proto/ into the snapview_proto package.

This is the only way generated code enters the tree; never edit snapview_proto by hand. The
generated modules import each other as ``snapview.v1.x_pb2``; we rewrite those imports to live
under ``snapview_proto`` so that no top-level ``snapview`` package is needed.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "snapview_proto"
IMPORT_RE = re.compile(r"^from snapview\.v1 import", re.MULTILINE)


def main() -> int:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={OUT}",
        f"--pyi_out={OUT}",
        f"--grpc_python_out={OUT}",
        *protos,
    ]
    if protoc.main(args) != 0:
        print("protoc failed", file=sys.stderr)
        return 1
    for path in OUT.rglob("*.py"):
        text = path.read_text()
        fixed = IMPORT_RE.sub("from snapview_proto.snapview.v1 import", text)
        if fixed != text:
            path.write_text(fixed)
    for pkg in [OUT, *[p for p in OUT.rglob("*") if p.is_dir()]]:
        (pkg / "__init__.py").touch()
    print(f"generated {len(protos)} proto files into {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
