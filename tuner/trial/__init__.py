"""One trial on one machine: launch the engine, benchmark it on each workload, sample telemetry, tear
down, and return a ``TrialOutcome``. Knows nothing of Optuna."""
