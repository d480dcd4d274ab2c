"""Isotropy of a sample of a layer's rows, and its null controls (``spec/geometry-metrics.md``).

Pure float64 functions on rows ``X`` (N, d); randomness comes only from a ``numpy.random.Generator``
passed in, so the same seed gives the same numbers.

* **Isotropy**: ``pc1_ratio``, ``effective_rank`` (Roy & Vetterli, 2007), ``isoscore`` (Rudman et al.,
  ACL Findings 2022), ``isoscore_star`` (Rudman & Eickhoff, ICLR 2024) and ``twonn_dimension`` (Facco
  et al., 2017, through scikit-dimension); ``isotropy_measures`` gives them all on one sample
  (``sample_rows``), sharing one eigendecomposition.
* **Null controls**: ``gaussian_null`` and ``permuted_null``.

IsoScore and the ``isoscore`` package (PyPI 2.0.1). ``isoscore`` here follows the paper's six steps
on the variance vector of the PCA-rotated points, i.e. the eigenvalues of the covariance matrix. The
steps simplify: k = (sum v)^2 / sum v^2 (the participation ratio of the spectrum), so the score is
(k - 1) / (d - 1). The package's ``IsoScore.IsoScore(points)`` agrees with it to about 1e-8 when it is
given points as (N, d): its ``n = torch.tensor(d)`` is an integer tensor, so ``torch.sqrt(n)`` runs in
float32, which is the whole difference (one-dimensional data scores 1.7e-8 there instead of 0).
Version 1.0 of the package took points as (d, N); 2.0.1 takes (N, d), so code written for 1.0 silently
gets the score of the transposed cloud (0.02 instead of 0.52 on a test cloud). 2.0.1 also fails on
float16 input (torch has no half-precision SVD on CPU). Its ``IsoScore_star(points, C0, zeta)`` with
``C0`` the identity, which its docstring recommends when no larger sample is at hand, is not invariant
to the scale of the data: with zeta = 0.5 the same cloud scores 1.00, 0.65 and 0.52 at scales 1e-3, 1
and 1e3 (it
shrinks towards a variance of 1 whatever the data's variance). ``isoscore_star`` here shrinks towards
the trace-matched identity instead; see its docstring. The I-STAR repository's own analysis code also
fed TwoNN its points transposed, as (d, N).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

# TwoNN (Facco et al., 2017): fraction of the largest ratios r2/r1 left out of the fit.
TWONN_DISCARD_FRACTION = 0.1


def sample_indices(n_rows: int, rng: np.random.Generator, size: int) -> np.ndarray | None:
    """The rows ``sample_rows`` draws from ``n_rows`` (None: all of them), drawing them from ``rng`` as it does."""
    if size >= n_rows:
        return None
    return np.sort(rng.choice(n_rows, size=size, replace=False))


def sample_rows(X: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` rows drawn uniformly without replacement (all rows if there are fewer), in row order."""
    rows = sample_indices(X.shape[0], rng, size)
    return np.asarray(X[:]) if rows is None else np.asarray(X[rows])


