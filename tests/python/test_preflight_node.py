"""`agpt preflight HOST` checks what the site and the job need of the host before its ranks start: the container
image, Copper's FUSE view, the checkpoint directory's layout; a missing image fails that host, naming the image."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agpt import preflight
from conftest import ROOT, agpt_env


def _site(tmp_path: Path, **values: str) -> Path:
    """AGPT_SITE_DIR holding site `c`: the generic profile with VALUES."""
    text = (ROOT / "site/generic/profile.sh").read_text().replace("SITE_NAME=generic", "SITE_NAME=c")
    for key, value in values.items():
        text = (
            "\n".join(f"{key}={value}" if ln.startswith(f"{key}=") else ln for ln in text.splitlines()) + "\n"
        )
    d = tmp_path / "site" / "c"
    d.mkdir(parents=True)
    (d / "profile.sh").write_text(text)
    return d.parent


def test_a_missing_image_fails_the_host_naming_the_image(tmp_path: Path) -> None:
    env = agpt_env({"AGPT_SITE_DIR": str(_site(tmp_path, SITE_CONTAINER="apptainer")), "AGPT_SITE": "c",
                    "AGPT_CONTAINER_IMAGE": str(tmp_path / "pt.sif"), "AGPT_RUN_DIR": str(tmp_path / "run")})  # fmt: skip
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/apptainer").symlink_to(
        ROOT / "tests/fixtures/fake_bin/apptainer"
    )  # not the fake mpiexec
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    r = subprocess.run([str(ROOT / "bin/agpt"), "preflight", "localhost", "--timeout", "120"], env=env,
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("preflight: localhost FAILED (rc 1): preflight: node ")
    assert last.endswith(
        f"FAILED: container image {tmp_path}/pt.sif: does not exist here (job.container_image)"
    )


def test_node_needs_follow_the_profile_and_the_job(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AGPT_SITE_DIR", str(_site(tmp_path, SITE_CONTAINER="shifter",
                                                  SITE_CKPT_LAYOUT="(lustre -c 1)")))  # fmt: skip
    env = {"AGPT_SITE": "c", "AGPT_CONTAINER_IMAGE": "docker:nvcr.io/pt", "AGPT_RUN_DIR": "/r", "USER": "u",
           "AGPT_STAGED": "copper"}  # fmt: skip
    # A registry reference is the runtime's to pull; the FUSE view only once env_stage started Copper.
    assert preflight.node_needs(env) == [("fuse", f"{os.environ.get('TMPDIR') or '/tmp'}/u/copper_mount"),
                                         ("lustre", "/r/ckpt")]  # fmt: skip
    fake = tmp_path / "lfs"
    fake.write_text("#!/bin/sh\necho 'lfs getstripe: no layout' >&2; exit 61\n")
    fake.chmod(0o755)
    bad = preflight.node_problems([("lustre", "/r/ckpt"), ("image", str(tmp_path / "nope.sif"))],
                                  {"ENV_LFS": str(fake)})  # fmt: skip
    assert bad == ["checkpoint layout of /r/ckpt not found: " + f"{fake} getstripe: lfs getstripe: no layout "
                   "(SITE_CKPT_LAYOUT)", f"container image {tmp_path}/nope.sif: does not exist here "
                   "(job.container_image)"]  # fmt: skip
