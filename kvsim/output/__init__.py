"""Everything that leaves the simulator for a person: tables, CSV files, plots, Markdown."""
