"""Joining the tasks of a Slurm step that `srun` started without dadtrun (direct launch).

``init()`` calls `join_step` first. Inside a task of a step (SLURM_STEP_ID and SLURM_PROCID set) that
no launcher prepared (no DADT_RANK, no DADT_CONTROLLER), it runs ``dadtrun --slurm-task-env``, which
reads the step from Slurm's variables (C++: dadtrun/slurm.cc, where the node-list forms are parsed and
tested) and prints this task's part of the launcher -> worker contract; on the step's rank 0 that
process also serves the job's rendezvous store until this process exits (its stdin closes). A step of
one task, or a process outside a step (salloc's shell, an sbatch script), runs as before. The job
secret is DADT_SECRET when the user exported one; else rank 0 makes one and hands it to the tasks
that munge proves are its user's (dadtrun/slurm_join.h), and it comes back here as DADT_SECRET.

A step of several tasks that cannot join (no DADT_SECRET and no munge, a task of another user, no
dadtrun, bad Slurm variables) raises here, on every task, instead of training as that many one-rank
jobs.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

# rank 0's store: kept referenced so that it lives (and its stdin stays open) as long as this process.
_store = None


def find_dadtrun():
    """The installed dadtrun: beside this Python (its scripts directory), else on PATH; None if absent."""
    here = os.path.join(sysconfig.get_path("scripts"), "dadtrun")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    beside = os.path.join(os.path.dirname(sys.executable), "dadtrun")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("dadtrun")


def join_step() -> None:
    global _store
    env = os.environ
    if "SLURM_STEP_ID" not in env or "SLURM_PROCID" not in env:
        return
    if "DADT_RANK" in env or "DADT_CONTROLLER" in env:
        return  # a launcher (dadtrun, or dadtrun inside the allocation) set the job up
    tasks = env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "?"))
    dadtrun = find_dadtrun()
    if dadtrun is None:
        if tasks == "1":
            return
        raise RuntimeError(
            "this is task %s of a Slurm step of %s tasks, and dadt joins them through the dadtrun "
            "program, which is not installed beside this Python nor on PATH; reinstall dadt "
            "(pip install ., which installs dadtrun) so that each task does not train alone"
            % (env.get("SLURM_PROCID"), tasks))
    proc = subprocess.Popen([dadtrun, "--slurm-task-env"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, close_fds=True)
    found = {}
    ready = False
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line == "READY":
            ready = True
            break
        if line.startswith("ERROR\t"):
            proc.wait()
            raise RuntimeError(line[len("ERROR\t"):])
        name, _, value = line.partition("=")
        found[name] = value
    if not ready:
        code = proc.wait()
        raise RuntimeError("%s --slurm-task-env ended (exit code %s) before saying how this Slurm task "
                           "joins its %s-task step" % (dadtrun, code, tasks))
    proc.stdout.close()
    if found.get("DADT_RANK") == "0":
        _store = proc  # serves the store until this process exits
    else:
        proc.stdin.close()
        proc.wait()
    for name, value in found.items():
        # torchrun's names stay as the user set them; dadt's contract is always written.
        if name.startswith("DADT_") or name not in env:
            env[name] = value
