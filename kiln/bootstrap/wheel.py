"""Build the node-side kiln wheel (launcher, metrics exporters, catalog; no CDK) with the standard library only."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

import kiln

KILN_DIR = Path(kiln.__file__).parent
# Node-side packages: standard library (plus torch for the launcher, prometheus_client for the exporters, which
# install_exporters adds by its pinned digest); never CDK, boto3 or pydantic.
NODE_PACKAGES = ("catalog", "launcher", "metrics")
# Console scripts of the node wheel: name -> (module file that must exist, entry point).
CONSOLE_SCRIPTS = {
    "kiln-launch": ("launcher/cli.py", "kiln.launcher.cli:main"),
    "kiln-metrics": ("metrics/cli.py", "kiln.metrics.cli:main"),
}
VERSION = "0.1.0"
# Fixed timestamps so the same sources give the same wheel (and the same asset hash).
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _node_files() -> list[tuple[str, bytes]]:
    files = [("kiln/__init__.py", (KILN_DIR / "__init__.py").read_bytes())]
    for package in NODE_PACKAGES:
        root = KILN_DIR / package
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in {".py", ".json"}:
                files.append((path.relative_to(KILN_DIR.parent).as_posix(), path.read_bytes()))
    return files


WHEEL_NAME = f"kiln-{VERSION}-py3-none-any.whl"


def wheel_bytes() -> bytes:
    """Return kiln's node wheel: the same bytes for the same sources."""
    dist_info = f"kiln-{VERSION}.dist-info"
    files = _node_files()
    metadata = f"Metadata-Version: 2.1\nName: kiln\nVersion: {VERSION}\nSummary: kiln node-side launcher\n"
    files.append((f"{dist_info}/METADATA", metadata.encode()))
    files.append(
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: kiln\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    )
    scripts = [
        f"{name} = {entry}\n" for name, (module, entry) in CONSOLE_SCRIPTS.items() if (KILN_DIR / module).is_file()
    ]
    if scripts:
        files.append((f"{dist_info}/entry_points.txt", ("[console_scripts]\n" + "".join(scripts)).encode()))
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
