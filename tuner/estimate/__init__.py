"""Performance estimators: a prediction of a config's throughput before anything is launched.

``get_estimator("aiconfigurator").estimate(EstimateRequest(...))``. Estimators are plug-ins
(``register``); the first one wraps NVIDIA AIConfigurator, an optional extra
(``pip install 'tuner[estimate]'``) imported only when an estimate is asked for.
"""

from tuner.estimate import aiconfigurator  # noqa: F401  (registers the AIConfigurator estimators)
from tuner.estimate.base import (
                                 ESTIMATORS,
                                 Estimate,
                                 EstimateRequest,
                                 Estimator,
                                 get_estimator,
                                 register,
)

__all__ = ["ESTIMATORS", "Estimate", "EstimateRequest", "Estimator", "get_estimator", "register"]
