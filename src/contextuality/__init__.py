"""contextuality: measure how contextual a language model's word representations are.

Reproduces Ethayarajh (EMNLP 2019) for any model. One module per concern:
corpus, words, models, extract, store, measures, analysis, static, figures, claims, elmo.
"""

__version__ = "0.1.0"
