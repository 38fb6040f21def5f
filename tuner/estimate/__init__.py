"""Performance estimators: a prediction of a config's throughput before anything is launched.

``get_estimator("aiconfigurator").estimate(EstimateRequest(...))``. Estimators are plug-ins
(``register``): ``aiconfigurator`` (and ``aiconfigurator-hybrid``) wrap NVIDIA AIConfigurator's
fixed-batch model (``pip install 'tuner[estimate]'``), ``aisimulate`` its successor's serving
simulator (``pip install 'tuner[simulate]'``). Each package is an optional extra, used only when an
estimate is asked for; the two cannot be installed together.
"""

from tuner.estimate import aiconfigurator  # noqa: F401  (registers the AIConfigurator estimators)
from tuner.estimate import aisimulate  # noqa: F401  (registers the AISimulate estimator)
from tuner.estimate.base import (
                                 ESTIMATORS,
                                 Estimate,
                                 EstimateRequest,
                                 Estimator,
                                 get_estimator,
                                 register,
)

__all__ = ["ESTIMATORS", "Estimate", "EstimateRequest", "Estimator", "get_estimator", "register"]
