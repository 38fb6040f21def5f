"""Named sets of workloads, usable in a space's ``workloads:`` / ``evaluation_workloads:`` (an entry
``{set: NAME, ...}``) and by ``tune evaluate --workloads NAME``.

``seed-study`` is the workload set of the manual tuning study that motivated the tuner (vLLM and
SGLang serving Qwen3-14B on one A100, tuned by hand): ShareGPT (1000 prompts) and four random
workloads, input/output tokens 128/4 (1000 prompts), 2000/100 (500), 4000/200 (500) and
32000/100 (100), all with seed 42 and every request sent at once. The same engine change gave
+78 % on the short prompts and -0.4 % on the 32,000-token ones there, which is why one workload
is not enough to judge a config.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

SEED_STUDY = "seed-study"


class WorkloadSet(BaseModel):
    """A ``workloads:`` entry that stands for a named set."""

    model_config = ConfigDict(extra="forbid")

    set: str
    # ShareGPT JSON file for the set's ShareGPT workload; without it that workload is left out.
    dataset_path: str | None = None
    # Every workload of the set sends this many requests instead (a short run, a CPU test).
    num_prompts: int | None = Field(None, gt=0)
    # The model's context: random prompts are cut to fit it, and the name says the lengths sent.
    max_len: int | None = Field(None, gt=4)


def seed_study(max_len: int | None = None, sharegpt_path: str | None = None,
               num_prompts: int | None = None) -> list[dict[str, Any]]:
    """The motivating study's workloads as ``Workload`` fields; see the module docstring."""
    out: list[dict[str, Any]] = [] if sharegpt_path is None else [
        dict(name="sharegpt", dataset="sharegpt", dataset_path=sharegpt_path,
             num_prompts=num_prompts or 1000, seed=42)]
    for label, n, inp, outp in (("short", 1000, 128, 4), ("medium", 500, 2000, 100),
                                ("long", 500, 4000, 200), ("very-long", 100, 32000, 100)):
        if max_len is not None and inp + outp > max_len:
            inp = max_len - outp
        out.append(dict(name=f"{label}-{inp}-{outp}", num_prompts=num_prompts or n,
                        random_input_len=inp, random_output_len=outp, seed=42))
    return out


SETS: dict[str, Callable[..., list[dict[str, Any]]]] = {SEED_STUDY: seed_study}


def expand(entry: WorkloadSet) -> list[dict[str, Any]]:
    """The workloads a set entry stands for (ValueError naming the known sets)."""
    make = SETS.get(entry.set)
    if make is None:
        raise ValueError(f"unknown workload set {entry.set!r}; known: {', '.join(SETS)}")
    return make(entry.max_len, entry.dataset_path, entry.num_prompts)


def expand_entries(entries: Any) -> Any:
    """A ``workloads:`` list with each ``{set: ...}`` entry replaced by its workloads."""
    if not isinstance(entries, list):
        return entries
    out: list[Any] = []
    for entry in entries:
        if isinstance(entry, dict) and "set" in entry:
            out.extend(expand(WorkloadSet.model_validate(entry)))
        else:
            out.append(entry)
    return out

