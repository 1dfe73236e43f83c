"""Train canary candidates side by side on a lent GPU host, in time-boxed calls.

The recall curriculum's first stage ends (``until``) once a candidate has learnt to
recall; when that comes varies from seed to seed and run to run (a plateau of ~1,000 to
over 3,000 steps on an H200), so several seeds start together and the first to escape
the plateau keeps the GPU: the others are stopped a grace period later. At the
deadline every candidate still running is stopped with SIGTERM, which makes the builder
save ``resume.pt``; each candidate's folder comes back as ``OUT/NAME.tar``, and the next
call continues them (``--from`` a folder holding those tars).

    python3 benchmarks/canary_gpu.py OUT --deadline 540 [--from DIR] --plan benchmarks/canary-plan.txt
    python3 benchmarks/canary_gpu.py OUT --builder images/canary/build_nemotronh.py --plan benchmarks/nemotronh-plan.txt

Each candidate: a name, then the builder's arguments (images/canary/build_canary.py, or
``--builder``'s; ``--device cuda`` is added); its log is ``train.log`` in its folder. The
host needs torch and transformers.

``--finish-file``: once it exists, each running candidate is stopped and started again
with its recipe cut where it stood (``cut_recipe``), so it goes on to its MTP head and its
report and comes back a finished build: a lease ends at a time, not at a step count, and a
stage's speed beside a lease's engines is not known in advance.

``--save-every``: every so many seconds each build is stopped, its folder (with resume.pt)
written to ``OUT/NAME.tar`` and the build resumed, so a poll call can send a stage in
progress back (benchmarks/gpu_lease_out.sh): a lent host that stops answering takes only
what came after (2026-12-05: one took two builders' ~9 minutes, no stage ended). Each resume
starts AdamW's moments afresh behind a 50-step warm-up, as any ``--resume`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BUILDER = Path(__file__).resolve().parent.parent / "images" / "canary" / "build_canary.py"


@dataclass
class Candidate:
    name: str
    args: list[str]
    folder: Path
    log: Path
    proc: subprocess.Popen | None = None
    last: dict = field(default_factory=dict)
    escaped_at: float | None = None
    # Why the trainer stopped it to start it again: "cut" (--finish-file) or "save" (--save-every).
    pending: str | None = None
    started_at: float = 0.0
    cut: bool = False  # started again with its recipe cut

    def read(self) -> None:
        """The newest progress record, and whether the first stage ended by its ``until``."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return
        for line in lines:
            if line.startswith("progress {"):
                rec = json.loads(line[len("progress "):])
                self.last = rec
                past = rec.get("what") == "mtp" or rec.get("stage", 0) > 0 or (
                    "ended" in rec and rec.get("mean") is not None and rec["mean"] < self.until())
                if self.escaped_at is None and past:
                    self.escaped_at = time.time()

    def until(self) -> float:
        stage = shlex.split(self.args[self.args.index("--stage") + 1])
        return float(dict(w.split("=", 1) for w in stage).get("until", "-inf"))

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def waiting(self) -> bool:
        """Stopped by the trainer to be started again (``pending``), and saved."""
        return self.pending is not None and not self.running() and (self.folder / "resume.pt").is_file()

    def stop_to_restart(self, why: str) -> None:
        self.pending = why
        self.proc.send_signal(signal.SIGTERM)  # saves resume.pt after its step

    def tar(self, out: Path) -> None:
        part = out / f"{self.name}.tar.part"
        with tarfile.open(part, "w") as tar:
            tar.add(self.folder, arcname=self.folder.name)
        part.replace(out / f"{self.name}.tar")  # a poll call never sends half a tar

    def stopped(self) -> dict:
        """Where the saved build stands: resume.pt's progress (not the log's last "stopped"
        line, which a builder killed after a stage-end save never printed)."""
        import torch

        return torch.load(self.folder / "resume.pt", map_location="cpu", weights_only=False)["progress"]

    def start(self, builder: Path, device: str, env: dict[str, str]) -> None:
        resume = ["--resume"] if (self.folder / "resume.pt").is_file() else []
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, str(builder), str(self.folder), "--device", device, *self.args, *resume]
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.started_at, self.pending = time.time(), None
        print(f"{self.name}: started{' (resumed)' if resume else ''}", flush=True)


