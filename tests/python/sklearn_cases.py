"""scikit-learn cases that several test modules run on boxfall namespaces: estimators,
array functions and scores, each a function of a dict of arrays (sample_data.sklearn_data's
names), run once on a device's arrays with array API dispatch and once on NumPy's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import Ridge
from sklearn.metrics import (
    accuracy_score,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_squared_error,
    r2_score,
)
from sklearn.metrics.pairwise import (
    cosine_similarity,
    euclidean_distances,
    linear_kernel,
    polynomial_kernel,
)
from sklearn.preprocessing import MinMaxScaler, StandardScaler

Case = Callable[[dict[str, Any]], Any]

ESTIMATORS: list[Any] = [
    pytest.param(
        lambda d: StandardScaler().fit_transform(d["X"]),
        id="StandardScaler",
    ),
    pytest.param(
        lambda d: MinMaxScaler().fit_transform(d["X"]),
        id="MinMaxScaler",
    ),
    pytest.param(
        lambda d: PCA(n_components=2, svd_solver="full").fit_transform(d["X"]),
        id="PCA-full",
    ),
    pytest.param(
        lambda d: LinearDiscriminantAnalysis().fit(d["X"], d["labels"]).predict(d["X"]),
        id="LinearDiscriminantAnalysis",
    ),
    pytest.param(
        lambda d: Ridge(alpha=1.0, solver="svd").fit(d["X"], d["target"]).predict(d["X"]),
        id="Ridge-svd",
    ),
]

ARRAY_FUNCTIONS: list[Any] = [
    pytest.param(
        lambda d: euclidean_distances(d["X"], d["Y"]),
        id="euclidean_distances",
    ),
    pytest.param(
        lambda d: cosine_similarity(d["X"], d["Y"]),
        id="cosine_similarity",
    ),
    pytest.param(lambda d: linear_kernel(d["X"], d["Y"]), id="linear_kernel"),
    pytest.param(lambda d: polynomial_kernel(d["X"], d["Y"], degree=2), id="polynomial_kernel"),
]

SCORES: list[Any] = [
    pytest.param(
        lambda d: accuracy_score(d["labels"], d["labels"] * 0 + 1),
        id="accuracy_score",
    ),
    pytest.param(
        lambda d: r2_score(d["target"], d["predicted"]),
        id="r2_score",
    ),
    pytest.param(lambda d: mean_squared_error(d["target"], d["predicted"]), id="mse"),
    pytest.param(lambda d: mean_absolute_error(d["target"], d["predicted"]), id="mae"),
    pytest.param(lambda d: mean_absolute_percentage_error(d["target"], d["predicted"]), id="mape"),
]
