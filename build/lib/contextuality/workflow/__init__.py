"""What the Snakefile imports: config checks, settings, the results layout, job estimates (no pandas)."""
