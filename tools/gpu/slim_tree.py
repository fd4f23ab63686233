"""Set the zoo's weights and trajectories aside from what a GPU window's call sends, and take them back afterwards.

A call to the device tool sends the working tree as git sees it (tracked files, and untracked ones git does not
ignore) within 64 MiB together with the carried state and wheels. The zoo's compressed weights and trajectories
(``SLIM_GLOBS``: 36 of the tree's 42 MiB on 2026-11-30) are read by no window, yet they left ~1 MiB beside the full
model's 16 MiB of state, and every trajectory the zoo was to ship had to fit in that. ``slim`` takes them out of the
index (``git rm --cached``: the files stay on disk, untouched) and ignores them (``.git/info/exclude``), so a call does
not send them and ``gpu_window.tree_bytes`` (how a window measures the tree) does not count them; ``restore`` puts
them back in the index from HEAD, checks each file on disk is HEAD's, and removes the exclusion.

While the tree is slim a commit would record their deletion: ``slim`` installs a pre-commit hook that refuses every
commit (``restore`` removes it; an existing hook of another's is never overwritten: ``slim`` refuses), and the test
suite fails on a slim checkout, naming ``restore``. ``slim`` refuses a file with uncommitted changes (``restore``
takes HEAD's). ``bash tools/gpu/gpu_queue.sh carry`` slims (``SLIM_TREE=0``: not), ``... unpack`` restores.

    python tools/gpu/slim_tree.py slim       # before a window's calls
    python tools/gpu/slim_tree.py restore    # after them
    python tools/gpu/slim_tree.py status     # slim or not, and what is set aside
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLIM_GLOBS = (
    "hooked_clip1d/pretrained/weights/*.safetensors.xz",
    "hooked_clip1d/pretrained/trajectories/*.safetensors.xz",
)
MARK = "# hooked-clip1d slim_tree: set aside for a GPU window; python tools/gpu/slim_tree.py restore"
END = "# hooked-clip1d slim_tree: end"
HOOK = f"""#!/bin/sh
{MARK}
echo "the working tree is slim for a GPU window (the zoo's weights and trajectories are out of the index):" >&2
echo "  python tools/gpu/slim_tree.py restore   # then commit" >&2
exit 1
"""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def _path(root: Path, what: str) -> Path:
    """A file of the repository's git directory (``git rev-parse --git-path``), made absolute."""
    p = Path(_git(root, "rev-parse", "--git-path", what).strip())
    return p if p.is_absolute() else root / p


def aside_files(root: Path = ROOT) -> list[str]:
    """The files ``slim`` sets aside: HEAD's files matching ``SLIM_GLOBS``, in name order."""
    names = _git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, g) for g in SLIM_GLOBS))


def aside_bytes(root: Path = ROOT) -> int:
    """Bytes of the files ``slim`` sets aside (as they are on disk): what a slim tree saves a call."""
    return sum((root / f).stat().st_size for f in aside_files(root) if (root / f).is_file())


def slimmed(root: Path = ROOT) -> list[str]:
    """The files set aside now (listed in ``.git/info/exclude`` between the marks), or [] when the tree is whole."""
    exclude = _path(root, "info/exclude")
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if MARK not in lines:
        return []
    block = lines[lines.index(MARK) + 1 : lines.index(END) if END in lines else len(lines)]
    return [line.lstrip("/") for line in block if line.strip()]


def slim(root: Path = ROOT) -> list[str]:
    """Set the zoo's weights and trajectories aside (module docstring); returns them. Already slim: nothing done."""
    if slimmed(root):
        return slimmed(root)
    files = aside_files(root)
    changed = _git(root, "status", "--porcelain", "--", *files).splitlines() if files else []
    if changed:
        raise RuntimeError(f"not slimmed: uncommitted changes to files it would set aside: {changed[:5]}")
    hook = _path(root, "hooks/pre-commit")
    if hook.exists() and MARK not in hook.read_text():
        raise RuntimeError(f"not slimmed: {hook} is another pre-commit hook; it would be replaced")
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(HOOK)
    hook.chmod(0o755)
    exclude = _path(root, "info/exclude")
    exclude.parent.mkdir(parents=True, exist_ok=True)
    before = exclude.read_text() if exclude.exists() else ""
    block = "\n".join([MARK, *(f"/{f}" for f in files), END])
    exclude.write_text(before + ("" if not before or before.endswith("\n") else "\n") + block + "\n")
    if files:
        _git(root, "rm", "-q", "--cached", "--", *files)
    return files


def restore(root: Path = ROOT) -> list[str]:
    """Put the files ``slim`` set aside back in the index (from HEAD), check each on disk is HEAD's, drop the
    exclusion and the hook; returns them. A whole tree: nothing done."""
    files = slimmed(root)
    if files:
        _git(root, "reset", "-q", "HEAD", "--", *files)
        moved = _git(root, "status", "--porcelain", "--", *files).splitlines()
        if moved:
            raise RuntimeError(f"restored into the index, but these differ from HEAD on disk: {moved[:5]}")
    exclude = _path(root, "info/exclude")
    if exclude.exists():
        lines = exclude.read_text().splitlines()
        if MARK in lines:
            end = lines.index(END) + 1 if END in lines else len(lines)
            lines = lines[: lines.index(MARK)] + lines[end:]
            exclude.write_text("".join(f"{line}\n" for line in lines))
    hook = _path(root, "hooks/pre-commit")
    if hook.exists() and MARK in hook.read_text():
        hook.unlink()
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=("slim", "restore", "status"))
    a = ap.parse_args(argv)
    if a.cmd == "slim":
        files = slim()
        print(f"slim: {len(files)} files set aside ({aside_bytes() / 2**20:.1f} MiB); restore after the window")
    elif a.cmd == "restore":
        files = restore()
        print(f"restored: {len(files)} files back in the index" if files else "the tree was whole: nothing to do")
    else:
        files = slimmed()
        print(
            f"slim: {len(files)} files set aside"
            if files
            else f"whole ({len(aside_files())} files slim would set aside)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
