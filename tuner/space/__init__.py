"""Search spaces: the YAML a user writes, validated (``model``), found and loaded (``load``), and
turned into Optuna suggestions (``suggest``). The first stage of the pipeline: everything downstream
reads a ``Space``."""

from tuner.space.load import available_spaces, load_space, overridden, space_from_dict
from tuner.space.model import (
                               QUALITY_METRICS,
                               Baseline,
                               Budget,
                               Container,
                               EngineChoice,
                               Fidelity,
                               LmEval,
                               MaxLoad,
                               Model,
                               Objective,
                               Param,
                               Prior,
                               Quality,
                               Scalar,
                               Space,
                               Target,
                               Workload,
)
from tuner.space.model_paths import model_path_problems
from tuner.space.suggest import (
                               ENGINE_PARAM,
                               arms,
                               baseline_params,
                               config_precision,
                               grid_values,
                               reference_baseline,
                               reference_precision,
                               suggest,
)

__all__ = ["ENGINE_PARAM", "QUALITY_METRICS", "Baseline", "Budget", "Container", "EngineChoice",
           "Fidelity", "LmEval", "MaxLoad", "Model", "Objective", "Param", "Prior", "Quality",
           "Scalar", "Space", "Target", "Workload", "arms", "available_spaces", "baseline_params",
           "config_precision", "grid_values", "load_space", "model_path_problems", "overridden",
           "reference_baseline", "reference_precision", "space_from_dict", "suggest"]
