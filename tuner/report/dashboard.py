"""``tune dashboard``: optuna-dashboard on a study, with its artifacts, and what it cannot show.

optuna-dashboard 0.21 shows neither Optuna 5 constraints nor feasibility (its "best trial" may be a
config the engine refused), so each trial also carries a one-line Markdown note saying what
happened, and flat user attrs (``feasible``, ``failure_class``, headline metrics) that appear as
sortable columns.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any, BinaryIO

import optuna
from optuna.artifacts.exceptions import ArtifactNotFound
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import InputError
from tuner.paths import studies_dir
from tuner.record import schema
from tuner.record.storage import (
    artifact_store,
    default_url,
    open_storage,
    require_study,
    study_names,
)
from tuner.report.data import objective_name
from tuner.runtime.procgroup import bind_error

# ---- what each trial shows ---------------------------------------------------------------------

def _num(v: Any, digits: int = 1) -> str:
    return f"{v:,.{digits}f}" if isinstance(v, (int, float)) else "-"


def trial_note(trial: FrozenTrial, objective_metric: str | None = None) -> str:
    """One Markdown line: outcome, arm, objective and latency, or why the trial lost.

    Reads user attrs first (failure class and evidence, pruning rule, SLO slack), so it also works
    on a RUNNING trial whose attrs are already recorded.
    """
    ua = trial.user_attrs
    arm = ua.get(schema.ARM, "search")
    if ua.get(schema.FAILURE_CLASS):
        evidence = (ua.get(schema.FAILURE_EVIDENCE) or ua.get(schema.FAILURE_REASON) or "").strip()
        evidence = evidence.splitlines()[-1] if evidence else ""
        return (f"**infeasible: {ua[schema.FAILURE_CLASS]}** · {arm} · "
                f"`{_clip(evidence, 200)}`" if evidence else
                f"**infeasible: {ua[schema.FAILURE_CLASS]}** · {arm}")
    if schema.REUSED_FROM in ua:
        return (f"**reused** · {arm} · measured already in trial {ua[schema.REUSED_FROM]}: "
                "not launched again")
    if trial.state == TrialState.PRUNED or ua.get(schema.PRUNED_RULE):
        word = schema.status(trial)
        rule = f" ({ua[schema.PRUNED_RULE]})" if ua.get(schema.PRUNED_RULE) else ""
        why = _clip(ua.get(schema.PRUNED_REASON, ""), 200)
        return f"**{word}**{rule} · {arm} · {why}".rstrip(" ·")
    if trial.state == TrialState.FAIL:
        what = "interrupted" if ua.get(schema.INTERRUPTED) else "tuner error"
        return f"**{what}** · {arm} · {_clip(ua.get('harness_error', ''), 200)}".rstrip(" ·")
    over = {m: v for m, v in (ua.get(schema.SLO_SLACK) or {}).items() if v > 0}
    if over:
        return f"**slo-violated** · {arm} · " + ", ".join(
            f"{m} over its bound by {_num(v)}" for m, v in over.items())
    if not ua.get(schema.FEASIBLE, True) or (trial.state == TrialState.COMPLETE
                                  and not schema.is_feasible(trial)):
        return f"**{schema.status(trial)}** · {arm}"
    if objective_metric in ua:
        shown = _num(ua[objective_metric])
    else:  # several objectives, or a metric not flattened into the attrs
        shown = " / ".join(_num(v) for v in trial.values or []) or "-"
    return (f"**ok** · {arm} · {objective_metric or 'value'} {shown} · p99 TTFT "
            f"{_num(ua.get('p99_ttft_ms'))} ms"
            f" · mean TPOT {_num(ua.get('mean_tpot_ms'))} ms · output "
            f"{_num(ua.get('output_throughput'))} tok/s")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def save_trial_note(study: optuna.Study, trial: FrozenTrial, objective_metric: str | None = None
                    ) -> None:
    """Write ``trial_note`` where the dashboard shows it; works on finished trials.

    ``optuna_dashboard.save_note`` wants a live ``optuna.Trial``; building one for a finished trial
    runs the sampler's ``before_trial`` (GridSampler then writes to the finished trial and fails),
    so this goes one level down, to the function save_note itself calls.
    """
    from optuna_dashboard._note import note_ver_key, save_note_with_version
    attrs = study._storage.get_study_system_attrs(study._study_id)
    version = attrs.get(note_ver_key(trial._trial_id), 0) + 1
    save_note_with_version(study._storage, study._study_id, trial._trial_id, version,
                           trial_note(trial, objective_metric))


def write_missing_notes(study: optuna.Study) -> int:
    """Note every finished trial that has none (studies recorded before notes existed)."""
    from optuna_dashboard._note import note_ver_key
    attrs = study._storage.get_study_system_attrs(study._study_id)
    metric = None if len(study.directions) > 1 else objective_name(study)
    missing = [t for t in study.get_trials(deepcopy=False, states=(
        TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
        if note_ver_key(t._trial_id) not in attrs]
    for t in missing:
        save_trial_note(study, t, metric)
    return len(missing)


# ---- serving -----------------------------------------------------------------------------------

class _ArtifactStores:
    """The artifact stores of several studies in one storage, read as one (artifact ids are UUIDs).

    Uploads from the UI go to the first study's store: the dashboard does not say which study.
    """

    def __init__(self, stores: list[Any]):
        self.stores = stores

    def open_reader(self, artifact_id: str) -> BinaryIO:
        for store in self.stores:
            try:
                return store.open_reader(artifact_id)
            except ArtifactNotFound:
                continue
        raise ArtifactNotFound(f"artifact {artifact_id} is in no study's artifact store")

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.stores[0].write(artifact_id, content_body)

    def remove(self, artifact_id: str) -> None:
        for store in self.stores:
            store.remove(artifact_id)


def is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (socket.gaierror, ValueError):
        return False


def resolve(study: str | None, storage: str | None) -> tuple[str, list[str]]:
    """The storage URL to serve and the studies in it; a wrong name or URL is an InputError."""
    if study is not None:
        url = storage or default_url(study)
        return url, require_study(study, url)
    if storage is not None:
        names = study_names(storage)
        if not names:
            raise InputError(f"storage {storage!r} holds no study")
        return storage, names
    on_disk = sorted(p.stem for p in studies_dir().glob("*.db"))
    if len(on_disk) != 1:
        raise InputError(f"name the study to show: studies under {studies_dir()}: "
                         f"{', '.join(on_disk) or '(none)'}" if on_disk else
                         f"no studies under {studies_dir()}: run `tune start --space cpu-smoke`")
    return resolve(on_disk[0], None)


def check_address(host: str, port: int) -> None:
    """InputError naming --host or --port when the dashboard could not listen on them."""
    error = bind_error(port, host)
    if error is None:
        return
    if isinstance(error, socket.gaierror):
        raise InputError(f"--host {host}: cannot be resolved ({error.strerror})")
    if error.errno == errno.EADDRNOTAVAIL:
        raise InputError(f"--host {host}: not an address of this machine")
    if error.errno == errno.EADDRINUSE:
        raise InputError(f"--port {port}: already in use on {host}; pick another port")
    raise InputError(f"--host {host} --port {port}: cannot listen there ({error.strerror or error})")


def serve(url: str, names: list[str], host: str, port: int) -> None:
    """Blocks until Ctrl-C. Writes missing trial notes first (the dashboard cannot compute them).
    The caller has checked the address (``check_address``) before announcing it."""
    import optuna_dashboard
    storage = open_storage(url)
    for name in names:
        write_missing_notes(optuna.load_study(study_name=name, storage=storage))
    stores = [artifact_store(url, name) for name in names]
    optuna_dashboard.run_server(storage, host=host, port=port,
                                artifact_store=stores[0] if len(stores) == 1
                                else _ArtifactStores(stores))




