"""`agpt check`: every committed job script can train at the size its own launch line implies; a config
that cannot is refused with the fix; bad input is one line and exit 2."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, agpt_env
from train_util import agpt_cmd, train_env

AGPT = str(ROOT / "bin" / "agpt")
# The training scripts (the evaluation jobs, jobs/agpt_eval_*, run `agpt eval` on one node, not a launch).
SCRIPTS = sorted(
    p for p in [*ROOT.glob("jobs/*.pbs"), *ROOT.glob("jobs/*.slurm")] if "agpt train" in p.read_text()
)


def run(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`agpt ARGS`; `agpt check` (which imports torch) as a fork of the trainer tests' server (train_util)."""
    cmd = [*agpt_cmd(), *args] if args[:1] == ("check",) else [AGPT, *args]
    return subprocess.run(cmd, cwd=cwd, env=train_env(env), capture_output=True, text=True, timeout=300)


def _export(text: str, name: str) -> str | None:
    m = re.search(rf"^export {name}=(.*?)(?:\s+#.*)?$", text, re.M)
    return shlex.split(m.group(1))[0] if m else None


def launch_size(script: Path, tmp: Path) -> tuple[int, int, str, str]:
    """(ranks, ranks per node, site, config) as the script's own launch line would start them.

    The allocation comes from the script's directive (`#PBS -l select=N`, `#SBATCH --nodes=N`) less its
    FAILOVER_SPARES; the launch line (`failover_run agpt launch PROGRAM...`) is then built by the real
    `agpt launch --dry-run` on that many hosts, with the script's own AGPT_SITE and LAUNCH_* exports, and
    the rank count is read from the launcher's command line."""
    text = script.read_text()
    m = re.search(r"^#PBS -l select=(\d+)", text, re.M) or re.search(r"^#SBATCH --nodes=(\d+)", text, re.M)
    assert m, f"{script}: no node directive"
    total = int(m.group(1))
    spares = int(_export(text, "FAILOVER_SPARES") or 0)
    site, config = _export(text, "AGPT_SITE"), _export(text, "AGPT_CONFIG")
    assert site and config, f"{script}: no AGPT_SITE/AGPT_CONFIG"
    line = re.search(r"^\s*failover_run agpt launch (.*?) \|\| rc=\$\?$", text, re.M)
    assert line, f"{script}: no `failover_run agpt launch` line"
    program = [w.replace("$AGPT_CONFIG", config) for w in shlex.split(line.group(1))]
    hostfile = tmp / f"{script.name}.hosts"
    hostfile.write_text("".join(f"node{i:04d}\n" for i in range(total - spares)))
    env = {"AGPT_SITE": site, "FAILOVER_HOSTFILE": str(hostfile)}
    for name in ("LAUNCH_PPN", "LAUNCH_LAUNCHER"):
        if (v := _export(text, name)) is not None:
            env[name] = v
    r = run("launch", "--dry-run", *program, env=env)
    assert r.returncode == 0, r.stderr
    words = shlex.split(r.stdout.strip().splitlines()[-1])
    ranks = ppn = 0
    for i, w in enumerate(words):
        if w in ("-n", "-np"):
            ranks = int(words[i + 1])
        elif w in ("--ppn", "-ppn"):
            ppn = int(words[i + 1])
        elif w.startswith("--ntasks-per-node="):
            ppn = int(w.split("=", 1)[1])
        elif w.startswith("ppr:"):
            ppn = int(w.split(":")[1])
    assert ranks and ppn, r.stdout
    return ranks, ppn, site, config


