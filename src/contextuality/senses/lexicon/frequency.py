"""General English frequency of a word form: wordfreq's Zipf scale (log10 of occurrences per billion words).

The STS count of a form measures how often it occurs in this corpus; the Zipf frequency measures how often it
occurs in English at large (wordfreq 3.1's ``best`` list for English, from Wikipedia, subtitles, news, books, web
text and more; its data are CC BY-SA 4.0). Both are covariates of the sense measures (P1: cosine underestimates
the similarity of frequent words), and the matching of monosemous with polysemous words uses both.
A form wordfreq does not know has Zipf 0.
"""

from __future__ import annotations

import numpy as np


def zipf_of(forms) -> np.ndarray:
    """wordfreq's English Zipf frequency of each form (float64; 0 where unknown)."""
    from wordfreq import zipf_frequency

    values = [zipf_frequency(str(form), "en") for form in forms]
    return np.asarray(values, dtype=np.float64)