def cut_recipe(args: list[str], stopped: dict) -> list[str]:
    """The builder's arguments with every training stage it had not ended cut to the steps it
    ran (a stage it had not begun to 0), so that ``--resume`` goes straight to the MTP
    stages, which are kept whole (a head stopped part-way trains on to its end), and then
    the report. The builders hold a stopped build to be "its recipe cut there"."""
    out, stage = list(args), 0
    for i, flag in enumerate(args[:-1]):
        if flag == "--stage":
            if not stopped["ended"]["train"][stage]:
                out[i + 1] = re.sub(r"\bsteps=\d+", f"steps={stopped['train'][stage]}", args[i + 1])
            stage += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("candidates", nargs="*", help="'NAME builder-args...'")
    p.add_argument("--plan", type=Path, default=None, help="a file of candidates, one a line ('#' comments)")
    p.add_argument("--deadline", type=float, default=540, help="seconds from start to stop everything")
    p.add_argument("--device", default="cuda")
    p.add_argument("--grace", type=float, default=60, help="seconds the others run on after one escapes")
    p.add_argument("--builder", type=Path, default=BUILDER, help="the canary builder the candidates run")
    p.add_argument("--stop-file", type=Path, default=None,
                   help="stop as at the deadline once this file exists (a run in the background, ended from a later call)")
    p.add_argument("--finish-file", type=Path, default=None,
                   help="once this file exists, cut each candidate's recipe where it stands: its MTP head and report next")
    p.add_argument("--save-every", type=float, default=None,
                   help="seconds: stop, tar (OUT/NAME.tar) and resume each build this often")
    p.add_argument("--from", dest="origin", type=Path, default=None, help="folder of NAME.tar from an earlier call")
    a = p.parse_args()
    t0 = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONUNBUFFERED": "1"}
    specs = list(a.candidates)
    if a.plan is not None:
        specs += [line for line in a.plan.read_text().splitlines() if line.strip() and not line.startswith("#")]
    cands = []
    for spec in specs:
        name, *args = shlex.split(spec)
        folder = Path(f"/tmp/canary-{name}")
        cands.append(Candidate(name, args, folder, folder / "train.log"))
    if a.origin is not None:
        # Continue only what came back; of those, only the escaped ones if any escaped.
        back = [c for c in cands if (a.origin / f"{c.name}.tar").is_file()]
        for c in back:
            with tarfile.open(a.origin / f"{c.name}.tar") as tar:
                tar.extractall("/tmp", filter="data")
            c.read()
        escaped = [c for c in back if c.escaped_at is not None]
        cands = escaped or back
    for c in cands:
        if not (c.folder / "resume.pt").is_file() and (c.folder / "model.safetensors").is_file():
            # Finished in an earlier call (the builder writes the weights last and removes
            # resume.pt): its folder comes back as it is, not trained again from scratch.
            print(f"{c.name}: finished earlier", flush=True)
            continue
        c.start(a.builder, a.device, env)
    shown = 0.0
    stopped_at: float | None = None
    stop = False
    # A build waiting to be started again is left as it is once everything stops.
    while any(c.running() or (c.waiting() and not stop) for c in cands):
        time.sleep(2)
        now = time.time()
        for c in cands:
            c.read()
        stop = now - t0 > a.deadline or (a.stop_file is not None and a.stop_file.exists())
        finish = a.finish_file is not None and a.finish_file.exists()
        for c in cands if not stop else []:
            if c.running() and finish and not c.cut and c.pending != "cut":
                c.stop_to_restart("cut")
            elif c.running() and a.save_every and c.pending is None and now - c.started_at > a.save_every:
                c.stop_to_restart("save")
            elif c.waiting():
                if finish and not c.cut:  # also one stopped to be saved when the file came
                    c.args, c.cut = cut_recipe(c.args, c.stopped()), True
                    print(f"{c.name}: cut to {[c.args[i + 1] for i, f in enumerate(c.args) if f == '--stage']}",
                          flush=True)
                else:
                    c.tar(a.out)
                    print(f"{c.name}: saved to {a.out / c.name}.tar", flush=True)
                c.start(a.builder, a.device, env)
        first = min((c.escaped_at for c in cands if c.escaped_at), default=None)
        for c in cands:
            late = first is not None and c.escaped_at is None and now - first > a.grace
            if c.running() and (late or stop):
                c.proc.send_signal(signal.SIGTERM)  # saves resume.pt after its step
        if now - shown > 60:
            shown = now
            print(f"{now - t0:4.0f}s " + " | ".join(
                f"{c.name} {c.last.get('what', '-')}{c.last.get('stage', '')}:{c.last.get('step', 0)} "
                f"{c.last.get('mean', 0) or 0:.3f}{'*' if c.escaped_at else ''}{'' if c.running() else ' done'}"
                for c in cands), flush=True)
        if stop and stopped_at is None:
            stopped_at = now
        if stopped_at is not None and now - stopped_at > 50:
            for c in cands:
                if c.running():
                    c.proc.kill()
    summary = {}
    for c in cands:
        c.read()
        summary[c.name] = {"rc": c.proc.returncode if c.proc else None, "escaped": c.escaped_at is not None,
                           "last": c.last}
        report = c.folder / "canary-report.json"
        if report.is_file():
            summary[c.name]["report"] = json.loads(report.read_text())
        if c.folder.is_dir():
            c.tar(a.out)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