def check_at_launch_size(script: Path, tmp: Path) -> tuple[int, int, subprocess.CompletedProcess[str]]:
    """`agpt check` of the script's config at the size its own launch line implies: (ranks, ppn, result)."""
    ranks, ppn, site, config = launch_size(script, tmp)
    r = run(
        "check",
        config,
        "--site",
        site,
        "--nodes",
        str(ranks // ppn),
        "--ranks-per-node",
        str(ppn),
        "--no-data",
    )
    return ranks, ppn, r


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_committed_job_script_can_train_at_its_launch_size(script: Path, tmp_path: Path) -> None:
    ranks, _, r = check_at_launch_size(script, tmp_path)
    assert r.returncode == 0, f"{script.name} ({ranks} ranks): {r.stderr}"
    assert f"= {ranks} ranks" in r.stdout


def test_the_committed_scripts_cover_every_production_config_at_scale() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"agpt_2b.pbs", "agpt_20b.pbs", "agpt_80b.pbs", "agpt_20b.slurm", "agpt_80b.slurm"} <= names


def _broken_20b(tmp: Path) -> Path:
    """The 20B config as first shipped: global batch 1024 for 384 ranks, no data path."""
    cfg = yaml.safe_load((ROOT / "jobs/configs/20b.yaml").read_text())
    cfg["train"]["global_batch"] = 1024
    cfg["data"] = {"path": ""}
    out = tmp / "20b.yaml"
    out.write_text(yaml.safe_dump(cfg))
    return out


def test_a_script_generated_from_a_broken_config_fails_the_committed_scripts_check(tmp_path: Path) -> None:
    cfg = _broken_20b(tmp_path)
    script = tmp_path / "agpt_20b.pbs"
    r = run("jobgen", "--site", "aurora", "--scheduler", "pbs", "--no-check", "-o", str(script), str(cfg))
    assert r.returncode == 0, r.stderr
    ranks, ppn, r = check_at_launch_size(script, tmp_path)
    assert (ranks, ppn) == (384, 12)
    assert r.returncode == 2
    assert f"{cfg}: train.global_batch: 1024 on 384 data-parallel ranks" in r.stderr
    assert "use train.global_batch 768 or 1152" in r.stderr
    assert f"{cfg}: data.path: empty" in r.stderr


def test_jobgen_refuses_the_first_20b_aurora_config_with_the_fix(tmp_path: Path) -> None:
    cfg = _broken_20b(tmp_path)
    out = tmp_path / "job.pbs"
    r = run("jobgen", "--site", "aurora", "--scheduler", "pbs", "-o", str(out), str(cfg))
    assert r.returncode == 2
    assert "global 1024 = 384 data ranks" in r.stderr  # the table, on stderr
    assert "use train.global_batch 768 or 1152" in r.stderr
    assert "not writing a job script" in r.stderr
    assert not out.exists()


def test_the_table_fits_one_screen_and_names_every_figure() -> None:
    r = run("check", "jobs/configs/80b.yaml", "--site", "aurora", "--no-data")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 24 and max(map(len, lines)) <= 160
    assert lines[0] == "agpt check jobs/configs/80b.yaml on aurora: 256 nodes x 12 ranks = 3072 ranks"
    text = r.stdout
    for want in ("3072 ranks = 768 data x 4 tensor", "79.2 B parameters (meta device)", "of 64 GiB per device",
                 "GB/s (SITE_FS_BW_GBPS)", "6.29 M per step", "not opened here"):  # fmt: skip
        assert want in text, want


