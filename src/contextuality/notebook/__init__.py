"""The notebook's way in: ``contextuality.study``, one model's measures in memory, with no Snakemake and no store."""
