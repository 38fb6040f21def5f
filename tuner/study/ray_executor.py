"""The Ray executor: a study's trials on a Ray cluster, several at once, one per free GPU slot.

Design: Ray *tasks* fed by the tuner's own driver (``tuner.study.driver``), not Ray Tune +
OptunaSearch. The driver is the only process that touches the Optuna storage, so trials are
recorded exactly as in local runs (constraints, user attrs, artifacts — OptunaSearch drops
constraints), baselines are enqueued once by ``tune start`` (OptunaSearch re-enqueues
points_to_evaluate on every restore), and there is no searcher state to pickle: restoring after the
driver dies is ``tune resume --backend ray``, which fails the orphaned RUNNING trials, reaps their
engines and re-queues them. Each task asks Ray for the GPUs its launch takes (``EngineSpec.gpus``);
Ray sets its CUDA_VISIBLE_DEVICES, and the task picks its own port.
"""

from __future__ import annotations

import os
from typing import Any

from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tuner.runtime import orphans
from tuner.study.executors import EXECUTORS, Finished, Hooks, reap_orphans
from tuner.study.task import TrialTask, execute
from tuner.trial.runner import TrialOutcome

# Files a task sends back, so a driver on another node can attach them as artifacts.
_RETURNED_FILES = 8 << 20


def _run_task(task: TrialTask) -> tuple[TrialOutcome, dict[str, str], dict[str, bytes]]:
    """Body of the Ray task: runs on a worker node, in a worker process."""
    placement = {"node": os.uname().nodename,
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    outcome = execute(task)
    files = {}
    for path in task.trial_dir.glob("*"):
        if path.is_file() and path.stat().st_size <= _RETURNED_FILES:
            files[path.name] = path.read_bytes()
    return outcome, placement, files


def _materialize(task: TrialTask, files: dict[str, bytes]) -> None:
    task.trial_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = task.trial_dir / name
        if not target.exists():
            target.write_bytes(data)


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("TUNER_CACHE", "TUNER_STUDIES_DIR")}


@EXECUTORS.register("ray")
class RayExecutor:
    def __init__(self, handle: Any = None, *, address: str | None = None,
                 max_concurrent: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError("--backend ray needs Ray: pip install 'tuner[ray]'") from None
        self._ray = ray
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True, runtime_env={"env_vars": _forwarded_env()})
        self._gpus = int(ray.cluster_resources().get("GPU", 0))
        self.slots = max_concurrent or max(1, self._gpus)
        self._remote = ray.remote(_run_task)
        self._tasks: dict[Any, TrialTask] = {}

    def submit(self, task: TrialTask, hooks: Hooks) -> Any:
        gpus = load_engine(task.engine).gpus(task.knobs, task.omit) if self._gpus else 0
        ref = self._remote.options(num_gpus=gpus, num_cpus=0.5).remote(task)
        self._tasks[ref] = task
        return ref

    def wait(self) -> Finished:
        (ref,), _ = self._ray.wait(list(self._tasks), num_returns=1)
        task = self._tasks.pop(ref)
        try:
            outcome, placement, files = self._ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a HarnessError in the task, or the worker died
            return Finished(ref, error=exc)
        _materialize(task, files)
        return Finished(ref, outcome, placement=placement)

    def cancel(self, keys: list[Any], timeout_s: float = 15) -> None:
        """Force-cancelled tasks die without their cleanup: reap the engines they left here."""
        for ref in keys:
            self._ray.cancel(ref, force=True)
        self._ray.wait(keys, num_returns=len(keys), timeout=timeout_s)
        orphans.reap()

    def reap(self) -> list[str]:
        return reap_orphans()

    def close(self) -> None:
        self._ray.shutdown()
