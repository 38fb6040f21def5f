"""The study: create, join or load one, queue its baselines, and run its trials through the one driver.

A thin façade, as Optuna's ``study.py`` is over ``_optimize.py``/``_tell.py``: ``lifecycle`` holds the
study's creation and queues, ``driver`` the trial loop, ``executors`` where trials run (local, Ray,
or a replay of measured data), ``recorder`` what is stored per trial, ``samplers`` the sampler registry.
"""

from tuner.study import ray_executor  # noqa: F401 - registers the "ray" executor (Ray is imported lazily)
from tuner.study.driver import (
                                EXHAUSTED,
                                MAX_PRUNED_IN_A_ROW,
                                SAMPLER_DONE,
                                QuietReporter,
                                Reporter,
                                run,
)
from tuner.study.executors import EXECUTORS, Executor, Finished, Hooks
from tuner.study.lifecycle import (
                                StudyHandle,
                                create,
                                enqueue_repeats,
                                fingerprint_mismatch,
                                finished_count,
                                link_new_hardware,
                                load,
                                trials_table,
)
from tuner.study.recorder import TrialRecorder
from tuner.study.samplers import SAMPLERS, sampler_for
from tuner.study.task import TrialTask

__all__ = ["EXECUTORS", "EXHAUSTED", "MAX_PRUNED_IN_A_ROW", "SAMPLERS", "SAMPLER_DONE", "Executor",
           "Finished", "Hooks", "QuietReporter", "Reporter", "StudyHandle", "TrialRecorder",
           "TrialTask", "create", "enqueue_repeats", "finished_count", "fingerprint_mismatch",
           "link_new_hardware", "load", "run", "sampler_for", "trials_table"]
