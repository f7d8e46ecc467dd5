"""Generate the Python protobuf and gRPC code from proto/ into the snapview_proto package.

This is the only way generated code enters the tree; never edit snapview_proto by hand. The
generated modules import each other as ``snapview.v1.x_pb2``; we rewrite those imports to live
under ``snapview_proto`` (``snapview`` is the application package).

The generated code is committed, so a plain ``pip install`` of the repository works without
grpcio-tools (temporalio's Python SDK does the same). ``--check`` (run by ``make lint``)
regenerates into a temporary directory and fails if that differs from what is committed: a
changed .proto without regenerated code, or a hand edit, never reaches main.

    python scripts/gen_protos.py           # regenerate snapview_proto/
    python scripts/gen_protos.py --check   # exit 1 if snapview_proto/ is not what proto/ gives
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "snapview_proto"
IMPORT_RE = re.compile(r"^from snapview\.v1 import", re.MULTILINE)


def generate(out: Path) -> int:
    """Generate every .proto under proto/ into ``out`` (emptied first); returns how many."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out.rglob("*.py"):
        text = path.read_text()
        fixed = IMPORT_RE.sub("from snapview_proto.snapview.v1 import", text)
        if fixed != text:
            path.write_text(fixed)
    for pkg in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (pkg / "__init__.py").touch()
    return len(protos)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def check() -> int:
    """0 if snapview_proto/ is exactly what proto/ generates, else 1 naming the differences."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "snapview_proto"
        generate(fresh)
        want, have = _files(fresh), _files(OUT) if OUT.exists() else {}
    diff = sorted(n for n in want.keys() | have.keys() if want.get(n) != have.get(n))
    if diff:
        print(
            "snapview_proto/ is not what proto/ generates; run `make proto` and commit. "
            f"Differs: {', '.join(diff)}",
            file=sys.stderr,
        )
        return 1
    print(f"snapview_proto/ matches proto/ ({len(want)} files)")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        return check()
    if argv:
        print(f"usage: {sys.argv[0]} [--check]", file=sys.stderr)
        return 2
    n = generate(OUT)
    print(f"generated {n} proto files into {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
