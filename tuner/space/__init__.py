"""Search spaces: the YAML a user writes, validated (``model``), found and loaded (``load``), and
turned into Optuna suggestions (``suggest``). The first stage of the pipeline: everything downstream
reads a ``Space``."""

from tuner.space.load import available_spaces, load_space, overridden, space_from_dict
from tuner.space.model import (
                               Baseline,
                               Budget,
                               Container,
                               EngineChoice,
                               Fidelity,
                               MaxLoad,
                               Model,
                               Objective,
                               Param,
                               Scalar,
                               Space,
                               Target,
                               Workload,
)
from tuner.space.model_paths import model_path_problems
from tuner.space.suggest import ENGINE_PARAM, baseline_params, grid_values, suggest

__all__ = ["ENGINE_PARAM", "Baseline", "Budget", "Container", "EngineChoice", "Fidelity", "MaxLoad",
           "Model", "Objective", "Param", "Prior", "Scalar", "Space", "Target", "Workload", "available_spaces",
           "baseline_params", "grid_values", "load_space", "model_path_problems", "overridden",
           "space_from_dict", "suggest"]
