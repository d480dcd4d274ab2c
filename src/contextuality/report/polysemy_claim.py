"""W4, the paper's reading (context variety, not polysemy, drives the variation), on one model's sense table: the
regression of self-similarity on the number of WordNet senses with context diversity, log count, Zipf frequency,
length and POS in (``senses.sts.polysemy``); the verdict from the tagged content words, all word forms beside it."""

from __future__ import annotations

from contextuality.report.sense_table import FAILS, HOLDS, NA, ci_text, rows_of

# W4's two versions of the full regression: the verdict reads the first present (the content words' is the
# cleaner), the other is shown beside it. Content words: spaCy's content POS and lemma (function words and
# numerals out).
W4_VERSIONS = (
    ("content", "tagged content words (the verdict)", "tagged content words"),
    ("frequency", "all word forms (stopwords and numerals in)", "all word forms"),
)


def _w4_version(table, suffix: str, layers, t) -> dict | None:
    """One W4 version on ``layers`` (those above the input): its betas, the layers below/above 0 and its verdict."""
    beta = rows_of(table, f"beta_log_synsets_{suffix}")
    if beta.empty or not beta["value"].notna().any():
        return None
    beta = beta.reindex(layers)
    diversity = rows_of(table, f"beta_context_diversity_{suffix}").reindex(beta.index)
    if not diversity["value"].notna().any():  # an older table: diversity's beta of the all-forms fit
        diversity = rows_of(table, "beta_context_diversity_frequency").reindex(beta.index)
    below, above = beta[beta["ci_high"] < 0], beta[beta["ci_low"] > 0]
    diversity_matters = diversity[diversity["ci_high"] < 0]
    share = len(beta) * t["W4 polysemy share"]
    holds = len(below) <= share and len(above) <= share and len(diversity_matters) > len(beta) * t["W4 diversity share"]
    return {"beta": beta, "below": below, "above": above, "diversity": diversity_matters, "holds": holds}


def _w4_text(version: dict, what: str) -> str:
    beta = version["beta"]
    text = (
        f"{what}: beta(log senses | diversity, log n, Zipf, length, POS) below 0 with its 95% interval in "
        f"{len(version['below'])} of {len(beta)} layers above the input (range {beta['value'].min():+.2f} to "
        f"{beta['value'].max():+.2f}; n = {int(beta['n'].max())} word forms)"
    )
    if len(version["above"]):
        text += "; ABOVE 0 in layer(s) " + ", ".join(
            f"{int(k)} ({v:+.2f} {ci_text(beta.loc[k])})" for k, v in version["above"]["value"].items()
        )
    return text + f"; beta(context diversity) below 0 in {len(version['diversity'])}"


def w4(table, t) -> tuple[str, str]:
    """W4's verdict (from the tagged content words) and evidence, the all-forms version beside it."""
    specified = rows_of(table, "beta_log_synsets_frequency")
    if specified.empty or not specified["value"].notna().any():
        return _w4_without_frequency(table, t)
    layers = specified.index[1:] if len(specified) > 1 else specified.index
    versions = [
        (suffix, version, what, short)
        for suffix, what, short in W4_VERSIONS
        if (version := _w4_version(table, suffix, layers, t)) is not None
    ]
    (suffix, verdict, what, _), beside = versions[0], versions[1:]
    evidence = _w4_text(verdict, what)
    if suffix != W4_VERSIONS[0][0]:
        evidence += " (no content-word version in this table: the verdict is this one's)"
    for _, version, what_beside, short in beside:
        evidence += (
            f"; beside it, {_w4_text(version, what_beside)} ({short} alone: {HOLDS if version['holds'] else FAILS})"
        )
    return (HOLDS if verdict["holds"] else FAILS), evidence


def _w4_without_frequency(table, t):
    """W4 on a table without the frequency covariates (an older run): log n and diversity only."""
    beta, diversity = rows_of(table, "beta_log_synsets"), rows_of(table, "beta_context_diversity")
    if beta.empty or not beta["value"].notna().any():
        return NA, "regression not measurable (too few words)"
    upper = beta.iloc[1:] if len(beta) > 1 else beta
    below = upper[upper["ci_high"] < 0]
    diversity_matters = diversity.loc[upper.index][diversity.loc[upper.index, "ci_high"] < 0]
    holds = (
        len(below) <= len(upper) * t["W4 polysemy share"]
        and len(diversity_matters) > len(upper) * t["W4 diversity share"]
    )
    return (HOLDS if holds else FAILS), (
        f"beta(log senses | diversity) below 0 in {len(below)} of {len(upper)} layers "
        "(no general-frequency covariates in this table)"
    )