def _centred(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return X - X.mean(axis=0)


def _spectrum_of_centred(Xc: np.ndarray) -> np.ndarray:
    n, d = Xc.shape
    if n < d:  # the nonzero eigenvalues of Xc^T Xc are those of the smaller Gram matrix Xc Xc^T
        values = np.concatenate([np.linalg.eigvalsh(Xc @ Xc.T), np.zeros(d - n)])
    else:
        values = np.linalg.eigvalsh(Xc.T @ Xc)
    return np.maximum(np.sort(values)[::-1], 0.0) / max(n, 1)


def covariance_spectrum(X: np.ndarray) -> np.ndarray:
    """Eigenvalues of the centred covariance (divisor N), descending, length d: the PCA variances.

    Uses the N x N Gram matrix when N < d (its eigenvalues, then d - N zeros). Every measure below is a
    ratio of these, so the divisor does not matter.
    """
    return _spectrum_of_centred(_centred(X))


def pc1_ratio(X: np.ndarray) -> float:
    """Share of the total variance on the first principal component, lambda_max / sum lambda.

    What LLM-Microscope calls anisotropy: 1/d for isotropic data, 1 for data on a line. NaN without
    variance.
    """
    return _pc1_ratio(covariance_spectrum(X))


def _pc1_ratio(values: np.ndarray) -> float:
    total = float(values.sum())
    return float(values[0] / total) if total > 0 else float("nan")


def effective_rank(X: np.ndarray) -> float:
    """Effective rank (Roy & Vetterli, 2007): exp of the entropy of p_j = sigma_j / sum sigma.

    sigma_j are the singular values of the centred matrix (sqrt(N lambda_j)). About d for isotropic
    Gaussian data with N >> d, k for data spanning a k-dimensional subspace. Eigenvalues at the level of
    rounding (below lambda_max * max(N, d) * machine epsilon) count as 0, as in a numerical rank.
    """
    return _effective_rank(covariance_spectrum(X), X.shape[0])


def _effective_rank(values: np.ndarray, n_rows: int) -> float:
    if not values.size or values[0] <= 0:
        return float("nan")
    values = np.where(values > values[0] * max(n_rows, len(values)) * np.finfo(np.float64).eps, values, 0.0)
    sigma = np.sqrt(values)
    p = sigma[sigma > 0] / sigma.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def isoscore_from_variances(variances: np.ndarray) -> float:
    """IsoScore (Rudman, Gillman, Rayne & Eickhoff, ACL Findings 2022) of a PCA variance vector.

    The paper's steps 3-6 on v (length n = d): v_hat = sqrt(n) v / |v|; isotropy defect
    delta = |v_hat - 1| / sqrt(2 (n - sqrt(n))); dimensions used k = (n - delta^2 (n - sqrt(n)))^2 / n;
    score (k - 1) / (n - 1), from 0 (one direction) to 1 (all directions equally). Algebraically k is
    the participation ratio (sum v)^2 / sum v^2. NaN for n = 1 or v = 0.
    """
    v = np.asarray(variances, dtype=np.float64)
    n = len(v)
    norm = float(np.linalg.norm(v))
    if n < 2 or norm == 0:
        return float("nan")
    v_hat = np.sqrt(n) * v / norm
    defect = np.linalg.norm(v_hat - 1.0) / np.sqrt(2.0 * (n - np.sqrt(n)))
    k = (n - defect**2 * (n - np.sqrt(n))) ** 2 / n
    return float((k - 1.0) / (n - 1.0))


def isoscore(X: np.ndarray) -> float:
    """IsoScore of the rows of X (N, d): steps 1-2 (PCA rotation, variance per axis) are the eigenvalues
    of the centred covariance; steps 3-6 are ``isoscore_from_variances``. Low when N < d: a sample
    covariance has at most N - 1 nonzero eigenvalues, and even for N > d its eigenvalues spread
    (Marchenko-Pastur), so an isotropic Gaussian scores about 1 - d/N, not 1 (see ``isoscore_star``).
    """
    return isoscore_from_variances(covariance_spectrum(X))


def dispersion_shrinkage(X: np.ndarray) -> float:
    """The shrinkage intensity zeta that ``isoscore_star`` uses by default (see there)."""
    Xc = _centred(X)
    return _dispersion_shrinkage(Xc, _spectrum_of_centred(Xc))


def _dispersion_shrinkage(Xc: np.ndarray, values: np.ndarray) -> float:
    n = Xc.shape[0]
    if n < 2:
        return float("nan")
    mean = float(values.mean())
    dispersion = float(np.sum((values - mean) ** 2))  # |S - mu I|_F^2
    if dispersion <= 0:
        return 0.0
    squared_norms = np.einsum("ij,ij->i", Xc, Xc)
    # Ledoit & Wolf (2004): sampling error of S, (1/N^2) sum_i |x_i x_i^T - S|_F^2
    sampling = (float(np.sum(squared_norms**2)) / n - float(np.sum(values**2))) / n
    sampling = min(max(sampling, 0.0), dispersion)
    return 1.0 - np.sqrt(1.0 - sampling / dispersion)


def isoscore_star(X: np.ndarray, zeta: float | None = None, C0: np.ndarray | None = None) -> float:
    """IsoScore* (Rudman & Eickhoff, ICLR 2024): IsoScore of a shrinkage covariance, stable when N < d.

    The authors' definition (their ``isoscore_star(points, C0, zeta)``): IsoScore of the eigenvalues of
    S_zeta = (1 - zeta) S + zeta C0, with S the sample covariance, C0 a "shrinkage covariance matrix"
    and zeta in [0, 1]; zeta = 0 is IsoScore. Their analysis takes C0 from up to 250,000 points of the
    same model and zeta = 0.75; without a larger sample they advise the identity.

    Default here: C0 = mu I with mu = tr(S) / d (the identity scaled to the data: the bare identity
    makes the score depend on the data's units), and zeta chosen from the data so that the shrunk
    spectrum has the population's dispersion. IsoScore depends on the spectrum only through its
    dispersion |S - mu I|_F^2 relative to d mu^2 (k = d^2 mu^2 / (d mu^2 + dispersion)). The sample
    dispersion overestimates the population's by the sampling error beta^2 = E|S - Sigma|_F^2, which
    Ledoit & Wolf (2004) estimate as (1/N^2) sum_i |x_i x_i^T - S|_F^2 (distribution-free, fourth
    moments included). Shrinking scales the dispersion by (1 - zeta)^2, so
    zeta = 1 - sqrt(1 - beta^2 / dispersion) makes it the estimate dispersion - beta^2 of the
    population's. (Ledoit-Wolf's own zeta = beta^2 / dispersion, Frobenius-optimal for the matrix,
    shrinks the dispersion to about its square over the sample's, biasing the score towards 1.) In
    simulated Gaussian clouds in d = 384 (one draw each; spectra spiked, 1/j, 1/sqrt(j), rank 20) it
    came within 0.06 of the population IsoScore from N = 100 and within 0.006 at N = 5,000, where
    IsoScore itself was low by up to 0.4 at N = 100 and 0.02 at N = 5,000; isotropic clouds scored
    0.92, 0.998 and 1.000 at N = 100, 1,000 and 5,000 (IsoScore: 0.20, 0.72 and 0.93). As N / d grows,
    zeta goes to 0 and IsoScore* to IsoScore.

    Pass ``zeta`` to fix the intensity, and ``C0`` (d x d, e.g. the covariance of a larger sample of the
    layer, as the authors did; then ``zeta`` is required) to shrink towards another target.
    """
    Xc = _centred(X)
    n = Xc.shape[0]
    values = _spectrum_of_centred(Xc)
    if C0 is None:
        if zeta is None:
            zeta = _dispersion_shrinkage(Xc, values)
        return isoscore_from_variances((1.0 - zeta) * values + zeta * values.mean())
    if zeta is None:
        raise ValueError("isoscore_star with a shrinkage target C0 needs zeta")
    S = Xc.T @ Xc / max(n - 1, 1)  # the authors' torch.cov / np.cov: C0 is absolute, so the divisor matters
    return isoscore_from_variances(np.linalg.eigvalsh((1.0 - zeta) * S + zeta * np.asarray(C0, dtype=np.float64)))


class TwoNN(NamedTuple):
    """TwoNN intrinsic dimension and what was discarded before the fit."""

    dimension: float
    duplicate_fraction: float  # share of rows dropped as exact duplicates of another row (r1 = 0)
    n_points: int  # distinct rows the estimate used (before the largest ratios are discarded)


def twonn_dimension(X: np.ndarray, discard_fraction: float = TWONN_DISCARD_FRACTION, method: str = "linear") -> TwoNN:
    """TwoNN intrinsic dimension (Facco, d'Errico, Rodriguez & Laio, Sci. Rep. 2017), via scikit-dimension.

    mu_i = r2 / r1, each point's distances to its second and first nearest neighbours, follow a
    Pareto law whose exponent is the dimension. Exact duplicate rows (r1 = 0, ratio undefined; common
    in input layers, where every occurrence of a token may share one vector) are removed first, keeping
    one copy each; ``duplicate_fraction`` says how many went. Then ``skdim.id.TwoNN`` fits the
    dimension after discarding the largest ``discard_fraction`` of the ratios (Facco et al.'s
    heuristic, 10% by default; ``method="linear"`` is their fit through the origin of -log(1 - F) on
    log mu, "mle" the censored maximum-likelihood estimate). Neighbours come from scikit-learn's exact
    brute-force search, in float64. NaN with fewer than 3 distinct rows.

    TwoNN sees the local dimension at the scale of nearest neighbours and saturates for high-dimensional
    clouds of few points: an isotropic Gaussian in d = 384 with 5,000 points gives far less than 384.
    """
    from skdim.id import TwoNN as SkdimTwoNN
    from sklearn.neighbors import NearestNeighbors

    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    distinct = np.unique(X, axis=0) if n else X
    duplicate_fraction = 1.0 - len(distinct) / n if n else float("nan")
    if len(distinct) < 3:
        return TwoNN(float("nan"), duplicate_fraction, len(distinct))
    neighbours = NearestNeighbors(n_neighbors=2, algorithm="brute").fit(distinct)
    distances, _ = neighbours.kneighbors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows closer than rounding after de-duplication are dropped
        usable = int(np.count_nonzero(distances[:, 0] > 0))
        try:
            estimator = SkdimTwoNN(discard_fraction=discard_fraction, dist=True, method=method).fit(distances)
        except ValueError:  # fewer than 2 ratios left after the discard
            return TwoNN(float("nan"), duplicate_fraction, usable)
    return TwoNN(float(estimator.dimension_), duplicate_fraction, usable)


def evenly_spaced(n_rows: int, size: int | None) -> np.ndarray:
    """``size`` row indices spread evenly over ``range(n_rows)`` (all rows if ``size`` is None or larger).

    Applied to a uniform random sample kept in row order, this gives a smaller sample spread over the
    whole layer, with no further random draws.
    """
    if size is None or size >= n_rows:
        return np.arange(n_rows)
    return (np.arange(size) * n_rows) // size


def isotropy_measures(
    X: np.ndarray, twonn_discard_fraction: float = TWONN_DISCARD_FRACTION, twonn_sample_size: int | None = None
) -> dict:
    """pc1_ratio, effective_rank, isoscore, isoscore_star, twonn_dimension (and its duplicate fraction)
    of a sample of rows, sharing one centring and one eigendecomposition.

    TwoNN's exact neighbour search costs N^2 d, by far the largest term; ``twonn_sample_size`` runs it
    on that many evenly spaced rows of X (``evenly_spaced``) instead of all.
    """
    Xc = _centred(X)
    values = _spectrum_of_centred(Xc)
    zeta = _dispersion_shrinkage(Xc, values)
    twonn = twonn_dimension(np.asarray(X)[evenly_spaced(len(X), twonn_sample_size)], twonn_discard_fraction)
    return {
        "pc1_ratio": _pc1_ratio(values),
        "effective_rank": _effective_rank(values, Xc.shape[0]),
        "isoscore": isoscore_from_variances(values),
        "isoscore_star": (
            isoscore_from_variances((1.0 - zeta) * values + zeta * values.mean()) if np.isfinite(zeta) else float("nan")
        ),
        "twonn_dimension": twonn.dimension,
        "twonn_duplicate_fraction": twonn.duplicate_fraction,
    }


def gaussian_null(n_rows: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """An isotropic standard Gaussian cloud of the given shape (float64): what "isotropic" looks like
    for N points in d dimensions, sampling noise included."""
    return rng.standard_normal((n_rows, d))


def permuted_null(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """X with each dimension (column) shuffled across rows independently of the others.

    Every dimension keeps its values, so its mean, spread and outliers (a rogue dimension's offset
    included); only the joint structure between dimensions is broken. Same dtype as X.
    """
    return rng.permuted(np.asarray(X), axis=0)
