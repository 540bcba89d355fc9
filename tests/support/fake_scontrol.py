"""A scontrol on PATH that logs each call's argv and answers `show job` as Slurm does."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def fake_scontrol(tmp_path: Path, *, requeue: str = "1", batch: str = "1") -> tuple[dict[str, str], Path]:
    """Put a scontrol on PATH that logs its argv (one line each) and answers `show job` with Requeue=REQUEUE and
    BatchFlag=BATCH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "scontrol.log"
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> "{log}"\n'
        'if [ "$1" = show ]; then\n'
        f'  echo "JobId=77 JobName=llm UserId=u(1) Requeue={requeue} Restarts=0 BatchFlag={batch}"\n'
        "fi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, log
