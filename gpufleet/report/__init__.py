"""Reports of simulation runs and scenarios: summaries, JSON and the HTML report (plotly)."""
