"""Measurement: the paper's reference definitions, the geometry beyond it, the fast one-read engine per layer, the job.

Modules, each importing only those above it in this list:

* reference definitions, pure float64 functions one concern at a time: ``word_pcs`` (per-word PC
  statistics, degenerate words), ``reference`` (the paper's measures), ``exact_baseline``; the geometry
  beyond the paper: ``rogue`` (rogue dimensions, massive activations), ``postprocess`` (standardize,
  all-but-the-top), ``isotropy`` (spectra, IsoScore, IsoScore*, TwoNN, null controls), ``panel`` (every
  geometry column of a layer);
* the engine, every measure of a layer from one read, tested against them: ``eigen`` (batched Lanczos),
  ``transforms`` (the post-processing variants as maps), ``layer_pass`` (the passes over all rows),
  ``word_stats`` (the pass over the occurrences);
* the job: ``layer_result`` (the typed per-layer record, its tables' columns and files), ``layer_job``
  (``measure_layer``), ``combine`` (a model's tables).
"""