def _one_error(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    assert "unknown site 'atlantis'" in _one_error(run("check", "jobs/configs/2b.yaml", "--site", "atlantis"))
    r = run("check", "jobs/configs/2b.yaml", "--site", "aurora", "--nodes", "0")  # a usage error: line + hint
    assert r.returncode == 2 and "--nodes: must be a whole number from 1 to 100000, got '0'" in r.stderr
    line = _one_error(run("check", "jobs/configs/80b.yaml", "--site", "aurora", "--nodes", "1", "--no-data"))
    assert line.startswith("agpt check: jobs/configs/80b.yaml: model: cannot fit in 64 GiB")
    assert (
        "SITE_DEVICE_MEM_GIB" in line and "at any batch" in line and re.search(r"short by [0-9.]+ GiB", line)
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {dim: 64, n_heads: 4, n_kv_heads: 2}\ntrain: {micro_batch: 3, global_batch: 8}\n")
    assert "train.micro_batch: 3 does not divide train.global_batch 8" in _one_error(
        run("check", str(bad), "--site", "generic")
    )


def _manifest(vocab: int) -> dict[str, object]:
    """The smallest manifest whose shape `agpt blend` would write (the check reads its tokenizer and shape)."""
    return {
        "format": "agpt-blend-1",
        "tokenizer": {"vocab_size": vocab, "sha256": "0" * 64, "path": "tok.model"},
        "files": [{"prefix": "shard", "bin_bytes": 0, "idx_sha256": "0" * 64}],
        "index_files": {},
        "seq_len": 64,
        "num_samples": 9,
    }


def test_a_manifest_from_another_tokenizer_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    blend = tmp_path / "blend"
    blend.mkdir()
    (blend / "manifest.json").write_text(json.dumps(_manifest(50257)))
    cfg = yaml.safe_load((ROOT / "jobs/configs/tiny.yaml").read_text())
    cfg["data"] = {"path": str(blend)}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    line = _one_error(run("check", str(path), "--site", "generic"))
    assert f"{blend}/manifest.json: tokenizer.vocab_size 50257 does not match model.vocab_size 512" in line
    (blend / "manifest.json").write_text(json.dumps(_manifest(512)))
    r = run("check", str(path), "--site", "generic")
    assert r.returncode == 0, r.stderr
    assert "9 samples, vocab 512, seq 64" in r.stdout
    r = run("check", str(tmp_path / "nope.yaml"), "--site", "generic")
    assert "nope.yaml: cannot read" in _one_error(r)


def test_the_run_directory_is_checked_writable_and_its_checkpoints_readable(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "ckpt" / "step-20").mkdir(parents=True)
    (run_dir / "ckpt" / "step-20" / ".complete").write_text('{"step": 20, "time": 1, "world_size": 2}')
    r = run("check", "jobs/configs/tiny.yaml", "--site", "generic", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert "resumes from step 20 (saved on 2 ranks)" in r.stdout
    assert "SYNTHETIC tokens" in r.stdout
    (run_dir / "ckpt" / "step-30").mkdir()
    (run_dir / "ckpt" / "step-30" / ".complete").write_text('{"step": 20}')  # a copy of step 20, made by hand
    line = _one_error(run("check", "jobs/configs/tiny.yaml", "--site", "generic", "--run-dir", str(run_dir)))
    assert "step-30/.complete: step 20 in a directory named step-30; move it aside" in line
    # A marker that does not parse is the trainer's resume step (data checked by size): said, not refused
    # (tests/python/test_ckpt_rule.py holds every tool to the same step).
    (run_dir / "ckpt" / "step-30" / ".complete").write_text("{not json")
    r = run("check", "jobs/configs/tiny.yaml", "--site", "generic", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert (
        "resumes from step 30 (saved on ? ranks)" in r.stdout and "step-30/.complete: unreadable" in r.stdout
    )


def test_check_reads_a_config_as_the_trainer_does(tmp_path: Path) -> None:
    """One reader (agpt.yamlio.load_sections): `agpt check` used PyYAML's own loader, so it passed a config
    with a repeated key, which the trainer refuses, and a config that is not UTF-8 ended in a traceback."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text((ROOT / "jobs/configs/tiny.yaml").read_text() + "optim:\n  lr: 1.0e-3\n")
    line = _one_error(run("check", str(cfg), "--site", "generic"))
    assert f"{cfg}: not valid YAML (duplicate key 'optim' on line" in line
    cfg.write_bytes(b"optim:\n  lr: 3e-4 # \xe9\n")
    assert (
        _one_error(run("check", str(cfg), "--site", "generic"))
        == f"agpt: error: {cfg}: not UTF-8 text (byte 20)"
    )


def test_tensor_parallel_layout_is_checked_when_the_config_asks_for_it(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "jobs/configs/80b.yaml").read_text())
    cfg["parallel"] = {"tp": 4}
    cfg["train"]["global_batch"] = 768
    path = tmp_path / "80b.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = run("check", str(path), "--site", "aurora", "--no-data")
    assert r.returncode == 0, r.stderr
    assert "3072 ranks = 768 data x 4 tensor" in r.stdout
    cfg["parallel"] = {"tp": 5}
    path.write_text(yaml.safe_dump(cfg))
    r = run("check", str(path), "--site", "aurora", "--no-data")
    assert r.returncode == 2
    assert "parallel.tp: 5 does not divide model.n_heads 64" in r.stderr


def test_the_trainer_refuses_an_empty_data_path_unless_synthetic_is_asked_for() -> None:
    from agpt.errors import DataError
    from agpt.train import data as tdata

    with pytest.raises(DataError, match=r"data\.path: empty"):
        tdata.make_source("", 512, 64, 0, synthetic=False)
    assert isinstance(tdata.make_source("", 512, 64, 0, synthetic=True), tdata.Synthetic)


def test_a_generated_job_script_refuses_missing_data_in_seconds_before_any_launch(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "jobs/configs/tiny.yaml").read_text())
    cfg["data"] = {"path": str(tmp_path / "no-such-blend")}
    cfg["job"].update({"run_dir": str(tmp_path / "run"), "launcher": "hydra"})
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    script = tmp_path / "job.sh"
    r = run("jobgen", "--site", "generic", "--scheduler", "slurm", "-o", str(script), str(path))
    assert r.returncode == 0, r.stderr  # jobgen does not open the data: it lives on the site
    env = agpt_env()
    for k in ("SLURM_JOB_ID", "PBS_JOBID", "SCHED_KIND"):
        env.pop(k, None)
    p = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{path}: data.path: {tmp_path}/no-such-blend/manifest.json: missing" in p.stderr
    assert not list((tmp_path / "run" / "attempts").glob("*.log"))  # nothing was launched


def test_the_local_tiers_memory_per_node_is_screened_against_the_nodes_memory(tmp_path: Path) -> None:
    """On 32 Aurora nodes the 20B's local tier holds ~49 GiB of 1 TiB; on 2 Perlmutter nodes (256 GiB) it cannot,
    and the job is refused before it queues, with what would fit."""
    cfg = yaml.safe_load((ROOT / "jobs/configs/20b.yaml").read_text())
    cfg["checkpoint"]["local_interval"] = 20
    path = tmp_path / "20b-local.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = run("check", str(path), "--site", "aurora", "--no-data")
    line = next(x for x in r.stdout.splitlines() if "local tier" in x)
    assert re.match(r"\s+ok\s+local tier\s+on \(the config sets checkpoint.local_interval: 20\), 48\.6 GiB per "
                    r"node at most \(6\.9 GiB of state per node", line), line  # fmt: skip
    r = run("check", str(path), "--site", "perlmutter", "--nodes", "2", "--no-data")
    assert r.returncode == 2
    assert (f"{path}: checkpoint.local_interval: the local tier needs 778.3 GiB per node, more than 50% of 256 "
            "GiB (site/perlmutter/profile.sh: SITE_HOST_MEM_GIB) that a tmpfs holds by default: run on 13 nodes "
            "or more") in r.stderr  # fmt: skip
    r = run("check", str(path), "--site", "generic", "--nodes", "2", "--no-data")
    assert "sets no host memory (SITE_HOST_MEM_GIB)" in r.stdout


def test_check_shows_the_node_counts_a_job_can_shrink_to_and_writes_the_loops_layout(tmp_path: Path) -> None:
    """FAILOVER_SHRINK: the counts the failover loop may run on once the spares are gone, at what throughput,
    and RUN_DIR/layout.json, the facts it decides from; a site or job that turns shrink off is told so."""
    r = run("check", "--site", "perlmutter", "--nodes", "32", "--no-data", "--run-dir", str(tmp_path),
            "jobs/configs/20b.yaml")  # fmt: skip
    assert r.returncode == 0, r.stderr
    # The default floor (0.9 of the throughput) refuses the 0.86 a node lost costs here, with the numbers.
    assert "no shrink: 31 node(s): 0.86 of full throughput (7 micro-steps for 6, uneven), 27.4 nodes' worth < " \
           "FAILOVER_MIN_NODES=0.9 (28.8 of 32)" in r.stdout  # fmt: skip
    r = run("check", "--site", "perlmutter", "--nodes", "32", "--no-data", "--run-dir", str(tmp_path),
            "jobs/configs/20b.yaml", env={"FAILOVER_MIN_NODES": "0.5"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (
        "one node lost with no spare: 28 node(s) at 0.86 of full throughput (7 micro-steps, uneven)"
        in r.stdout
    )
    assert re.search(r"runs on 31-28: 0\.86u, .* 16: 0\.50 \(nodes: throughput", r.stdout), r.stdout
    lay = json.loads((tmp_path / "layout.json").read_text())
    assert {k: lay[k] for k in ("nodes", "ranks_per_node", "tp", "global_batch", "micro_batch")} == {
        "nodes": 32, "ranks_per_node": 4, "tp": 1, "global_batch": 768, "micro_batch": 1
    }  # fmt: skip
    r = run("check", "--site", "perlmutter", "--nodes", "32", "--no-data", "jobs/configs/20b.yaml",
            env={"FAILOVER_SHRINK": "0"})  # fmt: skip
    assert "shrink      off (FAILOVER_SHRINK=0): a failure with no spare left hands over" in r.stdout


@pytest.mark.parametrize("site", ["aurora", "perlmutter", "frontier"])
def test_check_prints_the_sites_staging_container_and_checkpoint_layout(site: str, tmp_path: Path) -> None:
    """The profile's choices as the job applies them, one line each; the image comes from job.container_image."""
    r = run("check", "jobs/configs/20b.yaml", "--site", site, "--no-data")
    assert r.returncode == 0, r.stderr
    rows = {ln[7:18].strip(): ln[19:] for ln in r.stdout.splitlines()[1:]}
    want = {
        "aurora": ("copper (SITE_STAGE): launch_copper.sh -v /tmp/$USER/copper_mount",
                   "apptainer (SITE_CONTAINER): no image (job.container_image): ranks run on the host",
                   "the filesystem's default (SITE_CKPT_LAYOUT empty)"),
        "perlmutter": ("yeet (SITE_STAGE): agpt yeet copies the venv to /tmp on every node",
                       "shifter (SITE_CONTAINER): no image", "lfs setstripe -E 1G -c 1 -E 10G -c 8 -E 100G -c 24 "
                       "-E -1 -c 72 RUN_DIR/ckpt (SITE_CKPT_LAYOUT)"),
        "frontier": ("sbcast (SITE_STAGE): sbcast -pf of a tar of the venv to /mnt/bb/", "apptainer (SITE_CONTAINER)",
                     "the filesystem's default"),
    }[site]  # fmt: skip
    for name, text in zip(("staging", "container", "ckpt layout"), want, strict=True):
        assert rows[name].startswith(text), (name, rows[name])
    cfg = tmp_path / "img.yaml"
    raw = yaml.safe_load((ROOT / "jobs/configs/20b.yaml").read_text())
    raw["job"]["container_image"] = "/lus/img/pt.sif"
    cfg.write_text(yaml.safe_dump(raw))
    r = run("check", str(cfg), "--site", "perlmutter", "--no-data")
    assert r.returncode == 0, r.stderr
    assert ("container   shifter (SITE_CONTAINER): shifter --image=/lus/img/pt.sif --volume=RUN_DIR:RUN_DIR "
            "--volume=AGPT_HOME:AGPT_HOME --module=gpu CMD") in r.stdout  # fmt: skip
