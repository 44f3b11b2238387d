"""Analysis of the sweep: run summaries, peak/terminal/cliff, gradient dynamics, figures (parquet in)."""
