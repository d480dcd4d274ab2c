"""What could not be stored, per model: the indexed occurrences its length limit and its tokenizer kept from
being measured, as a table (losses.csv) and as the Markdown section that ends summary.md and claims.md."""

from __future__ import annotations

import pandas as pd

from contextuality.report.tables import md_text, pipe_table

LOSS_COLUMNS = [
    ("sentences_truncated", "Sentences truncated"),
    ("sentences_skipped", "Sentences skipped"),
    ("indexed_occurrences", "Indexed occurrences"),
    ("lost_truncated", "Lost to truncation"),
    ("lost_skipped", "Lost to skipping"),
    ("lost_spanning", "Lost to pieces spanning words"),
    ("lost_share", "Lost (share)"),
    ("misaligned_words", "Misaligned words (faithful)"),
]


def losses_frame(losses: dict[str, dict], labels: dict[str, str]) -> pd.DataFrame:
    """One row per model: what its length limit and its tokenizer kept from being stored and measured."""
    rows = []
    for model, entry in losses.items():
        lost = entry["indexed_occurrences_lost"]
        total = entry["indexed_occurrences"]
        rows.append(
            {
                "model": model,
                "label": labels.get(model, model),
                "sentences_truncated": entry["sentences_truncated"],
                "sentences_skipped": entry["sentences_skipped"],
                "indexed_occurrences": total,
                "lost_truncated": lost["truncated"],
                "lost_skipped": lost["skipped"],
                "lost_spanning": lost["spanning"],
                "lost_share": sum(lost.values()) / total if total else 0.0,
                "misaligned_words": entry.get("misaligned_words", 0),
            }
        )
    return pd.DataFrame(rows, columns=["model", "label"] + [column for column, _ in LOSS_COLUMNS])


def losses_section(losses: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """Markdown lines: per model, the occurrences that could not be measured, and why."""
    if not losses:
        return []
    frame = losses_frame(losses, labels)
    md = [
        "## What could not be stored",
        "",
        "Indexed occurrences a model could not store, so they are missing from its measurements: cut off "
        "at the model's length limit (`extraction.max_length_policy: truncate`), in skipped sentences "
        "(`skip`), or with no piece of their own because one piece spans two spaCy words (`cannot` -> "
        "`can` + `not`). Details: `results/embeddings/{corpus}/{model}/losses.json`.",
        "",
    ]
    rows = [
        [f"{md_text(row['label'])} (`{row['model']}`)"]
        + [f"{row[c]:.2%}" if c == "lost_share" else str(int(row[c])) for c, _ in LOSS_COLUMNS]
        for _, row in frame.iterrows()
    ]
    header = ["Model"] + [title for _, title in LOSS_COLUMNS]
    return md + [pipe_table(header, rows, "-" + "r" * len(LOSS_COLUMNS)), ""]
