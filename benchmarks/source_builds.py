"""Measure what building enroot and pyxis from their pinned commits costs a node: the checkout, and the build and
install the bootstrap's install_enroot and install_pyxis run (kiln/bootstrap/scripts/steps), on this machine.

Usage: .venv/bin/python benchmarks/source_builds.py [--repeat N] [--mirror DIR] [--also URL=GITDIR ...] [--jobs N]

The commits and submodules come from kiln/bootstrap/artifacts.json, the versions from kiln's defaults. Without
--mirror the repositories are cloned from their URLs (internet); with --mirror DIR, GitHub's from local mirrors laid
out as DIR/<owner>+<name>/repo (git directories), and any other URL (enroot's musl submodule,
git://git.musl-libc.org/musl) from the git directory --also URL=GITDIR names. A mirror serves the same commits: each
checkout is verified by its commit id. Needs the build tools the steps install (Debian: gcc make libtool
automake, and libslurm-dev for pyxis's Slurm headers). Everything happens in a temporary directory.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.bootstrap.artifacts import artifact_table
from kiln.catalog.platforms import KILN_INSTALLS

# What the steps pass to enroot's Makefile (install_enroot.sh).
ENROOT_LAYOUT = ("prefix=/usr", "sysconfdir=/etc")
SLURM_INCLUDE = "/usr/include"


# URL -> local git directory (--also), for repositories outside GitHub.
ALSO: dict[str, str] = {}


def source(url: str, mirror: Path | None) -> str:
    """Return where to clone URL from: the URL, its mirror under MIRROR, or what --also names for it."""
    if url in ALSO:
        return ALSO[url]
    if mirror is None or not url.startswith("https://github.com/"):
        return url
    owner, name = url.removeprefix("https://github.com/").removesuffix(".git").split("/")
    return str(mirror / f"{owner}+{name}" / "repo")


def run(*args: str, cwd: Path | None = None) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


def checkout(name: str, work: Path, mirror: Path | None) -> tuple[Path, float]:
    """Check out NAME at its pinned commit with its submodules, verify the commit; return the tree and the time."""
    entry = artifact_table()[name]
    commit = entry["commit"][KILN_INSTALLS[name]]
    tree = work / name
    started = time.perf_counter()
    run("git", "clone", "-q", "--no-checkout", source(entry["url"], mirror), str(tree))
    run("git", "-C", str(tree), "checkout", "-q", "--detach", commit)
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    if head.strip() != commit:
        sys.exit(f"{name}: got commit {head.strip()}, expected {commit}")
    for path in entry["submodules"]:
        url = subprocess.run(
            ["git", "-C", str(tree), "config", "-f", ".gitmodules", f"submodule.{path}.url"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        run("git", "-C", str(tree), "config", f"submodule.{path}.url", source(url, mirror))
        run("git", "-C", str(tree), "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", path)
    return tree, time.perf_counter() - started


def build_enroot(tree: Path, jobs: int) -> float:
    started = time.perf_counter()
    run("make", "-C", str(tree), f"-j{jobs}", *ENROOT_LAYOUT, "all")
    run("make", "-C", str(tree), *ENROOT_LAYOUT, f"DESTDIR={tree / 'stage'}", "install")
    if not (tree / "stage/usr/bin/enroot").exists():
        sys.exit("enroot: the build installed no /usr/bin/enroot")
    return time.perf_counter() - started


def build_pyxis(tree: Path, jobs: int) -> float:
    started = time.perf_counter()
    run(
        "env",
        "-u",
        "VERSION",
        f"CPPFLAGS=-I{SLURM_INCLUDE}",
        "make",
        "-C",
        str(tree),
        f"-j{jobs}",
        "prefix=/usr/local",
        f"DESTDIR={tree / 'stage'}",
        "install",
    )
    if not (tree / "stage/usr/local/lib/slurm/spank_pyxis.so").exists():
        sys.exit("pyxis: the build installed no spank_pyxis.so")
    return time.perf_counter() - started


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name:<22}median {statistics.median(values):7.1f} s   min {min(values):7.1f}   max {max(values):7.1f}"
        f"   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mirror", type=Path, default=None)
    parser.add_argument("--also", action="append", default=[], metavar="URL=GITDIR")
    parser.add_argument("--jobs", type=int, default=1, help="make -j; default 1, as the nodes' steps build")
    args = parser.parse_args()
    ALSO.update(item.split("=", 1) for item in args.also)
    figures: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="kiln-source-builds-") as tmp:
            for name, build in (("enroot", build_enroot), ("pyxis", build_pyxis)):
                tree, fetched = checkout(name, Path(tmp), args.mirror)
                figures.setdefault(f"{name} checkout", []).append(fetched)
                figures.setdefault(f"{name} build+install", []).append(build(tree, args.jobs))
    versions = ", ".join(f"{name} {KILN_INSTALLS[name]}" for name in ("enroot", "pyxis"))
    print(f"source builds of {versions} (make -j{args.jobs}):")
    for name, values in figures.items():
        print(summary(name, values))


if __name__ == "__main__":
    main()
