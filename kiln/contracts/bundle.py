"""What a rendered bundle's step ids mean to the layers that read them (the image's manifest and components, the
local cluster), besides kiln.bootstrap, which writes them."""

from __future__ import annotations

# A user step's id among the bundle's steps (KILN_INSTALL_STEPS, KILN_CONFIGURE_STEPS, markers, logs): user_NAME, which
# no kiln step's name starts with.
USER_STEP_PREFIX = "user_"

# The node health check program the bundle writes on every node that runs slurmd (configure_health), under the local
# cluster's prefix there: `kiln-launch health --drain` with no arguments, as Slurm's HealthCheckProgram takes one (the
# ParallelCluster construct names it in CustomSlurmSettings) and kiln's systemd timer runs it where the platform's
# slurm.conf takes none.
HEALTH_CHECK_PROGRAM = "/opt/kiln/bin/kiln-health-check"

# The program that checks a zipped bundle against its content digest (kiln.bootstrap.fetch.bundle_digest: the sha256 of
# one "<sha256 of the file>  <relative path>" line per file, in path order) before it unpacks anything, then unpacks it
# keeping the files' modes. Python's standard library only: every image kiln boots or bakes has python3, not unzip.
# Arguments: WHO (its messages' prefix) ARCHIVE TARGET EXPECTED_SHA256 URL ENTRY_POINT. fetch.sh carries the same
# text in its heredoc (it ships alone in user data; a test holds the two equal), and an image bake runs it before any
# step of the bundle.
VERIFIED_UNPACK = """\
import hashlib
import os
import sys
import zipfile

who, archive, target, expected, url, entry_point = sys.argv[1:7]
with zipfile.ZipFile(archive) as bundle:
    files = sorted((m for m in bundle.infolist() if not m.is_dir()), key=lambda m: m.filename)
    if any("\\n" in m.filename or "\\r" in m.filename for m in files):
        sys.exit(f"{who}: {url}: a file name in the zip holds a line break: refusing to unpack or run it")
    listing = "".join(f"{hashlib.sha256(bundle.read(m)).hexdigest()}  {m.filename}\\n" for m in files)
    actual = hashlib.sha256(listing.encode()).hexdigest()
    if actual != expected:
        sys.exit(
            f"{who}: {url}: the bundle's content has sha256 {actual}, expected {expected}: "
            "refusing to unpack or run it"
        )
    if entry_point not in {m.filename for m in files}:
        sys.exit(f"{who}: {url}: the bundle has no {entry_point}: refusing to run it")
    for member in bundle.infolist():
        path = bundle.extract(member, target)
        mode = (member.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
"""
