"""Reporting, what people read: ``figures`` (Figures 1-4 across models, each model's geometry), ``summary`` (this
run's per-layer numbers beside the paper's), ``claims`` (the paper's claims checked on the run, with the checks in
``claim_checks`` and ``table1_checks``), ``losses`` (what could not be stored), ``table1`` (Table 1 and its figure);
beneath them ``paper_models`` (how the run's models line up with the paper's) and ``tables`` (Markdown and LaTeX)."""
