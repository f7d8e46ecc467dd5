#!/usr/bin/env bash
# A plain `pip install` of this repository, as a user without make does it: a clean copy of the
# committed tree into a fresh virtual environment (no editable install, no dev extras), then
# `snapview --help` and `import coordinator` from outside the tree. Exits non-zero on any failure.
#
#     scripts/install_check.sh [PYTHON]
set -euo pipefail
python=${1:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$repo" archive --format=tar HEAD | tar -x -C "$work" --one-top-level=src
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q -c "$repo/requirements.lock" "$work/src"
cd "$work"
"$work/venv/bin/snapview" --help >/dev/null
"$work/venv/bin/python" -c "import coordinator, sys; assert 'lmdb' not in sys.modules; print('import coordinator: ok from', coordinator.__file__)"
if "$work/venv/bin/python" -c "import tests" 2>/dev/null; then
    echo "install-check: the tests package was installed" >&2
    exit 1
fi
echo "install-check: ok (pip install of the committed tree, snapview --help, import coordinator)"
